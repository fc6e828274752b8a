"""Build the book's static site, offline, from the stored notebook outputs.

    .venv/bin/python scripts/build_site.py          (make site)

Steps: read the canonical question list (book/questions.yml), find the chapter notebooks
(notebooks/<NN>_<slug>.ipynb) and parse each once (scripts/notebook_parts.py); write the
question index book/questions.md (each question linked to its own page, or marked "coming"
while its chapter is not written), the revision sheet book/revision.md (every short answer and
Summary line, one printed page per chapter), the drill book/drill.md (a card per question from
the same parts) and the page "What changed between torch versions" (book/torch-versions.md on
the site, docs/torch-versions.md in the repository, both from autogradviz's VERSION_FACTS).
Then write the Sphinx source tree _build/src: book/ copied, and per chapter notebook a chapter
page and a page per question (the notebook split at its "## Q<n>." headings, stored outputs
kept, question links pointed at the question pages), with book/_toc.yml's chapter glob
replaced by those pages. Run Jupyter Book 1.x on it with every Sphinx warning an error, give
every page's download button the whole chapter notebook, point the search page at the book's
own ranked index (_static/book-search.js), and fail on anything that would load from another
host or any link to a missing page or anchor. Prints the index page path. Exits non-zero, with
the reason, on any problem.
"""
from __future__ import annotations

import argparse
import functools
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Question",
    "QuestionHeading",
    "load_questions",
    "find_chapters",
    "question_headings",
    "heading_slug",
    "render_question_index",
    "render_revision_sheet",
    "render_drill",
    "render_version_page",
    "question_page",
    "chapter_page",
    "chapter_pages",
    "site_links",
    "join_split_math",
    "render_toc",
    "search_index",
    "search",
    "book_search_pages",
    "broken_links",
    "external_references",
    "build",
    "main",
]

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))  # notebook_parts sits beside this script
import notebook_parts  # noqa: E402 - needs the path above when run as a script
CONFIG = Path("book/_config.yml")
TOC = Path("book/_toc.yml")
QUESTIONS_YML = Path("book/questions.yml")
QUESTIONS_MD = Path("book/questions.md")
REVISION_MD = Path("book/revision.md")
DRILL_MD = Path("book/drill.md")
VERSIONS_MD = Path("book/torch-versions.md")  # the site's copy
VERSIONS_DOC = Path("docs/torch-versions.md")  # the repository's, readable without the site
CHAPTER_FILE = re.compile(r"^(\d{2})_[a-z0-9_]+\.ipynb$")
N_QUESTIONS = 50


class SiteError(RuntimeError):
    """The site cannot be built as it stands; the message says what to fix."""


@dataclass(frozen=True)
class Question:
    """One of the book's questions, as listed in book/questions.yml."""

    number: int
    text: str
    chapter: int
    chapter_title: str
    gpu: bool = False


@dataclass(frozen=True)
class QuestionHeading:
    """Where a question's section starts in a chapter notebook."""

    number: int
    title: str  # the heading text after "Q<n>. ", as written in the notebook
    slug: str  # what myst_heading_anchors calls it; Sphinx resolves it to the section's HTML id


def load_questions(path: Path) -> list[Question]:
    """Read and check the canonical list: questions 1..50, in order, each in one chapter."""
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("chapters"), list):
        raise SiteError(f"{path}: expected a mapping with a 'chapters' list")
    questions: list[Question] = []
    for i, ch in enumerate(data["chapters"], 1):
        if ch.get("number") != i:
            raise SiteError(f"{path}: chapter {i} is numbered {ch.get('number')!r}; number chapters 1, 2, ...")
        for q in ch.get("questions") or []:
            questions.append(
                Question(int(q["number"]), str(q["text"]).strip(), i, str(ch["title"]), bool(q.get("gpu", False)))
            )
    numbers = [q.number for q in questions]
    if numbers != list(range(1, N_QUESTIONS + 1)):
        raise SiteError(f"{path}: questions must be numbered 1..{N_QUESTIONS} in order, got {numbers}")
    return questions


def find_chapters(notebooks_dir: Path, n_chapters: int) -> dict[int, Path]:
    """Map chapter number -> notebook, from the file names notebooks/<NN>_<slug>.ipynb."""
    chapters: dict[int, Path] = {}
    if not notebooks_dir.is_dir():
        return chapters
    for path in sorted(notebooks_dir.glob("*.ipynb")):
        m = CHAPTER_FILE.match(path.name)
        if not m:
            raise SiteError(f"{path}: name chapter notebooks <NN>_<lowercase_slug>.ipynb, e.g. 01_define_by_run.ipynb")
        number = int(m.group(1))
        if not 1 <= number <= n_chapters:
            raise SiteError(f"{path}: chapter {number} is not in book/questions.yml (chapters 1..{n_chapters})")
        if number in chapters:
            raise SiteError(f"two notebooks for chapter {number}: {chapters[number].name} and {path.name}")
        chapters[number] = path
    return chapters


