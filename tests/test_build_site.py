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
    links = re.findall(r'<li id="q\d+"><p><a class="reference internal" href="\.\./notebooks/(q\d+)\.html"', questions_html)
    n_ch1 = sum(q.chapter == 1 for q in QUESTIONS)
    assert links == [f"q{n}" for n in CH1]  # each question links to its own page
    for n in CH1:
        page = (site / "notebooks" / f"q{n}.html").read_text()
        assert re.search(rf"<title>Q{n}\. ", page)
        assert f'href="q{n}.html"' in chapter_html  # the chapter page lists its questions
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
    assert "Unlike [Q1](../notebooks/q1.ipynb), " in md and "](#" not in md
    assert bs.render_revision_sheet(QUESTIONS, {}, tmp_path).count("No chapter is written yet") == 1


@pytest.mark.slow
def test_contract_chapter_site(site_root: Path) -> None:
    """The contract chapter built: anchors, revision sheet, figure text, CSS, favicon, download."""
    nbformat.write(contract_chapter(CH1), site_root / "notebooks" / "01_test.ipynb")
    site = bs.build(site_root).parent
    chapter = (site / "notebooks" / "01_test.html").read_text()
    pages = {n: (site / "notebooks" / f"q{n}.html").read_text() for n in CH1}
    revision = (site / "book" / "revision.html").read_text()
    index = (site / "book" / "questions.html").read_text()
    for n in CH1:
        assert f'id="q{n}"' in pages[n] and f'<li id="q{n}"' in index
        assert f"Q{n}. " in revision
        # The page is the question's section alone: its heading is the page title.
        assert re.search(rf"<h1>Q{n}\. ", pages[n]) and "Check yourself" not in pages[n]
        assert "The short answer" in pages[n] and "Common wrong answer" in pages[n]
    # "[Qn](#qn)" in a question's text goes to that question's page (here, the page itself).
    assert re.search(r'<a class="reference internal" href="#"><span class="std std-doc">Q3</span>', pages[3])
    # Previous/next run in question order: chapter page, Q1, Q2, ...
    assert re.search(r'<link rel="next" title="[^"]*" href="q1.html"', chapter)
    assert re.search(r'<link rel="prev" title="[^"]*" href="q1.html"', pages[2])
    assert re.search(r'<link rel="next" title="[^"]*" href="q3.html"', pages[2])
    assert "page-break-before" in (site / "_static" / "book.css").read_text()
    assert 'alt="the curve of question 1, rising."' in pages[1] and 'class="figure-caption"' in pages[1]
    assert "_static/book.css" in chapter and "_static/book.js" in chapter and "favicon.svg" in chapter
    # The chapter page keeps the set-up, the exercises, the quiz and the Summary.
    assert "Check yourself" in chapter and "Recall quiz" in chapter and "Summary" in chapter
    # A check cell's output is collapsed.
    check = chapter[chapter.index("tag_check"):]
    assert re.match(r'tag_check[^"]*tag_hide-output', check)
    assert check.index('<details class="admonition hide below-input">') < check.index("correct!") < check.index("</details>")
    # Every page's download button gives the whole chapter notebook, offline.
    for html, name in [(chapter, "01_test"), (pages[2], "q2")]:
        link = re.search(rf'href="(\.\./_sources/notebooks/{name}\.ipynb)"', html)
        assert link and (site / "notebooks" / link.group(1)).read_bytes() == (site_root / "notebooks" / "01_test.ipynb").read_bytes()
    assert 'href="revision.html"' in (site / "book" / "intro.html").read_text()
    assert SEARCH_WORD in pages[3]
    # The search page ranks with the book's index, not Sphinx's.
    search_html = (site / "search.html").read_text()
    assert "_static/book-search.js" in search_html and "searchindex.js" not in search_html
    assert (site / "_static" / "book-search.js").read_text().startswith("window.BOOK_SEARCH = ")
    assert bs.broken_links(site) == []
    # The drill: a card per question, its short answer and follow-ups in their own boxes.
    drill = (site / "book" / "drill.html").read_text()
    assert drill.count('class="drill-card') == len(CH1) and drill.count("drill-followup") == len(CH1)


def test_broken_links_finds_missing_pages_and_anchors(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.html").write_text(
        '<p id="top"></p><a href="#top">ok</a><a href="sub/b.html#there">ok</a><a href="https://x.org/y">other host</a>'
        '<a href="#gone">no anchor</a><a href="sub/c.html">no page</a><a href="sub/b.html#nowhere">no anchor there</a>'
    )
    (tmp_path / "sub" / "b.html").write_text('<h2 id="there">x</h2><a href="../a.html?x=1#top">ok</a>')
    assert bs.broken_links(tmp_path) == [
        "a.html: #gone (no such anchor)", "a.html: sub/c.html (no such page)", "a.html: sub/b.html#nowhere (no such anchor)",
    ]


