"""Every chapter notebook is stored the way nbval, the site and a reader need it.

The rules (one checker function each, each returning a list of problems):
valid nbformat; kernelspec "python3"; code cells executed top to bottom (counts 1..N over the
non-empty code cells); no error outputs and no `raises-exception` tag (errors are shown with
`agv.show_error`); no machine paths, memory addresses or timings in compared outputs (cells not
tagged `nbval-ignore-output`); files under 1.5 MB; code and printed lines of at most 88 columns; the set-up
cell calls `agv.written_for(`; no `pip install`; helpers come from autogradviz (no function or
class defined identically in two notebooks, no sys.path tricks or %run).

The chapter anatomy of the chapter standard (v2), read through scripts/notebook_parts.py (the
same parser the site build uses, so the two cannot disagree): one `Q<n>.` section per question
with its `<a id="q<n>">` anchor, exactly one short-answer tip callout (at most 5 sentences,
90 words and 3 numbers), at least one common-wrong-answer warning callout, `### Why` and `### Proof`;
"Check yourself" with exercises whose solution is hidden (tags `solution` + `hide-input`,
`jupyter.source_hidden`) and checked by a `check` cell, and a recall quiz of 8-12 items each
with a `<details>` answer; a Summary with a `**Q<n>.**` bullet per question.

Each checker is also fed a deliberately broken copy of a notebook that follows every rule
(tests/fixtures/contract_chapter.py), so a rule that stops catching what it is for fails here.
"""
from __future__ import annotations

import ast
import base64
import math
import re
import struct
import sys
from collections import defaultdict
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
MAX_BYTES = 1_500_000
IGNORE_OUTPUT_TAG = "nbval-ignore-output"
RAISES_TAG = "raises-exception"
# Output MIME types nbval compares (PNG/JPEG are not compared without --nbdime).
COMPARED_TEXT_TYPES = (
    "text/plain", "text/html", "text/markdown", "text/latex", "image/svg+xml", "application/json",
)  # fmt: skip
ANSI = re.compile(r"\x1b\[[0-9;]*m")
MACHINE_PATH = re.compile(r"(/work/|/root/|/tmp/|/home/[^/\s]+/|/Users/[^/\s]+/|/private/var/)")
ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{4,}\b")
# A number with a time unit ("0.42 s", "12 ms", "3.1µs"), or what %time / tqdm print.
TIMING = re.compile(r"\b\d+(?:\.\d+)?\s?(?:ns|us|µs|ms|s|sec|secs|seconds)\b|Wall time:|CPU times:|\bit/s\b")
PIP_INSTALL = re.compile(r"(^\s*[!%]\s*(pip|conda|mamba)\s+install)|(-m\s+pip\s+install)|(\bpip\.main\()", re.M)
PATH_TRICKS = re.compile(r"(^\s*%run\b)|(\bsys\.path\.(insert|append)\b)|(\bimportlib\.util\.spec_from_file_location\b)", re.M)
# The short answer is said aloud in an interview (chapter standard v3): at most 5 sentences,
# 90 words (markup, math and link targets not counted) and 3 numbers (measured figures go to Why).
MAX_SHORT_SENTENCES = 5
MAX_SHORT_WORDS = 90
MAX_SHORT_NUMBERS = 3
# A number in the prose (not in code or math): 3, 0.5, 1,024, 40%; not Q13, fp16 or bf16.
NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?![\w])")
QUIZ_ITEMS = (8, 12)
MAX_CODE_COLUMNS = 88
WRITTEN_FOR = "agv.written_for("
SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\bvs)(?<!\betc)[.!?]+(?=\s|$)")
MIN_HELPER_STATEMENTS = 3
# Round-off: a value printed in scientific notation below 1e-4 with a decimal point (3.7e-09,
# -8.9e-16) or with eight or more decimals (0.30000001192092896). Those last digits change with
# the reader's CPU kernels and thread count, so compared outputs print a verdict or round.
ROUNDOFF = re.compile(r"(?<![\w.])[-+]?(?:\d\.\d+e-(?:0[5-9]|[1-9]\d)|\d+\.\d{8,})(?![\d.])")  # a def this size or larger, identical in two notebooks, is a pasted helper

import build_site  # noqa: E402 - tests/conftest.py puts scripts/ on the path
import notebook_parts  # noqa: E402
from fixtures.contract_chapter import contract_chapter  # noqa: E402

QUESTIONS = build_site.load_questions(REPO / build_site.QUESTIONS_YML)


def _tags(cell) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


# --- the checkers --------------------------------------------------------------------------


def check_format(nb) -> list[str]:
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as exc:
        return [f"invalid nbformat: {exc.message}"]
    return []


def check_kernelspec(nb) -> list[str]:
    name = nb.metadata.get("kernelspec", {}).get("name")
    return [] if name == "python3" else [f"kernelspec name is {name!r}; store notebooks with kernelspec 'python3'"]


def check_execution_order(nb) -> list[str]:
    problems = []
    expected = 0
    for i, cell in enumerate(_code_cells(nb)):
        if not cell.source.strip():
            if cell.execution_count is not None or cell.outputs:
                problems.append(f"empty code cell {i} has a count or outputs")
            continue
        expected += 1
        if cell.execution_count != expected:
            problems.append(
                f"code cell {i} has execution_count {cell.execution_count}, expected {expected}: "
                "re-run with `make execute NB=...`"
            )
            break
    return problems