def heading_slug(title_markdown: str) -> str:
    """The anchor myst-parser gives a heading (see notebook_parts.heading_slug)."""
    return notebook_parts.heading_slug(title_markdown)


def question_headings(nb_path: Path) -> list[QuestionHeading]:
    """Every "Q<n>. ..." section heading of the chapter, in order, as notebook_parts finds it."""
    return [QuestionHeading(q.number, q.title, q.slug) for q in _chapter(nb_path).questions]


@functools.lru_cache(maxsize=32)
def _parsed(path: Path, mtime_ns: int) -> notebook_parts.Chapter:
    return notebook_parts.parse_chapter(path)


def _chapter(path: Path) -> notebook_parts.Chapter:
    """Each notebook parsed once per build (the cache key includes its modification time)."""
    return _parsed(path, path.stat().st_mtime_ns)


def question_page(number: int) -> str:
    """The generated page of question `number`, relative to the site's source root."""
    return f"notebooks/q{number}.ipynb"


def chapter_page(nb: Path) -> str:
    """The generated page of a chapter (its overview, question list, Check yourself, Summary)."""
    return f"notebooks/{nb.stem}.ipynb"


def render_question_index(questions: list[Question], chapters: dict[int, Path], root: Path) -> str:
    """The Markdown of book/questions.md: every question, linked to its page where its chapter exists."""
    coming = any(q.chapter not in chapters for q in questions)
    lines = [
        "# Question index",
        "",
        "<!-- Written by scripts/build_site.py from book/questions.yml and the chapter notebooks. -->",
        "",
        f"All {len(questions)} questions, in the order the book answers them, each on its own page.",
    ]
    if coming:
        lines.append("A question marked *coming* belongs to a chapter that is not written yet.")
    lines += [
        "The [revision sheet](revision.md) gathers every short answer and Summary line on one page,",
        "and the [drill](drill.md) asks them one at a time.",
    ]
    current = None
    for q in questions:
        if q.chapter != current:
            current = q.chapter
            lines += ["", f"## Chapter {q.chapter}: {q.chapter_title}", ""]
        gpu = " (GPU)" if q.gpu else ""
        nb = chapters.get(q.chapter)
        if nb is None:
            lines.append(f'{q.number}. <a id="q{q.number}"></a>{q.text}{gpu} *(coming)*')
            continue
        heads = {h.number: h for h in question_headings(nb)}
        if q.number not in heads:
            raise SiteError(
                f"{nb.relative_to(root)} has no heading '## Q{q.number}. ...'; every question of "
                f"chapter {q.chapter} needs one (see the chapter standard)"
            )
        # Escape brackets so question text such as "[GPU]" cannot close the link early.
        text = q.text.replace("[", r"\[").replace("]", r"\]")
        lines.append(f'{q.number}. <a id="q{q.number}"></a>[{text}](../{question_page(q.number)}){gpu}')
    for number, nb in sorted(chapters.items()):
        own = {q.number for q in questions if q.chapter == number}
        stray = [h.number for h in question_headings(nb) if h.number not in own]
        if stray:
            raise SiteError(f"{nb.relative_to(root)} has headings for questions {stray}, not in chapter {number}")
    return "\n".join(lines) + "\n"


_LOCAL_Q = re.compile(r"\]\(#q(\d+)\)")
_INDEX_Q = re.compile(r"\]\((?:\.\./book/)?questions\.md#q(\d+)\)")


def site_links(markdown: str, up: str) -> str:
    """Point a chapter's question links ("](#q3)", "](../book/questions.md#q3)") at the question's
    own page; `up` is the way from the page being written to the source root ("../" from book/
    and notebooks/)."""
    markdown = _LOCAL_Q.sub(lambda m: f"]({up}{question_page(int(m.group(1)))})", markdown)
    return _INDEX_Q.sub(lambda m: f"]({up}{question_page(int(m.group(1)))})", markdown)


def _rewrite_local_links(markdown: str, target: str = "") -> str:
    """A chapter's text moved to a page in book/: question links go to the question pages."""
    return site_links(join_split_math(markdown), "../")