def test_split_inline_math_is_joined() -> None:
    """Q30's formula broke over a line starting "+ ": a list item cut it in two on the sheet."""
    md = "loss:\n$L = \\alpha\\,T^2\n+ (1-\\alpha)\\,\\mathrm{CE}$ (Hinton).\n\n- a list\n- stays"
    assert bs.join_split_math(md) == "loss:\n$L = \\alpha\\,T^2 + (1-\\alpha)\\,\\mathrm{CE}$ (Hinton).\n\n- a list\n- stays"
    fenced = "```\ncost = $5\n+ 1\n```"
    assert bs.join_split_math(fenced) == fenced  # code is left alone
    assert bs.join_split_math("`$` alone\n+ item") == "`$` alone\n+ item"  # a dollar in code is not math


def test_site_links_point_questions_at_their_pages() -> None:
    md = "See [Q3](#q3), [Q42](../book/questions.md#q42) and [the index](questions.md)."
    assert bs.site_links(md, "../") == (
        "See [Q3](../notebooks/q3.ipynb), [Q42](../notebooks/q42.ipynb) and [the index](questions.md)."
    )


def test_the_question_index_has_no_coming_text_once_every_chapter_is_written() -> None:
    chapters = bs.find_chapters(REPO / "notebooks", 10)
    if len(chapters) < 10:
        pytest.skip("not every chapter is written yet")
    md = bs.render_question_index(QUESTIONS, chapters, REPO)
    assert "coming" not in md and md.count("](../notebooks/q") == 50


def test_alt_text_has_no_tex() -> None:
    sys.path.insert(0, str(REPO / "book" / "_ext"))
    from offline_site import tex_to_text

    assert tex_to_text(r"6\times10^{-8}") == "6×10^-8"
    assert tex_to_text(r"\mathrm{KL}(p \,\|\, q) \le \frac{1}{T^2}") == "KL(p ‖ q) ≤ (1)/(T^2)"


def test_search_finds_the_question_that_explains_each_term() -> None:
    """The list of terms in scripts/check_site.py, ranked by build_site.search (the ranking
    book.js repeats) over the real chapters: the first result is the explaining question."""
    import check_site

    chapters = bs.find_chapters(REPO / "notebooks", 10)
    needed = {q.chapter for q in QUESTIONS if q.number in set(check_site.SEARCH_TERMS.values())}
    if not needed <= set(chapters):
        pytest.skip("a chapter the search list needs is not written yet")
    book = {f"book/{n}.html": (REPO / "book" / f"{n}.md").read_text() for n in ("intro", "questions", "revision")}
    index = bs.search_index(bs.book_search_pages(QUESTIONS, chapters, book))
    assert len(check_site.SEARCH_TERMS) >= 20
    wrong = {}
    for term, n in check_site.SEARCH_TERMS.items():
        found = bs.search(index, term)
        if not found or found[0] != f"notebooks/q{n}.html":
            wrong[term] = (n, found[:3])
    assert wrong == {}
    assert bs.search(index, "qzxjvwkplorbtemu") == []
    # The set-up cells are not indexed: every chapter's calls agv.written_for(...).
    assert "written_for" not in index["terms"]
    # Nor are import lines.
    nb_cells = [nbformat.v4.new_code_cell("import heapq\nfrom torch import nn\nx = heapq.heappop(q)")]
    assert bs._code_text(nb_cells) == "x = heapq.heappop(q)"


def test_search_ranks_heading_above_short_answer_above_prose_above_code() -> None:
    fields = lambda w: [(bs.W_TITLE, "T"), (w, "zork")]  # noqa: E731
    pages = [(f"p{i}.html", "T", "", fields(w)) for i, w in enumerate((bs.W_CODE, bs.W_PROSE, bs.W_SHORT, bs.W_TITLE))]
    index = bs.search_index(pages)
    assert bs.search(index, "zork") == ["p3.html", "p2.html", "p1.html", "p0.html"]
    # Two fields of the same weight both count (the short answer and its lead sentence do).
    index = bs.search_index([("one.html", "", "", [(bs.W_SHORT, "zork")]),
                             ("both.html", "", "", [(bs.W_SHORT, "zork"), (bs.W_LEAD, "zork")])])  # fmt: skip
    assert bs.search(index, "zork") == ["both.html", "one.html"]
    # A phrase outranks the same two words apart; every word must occur; plurals fold.
    index = bs.search_index([("apart.html", "", "", [(1.0, "version of the counter")]),
                             ("phrase.html", "", "", [(1.0, "the version counter")]),
                             ("one.html", "", "", [(1.0, "version")])])  # fmt: skip
    assert bs.search(index, "version counters") == ["phrase.html", "apart.html"]
