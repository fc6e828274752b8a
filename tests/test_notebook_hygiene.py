"""Every chapter notebook is stored the way nbval, the site and a reader need it.

The rules (one checker function each, each returning a list of problems):
valid nbformat; kernelspec "python3"; code cells executed top to bottom (counts 1..N over the
non-empty code cells); errors only in cells tagged `raises-exception` (and such cells do raise);
no machine paths, memory addresses or timings in compared outputs (cells not tagged
`nbval-ignore-output`); files under 1.5 MB; the chapter anatomy of the chapter standard
(a "Q<n>." heading per question, a "Common wrong answer" callout in each question's section,
"Check yourself" and "Summary" sections); helpers come from autogradviz (no function or class
defined identically in two notebooks, no sys.path tricks or %run); no `pip install`.

Each checker is also fed a deliberately broken in-memory notebook below, so a rule that stops
catching what it is for fails here.
"""
from __future__ import annotations

import ast
import re
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
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
CALLOUT = re.compile(
    r"(^\s*(:{3,}|`{3,})\s*\{[\w-]+\}.*common wrong answer)"  # MyST admonition with that title
    r"|(^\s*(:{3,}|`{3,})\s*\{[\w-]+\}.*\n(\s*:class:.*\n)?\s*\**common wrong answer)"  # titled in the body
    r"|(^\s*>.*common wrong answer)"  # blockquote callout
    r"|(class=\"[^\"]*(admonition|alert)[^\"]*\"[^\n]*\n?[^\n]*common wrong answer)",  # HTML callout
    re.I | re.M,
)
MIN_HELPER_STATEMENTS = 3  # a def this size or larger, identical in two notebooks, is a pasted helper



import build_site
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
    problems = []
    for i, cell in enumerate(_code_cells(nb)):
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if errors and RAISES_TAG not in _tags(cell):
            problems.append(f"code cell {i} shows {errors[0].get('ename')} but is not tagged '{RAISES_TAG}'")
        if RAISES_TAG in _tags(cell) and not errors:
            problems.append(f"code cell {i} is tagged '{RAISES_TAG}' but shows no error")
        for err in errors:
            # A full traceback names files under the author's venv: the site would show them, and
            # they differ per machine. `%xmode Minimal` in the set-up cell keeps errors to one line.
            shown = ANSI.sub("", "\n".join(err.get("traceback", [])))
            m = MACHINE_PATH.search(shown)
            if m:
                problems.append(f"code cell {i}'s traceback shows a machine path ({m.group(0)!r}); "
                                "put `%xmode Minimal` in the set-up cell")
    return problems


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
    return problems


def check_size(path: Path) -> list[str]:
    size = path.stat().st_size
    return [] if size < MAX_BYTES else [f"{path.name} is {size / 1e6:.2f} MB; keep notebooks under 1.5 MB"]


def _headings(nb) -> list[tuple[int, str, int]]:
    """(cell index, heading text, level) of every Markdown heading, outside code fences."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        fence = False
        for line in cell.source.splitlines():
            if line.lstrip().startswith(("```", "~~~")) and "{" not in line:
                fence = not fence
            m = None if fence else HEADING.match(line)
            if m:
                found.append((i, m.group(2), len(m.group(1))))
    return found


def check_anatomy(nb, chapter: int) -> list[str]:
    """The chapter standard's skeleton: questions in order, each with its callout, then exercises, summary."""
    problems = []
    own = [q.number for q in QUESTIONS if q.chapter == chapter]
    if not own:
        return [f"chapter {chapter} is not in book/questions.yml"]
    heads = _headings(nb)
    q_heads = [(i, int(m.group(1))) for i, text, _ in heads if (m := re.match(r"Q(\d+)\.\s", text))]
    numbers = [n for _, n in q_heads]
    if numbers != own:
        problems.append(f"question headings are {['Q%d' % n for n in numbers]}, expected {['Q%d' % n for n in own]} in order")

    def first(title: str) -> int | None:
        return next((i for i, text, _ in heads if text.lower().startswith(title)), None)

    check, summary = first("check yourself"), first("summary")
    if check is None:
        problems.append("no 'Check yourself' section")
    if summary is None:
        problems.append("no 'Summary' section")
    if check is not None and summary is not None and summary < check:
        problems.append("'Summary' comes before 'Check yourself'")
    ends = [i for i, _ in q_heads[1:]] + [check if check is not None else len(nb.cells)]
    for (start, number), end in zip(q_heads, ends):
        section = "\n".join(c.source for c in nb.cells[start:end] if c.cell_type == "markdown")
        if not CALLOUT.search(section):
            problems.append(f"Q{number} has no 'Common wrong answer' callout in its section")
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

