"""scripts/check_site.py: passes a good site, and catches each thing it is there to catch.

Builds a small site (book/ copied, the contract chapter of tests/fixtures with its plots),
checks it in headless Chromium, then breaks copies: one in four ways at once (a CDN script, a
missing MathJax, a chapter without figures, a question link to a missing anchor), one in the
chapter-standard ways (a figure shrunk to nothing, a hash file name as alt text, a callout and
the quiz answers gone, an open solution, a revision sheet missing a question, a dead menu
button, a search that does not land on its question, a code block that scrolls sideways on
a phone), and checks that each is reported.
"""
from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_markdown_cell

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Chromium is not installed (make setup-browser)"),
]

import build_site  # noqa: E402 - tests/conftest.py puts scripts/ on the path
import check_site  # noqa: E402
from fixtures.contract_chapter import SEARCH_WORD, contract_chapter  # noqa: E402


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("book")
    shutil.copytree(REPO / "book", root / "book", ignore=shutil.ignore_patterns("questions.md", "revision.md"))
    (root / "notebooks").mkdir()
    questions = build_site.load_questions(REPO / build_site.QUESTIONS_YML)
    nb = contract_chapter({q.number: q.text for q in questions if q.chapter == 1})
    nb.cells.append(new_markdown_cell(r"The chain rule: $\frac{\partial L}{\partial x}$."))
    nbformat.write(nb, root / "notebooks" / "01_test.ipynb")
    return build_site.build(root).parent


def test_good_site_passes(site: Path, tmp_path: Path) -> None:
    report = check_site.check_site(site, tmp_path / "shots")
    assert report.problems == []
    assert set(report.pages) == {"front page", "notebooks/01_test.html", "book/questions.html",
                                 "book/revision.html", "book/torch-versions.html", "search.html"}  # fmt: skip
    assert "4 linked, 46 coming" in report.pages["book/questions.html"]
    assert "4 questions of 4 written" in report.pages["book/revision.html"]
    assert f"'{SEARCH_WORD}' (Q3) -> q3" in report.pages["search.html"]
    names = {shot.name for shot in report.screenshots}
    assert {f"{page}-{size}.png" for page in ("front", "ch01", "revision") for size in ("desktop", "phone")} <= names
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


def test_chapter_standard_breaks_are_caught(site: Path, tmp_path: Path) -> None:
    broken = tmp_path / "html"
    shutil.copytree(site, broken)
    chapter = broken / "notebooks" / "01_test.html"
    html = chapter.read_text()
    # A figure squeezed to 100 px (natural 440 px) and one with its file name as alt text.
    squeeze = 'img[alt="the curve of question 1, rising."] { width: 100px !important; min-width: 0 !important; }'
    html = html.replace("</head>", f"<style>{squeeze}</style></head>", 1)
    html = html.replace('alt="the curve of question 2, rising."', 'alt="../_images/0123456789abcdef0123456789abcdef.png"')
    # Q2 loses its wrong-answer callout; the quiz answers and the solution's collapsing go.
    q2 = html.index('id="q2"')
    warn = html.index('<div class="admonition warning', q2)
    html = html[:warn] + html[warn:].replace("admonition warning", "plain-box", 1)
    html = re.sub(r"<details>.*?</details>", "", html, flags=re.S)
    html = html.replace('<details class="admonition hide above-input">', '<details class="admonition hide above-input" open>')
    # A block that refuses to wrap: on a phone it scrolls sideways.
    unwrapped = '<pre style="white-space: pre !important">' + "x = 1  # " + "y" * 150 + "</pre>"
    # And a line of text that cannot break: on a phone the whole page scrolls sideways.
    unwrapped += '<p><span style="white-space: nowrap">' + "z" * 150 + "</span></p>"
    html = html.replace('id="q2"', 'id="q2"></span>' + unwrapped + '<span', 1)
    chapter.write_text(html)
    # The search page without the book's script: the hit lands on the top of the chapter.
    search = broken / "search.html"
    search.write_text(re.sub(r'<script src="_static/book\.js[^"]*"></script>', "", search.read_text()))
    revision = broken / "book" / "revision.html"
    revision.write_text(re.sub(r"<h3>Q3\..*?</h3>", "", revision.read_text(), flags=re.S))
    # The theme's sidebar toggles bound to nothing (what a missing navbar_persistent: [] gives).
    for page in (chapter,):
        page.write_text(page.read_text().replace("primary-toggle", "primary-toggle-unbound"))

    problems = "\n".join(check_site.check_site(broken, tmp_path / "shots").problems)
    assert re.search(r"notebooks/01_test.html: figure \S+ shown at 100 px of its 440 px", problems), problems
    assert "image(s) without meaningful alt text" in problems
    assert "Q2 has 1 callout(s)" in problems
    assert "no hidden recall-quiz answers" in problems
    assert "1 of 1 solution cells are not collapsed" in problems
    assert "revision sheet: written questions missing: ['Q3']" in problems
    assert "navigation button does not open the sidebar" in problems
    assert re.search(r"at 390 px 1 of \d+ code/output blocks scroll sideways", problems), problems
    assert re.search(r"at 390 px the page is \d+ px wide and scrolls sideways", problems), problems
    assert f"the hit for '{SEARCH_WORD}' goes to" in problems


def test_rejects_a_folder_that_is_not_a_site(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no index.html"):
        check_site.check_site(tmp_path, tmp_path / "shots")