_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def _open_inline_math(line: str) -> bool:
    """True when the line leaves a single-dollar formula open (an odd number of lone `$`)."""
    line = re.sub(r"`[^`]*`", "", line.replace("\\$", "").replace("$$", ""))
    return line.count("$") % 2 == 1


def join_split_math(markdown: str) -> str:
    """Join the lines of an inline formula written over several lines.

    Inside a paragraph a line break is only a space, except that a continuation line starting
    with "+ " or "- " opens a list: the formula is cut in two and both halves show as raw TeX
    (Q30's distillation loss). Joining the formula's lines keeps it one formula."""
    out: list[str] = []
    fence: str | None = None
    for line in markdown.split("\n"):
        m = _FENCE.match(line)
        if fence is not None:
            if m and m.group(1).startswith(fence):
                fence = None
            out.append(line)
            continue
        if m:
            fence = m.group(1)
            out.append(line)
            continue
        if out and line.strip() and _open_inline_math(out[-1]):
            out[-1] = out[-1].rstrip() + " " + line.strip()
        else:
            out.append(line)
    return "\n".join(out)


def render_revision_sheet(questions: list[Question], chapters: dict[int, Path], root: Path) -> str:
    """The Markdown of book/revision.md: per written chapter, each question's short answer and
    its Summary bullets, in question order. Printed, each chapter starts a new page."""
    lines = [
        "# Revision sheet",
        "",
        "<!-- Written by scripts/build_site.py from the chapter notebooks. -->",
        "",
        "Every short answer and every Summary line of the written chapters, in question order:",
        "the pass to make the night before. Printed, each chapter starts on a new page. The",
        "[question index](questions.md) lists all fifty questions; the [drill](drill.md) asks",
        "them one at a time.",
    ]
    if not chapters:
        lines += ["", "No chapter is written yet."]
    by_chapter: dict[int, list[Question]] = {}
    for q in questions:
        by_chapter.setdefault(q.chapter, []).append(q)
    for number, nb in sorted(chapters.items()):
        parsed = _chapter(nb)
        lines += ["", f"## Chapter {number}: {by_chapter[number][0].chapter_title}", ""]
        for q in by_chapter[number]:
            section = parsed.question(q.number)
            if section is None:
                continue  # render_question_index already refuses a chapter missing a question
            lines += [f"### Q{q.number}. {q.text}", ""]
            for callout in section.short_answers:
                lines += [_rewrite_local_links(callout.text), ""]
            if not section.short_answers:
                lines += ["*No short answer in the chapter yet.*", ""]
            for bullet in parsed.summary.get(q.number, ()):
                lines.append(f"- {_rewrite_local_links(bullet)}")
            lines += ["", f"[The full answer](../{question_page(q.number)})", ""]
        if parsed.summary_other:
            lines += ["### Also in the chapter's Summary", ""]
            lines += [f"- {_rewrite_local_links(b)}" for b in parsed.summary_other]
    return "\n".join(lines).rstrip() + "\n"


def render_drill(questions: list[Question], chapters: dict[int, Path], root: Path) -> str:
    """The Markdown of book/drill.md: a card per written question (its short answers, then
    each follow-up), from the same parts as the revision sheet. book.js shows one card at a time."""
    lines = [
        "# Drill",
        "",
        "<!-- Written by scripts/build_site.py from the chapter notebooks. -->",
        "",
        "One question at a time. Say your answer out loud, then reveal the short answer and the",
        "follow-ups one by one, and mark how it went. Marks stay in this browser (local storage);",
        "*shaky/missed first* puts the questions you struggled with at the front of the next round.",
        "",
        '<div id="drill-app" class="drill-app"><p class="drill-noscript">The drill needs JavaScript;',
        'the <a href="revision.html">revision sheet</a> has the same answers on one page.</p></div>',
    ]
    for q in questions:
        nb = chapters.get(q.chapter)
        section = _chapter(nb).question(q.number) if nb is not None else None
        if section is None:
            continue
        text = q.text.replace("[", r"\[").replace("]", r"\]")
        lines += ["", f"::::{{container}} drill-card drill-q{q.number} drill-ch{q.chapter}", "",
                  f"**Q{q.number}. {text}** (chapter {q.chapter})", ""]
        lines += [":::{container} drill-answer", ""]
        for callout in section.short_answers:
            lines += [_rewrite_local_links(callout.text), ""]
        if not section.short_answers:
            lines += ["*No short answer in the chapter yet.*", ""]
        lines += [f"[The full answer](../{question_page(q.number)})", "", ":::", ""]
        for bullet in section.follow_ups:
            lines += [":::{container} drill-followup", "", _rewrite_local_links(bullet), "", ":::", ""]
        lines += ["::::"]
    return "\n".join(lines).rstrip() + "\n"


