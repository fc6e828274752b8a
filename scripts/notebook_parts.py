"""Parse a chapter notebook once into its parts, as docs/chapter-markup.md marks them.

    from notebook_parts import parse_chapter
    chapter = parse_chapter(Path("notebooks/01_define_by_run.ipynb"))
    for q in chapter.questions:
        print(q.number, q.anchor, q.short_answers[0].text)

The site build (question index, revision sheet) and the notebook rules test both read
chapters through this module, so they cannot disagree about where a question starts or what
its short answer is. Headings are found with markdown-it (the parser MyST itself builds on),
so a `#` line inside any fenced block, MyST directive fences included, is never a heading.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Callout",
    "Chapter",
    "Exercise",
    "Figure",
    "Heading",
    "QuestionSection",
    "QuizItem",
    "parse_chapter",
    "headings",
    "heading_slug",
    "plain_text",
]

QUESTION_TITLE = re.compile(r"^Q(\d+)\.\s+(.+?)\s*$")
ANCHOR = re.compile(r"""<a\s+(?:name|id)\s*=\s*["']q(\d+)["']\s*>\s*</a>""", re.I)
# A callout cell starts with a <div> whose class list carries "admonition".
CALLOUT_OPEN = re.compile(r"""^\s*<div\s+class\s*=\s*["']([^"']*\badmonition\b[^"']*)["']\s*>""", re.I)
CALLOUT_TITLE = re.compile(r"""<p\s+class\s*=\s*["'][^"']*admonition-title[^"']*["']\s*>(.*?)</p>""", re.I | re.S)
CALLOUT_KINDS = ("tip", "warning", "note", "important", "caution", "danger", "hint", "attention", "error", "seealso")
EXERCISE_START = re.compile(r"^\s*\*\*\[(E|M|H)\]\s*(.*?)\*\*", re.S)
FIGURE_CAPTION = re.compile(r"^\s*\*Figure:\s*(.+?)\*\s*$")
SUMMARY_QUESTION = re.compile(r"^\*\*Q(\d+)\.\*\*\s*")
QUIZ_ITEM = re.compile(r"^(\d+)[.)]\s+", re.M)
DETAILS = re.compile(r"<details>\s*<summary>.*?</summary>(.*?)</details>", re.I | re.S)
FIGURE_MIME = ("image/png", "image/jpeg", "image/svg+xml")


@dataclass(frozen=True)
class Heading:
    """A Markdown heading: which cell, its level (1-6) and its text as written."""

    cell: int
    level: int
    text: str


@dataclass(frozen=True)
class Callout:
    """A `<div class="admonition <kind> ...">` cell: its kind, title and Markdown body."""

    cell: int
    kind: str  # "tip", "warning", "note", ... (the first admonition kind among the classes)
    classes: tuple[str, ...]
    title: str
    text: str  # the body, as Markdown, without the title and the closing </div>


@dataclass(frozen=True)
class Figure:
    """A code cell output that is a picture, and the caption line of the markdown cell after it."""

    cell: int
    mime: str
    caption: str | None  # the text of "*Figure: <caption>*", None when the cell has no caption


@dataclass(frozen=True)
class Exercise:
    """A "**[E|M|H] title**" cell and the code cells that follow it, by their tags."""

    cell: int
    level: str  # "E", "M" or "H"
    title: str
    exercise_cells: tuple[int, ...]  # the reader's stub, tagged "exercise"
    solution_cells: tuple[int, ...]  # tagged "solution"
    check_cells: tuple[int, ...]  # tagged "check"
    untagged_cells: tuple[int, ...]  # code cells with none of the three tags


@dataclass(frozen=True)
class QuizItem:
    """One numbered recall-quiz question, with the Markdown inside its <details> (None if none)."""

    number: int
    question: str
    answer: str | None


@dataclass(frozen=True)
class QuestionSection:
    """A "## Q<n>. ..." section, from its heading cell up to the next level-1/2 heading."""

    number: int
    title: str  # heading text after "Q<n>. "
    slug: str  # the heading's own anchor on the site (myst_heading_anchors)
    anchor: str | None  # "q<n>" when the heading cell carries <a id="q<n>"></a>
    start: int  # cell index of the heading
    end: int  # first cell index after the section
    subheadings: tuple[str, ...]  # level-3 headings in order ("Why", "Proof", ...)
    short_answers: tuple[Callout, ...]  # tip callouts
    wrong_answers: tuple[Callout, ...]  # warning callouts
    other_callouts: tuple[Callout, ...]
    figures: tuple[Figure, ...]
    follow_ups: tuple[str, ...] = ()  # top-level bullets of the "### Follow-ups" subsection, as Markdown


@dataclass(frozen=True)
class Chapter:
    """Everything the site and the rules test need to know about one chapter notebook."""

    path: Path | None
    title: str | None  # the first level-1 heading
    headings: tuple[Heading, ...]
    questions: tuple[QuestionSection, ...]
    callouts: tuple[Callout, ...]
    figures: tuple[Figure, ...]
    exercises: tuple[Exercise, ...]
    quiz: tuple[QuizItem, ...]
    quiz_cell: int | None  # the "### Recall quiz" cell
    summary: dict[int, tuple[str, ...]] = field(default_factory=dict)  # question -> its bullets
    summary_other: tuple[str, ...] = ()  # Summary bullets not starting with **Q<n>.**
    summary_cell: int | None = None

    def question(self, number: int) -> QuestionSection | None:
        """The section of question `number`, or None when the chapter has no such heading."""
        return next((q for q in self.questions if q.number == number), None)

    def section_start(self, title: str) -> int | None:
        """Cell of the first level-1/2 heading starting with `title` (case-insensitive)."""
        return next(
            (h.cell for h in self.headings if h.level <= 2 and h.text.lower().startswith(title.lower())), None
        )


def _markdown():
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark")


def headings(source: str) -> list[tuple[int, str]]:
    """(level, text) of every Markdown heading in `source`, never counting fenced or indented code."""
    tokens = _markdown().parse(source)
    found = []
    for tok, inline in zip(tokens, tokens[1:]):
        if tok.type == "heading_open":
            found.append((int(tok.tag[1]), inline.content.strip()))
    return found


def plain_text(markdown: str) -> str:
    """The text a reader sees in a Markdown snippet: no markup, tags, code ticks, math or
    link targets; a line break inside a paragraph reads as a space, as it renders."""
    tokens = _markdown().parse(markdown)
    parts: list[str] = []
    for tok in tokens:
        if tok.type == "inline":
            parts.append("".join(c.content if c.type in ("text", "code_inline") else " "
                                 for c in tok.children or []
                                 if c.type in ("text", "code_inline", "softbreak", "hardbreak")))
        elif tok.type in ("fence", "code_block"):
            parts.append(tok.content)
    return html.unescape(re.sub(r"\s+", " ", " ".join(parts))).strip()


def heading_slug(title_markdown: str) -> str:
    """The anchor myst-parser gives a heading: its plain text, slugified the GitHub way.

    Uses myst-parser's own slug function on the text markdown-it sees, so inline code and
    emphasis in a heading come out exactly as in the built page.
    """
    from myst_parser.mdit_to_docutils.base import default_slugify

    tokens = _markdown().parseInline(title_markdown)
    text = "".join(c.content for tok in tokens for c in (tok.children or []) if c.type in ("text", "code_inline"))
    return default_slugify(text)


def _tags(cell: Any) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def _callout(index: int, source: str) -> Callout | None:
    m = CALLOUT_OPEN.match(source)
    if not m:
        return None
    classes = tuple(m.group(1).split())
    kind = next((c for c in classes if c in CALLOUT_KINDS), "note")
    body = source[m.end():]
    t = CALLOUT_TITLE.search(body)
    title = plain_text(t.group(1)) if t else ""
    if t:
        body = body[: t.start()] + body[t.end():]
    body = re.sub(r"</div>\s*$", "", body.strip(), flags=re.I).strip()
    return Callout(index, kind, classes, title, body)


def _figure_mime(cell: Any) -> str | None:
    for out in cell.get("outputs", []):
        for mime in FIGURE_MIME:
            if mime in out.get("data", {}):
                return mime
    return None


def _caption_after(cells: list, index: int) -> str | None:
    nxt = cells[index + 1] if index + 1 < len(cells) else None
    if nxt is None or nxt.cell_type != "markdown" or not nxt.source.strip():
        return None
    m = FIGURE_CAPTION.match(nxt.source.strip().splitlines()[0])
    return plain_text(m.group(1)) if m else None


def _bullets(source: str) -> list[str]:
    """Top-level bullet items of a Markdown list, continuation lines joined."""
    items: list[str] = []
    for line in source.splitlines():
        m = re.match(r"^[-*+]\s+(.*)$", line)
        if m:
            items.append(m.group(1).strip())
        elif items and line.startswith((" ", "\t")) and line.strip():
            items[-1] += " " + line.strip()
        elif items and not line.strip():
            continue
    return items


def _quiz_items(source: str) -> list[QuizItem]:
    starts = list(QUIZ_ITEM.finditer(source))
    items = []
    for m, nxt in zip(starts, starts[1:] + [None]):
        chunk = source[m.end(): nxt.start() if nxt else len(source)]
        d = DETAILS.search(chunk)
        question = chunk[: d.start()] if d else chunk
        items.append(QuizItem(int(m.group(1)), " ".join(question.split()), d.group(1).strip() if d else None))
    return items


def parse_chapter(notebook: Path | Any) -> Chapter:
    """Parse a chapter from its path or an nbformat notebook node (v4)."""
    import nbformat

    if isinstance(notebook, (str, Path)):
        path = Path(notebook)
        if path.suffix != ".ipynb" or not path.is_file():
            raise ValueError(f"{path} is not an existing .ipynb file; pass notebooks/<NN>_<slug>.ipynb")
        nb = nbformat.read(path, as_version=4)
    elif hasattr(notebook, "cells"):
        path, nb = None, notebook
    else:
        raise TypeError(f"pass a notebook path or an nbformat notebook, got {type(notebook).__name__}")
    cells = list(nb.cells)

    heads: list[Heading] = []
    callouts: list[Callout] = []
    figures: list[Figure] = []
    for i, cell in enumerate(cells):
        if cell.cell_type == "markdown":
            heads += [Heading(i, level, text) for level, text in headings(cell.source)]
            c = _callout(i, cell.source)
            if c:
                callouts.append(c)
        elif cell.cell_type == "code":
            mime = _figure_mime(cell)
            if mime:
                figures.append(Figure(i, mime, _caption_after(cells, i)))

    title = next((h.text for h in heads if h.level == 1), None)
    # A level-1/2 heading closes whatever section came before it.
    breaks = sorted({h.cell for h in heads if h.level <= 2})

    def section_end(start: int) -> int:
        return next((b for b in breaks if b > start), len(cells))

    def follow_ups(start: int, end: int) -> tuple[str, ...]:
        """Bullets from the "Follow-ups" level-3 heading up to the next heading of level <= 3."""
        head = next((h for h in heads if start <= h.cell < end and h.level == 3
                     and h.text.lower().startswith("follow-up")), None)
        if head is None:
            return ()
        stop = next((h.cell for h in heads if head.cell < h.cell < end and h.level <= 3), end)
        text = "\n\n".join(c.source for c in cells[head.cell:stop] if c.cell_type == "markdown")
        return tuple(_bullets(text))

    questions = []
    for h in heads:
        m = QUESTION_TITLE.match(h.text)
        if not m or h.level > 2:
            continue
        start, end = h.cell, section_end(h.cell)
        a = ANCHOR.search(cells[start].source)
        inside = [c for c in callouts if start <= c.cell < end]
        questions.append(
            QuestionSection(
                number=int(m.group(1)),
                title=m.group(2),
                slug=heading_slug(h.text),
                anchor=f"q{a.group(1)}" if a else None,
                start=start,
                end=end,
                subheadings=tuple(x.text for x in heads if start <= x.cell < end and x.level == 3),
                short_answers=tuple(c for c in inside if c.kind == "tip"),
                wrong_answers=tuple(c for c in inside if c.kind == "warning"),
                other_callouts=tuple(c for c in inside if c.kind not in ("tip", "warning")),
                figures=tuple(f for f in figures if start <= f.cell < end),
                follow_ups=follow_ups(start, end),
            )
        )

    chapter_kwargs: dict[str, Any] = {}
    check = next((h.cell for h in heads if h.level <= 2 and h.text.lower().startswith("check yourself")), None)
    exercises: list[Exercise] = []
    quiz: list[QuizItem] = []
    quiz_cell = None
    if check is not None:
        end = section_end(check)
        starts = [i for i in range(check, end) if cells[i].cell_type == "markdown" and EXERCISE_START.match(cells[i].source)]
        quiz_heads = [h.cell for h in heads if check <= h.cell < end and h.text.lower().startswith("recall quiz")]
        quiz_cell = quiz_heads[0] if quiz_heads else None
        if quiz_cell is not None:
            quiz = _quiz_items(cells[quiz_cell].source)
        stops = sorted(set(starts + quiz_heads + [end]))
        for s in starts:
            stop = next(x for x in stops if x > s)
            code = [(i, _tags(cells[i])) for i in range(s + 1, stop) if cells[i].cell_type == "code"]
            m = EXERCISE_START.match(cells[s].source)
            exercises.append(
                Exercise(
                    cell=s,
                    level=m.group(1),
                    title=plain_text(m.group(2)),
                    exercise_cells=tuple(i for i, t in code if "exercise" in t),
                    solution_cells=tuple(i for i, t in code if "solution" in t),
                    check_cells=tuple(i for i, t in code if "check" in t),
                    untagged_cells=tuple(i for i, t in code if not t & {"exercise", "solution", "check"}),
                )
            )

    summary: dict[int, list[str]] = {}
    summary_other: list[str] = []
    summary_cell = next((h.cell for h in heads if h.level <= 2 and h.text.lower().startswith("summary")), None)
    if summary_cell is not None:
        text = "\n".join(c.source for c in cells[summary_cell: section_end(summary_cell)] if c.cell_type == "markdown")
        for bullet in _bullets(text):
            m = SUMMARY_QUESTION.match(bullet)
            if m:
                summary.setdefault(int(m.group(1)), []).append(bullet[m.end():].strip())
            else:
                summary_other.append(bullet)
    chapter_kwargs.update(
        summary={k: tuple(v) for k, v in summary.items()}, summary_other=tuple(summary_other), summary_cell=summary_cell
    )
    return Chapter(
        path=path,
        title=title,
        headings=tuple(heads),
        questions=tuple(questions),
        callouts=tuple(callouts),
        figures=tuple(figures),
        exercises=tuple(exercises),
        quiz=tuple(quiz),
        quiz_cell=quiz_cell,
        **chapter_kwargs,
    )
