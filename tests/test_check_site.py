"""scripts/check_site.py: passes a good site, and catches each thing it is there to catch.

Builds a small site (book/ copied, one chapter notebook with a plot made here), checks it in
headless Chromium, then breaks a copy in four ways at once (a CDN script, a missing MathJax,
a chapter without figures, a question link to a missing anchor) and checks that each is reported.
"""
from __future__ import annotations

import base64
import io
import re
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Chromium is not installed (make setup-browser)"),
]



import build_site
import check_site


def _png_plot() -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 1.5), dpi=50)
    ax.plot([0, 1, 4])
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("book")
    shutil.copytree(REPO / "book", root / "book", ignore=shutil.ignore_patterns("questions.md"))
    (root / "notebooks").mkdir()
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    cells = [new_markdown_cell(r"# Chapter 1: test" "\n\nThe chain rule: $\\frac{\\partial L}{\\partial x}$.")]
    for q in build_site.load_questions(REPO / build_site.QUESTIONS_YML):
        if q.chapter == 1:
            cells.append(new_markdown_cell(f"## Q{q.number}. {q.text}\n\nWith $y = w x$."))
    plot = new_output("display_data", data={"image/png": _png_plot(), "text/plain": "<Figure size 100x75 with 1 Axes>"})
    cells.append(new_code_cell("plot()", execution_count=1, outputs=[plot]))
    nb.cells = cells
    nbformat.write(nb, root / "notebooks" / "01_test.ipynb")
    return build_site.build(root).parent


def test_good_site_passes(site: Path, tmp_path: Path) -> None:
    report = check_site.check_site(site, tmp_path / "shots")
    assert report.problems == []
    assert set(report.pages) == {"front page", "notebooks/01_test.html", "book/questions.html", "search.html"}
    assert "4 linked, 46 coming" in report.pages["book/questions.html"]
    assert all(shot.stat().st_size > 1000 for shot in report.screenshots)
    assert report.requests and all(u.startswith("http://127.0.0.1:") for u in report.requests)


def test_broken_site_is_caught(site: Path, tmp_path: Path) -> None:
    broken = tmp_path / "html"
    shutil.copytree(site, broken)
    intro = broken / "book" / "intro.html"
    intro.write_text(intro.read_text().replace("</head>", '<script src="https://cdn.example.com/x.js"></script></head>'))
    shutil.rmtree(broken / "_static" / "mathjax")
    chapter = broken / "notebooks" / "01_test.html"
    html = re.sub(r"<img [^>]*>", "", chapter.read_text())
    chapter.write_text(html.replace('id="q2-', 'id="renamed-q2-'))

    problems = "\n".join(check_site.check_site(broken, tmp_path / "shots").problems)
    assert "request to another host blocked: https://cdn.example.com/x.js" in problems
    assert "front page: MathJax did not load" in problems and "HTTP 404" in problems
    assert "notebooks/01_test.html: raw TeX left in the text" in problems
    assert "notebooks/01_test.html: no figure" in problems
    assert re.search(r"questions: Q2 links to #q2-\S+, which \S+ does not have", problems)


def test_rejects_a_folder_that_is_not_a_site(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no index.html"):
        check_site.check_site(tmp_path, tmp_path / "shots")
