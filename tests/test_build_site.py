"""scripts/build_site.py: the question list, the index's anchors, and failing loudly.

The end-to-end tests build a real (small) site in a temporary copy of book/, with a chapter
notebook made on the fly, and read the anchors back from the HTML Sphinx wrote: Sphinx is the
oracle for what an anchor is called.
"""
from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

REPO = Path(__file__).resolve().parent.parent

import build_site as bs  # noqa: E402 - tests/conftest.py puts scripts/ on the path
from fixtures.contract_chapter import SEARCH_WORD, contract_chapter, short_answer, summary_line  # noqa: E402

QUESTIONS = bs.load_questions(REPO / bs.QUESTIONS_YML)
CH1 = {q.number: q.text for q in QUESTIONS if q.chapter == 1}


def test_canonical_question_list() -> None:
    assert [q.number for q in QUESTIONS] == list(range(1, 51))
    assert sorted({q.chapter for q in QUESTIONS}) == list(range(1, 11))
    chapters = [q.chapter for q in QUESTIONS]
    assert chapters == sorted(chapters), "questions must run through the chapters in order"
    assert all(q.text.endswith(("?", ".")) for q in QUESTIONS)


@pytest.mark.parametrize(
    ("edit", "message"),
    [(lambda t: t.replace("{number: 7,", "{number: 70,"), "numbered 1..50"),
     (lambda t: t.replace("  - number: 2\n", "  - number: 3\n", 1), "chapter 2 is numbered 3"),
     (lambda t: "just a string\n", "'chapters' list")],  # fmt: skip
)
def test_load_questions_rejects_broken_lists(tmp_path: Path, edit, message: str) -> None:
    path = tmp_path / "questions.yml"
    path.write_text(edit((REPO / bs.QUESTIONS_YML).read_text()))
    with pytest.raises(bs.SiteError, match=message):
        bs.load_questions(path)


def test_find_chapters_rejects_bad_names(tmp_path: Path) -> None:
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    nbformat.write(new_notebook(), nbdir / "02_tensors.ipynb")
    assert bs.find_chapters(nbdir, 10) == {2: nbdir / "02_tensors.ipynb"}
    nbformat.write(new_notebook(), nbdir / "Untitled.ipynb")
    with pytest.raises(bs.SiteError, match="<NN>_"):
        bs.find_chapters(nbdir, 10)
    (nbdir / "Untitled.ipynb").unlink()
    nbformat.write(new_notebook(), nbdir / "02_other.ipynb")
    with pytest.raises(bs.SiteError, match="two notebooks for chapter 2"):
        bs.find_chapters(nbdir, 10)


def test_external_references(tmp_path: Path) -> None:
    (tmp_path / "a.html").write_text(
        '<a href="https://pytorch.org/docs">docs</a><link rel="canonical" href="https://x.org/a.html">'
        '<script src="../_static/local.js"></script>'
    )
    assert bs.external_references(tmp_path) == []
    (tmp_path / "b.html").write_text('<script async src="https://unpkg.com/thebe/lib/index.js"></script>')
    (tmp_path / "c.css").write_text("@font-face { src: url('https://fonts.gstatic.com/x.woff2'); }")
    (tmp_path / "d.html").write_text('<link rel="stylesheet" href="//cdn.example.com/a.css">')
    found = bs.external_references(tmp_path)
    assert [f.split(":")[0] for f in found] == ["b.html", "d.html", "c.css"]


# --- end to end: a small site built by Sphinx ----------------------------------------------

TRICKY = 1  # Q1 gets inline code and punctuation in its heading, the hard case for anchors


def _chapter_one(path: Path, *, drop: int | None = None, extra_md: str = "") -> None:
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    cells = [new_markdown_cell("# Chapter 1: test chapter\n\nMath: $y = w x$." + extra_md)]
    for q in (q for q in QUESTIONS if q.chapter == 1 and q.number != drop):
        title = q.text if q.number != TRICKY else "Why is `optimizer.zero_grad()` *mandatory* (really)?"
        cells.append(new_markdown_cell(f"## Q{q.number}. {title}\n\nAnswer."))
    cell = new_code_cell("print(1)", execution_count=1, outputs=[new_output("stream", name="stdout", text="1\n")])
    nb.cells = cells + [cell, new_markdown_cell("## Check yourself\n\nDo it."), new_markdown_cell("## Summary\n\n- done")]
    nbformat.write(nb, path)


@pytest.fixture()
def site_root(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "book", tmp_path / "book", ignore=shutil.ignore_patterns("questions.md"))
    (tmp_path / "notebooks").mkdir()
    return tmp_path