def render_version_page(
    questions: list[Question], chapters: dict[int, Path], root: Path, for_site: bool = True
) -> str:
    """The Markdown of the page "What changed between torch versions": every fact of
    autogradviz.versions.VERSION_FACTS, the questions whose proofs assert it (linked), what
    each tested release does, the value the proofs expect, and the change behind it.

    ``for_site`` writes the site's copy (book/torch-versions.md: questions link to their
    own page); otherwise the repository's (docs/torch-versions.md: links
    to the chapter notebooks and the question list, no site needed)."""
    from autogradviz.versions import PINNED_TORCH, TESTED_TORCH, VERSION_FACTS

    by_number = {q.number: q for q in questions}
    up = "../"  # both copies sit one folder below the repository root
    tested = ", ".join(TESTED_TORCH)
    lines = [
        "# What changed between torch versions",
        "",
        "<!-- Written by scripts/build_site.py from autogradviz/versions.py (VERSION_FACTS). -->",
        "",
        f"The chapters' stored outputs come from torch {PINNED_TORCH}; the book is also run on every",
        f"release listed here ({tested}) with `make compat TORCH=<version>`. Each claim below",
        "differs between them. A chapter's proof asserts it through",
        "`agv.version_fact(\"<name>\")`, which returns the value for the torch that is running, and",
        "this page is generated from the same records, so the two cannot disagree. Newer releases",
        "are not listed until the book has been run on them.",
    ]
    if not for_site:
        lines += ["", "On the site this page is *What changed between torch versions*, in the table of contents."]
    for fact in VERSION_FACTS.values():
        lines += ["", f"## {fact.title}", "", fact.claim, ""]
        links = []
        for number in fact.questions:
            q = by_number.get(number)
            if q is None:
                raise SiteError(f"version fact {fact.name!r} names question {number}, not in book/questions.yml")
            nb = chapters.get(q.chapter)
            text = q.text.replace("[", r"\[").replace("]", r"\]")
            if nb is None:  # a book being written (or a test site) may lack the chapter
                links.append(f"Q{number}. {text} *(chapter not written yet)*")
                continue
            if for_site:
                section = _chapter(nb).question(number)
                if section is None:
                    raise SiteError(f"{nb.relative_to(root)} has no section for Q{number} (version fact {fact.name!r})")
                target = f"{up}{question_page(number)}"
            else:
                target = f"{up}{nb.relative_to(root).as_posix()}"
            links.append(f"[Q{number}. {text}]({target})")
        lines.append(f"- **Question{'s' if len(links) > 1 else ''}:** " + "; ".join(links))
        for version in TESTED_TORCH:
            lines.append(f"- **torch {version}:** {fact.described(version)}")
        values = ", ".join(f"`{fact.since[k]!r}` from {k}" for k in sorted(fact.since, key=_version_key))
        where = ", ".join(f"`{p}`" for p in fact.proofs)
        lines.append(f"- **Asserted as** `agv.version_fact(\"{fact.name}\")`: {values}; in {where}")
        title = fact.source_title.replace("[", r"\[").replace("]", r"\]")
        lines.append(f"- **Changed by:** [{title}]({fact.source})")
    if for_site:
        lines += ["", "The [question index](questions.md) lists every question of the book."]
    else:
        lines += ["", f"The [question list]({up}book/questions.yml) has every question of the book."]
    return "\n".join(lines) + "\n"


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


_EXTERNAL = re.compile(
    r"""<(script|link|img|iframe|source)\b[^>]*?\b(src|href)\s*=\s*["']((?:https?:)?//[^"']+)["']""", re.I
)
_CSS_URL = re.compile(r"""url\(\s*["']?((?:https?:)?//[^"')]+)""", re.I)


def external_references(site: Path) -> list[str]:
    """Every resource a page or stylesheet would load from another host ("file: url").

    Plain <a href> links to other sites are fine (nothing loads until clicked); scripts,
    stylesheets, images, frames and CSS url()s are not.
    """
    found: list[str] = []
    for path in sorted(site.rglob("*.html")):
        for m in _EXTERNAL.finditer(path.read_text(encoding="utf-8", errors="replace")):
            if m.group(1).lower() == "link" and "stylesheet" not in m.group(0).lower() and "preload" not in m.group(0).lower():
                continue  # <link rel="canonical"/"author"> loads nothing
            found.append(f"{path.relative_to(site)}: {m.group(3)}")
    for path in sorted(site.rglob("*.css")):
        for m in _CSS_URL.finditer(path.read_text(encoding="utf-8", errors="replace")):
            found.append(f"{path.relative_to(site)}: {m.group(1)}")
    return found