def check_errors(nb) -> list[str]:
    """No cell shows an error, and none is tagged to be allowed one: `agv.show_error` shows
    errors on purpose as one printed line, with their type and message asserted."""
    problems = []
    for i, cell in enumerate(_code_cells(nb)):
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if RAISES_TAG in _tags(cell):
            problems.append(f"code cell {i} is tagged '{RAISES_TAG}'; show the error with agv.show_error instead")
        if errors:
            shown = ANSI.sub("", "\n".join(errors[0].get("traceback", [])))
            where = " (its traceback shows a machine path)" if MACHINE_PATH.search(shown) else ""
            problems.append(
                f"code cell {i} shows {errors[0].get('ename')}{where}; a chapter runs without errors: "
                "use agv.show_error(callable, ErrorType, 'message') for an error shown on purpose"
            )
    return problems


def check_code_lines(nb) -> list[str]:
    """Every code line fits the page and prints: at most 88 columns."""
    return [
        f"code cell {i} line {n} is {len(line)} columns; keep code lines to {MAX_CODE_COLUMNS}"
        for i, cell in enumerate(_code_cells(nb))
        for n, line in enumerate(cell.source.splitlines(), 1)
        if len(line) > MAX_CODE_COLUMNS
    ]


def check_output_lines(nb) -> list[str]:
    """Printed text fits the page too: a longer line scrolls sideways in its output box at
    1400 px (book.css) and breaks mid-row on a phone. Figures and HTML are not text lines."""
    problems = []
    for i, cell in enumerate(_code_cells(nb)):
        for out in cell.outputs:
            data = out.get("data", {})
            if out.output_type == "stream":
                text = out.get("text", "")
            elif "text/plain" in data and not ({"image/png", "image/svg+xml", "text/html"} & set(data)):
                text = data["text/plain"]
            else:
                continue
            text = "".join(text) if isinstance(text, list) else text
            problems += [f"code cell {i} prints a line of {len(line)} columns; keep printed lines to "
                         f"{MAX_CODE_COLUMNS} (wrap the print)"
                         for line in text.splitlines() if len(line) > MAX_CODE_COLUMNS]
    return problems


def check_setup_cell(nb) -> list[str]:
    """The first code cell says which torch the text was written for, and leaves the thread
    count alone."""
    code = [c for c in _code_cells(nb) if c.source.strip()]
    if not code or WRITTEN_FOR not in code[0].source:
        return [f"the set-up cell (first code cell) does not call {WRITTEN_FOR}\"<torch version>\")"]
    if "set_num_threads(" in code[0].source:
        # `make notebooks` compares the outputs on one thread (OMP_NUM_THREADS=1); a chapter that
        # pins its own count would never be checked there.
        return ["the set-up cell sets torch's thread count; leave it to the reader's machine (a demo "
                "that needs a count saves torch.get_num_threads() and restores it)"]
    return []


def _compared_texts(cell):
    """(label, text) for every output of the cell that nbval compares."""
    for j, out in enumerate(cell.outputs):
        if out.output_type == "stream":
            yield f"output {j} ({out.name})", out.text
        elif out.output_type in ("execute_result", "display_data"):
            for mime in COMPARED_TEXT_TYPES:
                if mime in out.get("data", {}):
                    data = out.data[mime]
                    yield f"output {j} ({mime})", data if isinstance(data, str) else str(data)
        elif out.output_type == "error":
            yield f"output {j} (error)", f"{out.get('ename', '')}: {out.get('evalue', '')}"


def _finfo_constants() -> list[float]:
    import torch  # only here: the rules run without torch otherwise

    values = set()
    for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
        info = torch.finfo(dtype)
        values |= {info.eps, info.tiny, info.resolution, info.smallest_normal * info.eps}
    return sorted(values)


def is_exact_constant(token: str) -> bool:
    """A printed value no CPU can change: a power of ten with mantissa 1 (a tolerance such as
    1.0e-06), a torch.finfo constant or power of two shown to 3+ digits, or a value of at most
    11 significant bits (exact in float16 and bfloat16) shown to 5+ digits. Shorter prints are
    not trusted: 3.7e-09 is 2**-28 to two digits and also a typical float32 difference."""
    value = abs(float(token))
    mantissa, _, exponent = token.lstrip("+-").partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    if value == 0 or digits.rstrip("0") == "1":
        return True
    tolerance = 0.5 * 10.0 ** ((int(exponent) if exponent else 0) - len(fraction))
    if len(digits) >= 3 and any(abs(c - value) <= tolerance for c in _finfo_constants()):
        return True
    top = math.floor(math.log2(value))
    for bits in range(1, 12):
        if len(digits) < (3 if bits == 1 else 5):
            continue
        step = 2.0 ** (top - bits + 1)
        if abs(round(value / step) * step - value) <= tolerance:
            return True
    return False


def roundoff_in(text: str) -> list[str]:
    return [m.group(0) for m in ROUNDOFF.finditer(text) if not is_exact_constant(m.group(0))]


_MARKUP = re.compile(r"<style\b.*?</style>|<script\b.*?</script>|<[^>]*>", re.S | re.I)


def _visible_text(label: str, text: str) -> str:
    """For SVG and HTML, the text a reader sees: CSS such as `animation: 8.4s` is not a timing."""
    return _MARKUP.sub(" ", text) if ("svg" in label or "html" in label) else text


