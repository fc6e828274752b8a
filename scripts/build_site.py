"""Build the book's static site, offline, from the stored notebook outputs.

    .venv/bin/python scripts/build_site.py          (make site)

Steps: read the canonical question list (book/questions.yml), find the chapter notebooks
(notebooks/<NN>_<slug>.ipynb) and parse each once (scripts/notebook_parts.py), write the
question index book/questions.md linking each question to its "Q<n>. ..." section (or marking
it "coming" while its chapter is not written) and the revision sheet book/revision.md (every
short answer and Summary line, one printed page per chapter) and the page "What changed between
torch versions" (book/torch-versions.md on the site, docs/torch-versions.md in the repository,
both from autogradviz's VERSION_FACTS), then run Jupyter Book 1.x from
the repository root with every Sphinx warning an error.
Finally scan the HTML for anything that would load from another host. Prints the index
page path. Exits non-zero, with the reason, on any problem.
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
    "render_version_page",
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


def render_question_index(questions: list[Question], chapters: dict[int, Path], root: Path) -> str:
    """The Markdown of book/questions.md: every question, linked where its chapter exists."""
    lines = [
        "# Question index",
        "",
        "<!-- Written by scripts/build_site.py from book/questions.yml and the chapter notebooks. -->",
        "",
        f"All {len(questions)} questions, in the order the book answers them. Each links to its section;",
        "a question marked *coming* belongs to a chapter that is not written yet. The",
        "[revision sheet](revision.md) gathers every written short answer and Summary line on one page.",
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
        target = f"../{nb.relative_to(root).as_posix()}#{heads[q.number].slug}"
        # Escape brackets so question text such as "[GPU]" cannot close the link early.
        text = q.text.replace("[", r"\[").replace("]", r"\]")
        lines.append(f'{q.number}. <a id="q{q.number}"></a>[{text}]({target}){gpu}')
    for number, nb in sorted(chapters.items()):
        own = {q.number for q in questions if q.chapter == number}
        stray = [h.number for h in question_headings(nb) if h.number not in own]
        if stray:
            raise SiteError(f"{nb.relative_to(root)} has headings for questions {stray}, not in chapter {number}")
    return "\n".join(lines) + "\n"


def _rewrite_local_links(markdown: str, target: str) -> str:
    """Point in-page links ("](#q3)") of a chapter's text at that chapter from another page."""
    return re.sub(r"\]\(#", f"]({target}#", markdown)


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
        "[question index](questions.md) lists all fifty questions.",
    ]
    if not chapters:
        lines += ["", "No chapter is written yet."]
    by_chapter: dict[int, list[Question]] = {}
    for q in questions:
        by_chapter.setdefault(q.chapter, []).append(q)
    for number, nb in sorted(chapters.items()):
        parsed = _chapter(nb)
        page = f"../{nb.relative_to(root).as_posix()}"
        lines += ["", f"## Chapter {number}: {by_chapter[number][0].chapter_title}", ""]
        for q in by_chapter[number]:
            section = parsed.question(q.number)
            if section is None:
                continue  # render_question_index already refuses a chapter missing a question
            lines += [f"### Q{q.number}. {q.text}", ""]
            for callout in section.short_answers:
                lines += [_rewrite_local_links(callout.text, page), ""]
            if not section.short_answers:
                lines += ["*No short answer in the chapter yet.*", ""]
            for bullet in parsed.summary.get(q.number, ()):
                lines.append(f"- {_rewrite_local_links(bullet, page)}")
            lines += ["", f"[The full answer]({page}#{section.slug})", ""]
        if parsed.summary_other:
            lines += ["### Also in the chapter's Summary", ""]
            lines += [f"- {_rewrite_local_links(b, page)}" for b in parsed.summary_other]
    return "\n".join(lines).rstrip() + "\n"


def render_version_page(
    questions: list[Question], chapters: dict[int, Path], root: Path, for_site: bool = True
) -> str:
    """The Markdown of the page "What changed between torch versions": every fact of
    autogradviz.versions.VERSION_FACTS, the questions whose proofs assert it (linked), what
    each tested release does, the value the proofs expect, and the change behind it.

    ``for_site`` writes the site's copy (book/torch-versions.md: questions link to their
    section of the chapter page); otherwise the repository's (docs/torch-versions.md: links
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
                target = f"{up}{nb.relative_to(root).as_posix()}#{section.slug}"
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


def build(root: Path = REPO) -> Path:
    """Write the question index, build the site into root/_build/html, return its index page."""
    questions = load_questions(root / QUESTIONS_YML)
    n_chapters = max(q.chapter for q in questions)
    chapters = find_chapters(root / "notebooks", n_chapters)
    generated = {
        QUESTIONS_MD: render_question_index(questions, chapters, root),
        REVISION_MD: render_revision_sheet(questions, chapters, root),
        VERSIONS_MD: render_version_page(questions, chapters, root, for_site=True),
        VERSIONS_DOC: render_version_page(questions, chapters, root, for_site=False),
    }
    for rel, text in generated.items():
        target = root / rel
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.parent.mkdir(parents=True, exist_ok=True)  # docs/ in a test's copy of book/
            target.write_text(text, encoding="utf-8")

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
    pages = [site / "book" / "questions.html", site / "book" / "revision.html", site / "book" / "torch-versions.html"] + [site / nb.relative_to(root).with_suffix(".html") for nb in chapters.values()]
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