SOURCE = Path("_build/src")  # the generated Sphinx source tree (book/ copied, the pages written)
SEARCH_JS = "_static/book-search.js"
# Search weights by where a word occurs: a question's heading, its short answer, the other
# prose, its code (imports dropped). The book's own pages (index, revision sheet) repeat the
# questions' words and rank below the questions themselves.
W_TITLE, W_SHORT, W_PROSE, W_CODE, W_BOOK, W_BOOK_TITLE = 10.0, 5.0, 1.0, 0.3, 0.4, 3.0
W_LEAD = 5.0  # the short answer's first sentence, on top of W_SHORT
_TOKEN = re.compile(r"[a-z0-9_]+")
_IMPORT = re.compile(r"^\s*(?:import\s|from\s+\S+\s+import\s)")
_HEADING_LINE = re.compile(r"^(\s{0,3})(#{1,6})(?=\s)")


def _promote_headings(source: str, by: int) -> str:
    """Raise every ATX heading of a Markdown cell by `by` levels (## -> #), fences left alone."""
    if by <= 0:
        return source
    lines = source.split("\n")
    tokens = notebook_parts._markdown().parse(source)
    for tok in tokens:
        if tok.type == "heading_open" and tok.map and tok.markup.startswith("#"):
            i = tok.map[0]
            lines[i] = _HEADING_LINE.sub(lambda m: m.group(1) + m.group(2)[: max(1, len(m.group(2)) - by)], lines[i], 1)
    return "\n".join(lines)


def _page_cell(cell, promote: int = 0):
    """A copy of a chapter cell for a generated page: links to question pages, math joined."""
    import copy

    cell = copy.deepcopy(cell)
    if cell.cell_type == "markdown":
        cell.source = site_links(join_split_math(_promote_headings(cell.source, promote)), "../")
    elif "check" in cell.get("metadata", {}).get("tags", []):
        # A check cell's output says whether the reader's answer passed: collapsed on the site.
        tags = list(cell.metadata.get("tags", []))
        cell.metadata["tags"] = tags + ["hide-output"]
    return cell


def chapter_pages(nb_path: Path, questions: list[Question]) -> dict[str, object]:
    """The generated pages of one chapter notebook: {page path: notebook}. The chapter page keeps
    every cell outside the question sections and lists the questions where the first one
    started; each question page holds its section, its heading raised to the page title."""
    import nbformat

    nb = nbformat.read(nb_path, as_version=4)
    parsed = _chapter(nb_path)
    cells = list(nb.cells)
    text = {q.number: q.text for q in questions}
    inside: set[int] = set()
    pages: dict[str, object] = {}
    for section in parsed.questions:
        inside.update(range(section.start, section.end))
        level = next(h.level for h in parsed.headings if h.cell == section.start and h.text.startswith(f"Q{section.number}."))
        page = nbformat.v4.new_notebook(metadata=nb.metadata)
        page.cells = [_page_cell(c, promote=level - 1) for c in cells[section.start:section.end]]
        pages[question_page(section.number)] = page
    listing = ["## Questions", ""]
    for section in parsed.questions:
        title = text.get(section.number, section.title).replace("[", r"\[").replace("]", r"\]")
        listing.append(f"{section.number}. [{title}](../{question_page(section.number)})")
    chapter = nbformat.v4.new_notebook(metadata=nb.metadata)
    first = parsed.questions[0].start if parsed.questions else len(cells)
    chapter.cells = [_page_cell(c) for i, c in enumerate(cells[:first])]
    chapter.cells.append(nbformat.v4.new_markdown_cell("\n".join(listing)))
    chapter.cells += [_page_cell(c) for i, c in enumerate(cells) if i >= first and i not in inside]
    return {chapter_page(nb_path): chapter, **pages}


def render_toc(template: str, chapters: dict[int, Path], parsed_numbers: dict[int, list[int]]) -> str:
    """book/_toc.yml with its chapter glob replaced by the generated pages: each chapter page,
    its question pages as sections (so previous/next run in question order)."""
    import yaml

    toc = yaml.safe_load(template)
    entries = []
    for number, nb in sorted(chapters.items()):
        entry: dict[str, object] = {"file": chapter_page(nb).removesuffix(".ipynb")}
        if parsed_numbers[number]:
            entry["sections"] = [{"file": question_page(n).removesuffix(".ipynb")} for n in parsed_numbers[number]]
        entries.append(entry)
    out = []
    for item in toc["chapters"]:
        out.extend(entries if "glob" in item else [item])
    toc["chapters"] = out
    return yaml.safe_dump(toc, sort_keys=False)