@pytest.mark.slow
def test_build_links_every_question_to_an_existing_anchor(site_root: Path) -> None:
    _chapter_one(site_root / "notebooks" / "01_test.ipynb")
    index = bs.build(site_root)
    site = index.parent
    questions_html = (site / "book" / "questions.html").read_text()
    chapter_html = (site / "notebooks" / "01_test.html").read_text()
    ids = set(re.findall(r'id="([^"]+)"', chapter_html))
    links = re.findall(r'href="\.\./notebooks/01_test\.html#([^"]+)"', questions_html)
    n_ch1 = sum(q.chapter == 1 for q in QUESTIONS)
    assert len(links) == n_ch1 and set(links) <= ids
    assert questions_html.count("coming") == len(QUESTIONS) - n_ch1 + 1  # + the sentence explaining it
    # MathJax is the site's own copy, and nothing loads from another host.
    assert (site / "_static" / "mathjax" / "tex-chtml.js").is_file()
    assert "_static/mathjax/tex-chtml.js" in chapter_html and "THEBE_JS_URL" not in chapter_html


def test_build_fails_on_a_missing_question_heading(site_root: Path) -> None:
    _chapter_one(site_root / "notebooks" / "01_test.ipynb", drop=2)
    with pytest.raises(bs.SiteError, match="no heading '## Q2"):
        bs.build(site_root)


@pytest.mark.slow
def test_build_fails_on_a_broken_reference(site_root: Path) -> None:
    _chapter_one(site_root / "notebooks" / "01_test.ipynb", extra_md="\n\nSee [there](#no-such-section).")
    with pytest.raises(bs.SiteError, match="no-such-section"):
        bs.build(site_root)


# --- one parser: question headings, the revision sheet ------------------------------------


def test_heading_after_a_directive_fence_is_found(tmp_path: Path) -> None:
    """A cell holding a ```{warning} block and then "## Q3." still starts Q3's section."""
    nb = contract_chapter(CH1)
    i = next(i for i, c in enumerate(nb.cells) if "## Q3." in c.source)
    nb.cells[i].source = "```{warning}\nOld-style callout.\n```\n\n" + nb.cells[i].source
    path = tmp_path / "01_test.ipynb"
    nbformat.write(nb, path)
    assert [h.number for h in bs.question_headings(path)] == [1, 2, 3, 4]


def test_revision_sheet_gathers_short_answers_and_summary(tmp_path: Path) -> None:
    (tmp_path / "notebooks").mkdir()
    path = tmp_path / "notebooks" / "01_test.ipynb"
    nbformat.write(contract_chapter(CH1), path)
    md = bs.render_revision_sheet(QUESTIONS, {1: path}, tmp_path)
    heads = [line for line in md.splitlines() if line.startswith("### Q")]
    assert heads == [f"### Q{n}. {text}" for n, text in CH1.items()]  # every question, in order
    for n in CH1:
        block = md.split(f"### Q{n}. ")[1].split("### Q")[0]
        assert short_answer(n) in block and f"- {summary_line(n)}" in block
    assert md.count("## Chapter ") == 1
    # An in-page link of the chapter's text points at the chapter from the sheet.
    nb = contract_chapter(CH1)
    summary = next(c for c in nb.cells if c.source.startswith("## Summary"))
    summary.source = summary.source.replace("- **Q2.** ", "- **Q2.** Unlike [Q1](#q1), ")
    nbformat.write(nb, path)
    md = bs.render_revision_sheet(QUESTIONS, {1: path}, tmp_path)
    assert "Unlike [Q1](../notebooks/01_test.ipynb#q1), " in md and "](#" not in md
    assert bs.render_revision_sheet(QUESTIONS, {}, tmp_path).count("No chapter is written yet") == 1


@pytest.mark.slow
def test_contract_chapter_site(site_root: Path) -> None:
    """The contract chapter built: anchors, revision sheet, figure text, CSS, favicon, download."""
    nbformat.write(contract_chapter(CH1), site_root / "notebooks" / "01_test.ipynb")
    site = bs.build(site_root).parent
    chapter = (site / "notebooks" / "01_test.html").read_text()
    revision = (site / "book" / "revision.html").read_text()
    index = (site / "book" / "questions.html").read_text()
    for n in CH1:
        assert f'id="q{n}"' in chapter and f'<li id="q{n}"' in index
        assert f"Q{n}. " in revision
    # "[Qn](#qn)" in the chapter resolves to the question's section (no warning, a real link).
    assert re.search(r'href="#q3-[^"]+"', chapter)
    assert "page-break-before" in (site / "_static" / "book.css").read_text()
    assert 'alt="the curve of question 1, rising."' in chapter and 'class="figure-caption"' in chapter
    assert "_static/book.css" in chapter and "_static/book.js" in chapter and "favicon.svg" in chapter
    # The download button's notebook link works offline: the file is in the site.
    link = re.search(r'href="(\.\./_sources/notebooks/01_test\.ipynb)"', chapter)
    assert link and (site / "notebooks" / link.group(1)).resolve().is_file()
    assert 'href="revision.html"' in (site / "book" / "intro.html").read_text()
    assert SEARCH_WORD in chapter
