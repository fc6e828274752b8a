"""scripts/check_site.py: passes a good site, and catches each thing it is there to catch.

Builds a small site (book/ copied, the contract chapter of tests/fixtures with its plots:
a chapter page and four question pages), checks it in headless Chromium, then breaks copies:
one in four ways at once (a CDN script, a missing MathJax, a link to a missing anchor, a
missing question page), one in the chapter-standard ways (a figure shrunk to nothing, a hash
file name or TeX as alt text, a callout and the quiz answers gone, an open solution, an open
check output, a revision sheet missing a question and showing raw TeX and scrolling sideways,
a dead menu button, a search that does not land on its question, a code block that scrolls
sideways on a phone, a drill without its script), and checks that each is reported.
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
    shutil.copytree(REPO / "book", root / "book", ignore=shutil.ignore_patterns("questions.md", "revision.md", "drill.md"))
    (root / "notebooks").mkdir()
    questions = build_site.load_questions(REPO / build_site.QUESTIONS_YML)
    nb = contract_chapter({q.number: q.text for q in questions if q.chapter == 1})
    nb.cells.append(new_markdown_cell(r"The chain rule: $\frac{\partial L}{\partial x}$."))
    nbformat.write(nb, root / "notebooks" / "01_test.ipynb")
    return build_site.build(root).parent


def test_good_site_passes(site: Path, tmp_path: Path) -> None:
    report = check_site.check_site(site, tmp_path / "shots")
    assert report.problems == []
    questions = {f"notebooks/q{n}.html" for n in range(1, 5)}
    assert set(report.pages) == {"front page", "notebooks/01_test.html", "book/questions.html", "book/drill.html",
                                 "book/revision.html", "book/torch-versions.html", "search.html"} | questions  # fmt: skip
    assert "4 linked, 46 coming" in report.pages["book/questions.html"]
    assert "4 questions of 4 written" in report.pages["book/revision.html"]
    assert "4/4 questions listed" in report.pages["notebooks/01_test.html"]
    assert "1/1 check outputs collapsed" in report.pages["notebooks/01_test.html"]
    assert "4 cards; reveal, follow-up, mark, reload: ok" in report.pages["book/drill.html"]
    assert f"'{SEARCH_WORD}' (Q3) -> notebooks/q3.html" in report.pages["search.html"]
    names = {shot.name for shot in report.screenshots}
    assert {f"{page}-{size}.png" for page in ("front", "ch01", "q1", "revision", "drill")
            for size in ("desktop", "phone")} <= names  # fmt: skip
    assert all(shot.stat().st_size > 1000 for shot in report.screenshots)
    assert report.requests and all(u.startswith("http://127.0.0.1:") for u in report.requests)


def test_broken_site_is_caught(site: Path, tmp_path: Path) -> None:
    broken = tmp_path / "html"
    shutil.copytree(site, broken)
    intro = broken / "book" / "intro.html"
    html = intro.read_text().replace("</head>", '<script src="https://cdn.example.com/x.js"></script></head>')
    intro.write_text(html.replace("</article>", '<a href="../notebooks/q2.html#no-such-anchor">x</a></article>', 1))
    shutil.rmtree(broken / "_static" / "mathjax")
    (broken / "notebooks" / "q4.html").unlink()

    problems = "\n".join(check_site.check_site(broken, tmp_path / "shots").problems)
    assert "request to another host blocked: https://cdn.example.com/x.js" in problems
    assert "front page: MathJax did not load" in problems and "HTTP 404" in problems
    assert "notebooks/01_test.html: raw TeX left in the text" in problems
    assert "broken link: book/intro.html: ../notebooks/q2.html#no-such-anchor (no such anchor)" in problems
    assert "broken link: book/questions.html: ../notebooks/q4.html (no such page)" in problems


def test_chapter_standard_breaks_are_caught(site: Path, tmp_path: Path) -> None:
    broken = tmp_path / "html"
    shutil.copytree(site, broken)
    q1, q2 = broken / "notebooks" / "q1.html", broken / "notebooks" / "q2.html"
    # A figure squeezed to 100 px (natural 440 px) and one with its file name as alt text.
    squeeze = 'img[alt="the curve of question 1, rising."] { width: 100px !important; min-width: 0 !important; }'
    q1.write_text(q1.read_text().replace("</head>", f"<style>{squeeze}</style></head>", 1))
    html = q2.read_text()
    html = html.replace('alt="the curve of question 2, rising."', 'alt="../_images/0123456789abcdef0123456789abcdef.png"')
    # Q2 loses its wrong-answer callout.
    warn = html.index('<div class="admonition warning')
    html = html[:warn] + html[warn:].replace("admonition warning", "plain-box", 1)
    # A block that refuses to wrap: on a phone it scrolls sideways.
    unwrapped = '<pre style="white-space: pre !important">' + "x = 1  # " + "y" * 150 + "</pre>"
    # And a line of text that cannot break: on a phone the whole page scrolls sideways.
    unwrapped += '<p><span style="white-space: nowrap">' + "z" * 150 + "</span></p>"
    # And a table of long unbreakable cells, in the theme's own scroll box: on a phone its
    # last columns are cut off.
    cells = "".join(f"<td>{word * 12}</td>" for word in ("alpha", "beta", "gamma"))
    unwrapped += ('<div class="pst-scrollable-table-container" style="overflow-x: auto">'
                  f"<table><tr>{cells}</tr></table></div>")
    html = html.replace('id="q2"', 'id="q2"></span>' + unwrapped + '<span', 1)
    # The page's title no longer names its question.
    html = re.sub(r"<title>Q2\.", "<title>Untitled.", html)
    q2.write_text(html)
    # The chapter page: quiz answers gone, the solution and the check's output shown.
    chapter = broken / "notebooks" / "01_test.html"
    html = re.sub(r"<details>.*?</details>", "", chapter.read_text(), flags=re.S)
    html = html.replace('<details class="admonition hide above-input">', '<details class="admonition hide above-input" open>')
    html = html.replace('<details class="admonition hide below-input">', '<details class="admonition hide below-input" open>')
    # The theme's sidebar toggles bound to nothing (what a missing navbar_persistent: [] gives).
    chapter.write_text(html.replace("primary-toggle", "primary-toggle-unbound"))
    # The search index points the Q3 word at Q1's page.
    index = broken / "_static" / "book-search.js"
    index.write_text(index.read_text().replace('["notebooks/q3.html"', '["notebooks/q1.html"', 1))
    revision = broken / "book" / "revision.html"
    html = re.sub(r"<h3>Q3\..*?</h3>", "", revision.read_text(), flags=re.S)
    html = html.replace("</article>", '<p>left raw: $x = \\alpha$ <span style="white-space: nowrap">' + "w" * 80 + "</span></p></article>", 1)
    revision.write_text(html)
    # The drill page without the book's script: every card and answer shows, nothing responds.
    drill = broken / "book" / "drill.html"
    drill.write_text(re.sub(r'<script src="\.\./_static/book\.js[^"]*"></script>', "", drill.read_text()))

    problems = "\n".join(check_site.check_site(broken, tmp_path / "shots").problems)
    assert re.search(r"notebooks/q1.html: figure \S+ shown at 100 px of its 440 px", problems), problems
    assert "notebooks/q2.html: 1 image(s) without meaningful alt text" in problems
    assert "notebooks/q2.html: the page title is 'Untitled." in problems
    assert "Q2 has 1 callout(s)" in problems
    assert "no hidden recall-quiz answers" in problems
    assert "1 of 1 solution cells are not collapsed" in problems
    assert "1 of 1 check cells show their output" in problems
    assert "revision sheet: written questions missing: ['Q3']" in problems
    assert "revision sheet: raw TeX left in the text: ['$', '\\\\alpha']" in problems
    assert re.search(r"revision sheet: at 390 px the page is \d+ px wide", problems), problems
    assert "navigation button does not open the sidebar" in problems
    assert re.search(r"notebooks/q2.html: at 390 px 1 of \d+ code/output blocks scroll sideways", problems), problems
    assert re.search(r"notebooks/q2.html: at 390 px the page is \d+ px wide and scrolls sideways", problems), problems
    assert ("notebooks/q2.html: at 390 px a table is wider than the screen and hides its last "
            "column(s); fewer columns or shorter cells (first row: 'alphaalpha") in problems, problems
    assert f"search: '{SEARCH_WORD}' (only in Q3) finds ['notebooks/q1.html'" in problems
    assert "book/drill.html: 4 cards visible at the start" in problems


def test_rejects_a_folder_that_is_not_a_site(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no index.html"):
        check_site.check_site(tmp_path, tmp_path / "shots")