def _stem(token: str) -> str:
    """A plural and its singular are one term ("counters" finds "counter"); book.js does the same."""
    return token[:-1] if len(token) > 3 and token.endswith("s") and not token.endswith("ss") else token


def _tokens(text: str) -> list[str]:
    return [_stem(t) for t in _TOKEN.findall(text.lower()) if len(t) > 1]


def _code_text(cells) -> str:
    return "\n".join(
        line for c in cells if c.cell_type == "code" for line in c.source.splitlines() if not _IMPORT.match(line)
    )


def search_index(pages: list[tuple[str, str, str, list[tuple[float, str]]]]) -> dict[str, object]:
    """The search index: {"pages": [[url, title, snippet], ...], "terms": {term: [[page, score], ...]}}.

    `pages` holds (url, title, snippet, [(weight, text), ...]); a term's score on a page is,
    per field, weight * (1 + ln count), summed, times the term's rarity across pages."""
    import math

    terms: dict[str, list[list[float]]] = {}
    for i, (_url, _title, _snippet, fields) in enumerate(pages):
        score: dict[str, float] = {}
        for weight, text in fields:
            counts: dict[str, int] = {}
            words = _tokens(text)
            # Each word, and each pair of neighbours ("version counter"): a phrase searched for
            # ranks the page that uses it as a phrase above one that has both words apart.
            for t in words + [f"{a} {b}" for a, b in zip(words, words[1:])]:
                counts[t] = counts.get(t, 0) + 1
            for t, c in counts.items():
                score[t] = score.get(t, 0.0) + weight * (1 + math.log(c))
        for t, v in score.items():
            terms.setdefault(t, []).append([i, v])
    # A word on every page ("tensor") says little about which page is meant: each term's
    # scores are scaled by its rarity, ln(1 + pages / pages that have it). Done here, once,
    # so book.js ranks with the same numbers.
    for t, postings in terms.items():
        rarity = math.log(1 + len(pages) / len(postings))
        for entry in postings:
            entry[1] = round(entry[1] * rarity, 3)
    return {"pages": [[u, t, s] for u, t, s, _ in pages], "terms": terms}


def search(index: dict[str, object], query: str) -> list[str]:
    """The page urls a query finds, best first: every word must occur (a word of 3+ letters
    also matches the start of a longer one, at half score), and two words that occur side by
    side score again as a phrase (the second word matched the same way). book.js ranks the
    same way."""
    words = _tokens(query)
    scores: dict[int, float] | None = None
    for w in words:
        got: dict[int, float] = {}
        for term, postings in index["terms"].items():  # type: ignore[union-attr]
            if term == w:
                f = 1.0
            elif len(w) >= 3 and term.startswith(w) and " " not in term:
                f = 0.5
            else:
                continue
            for page, value in postings:
                got[page] = max(got.get(page, 0.0), f * value)
        scores = got if scores is None else {p: scores[p] + got[p] for p in scores if p in got}
    if not scores:
        return []
    for a, b in zip(words, words[1:]):  # a phrase bonus: the pair's own score where it occurs
        pair, bonus = f"{a} {b}", {}  # "tensor parallel" also finds "tensor parallelism", at half
        for term, postings in index["terms"].items():  # type: ignore[union-attr]
            if term == pair:
                f = 1.0
            elif len(b) >= 3 and term.startswith(pair) and term.count(" ") == 1:
                f = 0.5
            else:
                continue
            for page, value in postings:
                bonus[page] = max(bonus.get(page, 0.0), f * value)
        for page, value in bonus.items():
            if page in scores:
                scores[page] += value
    pages = index["pages"]  # type: ignore[index]
    return [pages[p][0] for p in sorted(scores, key=lambda p: (-round(scores[p], 6), p))]


def _snippet(text: str, n: int = 180) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1].rsplit(" ", 1)[0] + " …"


