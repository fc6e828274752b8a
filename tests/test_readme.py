"""The README tells the truth: every ```python block in it runs, and its Records section
lists the fields of every public record as the dataclasses define them.

How a block is run (the convention the README states under its first example):

* Each block runs in a fresh namespace that `PREAMBLE` fills with stand-ins for the
  reader's own objects: ``model`` (a two-layer MLP with ``fc1`` and ``fc2``), ``x`` (a
  batch for it), ``loss`` (``model(x).sum()``), ``opt`` / ``optimizer`` (AdamW on the
  model), ``build_model`` and ``batch`` (for `estimate_memory`), ``w`` and ``b`` (a
  weight and bias for ``F.linear(x, w, b)``), and ``train_step()``.
* A line that is only ``...`` (plus a comment) is the reader's own training code: it
  runs ``train_step()`` (forward, backward, ``opt.step()``, ``opt.zero_grad()``, on
  ``ddp`` where the block made one).
* A block holding a ``# the notebook`` line is a rank script followed by the notebook
  that launches it: the part above is written to the file its first comment names,
  after the preamble, and the part below runs here, where `agv.torchrun` finds it.

Lines keep their README line numbers (the code is compiled as ``README.md``, the rank
script padded), so a failure names the README line that raised.
"""
from __future__ import annotations

import dataclasses
import re
import sys
import traceback
from pathlib import Path

import pytest

import autogradviz as agv

README = Path(__file__).resolve().parents[1] / "README.md"

PREAMBLE = '''\
import torch
import torch.nn.functional as F
from torch import nn
import autogradviz as agv
torch.manual_seed(0)
class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 4)
    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))
def build_model():
    return MLP()
model = build_model()
x = batch = torch.randn(4, 8)
loss = model(x).sum()
opt = optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
w, b = torch.randn(16, 8, requires_grad=True), torch.zeros(16, requires_grad=True)
def train_step():
    net = globals().get("ddp", model)
    net(x).square().mean().backward()
    opt.step()
    opt.zero_grad()
'''
_ELLIPSIS_LINE = re.compile(r"^(\s*)\.\.\.(\s*(#.*)?)$")
_NOTEBOOK = "# the notebook"


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(README line of the block's first code line, code) for each ```python block."""
    blocks, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start, body = i + 2, []
            i += 1
            while lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            blocks.append((start, "\n".join(body)))
        i += 1
    return blocks


def filled(code: str) -> str:
    """``...`` statement lines replaced by ``train_step()``, line count unchanged."""
    return "\n".join(_ELLIPSIS_LINE.sub(r"\1train_step()\2", ln) for ln in code.splitlines())


def _fail_at_readme_line(err: BaseException) -> None:
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename == "README.md"]
    where = f"README.md line {frames[-1].lineno}" if frames else "README.md"
    pytest.fail(f"{where} raised {type(err).__name__}: {err}", pytrace=False)


def run_block(start: int, code: str, tmp_path: Path) -> dict:
    code = filled(code)
    namespace: dict = {"__name__": "__readme__"}
    exec(compile(PREAMBLE, "<readme preamble>", "exec"), namespace)  # noqa: S102
    lines = code.splitlines()
    if any(ln.strip() == _NOTEBOOK for ln in lines):
        cut = next(i for i, ln in enumerate(lines) if ln.strip() == _NOTEBOOK)
        script = re.match(r"#\s*(\S+\.py)", lines[0])
        assert script, f"README.md line {start}: a rank script's first line names its file"
        pad = "\n" * (start - 1 - len(PREAMBLE.splitlines()) - 1)
        (tmp_path / script.group(1)).write_text(
            PREAMBLE + "from torch.nn.parallel import DistributedDataParallel as DDP"
            + pad + "\n" + "\n".join(lines[:cut]) + "\n")
        start, lines = start + cut, ["#"] * cut + lines[cut:]
    source = "\n" * (start - 1) + "\n".join(lines)
    try:
        exec(compile(source, "README.md", "exec"), namespace)  # noqa: S102
    except Exception as err:  # noqa: BLE001 - reported with its README line
        _fail_at_readme_line(err)
    return namespace


BLOCKS = python_blocks(README.read_text())


def test_readme_has_the_blocks_this_test_knows():
    assert len(BLOCKS) >= 2
    assert sum(_NOTEBOOK in code for _, code in BLOCKS) == 1


@pytest.mark.parametrize("start, code", [
    pytest.param(s, c, id=f"line{s}",
                 marks=[pytest.mark.slow] if _NOTEBOOK in c else [])
    for s, c in BLOCKS])
def test_readme_block_runs(start, code, tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)  # blocks save files (graph.html)
    ns = run_block(start, code, tmp_path)
    if "mem" in ns:  # the memory example reads real fields of a real record
        assert ns["mem"].samples and ns["mem"].peak_bytes > 0


def test_a_failing_line_is_named():
    code = "y = 1\nz = y.no_such_field\n"
    with pytest.raises(pytest.fail.Exception, match=r"README.md line 11 raised AttributeError"):
        run_block(10, code, Path("."))


def test_ellipsis_lines_are_the_readers_code():
    assert filled("with a:\n    ...   # note\nf(x=...)") == (
        "with a:\n    train_step()   # note\nf(x=...)")


# --- the Records section ---------------------------------------------------------------------
def public_records() -> list[str]:
    """Names the README's API table calls a record, in table order."""
    rows = re.findall(r"^\| `(\w+)` \| record \|", README.read_text(), re.M)
    assert rows, "the README's API table lists no record"
    return rows


def _properties(cls: type) -> list[str]:
    names = []
    for klass in reversed(cls.__mro__[:-1]):
        for name, value in vars(klass).items():
            if isinstance(value, property) and not name.startswith("_") and name not in names:
                names.append(name)
    return names


def records_section() -> str:
    """The README's Records table, generated from the dataclasses."""
    lines = ["| record | fields | properties |", "|---|---|---|"]
    for name in public_records():
        cls = getattr(agv, name)
        assert dataclasses.is_dataclass(cls), f"{name} is listed as a record but is no dataclass"
        fields = ", ".join(f"`{f.name}`" for f in dataclasses.fields(cls))
        props = ", ".join(f"`{p}`" for p in _properties(cls)) or "-"
        lines.append(f"| `{name}` | {fields} | {props} |")
    return "\n".join(lines)


def test_records_section_matches_the_dataclasses():
    text = README.read_text()
    found = re.search(r"^### Records\n.*?\n(\| record \| fields \| properties \|\n(?:\|[^\n]*\n)+)",
                      text, re.S | re.M)
    assert found, "README.md has no '### Records' section with a fields table"
    want = records_section()
    assert found.group(1).rstrip("\n") == want, (
        "README.md's Records table is out of date; replace it with "
        "(python tests/test_readme.py prints it):\n" + want)


if __name__ == "__main__":
    sys.stdout.write(records_section() + "\n")