def check_deterministic_outputs(nb) -> list[str]:
    problems = []
    for i, cell in enumerate(_code_cells(nb)):
        if IGNORE_OUTPUT_TAG in _tags(cell):
            continue
        for label, text in _compared_texts(cell):
            # Paths and addresses count anywhere in the markup; timings only in what is shown.
            for what, pattern, where in (("a machine path", MACHINE_PATH, text), ("a memory address", ADDRESS, text),
                                         ("a timing", TIMING, _visible_text(label, text))):  # fmt: skip
                m = pattern.search(where)
                if m:
                    problems.append(
                        f"code cell {i} {label} shows {what} ({m.group(0)!r}); remove it or tag the cell "
                        f"'{IGNORE_OUTPUT_TAG}' and assert the meaning instead"
                    )
            if label.endswith("(image/svg+xml)"):
                continue  # coordinates, not results
            for value in roundoff_in(_visible_text(label, text))[:1]:
                problems.append(
                    f"code cell {i} {label} prints {value!r}, which looks like floating-point round-off: "
                    "another CPU prints other digits. Print the verdict against the tolerance "
                    "(`within 1e-6: True`) or round to what the claim needs"
                )
    return problems


# A 390 px phone gives a figure about 350 px of page; shown below 65% of its natural width,
# 9 pt text drops under 9 px. scripts/check_site.py measures that in Chromium and owns the
# numbers; a stored figure wider than its MAX_FIGURE_PX (538) fails here, before a build.
from check_site import MAX_FIGURE_PX, PHONE_FIGURE_PX  # noqa: E402
SVG_WIDTH = re.compile(r'<svg\b[^>]*?\swidth="([\d.]+)(pt|px)?"')


def _figure_width(data: dict) -> float | None:
    """A stored figure's natural width in CSS px (PNG header; SVG width, pt = 4/3 px)."""
    if "image/png" in data:
        png = base64.b64decode(data["image/png"])
        return float(struct.unpack(">I", png[16:20])[0]) if png[12:16] == b"IHDR" else None
    if "image/svg+xml" in data:
        svg = data["image/svg+xml"]
        m = SVG_WIDTH.search("".join(svg) if isinstance(svg, list) else svg)
        if m:
            return float(m.group(1)) * (4 / 3 if m.group(2) == "pt" else 1)
    return None


def check_figure_widths(nb) -> list[str]:
    problems = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            width = _figure_width(out.get("data", {}))
            if width is not None and width > MAX_FIGURE_PX:
                problems.append(
                    f"cell {i}: a figure {width:.0f} px wide shows at {PHONE_FIGURE_PX / width:.0%} on a "
                    f"390 px phone; keep it <= {MAX_FIGURE_PX} px (figsize width <= "
                    f"{MAX_FIGURE_PX / 110:.1f} in at dpi 110, autogradviz.style.PHONE_WIDTH_IN)")
    return problems


def check_size(path: Path) -> list[str]:
    size = path.stat().st_size
    return [] if size < MAX_BYTES else [f"{path.name} is {size / 1e6:.2f} MB; keep notebooks under 1.5 MB"]


def _sentences(markdown: str) -> int:
    text = notebook_parts.plain_text(re.sub(r"\$[^$]*\$", "x", markdown))
    return len(SENTENCE_END.findall(text)) or (1 if text.strip() else 0)


def check_anatomy(nb, chapter: int) -> list[str]:
    """The chapter standard (v2)'s skeleton, as notebook_parts reads it."""
    problems = []
    own = [q.number for q in QUESTIONS if q.chapter == chapter]
    if not own:
        return [f"chapter {chapter} is not in book/questions.yml"]
    parsed = notebook_parts.parse_chapter(nb)
    numbers = [q.number for q in parsed.questions]
    if numbers != own:
        problems.append(f"question headings are {['Q%d' % n for n in numbers]}, expected {['Q%d' % n for n in own]} in order")
    check, summary = parsed.section_start("check yourself"), parsed.section_start("summary")
    if check is None:
        problems.append("no 'Check yourself' section")
    if summary is None:
        problems.append("no 'Summary' section")
    if check is not None and summary is not None and summary < check:
        problems.append("'Summary' comes before 'Check yourself'")
    for q in parsed.questions:
        where = f"Q{q.number}"
        if q.anchor != f"q{q.number}":
            problems.append(f'{where}: its heading cell has no <a id="q{q.number}"></a> before the heading')
        if len(q.short_answers) != 1:
            problems.append(f"{where} has {len(q.short_answers)} short-answer tip callouts; it needs exactly one")
        for c in q.short_answers:
            # Words: math not counted. Numbers: those in math count, those in code do not.
            no_math = re.sub(r"\$\$.*?\$\$|\$[^$]*\$", " ", c.text, flags=re.S)
            n_sent, n_words = _sentences(c.text), len(re.findall(r"\S*\w\S*", notebook_parts.plain_text(no_math)))
            n_num = len(NUMBER.findall(notebook_parts.plain_text(re.sub(r"`[^`]*`", " ", c.text))))
            if n_sent > MAX_SHORT_SENTENCES or n_words > MAX_SHORT_WORDS or n_num > MAX_SHORT_NUMBERS:
                problems.append(
                    f"{where}'s short answer has {n_sent} sentences, {n_words} words and {n_num} numbers; "
                    f"keep it to {MAX_SHORT_SENTENCES} sentences, {MAX_SHORT_WORDS} words and "
                    f"{MAX_SHORT_NUMBERS} numbers (thresholds and measured figures go to 'Why')"
                )
        if not q.wrong_answers:
            problems.append(f"{where} has no 'Common wrong answer' warning callout in its section")
        # Chapter standard v3: the mechanism, its proof, what changes at scale, then follow-ups.
        found = []
        for sub in ("Why", "Proof", "At scale", "Follow-ups"):
            at = next((i for i, h in enumerate(q.subheadings) if h.lower().startswith(sub.lower())), None)
            if at is None:
                problems.append(f"{where} has no '### {sub}' sub-heading")
            else:
                found.append((at, sub))
        if [sub for _, sub in sorted(found)] != [sub for _, sub in found]:
            problems.append(f"{where}'s sub-headings are {', '.join(q.subheadings)}; "
                            "keep Why, Proof, At scale, Follow-ups in that order")
        if not parsed.summary.get(q.number):
            problems.append(f"the Summary has no bullet starting **Q{q.number}.**")
    if check is not None:
        if not parsed.exercises:
            problems.append("'Check yourself' has no exercise (a cell starting **[E]**, **[M]** or **[H]**)")
        for ex in parsed.exercises:
            where = f"exercise '{ex.title}' (cell {ex.cell})"
            if not ex.solution_cells:
                problems.append(f"{where} has no solution cell tagged 'solution'")
            for i in ex.solution_cells:
                cell = nb.cells[i]
                if "hide-input" not in _tags(cell):
                    problems.append(f"{where}: solution cell {i} is not tagged 'hide-input' (collapsed on the site)")
                if not cell.metadata.get("jupyter", {}).get("source_hidden"):
                    problems.append(f"{where}: solution cell {i} lacks metadata jupyter.source_hidden (hidden in JupyterLab)")
            if not ex.check_cells:
                problems.append(f"{where} has no check cell tagged 'check'")
        lo, hi = QUIZ_ITEMS
        if parsed.quiz_cell is None:
            problems.append("'Check yourself' has no '### Recall quiz'")
        elif not lo <= len(parsed.quiz) <= hi:
            problems.append(f"the recall quiz has {len(parsed.quiz)} items; it needs {lo}-{hi}")
        unanswered = [item.number for item in parsed.quiz if not item.answer]
        if unanswered:
            problems.append(f"recall quiz items {unanswered} have no <details> answer")
    return problems


