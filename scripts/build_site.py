"""Build the book's static site, offline, from the stored notebook outputs.

    .venv/bin/python scripts/build_site.py          (make site)

Steps: read the canonical question list (book/questions.yml), find the chapter notebooks
(notebooks/<NN>_<slug>.ipynb), write the question index book/questions.md linking each
question to its "Q<n>. ..." section (or marking it "coming" while its chapter is not written),
then run Jupyter Book 1.x from the repository root with every Sphinx warning an error.
Finally scan the HTML for anything that would load from another host. Prints the index
page path. Exits non-zero, with the reason, on any problem.
"""
from __future__ import annotations

import argparse
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
    "external_references",
    "build",
    "main",
]

REPO = Path(__file__).resolve().parent.parent
CONFIG = Path("book/_config.yml")
TOC = Path("book/_toc.yml")
QUESTIONS_YML = Path("book/questions.yml")
QUESTIONS_MD = Path("book/questions.md")
CHAPTER_FILE = re.compile(r"^(\d{2})_[a-z0-9_]+\.ipynb$")
# A question section heading in a chapter: "## Q12. What does retain_graph do?" (levels 1-3,
# the levels myst_heading_anchors gives slugs to).
QUESTION_HEADING = re.compile(r"^(#{1,3})\s+Q(\d+)\.\s+(.+?)\s*#*\s*$")
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
    """The anchor myst-parser gives a heading: its plain text, slugified the GitHub way.

    Uses myst-parser's own slug function on the text that markdown-it sees, so inline code
    and emphasis in a heading come out exactly as in the built page.
    """
    from markdown_it import MarkdownIt
    from myst_parser.mdit_to_docutils.base import default_slugify

    tokens = MarkdownIt("commonmark").parseInline(title_markdown)
    text = "".join(
        child.content for tok in tokens for child in (tok.children or []) if child.type in ("text", "code_inline")
    )
    return default_slugify(text)


def question_headings(nb_path: Path) -> list[QuestionHeading]:
    """Every "Q<n>. ..." heading in the notebook's markdown cells, in order."""
    import nbformat

    nb = nbformat.read(nb_path, as_version=4)
    found: list[QuestionHeading] = []
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        in_fence = False
        for line in cell.source.splitlines():
            if line.lstrip().startswith(("```", "~~~")):
                in_fence = not in_fence
            m = None if in_fence else QUESTION_HEADING.match(line)
            if m:
                full = line.lstrip("#").strip()
                found.append(QuestionHeading(int(m.group(2)), m.group(3), heading_slug(full)))
    return found


def render_question_index(questions: list[Question], chapters: dict[int, Path], root: Path) -> str:
    """The Markdown of book/questions.md: every question, linked where its chapter exists."""
    lines = [
        "# Question index",
        "",
        "<!-- Written by scripts/build_site.py from book/questions.yml and the chapter notebooks. -->",
        "",
        f"All {len(questions)} questions, in the order the book answers them. Each links to its section;",
        "a question marked *coming* belongs to a chapter that is not written yet.",
    ]
    current = None
    for q in questions:
        if q.chapter != current:
            current = q.chapter
            lines += ["", f"## Chapter {q.chapter}: {q.chapter_title}", ""]
        gpu = " (GPU)" if q.gpu else ""
        nb = chapters.get(q.chapter)
        if nb is None:
            lines.append(f"{q.number}. {q.text}{gpu} *(coming)*")
            continue
        heads = {h.number: h for h in question_headings(nb)}
        if q.number not in heads:
            raise SiteError(
                f"{nb.relative_to(root)} has no heading '## Q{q.number}. ...'; every question of "
                f"chapter {q.chapter} needs one (see the chapter standard)"
            )
        target = f"../{nb.relative_to(root).as_posix()}#{heads[q.number].slug}"
        # Escape brackets so question text such as "[GPU]" cannot close the link early.
        text = q.text.replace("[", r"\[").replace("]", r"\]")
        lines.append(f"{q.number}. [{text}]({target}){gpu}")
    for number, nb in sorted(chapters.items()):
        own = {q.number for q in questions if q.chapter == number}
        stray = [h.number for h in question_headings(nb) if h.number not in own]
        if stray:
            raise SiteError(f"{nb.relative_to(root)} has headings for questions {stray}, not in chapter {number}")
    return "\n".join(lines) + "\n"


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


def build(root: Path = REPO) -> Path:
    """Write the question index, build the site into root/_build/html, return its index page."""
    questions = load_questions(root / QUESTIONS_YML)
    n_chapters = max(q.chapter for q in questions)
    chapters = find_chapters(root / "notebooks", n_chapters)
    index_md = render_question_index(questions, chapters, root)
    target = root / QUESTIONS_MD
    if not target.exists() or target.read_text(encoding="utf-8") != index_md:
        target.write_text(index_md, encoding="utf-8")

    site = root / "_build" / "html"
    # Start empty: pages left from an earlier build (a renamed chapter) would still be served.
    shutil.rmtree(site, ignore_errors=True)
    jb = Path(sys.executable).parent / "jupyter-book"
    cmd = [
        str(jb), "build", ".", "--config", str(CONFIG), "--toc", str(TOC), "--builder", "html",
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
    pages = [site / "book" / "questions.html"] + [site / nb.relative_to(root).with_suffix(".html") for nb in chapters.values()]
    missing = [str(p.relative_to(site)) for p in pages if not p.is_file()]
    if missing:
        raise SiteError(f"pages missing from the site: {missing}; is the chapter in book/_toc.yml's glob?")
    mathjax = site / "_static" / "mathjax" / "tex-chtml.js"
    if not mathjax.is_file():
        raise SiteError(f"{mathjax} is missing: the site would load MathJax from a CDN (is sphinx-mathjax-offline installed?)")
    external = external_references(site)
    if external:
        raise SiteError("the site would load resources from other hosts:\n  " + "\n  ".join(external))
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