def book_search_pages(questions: list[Question], chapters: dict[int, Path], book_pages: dict[str, str]) -> list:
    """What the search index is made of: each question page, each chapter page (without its
    set-up cells) and the book's own pages (`book_pages`: url -> Markdown)."""
    plain = notebook_parts.plain_text
    pages = []
    for url, md in book_pages.items():
        title = next((line[2:].strip() for line in md.splitlines() if line.startswith("# ")), url)
        body = re.sub(r"<!--.*?-->", "", md, flags=re.S)
        pages.append((url, title, _snippet(plain(body.split("\n", 1)[-1])), [(W_BOOK_TITLE, title), (W_BOOK, plain(body))]))
    for number, nb_path in sorted(chapters.items()):
        parsed = _chapter(nb_path)
        import nbformat

        cells = list(nbformat.read(nb_path, as_version=4).cells)
        first = parsed.questions[0].start if parsed.questions else len(cells)
        inside = {i for s in parsed.questions for i in range(s.start, s.end)}
        rest = [c for i, c in enumerate(cells) if i >= first and i not in inside]
        prose = plain("\n\n".join(c.source for c in cells[:first] + rest if c.cell_type == "markdown"))
        title = parsed.title or nb_path.stem
        url = chapter_page(nb_path).replace(".ipynb", ".html")
        pages.append((url, title, _snippet(prose.replace(title, "", 1)), [(W_TITLE, title), (W_PROSE, prose), (W_CODE, _code_text(rest))]))
        for s in parsed.questions:
            sec = cells[s.start:s.end]
            short_cells = {c.cell for c in s.short_answers}
            # The short answer and the question's Summary lines: the answer in brief.
            short = plain("\n\n".join([c.text for c in s.short_answers] + list(parsed.summary.get(s.number, ()))))
            heading = f"Q{s.number}. {s.title}"
            prose = plain("\n\n".join(c.source for i, c in enumerate(sec, s.start)
                                       if c.cell_type == "markdown" and i not in short_cells and i != s.start))
            # The short answer's first sentence states the answer: it counts again, as a heading would.
            lead = re.split(r"(?<=[.!?])\s", plain(s.short_answers[0].text), maxsplit=1)[0] if s.short_answers else ""
            # (weight, text) pairs, not a dict keyed by weight: two fields may weigh the same.
            fields = [(W_TITLE, plain(heading)), (W_SHORT, short), (W_LEAD, lead), (W_PROSE, prose),
                      (W_CODE, _code_text(sec))]
            pages.append((question_page(s.number).replace(".ipynb", ".html"), plain(heading), _snippet(short), fields))
    return pages


_HREF = re.compile(r"""\bhref\s*=\s*["']([^"']+)["']""", re.I)
_ID = re.compile(r"""\bid\s*=\s*["']([^"']+)["']""", re.I)


def broken_links(site: Path) -> list[str]:
    """Every link of the site's pages that points at a page or an anchor the site lacks."""
    import html as html_lib
    from urllib.parse import unquote, urldefrag, urlparse

    ids: dict[Path, set[str]] = {}

    def ids_of(path: Path) -> set[str]:
        if path not in ids:
            ids[path] = set(_ID.findall(path.read_text(encoding="utf-8", errors="replace")))
        return ids[path]

    found = []
    for page in sorted(site.rglob("*.html")):
        rel = page.relative_to(site)
        if rel.parts[0] in ("_static", "_sources", "_images"):
            continue
        for href in _HREF.findall(page.read_text(encoding="utf-8", errors="replace")):
            href = html_lib.unescape(href)
            if urlparse(href).scheme or href.startswith("//"):
                continue  # another host, mailto:, javascript:
            target, anchor = urldefrag(href)
            path = (page.parent / unquote(target.split("?")[0])).resolve() if target else page
            if path.is_dir():
                path = path / "index.html"
            if not path.exists():
                found.append(f"{rel}: {href} (no such page)")
            elif anchor and path.suffix == ".html" and unquote(anchor) not in ids_of(path):
                found.append(f"{rel}: {href} (no such anchor)")
    return found


def _use_book_search(site: Path, index: dict[str, object]) -> None:
    """The search page ranks with the book's own index (book.js) instead of Sphinx's."""
    import json

    (site / SEARCH_JS).write_text("window.BOOK_SEARCH = " + json.dumps(index, separators=(",", ":")) + ";\n", encoding="utf-8")
    page = site / "search.html"
    text = page.read_text(encoding="utf-8")
    sphinx = re.compile(r'\s*<script src="(?:_static/searchtools\.js|_static/language_data\.js|searchindex\.js)"></script>')
    text, n = sphinx.subn("", text)
    if n != 3:
        raise SiteError(f"{page}: expected Sphinx's three search scripts, found {n}; has the theme changed?")
    text = text.replace("</head>", f'<script src="{SEARCH_JS}"></script>\n</head>', 1)
    page.write_text(text, encoding="utf-8")