def check_no_pip(nb) -> list[str]:
    return [
        f"code cell {i} installs packages; the environment comes from `make setup`, never from a notebook"
        for i, cell in enumerate(_code_cells(nb))
        if PIP_INSTALL.search(cell.source)
    ]


def check_no_path_tricks(nb) -> list[str]:
    return [
        f"code cell {i} loads code around the package ({m.group(0).strip()!r}); import helpers from autogradviz"
        for i, cell in enumerate(_code_cells(nb))
        if (m := PATH_TRICKS.search(cell.source))
    ]


def _python_source(cell_source: str) -> str:
    # IPython magics and shell escapes are not Python; blank them so ast can parse the rest.
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in cell_source.splitlines())


def helper_definitions(nb) -> dict[str, str]:
    """Normalised source (ast dump, name blanked) -> name, for each sizeable top-level def/class."""
    defs = {}
    for cell in _code_cells(nb):
        try:
            tree = ast.parse(_python_source(cell.source))
        except SyntaxError:
            continue
        for node in tree.body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            n_statements = sum(isinstance(n, ast.stmt) for n in ast.walk(node)) - 1
            if n_statements < MIN_HELPER_STATEMENTS:
                continue
            name, node.name = node.name, "_"
            defs[ast.dump(node)] = name
    return defs


def check_duplicate_helpers(notebooks: dict[str, object]) -> list[str]:
    """Functions or classes defined identically (up to their name) in two or more notebooks."""
    seen: dict[str, list[str]] = defaultdict(list)
    for label, nb in notebooks.items():
        for dump, name in helper_definitions(nb).items():
            seen[dump].append(f"{label}:{name}")
    return [
        f"{' and '.join(where)} define the same helper; move it into autogradviz and import it"
        for where in seen.values()
        if len({w.split(':')[0] for w in where}) > 1
    ]


def chapter_of(path: Path) -> int:
    m = build_site.CHAPTER_FILE.match(path.name)
    if not m:
        raise ValueError(f"{path.name}: name chapter notebooks <NN>_<slug>.ipynb")
    return int(m.group(1))


# --- the real notebooks --------------------------------------------------------------------

# --- Exercises that running top to bottom cannot spoil (docs/chapter-markup.md, "Exercises") ---


def _assigned_names(source: str) -> set[str]:
    """Names a cell binds at top level (assignments, defs, classes, imports)."""
    try:
        tree = ast.parse(_python_source(source))
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def check_unspoilable_exercises(nb) -> list[str]:
    """Each solution cell opens with the line `# Solution` (all a collapsed input shows),
    binds no name the reader's exercise cell binds (Run All and Shift+Enter run it between
    the reader's cell and the check), and the check cell after it passes one of its names
    as `solution=`, so the check judges the reader and verifies the solution silently."""
    problems = []
    cells = nb.cells
    for i, cell in enumerate(cells):
        if cell.cell_type != "code" or "solution" not in _tags(cell):
            continue
        where = f"solution cell {i}"
        first = cell.source.splitlines()[0].strip() if cell.source.strip() else ""
        if first != "# Solution":
            problems.append(f"{where}: its first line is {first[:60]!r}, not '# Solution' "
                            "(a collapsed input shows the first line)")
        reader = next((c for c in reversed(cells[:i]) if c.cell_type == "code" and "exercise" in _tags(c)), None)
        mine = _assigned_names(cell.source)
        if reader is not None and (shared := sorted(mine & _assigned_names(reader.source))):
            problems.append(f"{where}: it assigns the reader's name(s) {', '.join(shared)}; "
                            "name its own (e.g. solution_<name>) so running it keeps the reader's answer")
        check = next((c for c in cells[i + 1:] if c.cell_type == "code" and "check" in _tags(c)), None)
        passed = set(re.findall(r"\bsolution\s*=\s*([A-Za-z_]\w*)", check.source)) if check else set()
        if not passed & mine:
            problems.append(f"{where}: the check cell after it does not pass its names as "
                            "`solution=` to agv.check, so a wrong solution would go unnoticed")
    return problems


