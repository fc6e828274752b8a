"""The claims index (docs/claims/<chapter>.md) points at cells that exist, in the right question.

Each chapter's index lists, per question, the claims a reader carries away and what proves
each: the first line of a code cell in that question's section (whose asserts would fail if
the claim were false), `Q<m>: <first line>` for a cell of another question that the text
points to, or `cited: <reference>` where the reference is written in that question's own
text. This test keeps the index honest as chapters change: a proof cell that
moves to another question, is rewritten or is deleted, or a citation that is dropped from the
chapter, fails here and names the row. The format is described in docs/claims/README.md.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

import nbformat
import pytest

import notebook_parts  # scripts/ is on sys.path (conftest.py)

REPO = Path(__file__).resolve().parent.parent
CLAIMS = REPO / "docs" / "claims"
INDEXES = sorted(p for p in CLAIMS.glob("[0-9][0-9]_*.md"))
MIN_ROWS = 3  # a question's index with fewer rows is a stub, not an index

_CODE_SPAN = re.compile(r"(`+)\s?(.+?)\s?\1")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


def parse_index(text: str) -> dict[int, list[tuple[str, str]]]:
    """{question: [(claim, proved_by), ...]} from an index's `## Q<n>` tables."""
    rows: dict[int, list[tuple[str, str]]] = {}
    current = None
    for line in text.splitlines():
        m = re.match(r"##\s+Q(\d+)\b", line)
        if m:
            current = int(m.group(1))
            if current in rows:
                raise ValueError(f"Q{current} has two tables")
            rows[current] = []
            continue
        if current is None or not line.startswith("|"):
            continue
        cells = [c.strip().replace("\\|", "|") for c in _CELL_SPLIT.split(line.strip())[1:-1]]
        if len(cells) != 2:
            raise ValueError(f"Q{current}: a row needs two columns (claim | proved by): {line!r}")
        if cells[0].lower() == "claim" or set(cells[0]) <= set("-: "):
            continue  # header or separator row
        rows[current].append((cells[0], cells[1]))
    return rows


def _first_line(source: str) -> str:
    return next((ln.strip() for ln in source.splitlines() if ln.strip()), "")


def check_row(
    proved_by: str, code_first_lines: set[str], section_text: str, others: dict[int, set[str]] | None = None
) -> list[str]:
    """Problems with one row's "proved by" column (empty when every item in it holds).

    `others` maps another question's number to its code cells' first lines, for `Q<m>: ...`."""
    items = [i.strip() for i in re.split(r";\s+(?=`|cited:|Q\d+:)", proved_by) if i.strip()]
    if not items:
        return ["nothing in the 'proved by' column"]
    problems = []
    for item in items:
        elsewhere = re.match(r"Q(\d+):\s*(.*)", item)
        if elsewhere:
            number, item = int(elsewhere.group(1)), elsewhere.group(2)
            if f"Q{number}" not in section_text and f"q{number}" not in section_text:
                problems.append(f"points to Q{number}, which the question's text does not mention")
                continue
            span = _CODE_SPAN.fullmatch(item)
            if not span or span.group(2).strip() not in (others or {}).get(number, set()):
                problems.append(f"no code cell in Q{number} starts with {item!r}")
            continue
        if item.startswith("cited:"):
            ref = item[len("cited:"):].strip()
            span = _CODE_SPAN.fullmatch(ref)
            ref = span.group(2) if span else ref
            if not ref:
                problems.append("'cited:' without a reference")
            elif ref not in section_text:
                problems.append(f"cited {ref!r}, which the question's text does not contain")
            continue
        span = _CODE_SPAN.fullmatch(item)
        if not span:
            problems.append(f"{item!r} is neither a `code cell's first line` nor 'cited: <ref>'")
        elif span.group(2).strip() not in code_first_lines:
            problems.append(f"no code cell in the question starts with {span.group(2).strip()!r}")
    return problems


def test_parse_index_reads_rows_and_escaped_bars() -> None:
    text = "# x\n## Q3\n| Claim | Proved by |\n|---|---|\n| a | `y = a \\| b` |\n| c | cited: `f.py` |\n"
    assert parse_index(text) == {3: [("a", "`y = a | b`"), ("c", "cited: `f.py`")]}


def test_check_row_catches_a_missing_cell_and_a_missing_citation() -> None:
    lines, text = {"out = f(x)"}, "see torch/foo.py and https://x.org/a"
    assert check_row("`out = f(x)`", lines, text) == []
    assert check_row("`out = f(x)`; cited: `torch/foo.py`", lines, text) == []
    assert check_row("cited: https://x.org/a", lines, text) == []
    assert check_row("`out = g(x)`", lines, text) == ["no code cell in the question starts with 'out = g(x)'"]
    assert "does not contain" in check_row("cited: torch/bar.py", lines, text)[0]
    assert "neither" in check_row("trust me", lines, text)[0]
    others = {12: {"z = h(x)"}}
    assert check_row("Q12: `z = h(x)`", lines, text + " (Q12)", others) == []
    assert "does not mention" in check_row("Q12: `z = h(x)`", lines, text, others)[0]
    assert "no code cell in Q12" in check_row("Q12: `z = k(x)`", lines, text + " Q12", others)[0]


@functools.cache  # one parse of the ten chapters for every index
def _sections() -> dict[int, tuple[set[str], str]]:
    """Every question of the book: (its code cells' first lines, its cells' text)."""
    out = {}
    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for q in notebook_parts.parse_chapter(nb).questions:
            cells = nb.cells[q.start:q.end]
            first = {_first_line(c.source) for c in cells if c.cell_type == "code"}
            out[q.number] = (first, "\n".join(c.source for c in cells))
    return out


@pytest.mark.parametrize("index", INDEXES, ids=[p.stem for p in INDEXES])
def test_claims_index_points_at_real_cells(index: Path) -> None:
    notebook = REPO / "notebooks" / f"{index.stem}.ipynb"
    assert notebook.exists(), f"{index.name} indexes {notebook.name}, which does not exist"
    nb = nbformat.read(notebook, as_version=4)
    chapter = notebook_parts.parse_chapter(nb)
    rows = parse_index(index.read_text())
    wanted = [q.number for q in chapter.questions]
    assert sorted(rows) == wanted, f"{index.name} has tables for Q{sorted(rows)}; the chapter asks Q{wanted}"
    problems = []
    sections = _sections()
    others = {n: first for n, (first, _) in sections.items()}
    for q in chapter.questions:
        first_lines, text = sections[q.number]
        if len(rows[q.number]) < MIN_ROWS:
            problems.append(f"Q{q.number}: {len(rows[q.number])} rows (at least {MIN_ROWS})")
        for claim, proved_by in rows[q.number]:
            found = check_row(proved_by, first_lines, text, others)
            problems += [f"Q{q.number} {claim[:60]!r}: {p}" for p in found]
    assert not problems, f"{index.name}:\n" + "\n".join(problems)


def test_every_chapter_has_a_claims_index() -> None:
    chapters = {p.stem for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    missing = sorted(chapters - {p.stem for p in INDEXES})
    assert not missing, f"no claims index for {missing}: add docs/claims/<chapter>.md (docs/claims/README.md)"