ids = [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_notebook_hygiene(path: Path) -> None:
    problems = check_size(path)
    nb = nbformat.read(path, as_version=4)
    for check in (check_format, check_kernelspec, check_execution_order, check_errors,
                  check_deterministic_outputs, check_no_pip, check_no_path_tricks):  # fmt: skip
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


def _chapter_one(callout: str = ":::{admonition} Common wrong answer\n:class: warning\nIt is not so.\n:::"):
    """A small notebook that follows every rule, for chapter 1; tests break one thing at a time."""
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    cells = [new_markdown_cell("# Chapter 1\n\nOverview."), new_code_cell("import torch")]
    for q in (q for q in QUESTIONS if q.chapter == 1):
        cells += [new_markdown_cell(f"## Q{q.number}. {q.text}\n\nShort answer."),
                  new_code_cell("print(torch.ones(2).sum().item())"),
                  new_markdown_cell(callout)]  # fmt: skip
    cells += [new_markdown_cell("## Check yourself\n\n[E] Predict."), new_code_cell(""),
              new_markdown_cell("## Summary\n\n- one-liners")]  # fmt: skip
    nb.cells = cells
    count = 0
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source.strip():
            count += 1
            cell.execution_count = count
            cell.outputs = [new_output("stream", name="stdout", text="2.0\n")]
    return nb


def _first_printing_cell(nb):
    return next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("print"))


def test_good_notebook_passes_every_check() -> None:
    nb = _chapter_one()
    for check in (check_format, check_kernelspec, check_execution_order, check_errors,
                  check_deterministic_outputs, check_no_pip, check_no_path_tricks):  # fmt: skip
        assert check(nb) == [], check.__name__
    assert check_anatomy(nb, 1) == []


@pytest.mark.parametrize(
    "callout",
    ["> **Common wrong answer:** it is not so.",
     "```{warning} Common wrong answer\nIt is not so.\n```",
     ":::{admonition}\n:class: warning\n**Common wrong answer.** It is not so.\n:::"],  # fmt: skip
)
def test_callout_forms_accepted(callout: str) -> None:
    assert check_anatomy(_chapter_one(callout), 1) == []


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
    empty = next(c for c in _code_cells(nb) if not c.source.strip())
    empty.execution_count = 99
    assert check_execution_order(nb)


def test_catches_untagged_error_and_tag_without_error() -> None:
    nb = _chapter_one()
    cell = _first_printing_cell(nb)
    cell.outputs = [new_output("error", ename="RuntimeError", evalue="boom", traceback=[])]
    assert check_errors(nb)
    cell.metadata["tags"] = [RAISES_TAG]
    assert check_errors(nb) == []
    cell.outputs = []
    assert check_errors(nb)


def test_catches_machine_path_in_a_traceback() -> None:
    nb = _chapter_one()
    cell = _first_printing_cell(nb)
    cell.metadata["tags"] = [RAISES_TAG]
    frame = "\x1b[36mFile \x1b[39m\x1b[32m/home/alice/.venv/lib/python3.11/site-packages/torch/_tensor.py:623\x1b[39m"
    cell.outputs = [new_output("error", ename="RuntimeError", evalue="boom", traceback=[frame, "RuntimeError: boom"])]
    assert any("traceback" in p for p in check_errors(nb))
    cell.outputs[0].traceback = ["\x1b[31mRuntimeError\x1b[39m: boom"]
    assert check_errors(nb) == []


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


def test_catches_large_file(tmp_path: Path) -> None:
    path = tmp_path / "01_big.ipynb"
    path.write_bytes(b" " * MAX_BYTES)
    assert check_size(path)
    path.write_bytes(b" " * 1000)
    assert check_size(path) == []


def test_catches_missing_question_heading() -> None:
    nb = _chapter_one()
    nb.cells = [c for c in nb.cells if not c.source.startswith("## Q2.")]
    assert any("question headings" in p for p in check_anatomy(nb, 1))


def test_catches_missing_sections_and_callout() -> None:
    nb = _chapter_one()
    nb.cells = [c for c in nb.cells if not c.source.startswith(("## Check yourself", "## Summary"))]
    problems = check_anatomy(nb, 1)
    assert any("Check yourself" in p for p in problems) and any("Summary" in p for p in problems)
    nb = _chapter_one(callout="A plain paragraph that merely mentions a common wrong answer.")
    assert sum("callout" in p for p in check_anatomy(nb, 1)) == len([q for q in QUESTIONS if q.chapter == 1])


def test_heading_inside_code_fence_does_not_count() -> None:
    nb = _chapter_one()
    nb.cells.append(new_markdown_cell("```text\n## Q9. not a heading\n```"))
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