NOTEBOOK_CHECKS = (check_format, check_kernelspec, check_execution_order, check_errors, check_deterministic_outputs,
                   check_no_pip, check_no_path_tricks, check_code_lines, check_output_lines, check_setup_cell,
                   check_figure_widths, check_unspoilable_exercises)  # fmt: skip

ids = [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_notebook_hygiene(path: Path) -> None:
    problems = check_size(path)
    nb = nbformat.read(path, as_version=4)
    for check in NOTEBOOK_CHECKS:
        problems += check(nb)
    problems += check_anatomy(nb, chapter_of(path))
    assert not problems, f"{path.name}:\n  " + "\n  ".join(problems)


def test_no_helper_pasted_between_notebooks() -> None:
    if len(NOTEBOOKS) < 2:
        pytest.skip("fewer than two chapter notebooks")
    notebooks = {p.name: nbformat.read(p, as_version=4) for p in NOTEBOOKS}
    problems = check_duplicate_helpers(notebooks)
    assert not problems, "\n".join(problems)


# --- the checkers catch what they are for --------------------------------------------------


def _chapter_one():
    """A small chapter 1 that follows every rule; tests break one thing at a time."""
    return contract_chapter({q.number: q.text for q in QUESTIONS if q.chapter == 1})


def _first_printing_cell(nb):
    """A proof cell that prints (its stored output is a stdout stream)."""
    return next(
        c for c in nb.cells
        if c.cell_type == "code" and any(o.output_type == "stream" for o in c.outputs) and "print(" in c.source
    )


def _cell(nb, start: str):
    return next(c for c in nb.cells if c.source.startswith(start))


def test_good_notebook_passes_every_check() -> None:
    nb = _chapter_one()
    for check in NOTEBOOK_CHECKS:
        assert check(nb) == [], check.__name__
    assert check_anatomy(nb, 1) == []


def test_fixture_file_is_the_generated_chapter() -> None:
    """tests/fixtures/01_contract_chapter.ipynb (for trying the site by hand) is not stale."""
    stored = nbformat.read(REPO / "tests" / "fixtures" / "01_contract_chapter.ipynb", as_version=4)
    assert [c.source for c in stored.cells] == [c.source for c in contract_chapter().cells]


def test_catches_invalid_format() -> None:
    nb = _chapter_one()
    nb.cells[1]["outputs"] = "not a list"
    assert check_format(nb)


def test_catches_wrong_kernelspec() -> None:
    nb = _chapter_one()
    nb.metadata["kernelspec"]["name"] = "myenv"
    assert check_kernelspec(nb)


@pytest.mark.parametrize("counts", [[2, 1], [None, None], [1, 3]])
def test_catches_out_of_order_execution(counts: list) -> None:
    nb = _chapter_one()
    code = [c for c in _code_cells(nb) if c.source.strip()]
    code[0].execution_count, code[1].execution_count = counts
    assert check_execution_order(nb)


def test_catches_output_on_empty_cell() -> None:
    nb = _chapter_one()
    nb.cells.append(new_code_cell(""))
    assert check_execution_order(nb) == []
    empty = nb.cells[-1]
    empty.execution_count = 99
    assert check_execution_order(nb)


def test_catches_error_output_and_raises_tag() -> None:
    nb = _chapter_one()
    cell = _first_printing_cell(nb)
    cell.outputs = [new_output("error", ename="RuntimeError", evalue="boom", traceback=[])]
    assert any("shows RuntimeError" in p for p in check_errors(nb))
    cell.metadata["tags"] = [RAISES_TAG]
    assert any(RAISES_TAG in p for p in check_errors(nb))
    cell.outputs = [new_output("stream", name="stdout", text="RuntimeError: boom\n")]  # what show_error prints
    assert any(RAISES_TAG in p for p in check_errors(nb))
    cell.metadata["tags"] = []
    assert check_errors(nb) == []


def test_catches_machine_path_in_a_traceback() -> None:
    nb = _chapter_one()
    frame = "\x1b[36mFile \x1b[39m\x1b[32m/home/alice/.venv/lib/python3.11/site-packages/torch/_tensor.py:623\x1b[39m"
    _first_printing_cell(nb).outputs = [
        new_output("error", ename="RuntimeError", evalue="boom", traceback=[frame, "RuntimeError: boom"])
    ]
    assert any("machine path" in p for p in check_errors(nb))


def test_catches_long_code_line_and_missing_written_for() -> None:
    nb = _chapter_one()
    cell = _first_printing_cell(nb)
    cell.source += "\n" + "y = 1  # " + "x" * (MAX_CODE_COLUMNS - 9)
    assert check_code_lines(nb) == []  # exactly 88 columns is fine
    cell.source += "x"
    assert any("89 columns" in p for p in check_code_lines(nb))
    assert check_output_lines(nb) == []
    _first_printing_cell(nb).outputs = [new_output("stream", name="stdout", text="y" * 89 + "\n")]
    assert any("89 columns" in p for p in check_output_lines(nb))
    nb = _chapter_one()
    setup = next(c for c in _code_cells(nb) if c.source.strip())
    setup.source = setup.source.replace(WRITTEN_FOR, "print(")
    assert check_setup_cell(nb)
    nb = _chapter_one()
    setup = next(c for c in _code_cells(nb) if c.source.strip())
    assert check_setup_cell(nb) == []
    setup.source += "\ntorch.set_num_threads(2)"
    assert any("thread count" in p for p in check_setup_cell(nb))


@pytest.mark.parametrize(
    "text",
    ["saved to /tmp/tmpab12/x.pt\n", "/work/main/notebooks/x.py:3: UserWarning\n", "/home/alice/data\n",
     "<graphviz.graphs.Digraph at 0x7f3a5c0d2e50>\n", "step took 0.42 s\n", "forward: 12.5 ms\n",
     "CPU times: user 3 ms\n"],  # fmt: skip
)
def test_catches_nondeterministic_output(text: str) -> None:
    nb = _chapter_one()
    cell = _first_printing_cell(nb)
    cell.outputs = [new_output("stream", name="stdout", text=text)]
    assert check_deterministic_outputs(nb)
    cell.metadata["tags"] = [IGNORE_OUTPUT_TAG]  # what the standard says to do with such a cell
    assert check_deterministic_outputs(nb) == []


def test_catches_address_in_rich_output() -> None:
    nb = _chapter_one()
    cell = _first_printing_cell(nb)
    cell.outputs = [new_output("display_data", data={"image/svg+xml": "<svg/>", "text/plain": "<Digraph at 0xdeadbeef>"})]
    assert check_deterministic_outputs(nb)


def test_timings_in_svg_text_caught_but_not_in_its_css() -> None:
    nb = _chapter_one()
    cell = _first_printing_cell(nb)
    svg = '<svg><style>#n0 path{animation:k1 8.40s step-end infinite}</style><text x="1">{}</text></svg>'
    cell.outputs = [new_output("display_data", data={"image/svg+xml": svg.replace("{}", "AddBackward0")})]
    assert check_deterministic_outputs(nb) == []
    cell.outputs = [new_output("display_data", data={"image/svg+xml": svg.replace("{}", "backward 3.2 ms")})]
    assert check_deterministic_outputs(nb)


def test_plain_numbers_are_not_timings() -> None:
    nb = _chapter_one()
    _first_printing_cell(nb).outputs = [new_output("stream", name="stdout", text="torch.Size([8, 4]) 16 B/param x 3\n")]
    assert check_deterministic_outputs(nb) == []


@pytest.mark.parametrize(
    "text",
    ["k=2: max |accumulated - full| = 3.7e-09\n", "{'equal sizes': '6.0e-08'}\n", "largest difference 8.9e-16\n",
     "loss 2.3025851249694824\n", "gap -2.4e-07\n", "std at layer 50: 1.4e-20\n"],  # fmt: skip
)
def test_catches_roundoff_in_compared_output(text: str) -> None:
    nb = _chapter_one()
    cell = _first_printing_cell(nb)
    cell.outputs = [new_output("stream", name="stdout", text=text)]
    assert any("round-off" in p for p in check_deterministic_outputs(nb))
    cell.metadata["tags"] = [IGNORE_OUTPUT_TAG]
    assert check_deterministic_outputs(nb) == []


@pytest.mark.parametrize(
    "text",
    ["within 1e-6: True\n", "tolerance 1.0e-06\n", "eps 1.19e-07, tiny 1.18e-38, subnormal 1.40e-45\n",
     "4e-8 in fp16 5.96046e-08\n", "1e-8 in bf16 1.00117e-08\n", "bf16 subnormal 9.18e-41\n",
     "max 3.403e+38\n", "lr 3.0e-04\n", "0.000655174\n"],  # fmt: skip
)
def test_exact_constants_are_not_roundoff(text: str) -> None:
    nb = _chapter_one()
    _first_printing_cell(nb).outputs = [new_output("stream", name="stdout", text=text)]
    assert check_deterministic_outputs(nb) == []


def test_catches_large_file(tmp_path: Path) -> None:
    path = tmp_path / "01_big.ipynb"
    path.write_bytes(b" " * MAX_BYTES)
    assert check_size(path)
    path.write_bytes(b" " * 1000)
    assert check_size(path) == []


def test_catches_missing_question_heading() -> None:
    nb = _chapter_one()
    nb.cells = [c for c in nb.cells if "## Q2." not in c.source]
    assert any("question headings" in p for p in check_anatomy(nb, 1))


def test_catches_missing_sections() -> None:
    nb = _chapter_one()
    nb.cells = [c for c in nb.cells if not c.source.startswith(("## Check yourself", "## Summary"))]
    problems = check_anatomy(nb, 1)
    assert any("Check yourself" in p for p in problems) and any("'Summary' section" in p for p in problems)


def _break(nb, start: str, new_source: str | None) -> None:
    """Replace (or, with None, delete) the first cell of Q2's section that starts with `start`."""
    q2 = notebook_parts.parse_chapter(nb).question(2)
    i = next(i for i in range(q2.start, q2.end) if nb.cells[i].source.startswith(start))
    if new_source is None:
        del nb.cells[i]
    else:
        nb.cells[i].source = new_source


@pytest.mark.parametrize(
    ("start", "new", "message"),
    [('<a id="q2">', "## Q2. " + next(q.text for q in QUESTIONS if q.number == 2), '<a id="q2">'),
     ('<div class="admonition tip', None, "0 short-answer tip callouts"),
     ('<div class="admonition warning', None, "no 'Common wrong answer'"),
     ('<div class="admonition warning', '<div class="admonition note alert alert-info">\n<p class="admonition-title">'
      'Common wrong answer</p>\n\nText.\n\n</div>', "no 'Common wrong answer'"),
     ("### Why", "### Mechanism\n\nText.", "'### Why'"),
     ("### Proof", "Proof follows.", "'### Proof'"),
     ("### At scale", None, "'### At scale'"),
     ("### Why", "### Follow-ups\n\nFirst.", "keep Why, Proof, At scale, Follow-ups in that order")],  # fmt: skip
)
def test_catches_broken_question_section(start: str, new: str | None, message: str) -> None:
    nb = _chapter_one()
    _break(nb, start, new)
    problems = check_anatomy(nb, 1)
    assert any(message in p and "Q2" in p for p in problems), problems


def test_catches_two_short_answers_and_a_long_one() -> None:
    nb = _chapter_one()
    q2 = notebook_parts.parse_chapter(nb).question(2)
    tip = nb.cells[q2.short_answers[0].cell]
    nb.cells.insert(q2.short_answers[0].cell, nbformat.v4.new_markdown_cell(tip.source))
    assert any("2 short-answer tip callouts" in p for p in check_anatomy(nb, 1))
    nb = _chapter_one()
    tip = nb.cells[notebook_parts.parse_chapter(nb).question(2).short_answers[0].cell]
    title = '<div class="admonition tip alert alert-success">\n<p class="admonition-title">The short answer</p>\n\n'
    five = " ".join(f"Sentence {word} about `torch.no_grad(3)`, e.g. in eval." for word in "abcde")
    tip.source = title + five + "\n\n</div>"
    assert check_anatomy(nb, 1) == []  # abbreviations and code do not end a sentence
    tip.source = title + five + " One more.\n\n</div>"
    assert any("6 sentences" in p for p in check_anatomy(nb, 1))
    # 90 words on two lines (a line break is a space, as rendered) and math do not count.
    ninety = " ".join(["word"] * 45) + "\n" + " ".join(["word"] * 45)
    tip.source = title + ninety + " $a + b$.\n\n</div>"
    assert check_anatomy(nb, 1) == []
    tip.source = title + ninety + " more.\n\n</div>"
    assert any("91 words" in p for p in check_anatomy(nb, 1))
    tip.source = title + "It takes 3 steps, 2.5 s and 40 MB, and fp16 or Q13 are names.\n\n</div>"
    assert check_anatomy(nb, 1) == []
    tip.source = title + "It takes 3 steps, 2.5 s, 40 MB and $10^{-12}$.\n\n</div>"
    assert any("5 numbers" in p for p in check_anatomy(nb, 1))


def test_catches_unhidden_or_unchecked_solution() -> None:
    nb = _chapter_one()
    solution = next(c for c in nb.cells if "solution" in _tags(c))
    solution.metadata["tags"] = ["solution"]
    assert any("'hide-input'" in p for p in check_anatomy(nb, 1))
    solution.metadata["tags"] = ["solution", "hide-input"]
    del solution.metadata["jupyter"]
    assert any("source_hidden" in p for p in check_anatomy(nb, 1))
    nb = _chapter_one()
    next(c for c in nb.cells if "check" in _tags(c)).metadata["tags"] = []
    assert any("no check cell" in p for p in check_anatomy(nb, 1))
    nb = _chapter_one()
    next(c for c in nb.cells if "solution" in _tags(c)).metadata["tags"] = []
    assert any("no solution cell" in p for p in check_anatomy(nb, 1))


@pytest.mark.parametrize(("n_items", "ok"), [(7, False), (8, True), (12, True), (13, False)])
def test_catches_quiz_of_the_wrong_size(n_items: int, ok: bool) -> None:
    nb = _chapter_one()
    quiz = _cell(nb, "### Recall quiz")
    item = "{i}. Q {i}?\n   <details><summary>Answer</summary>\n\n   A {i}.\n\n   </details>\n"
    quiz.source = "### Recall quiz\n\n" + "\n".join(item.format(i=i) for i in range(1, n_items + 1))
    assert (check_anatomy(nb, 1) == []) is ok


def test_catches_quiz_answer_not_hidden_and_missing_summary_bullet() -> None:
    nb = _chapter_one()
    quiz = _cell(nb, "### Recall quiz")
    quiz.source = re.sub(r"3\. Recall question 3\?\n   <details>.*?</details>", "3. Recall question 3? Answer 3.",
                         quiz.source, flags=re.S)  # fmt: skip
    assert any("[3]" in p and "<details>" in p for p in check_anatomy(nb, 1))
    nb = _chapter_one()
    summary = _cell(nb, "## Summary")
    summary.source = summary.source.replace("- **Q3.**", "- Q3:")
    assert any("**Q3.**" in p for p in check_anatomy(nb, 1))


def test_heading_inside_code_fence_does_not_count() -> None:
    nb = _chapter_one()
    nb.cells.append(new_markdown_cell("```text\n## Q9. not a heading\n```"))
    assert check_anatomy(nb, 1) == []


def test_heading_after_a_myst_directive_fence_counts() -> None:
    """A `{warning}` fence closes like any other: the heading after it in the same cell is found,
    by the rules test and by the site build alike (they share notebook_parts)."""
    nb = _chapter_one()
    q3 = notebook_parts.parse_chapter(nb).question(3)
    heading = nb.cells[q3.start]
    heading.source = "```{warning}\nAn old-style callout.\n```\n\n" + heading.source
    parsed = notebook_parts.parse_chapter(nb)
    assert [q.number for q in parsed.questions] == [1, 2, 3, 4]
    assert parsed.question(3).anchor == "q3"
    assert check_anatomy(nb, 1) == []


def test_catches_pip_install() -> None:
    for source in ("!pip install torchviz", "%pip install graphviz", "import sys\n!{sys.executable} -m pip install x"):
        nb = _chapter_one()
        _first_printing_cell(nb).source = source
        assert check_no_pip(nb), source


def test_catches_path_tricks() -> None:
    for source in ("import sys\nsys.path.insert(0, '..')", "%run ../02_tensors.ipynb"):
        nb = _chapter_one()
        _first_printing_cell(nb).source = source
        assert check_no_path_tricks(nb), source


def test_catches_helper_pasted_between_notebooks() -> None:
    helper = "def param_bytes(model):\n    total = 0\n    for p in model.parameters():\n        total += p.numel() * p.element_size()\n    return total\n"
    renamed = helper.replace("param_bytes", "count_bytes")
    one, two = _chapter_one(), _chapter_one()
    cell_one, cell_two = _first_printing_cell(one), _first_printing_cell(two)
    cell_one.source = helper
    cell_two.source = "%matplotlib inline\n" + renamed
    assert check_duplicate_helpers({"01.ipynb": one, "02.ipynb": two})
    # The same helper twice in one notebook, or a one-line demo function in both, is not pasting.
    assert check_duplicate_helpers({"01.ipynb": one}) == []
    cell_one.source = cell_two.source = "def f(x):\n    return x * 2\n"
    assert check_duplicate_helpers({"01.ipynb": one, "02.ipynb": two}) == []


def test_chapter_of_rejects_bad_names() -> None:
    assert chapter_of(Path("03_autograd_engine.ipynb")) == 3
    with pytest.raises(ValueError, match="<NN>_<slug>"):
        chapter_of(Path("Untitled.ipynb"))


# --- the nbval sanitize rules ---------------------------------------------------------------


def _sanitizer():
    """Apply tests/nbval_sanitize.cfg exactly as nbval does (its own parser, its own re.sub loop)."""
    from nbval.plugin import get_sanitize_patterns

    patterns = get_sanitize_patterns((REPO / "tests" / "nbval_sanitize.cfg").read_text())
    assert patterns, "nbval found no regex/replace pairs in tests/nbval_sanitize.cfg"

    def sanitize(s: str) -> str:
        for regex, replace in patterns:
            s = re.sub(regex, replace, s)
        return s

    return sanitize


def _dot_svg(source: str) -> str:
    """SVG from the real Graphviz `dot`, as a displayed graphviz.Digraph would store it."""
    import shutil
    import subprocess

    if shutil.which("dot") is None:
        pytest.skip("Graphviz `dot` is not installed")
    return subprocess.run(["dot", "-Tsvg"], input=source, capture_output=True, text=True, check=True).stdout


def test_sanitize_hides_addresses_only() -> None:
    sanitize = _sanitizer()
    assert sanitize("<Digraph at 0x7f3a5c0d2e50>") == sanitize("<Digraph at 0x7f00deadbeef>")
    assert sanitize("tensor([1., 2.])") == "tensor([1., 2.])"
    assert sanitize("grad 0.5") != sanitize("grad 0.25")


def test_sanitize_compares_graph_structure_not_layout() -> None:
    sanitize = _sanitizer()
    base = _dot_svg("digraph { a -> b; }")
    # Same graph, different geometry (what another Graphviz version produces).
    wider = _dot_svg("digraph { nodesep=2; ranksep=2; a -> b; }")
    relabelled = _dot_svg("digraph { a -> c; }")
    assert base != wider and sanitize(base) == sanitize(wider)
    assert sanitize(base) != sanitize(relabelled)
    assert "graphviz version" in base and "graphviz version" not in sanitize(base)


def test_contract_chapters_exercise_cannot_be_spoiled() -> None:
    assert check_unspoilable_exercises(_chapter_one()) == []


@pytest.mark.parametrize(
    ("new_solution", "new_check", "message"),
    [("my_prediction = 4.0", None, "not '# Solution'"),
     ("# Solution\nmy_prediction = 4.0", None, "assigns the reader's name(s) my_prediction"),
     ("# Solution\nsolution_prediction = 4.0", "agv.check(my_prediction, 4.0)", "does not pass its names"),
     ("# Solution\nsolution_prediction = 4.0", "agv.check(my_prediction, 4.0, solution=other)",
      "does not pass its names")])  # fmt: skip
def test_catches_a_spoiling_exercise(new_solution: str, new_check: str | None, message: str) -> None:
    nb = _chapter_one()
    next(c for c in nb.cells if "solution" in _tags(c)).source = new_solution
    if new_check is not None:
        next(c for c in nb.cells if "check" in _tags(c)).source = new_check
    problems = check_unspoilable_exercises(nb)
    assert any(message in p for p in problems), problems


def test_catches_a_figure_too_wide_for_a_phone() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import io

    import matplotlib.pyplot as plt

    def png(width_in: float) -> str:
        fig = plt.figure(figsize=(width_in, 2), dpi=110)
        buf = io.BytesIO()
        fig.savefig(buf, format="png")  # no bbox_inches: the width is figsize x dpi
        plt.close(fig)
        return base64.b64encode(buf.getvalue()).decode()

    nb = _chapter_one()
    cell = _first_printing_cell(nb)
    cell.outputs = [new_output("display_data", data={"image/png": png(4.6), "text/plain": "<Figure>"})]
    assert check_figure_widths(nb) == []  # 506 px: 69% on a phone
    cell.outputs = [new_output("display_data", data={"image/png": png(6.5), "text/plain": "<Figure>"})]
    assert any("715 px wide shows at 49%" in p for p in check_figure_widths(nb)), check_figure_widths(nb)
    cell.outputs = [new_output("display_data", data={"image/svg+xml": '<svg width="450pt" height="9pt"></svg>',
                                                     "text/plain": "<svg>"})]
    assert any("600 px wide" in p for p in check_figure_widths(nb))