def build(root: Path = REPO) -> Path:
    """Write the generated pages, build the site into root/_build/html, return its index page."""
    questions = load_questions(root / QUESTIONS_YML)
    n_chapters = max(q.chapter for q in questions)
    chapters = find_chapters(root / "notebooks", n_chapters)
    generated = {
        QUESTIONS_MD: render_question_index(questions, chapters, root),
        REVISION_MD: render_revision_sheet(questions, chapters, root),
        DRILL_MD: render_drill(questions, chapters, root),
        VERSIONS_MD: render_version_page(questions, chapters, root, for_site=True),
        VERSIONS_DOC: render_version_page(questions, chapters, root, for_site=False),
    }
    for rel, text in generated.items():
        target = root / rel
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.parent.mkdir(parents=True, exist_ok=True)  # docs/ in a test's copy of book/
            target.write_text(text, encoding="utf-8")

    # The Sphinx source: book/ as it is, and one page per chapter and per question, written
    # from the chapter notebooks (which stay one per chapter for JupyterLab and the download).
    import nbformat

    source = root / SOURCE
    shutil.rmtree(source, ignore_errors=True)
    shutil.copytree(root / "book", source / "book", ignore=shutil.ignore_patterns(".*", "__pycache__"))
    (source / "notebooks").mkdir(parents=True)
    numbers: dict[int, list[int]] = {}
    page_of_chapter: dict[str, Path] = {}
    for number, nb in sorted(chapters.items()):
        numbers[number] = [s.number for s in _chapter(nb).questions]
        for rel, page in chapter_pages(nb, questions).items():
            nbformat.write(page, source / rel)
            page_of_chapter[rel] = nb
    (source / TOC).write_text(render_toc((root / TOC).read_text(encoding="utf-8"), chapters, numbers), encoding="utf-8")

    site = root / "_build" / "html"
    # Start empty: pages left from an earlier build (a renamed chapter) would still be served.
    shutil.rmtree(site, ignore_errors=True)
    jb = Path(sys.executable).parent / "jupyter-book"
    cmd = [
        str(jb), "build", str(source), "--path-output", str(root), "--config", str(source / CONFIG),
        "--toc", str(source / TOC), "--builder", "html",
        # Fresh every time: an incremental Sphinx build does not repeat the warnings of
        # unchanged pages, so -W would let a broken page through on the second build.
        "--all", "-W", "--keep-going", "-q",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    output = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        raise SiteError(f"Sphinx failed (exit {proc.returncode}):\n{output}")
    if "WARNING" in output or "ERROR" in output:
        raise SiteError(f"Sphinx reported problems:\n{output}")
    index = site / "index.html"
    if not index.is_file():
        raise SiteError(f"the build finished but {index} is missing:\n{output}")
    pages = [site / "book" / f"{name}.html" for name in ("questions", "revision", "drill", "torch-versions")]
    pages += [site / rel.replace(".ipynb", ".html") for rel in page_of_chapter]
    missing = [str(p.relative_to(site)) for p in pages if not p.is_file()]
    if missing:
        raise SiteError(f"pages missing from the site: {missing}; is the chapter in book/_toc.yml's glob?")
    # Every page's download button gives the whole chapter notebook, not the page's cells.
    for rel, nb in page_of_chapter.items():
        shutil.copyfile(nb, site / "_sources" / rel)
    mathjax = site / "_static" / "mathjax" / "tex-chtml.js"
    if not mathjax.is_file():
        raise SiteError(f"{mathjax} is missing: the site would load MathJax from a CDN (is sphinx-mathjax-offline installed?)")
    book_pages = {
        f"book/{name}.html": (source / "book" / f"{name}.md").read_text(encoding="utf-8")
        for name in ("intro", "questions", "revision", "torch-versions")
    }
    _use_book_search(site, search_index(book_search_pages(questions, chapters, book_pages)))
    external = external_references(site)
    if external:
        raise SiteError("the site would load resources from other hosts:\n  " + "\n  ".join(external))
    broken = broken_links(site)
    if broken:
        raise SiteError(f"{len(broken)} link(s) point at a missing page or anchor:\n  " + "\n  ".join(broken[:40]))
    return index


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=REPO, help="repository root (default: this script's repository)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        index = build(args.root.resolve())
    except SiteError as exc:
        print(f"build_site: {exc}", file=sys.stderr)
        return 1
    n_pages = len(list(index.parent.rglob("*.html")))
    print(f"build_site: {n_pages} pages in {time.perf_counter() - start:.1f} s")
    print(f"Site: {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
