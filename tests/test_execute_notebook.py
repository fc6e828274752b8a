"""scripts/execute_notebook.py stores a notebook as a fresh top-to-bottom run would leave it."""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

REPO = Path(__file__).resolve().parent.parent

import execute_notebook as ex


def _messy_notebook(path: Path, *, tag_the_error: bool = True) -> None:
    """Run out of order in some session, with editor noise in the metadata."""
    nb = new_notebook()
    nb.metadata.update({"kernelspec": {"name": "myenv", "display_name": "My env", "language": "python"},
                        "widgets": {"state": {}}, "language_info": {"name": "python", "version": "3.11.7"}})  # fmt: skip
    stale = [new_output("stream", name="stdout", text="stale\n")]
    raising = new_code_cell("raise ValueError('on purpose')", execution_count=2)
    if tag_the_error:
        raising.metadata["tags"] = ["raises-exception"]
    nb.cells = [
        new_markdown_cell("# Title"),
        new_code_cell("import os\nx = 6 * 7", execution_count=9, metadata={"execution": {"iopub.status.busy": "t"}}),
        new_code_cell("print(x, os.getcwd() == OUR_DIR)".replace("OUR_DIR", repr(str(path.parent.resolve()))),
                      execution_count=3, outputs=stale, metadata={"collapsed": True, "tags": ["keep"]}),  # fmt: skip
        new_code_cell("", execution_count=5, outputs=stale),
        raising,
        new_code_cell("x + 1", execution_count=1,
                      metadata={"jupyter": {"source_hidden": True}, "tags": ["solution"]}),
    ]
    nbformat.write(nb, path)


def test_execute_renumbers_runs_and_cleans(tmp_path: Path) -> None:
    path = tmp_path / "01_test.ipynb"
    _messy_notebook(path)
    seconds = ex.execute_notebook(path)
    assert seconds > 0
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == [1, 2, None, 3, 4]
    assert code[1].outputs[0].text == "42 True\n"  # ran in the notebook's own folder
    assert code[1].metadata == {"tags": ["keep"]} and code[0].metadata == {}
    assert code[2].outputs == []
    assert code[3].outputs[0].output_type == "error" and code[3].outputs[0].ename == "ValueError"
    assert code[4].outputs[0].data["text/plain"] == "43" and code[4].outputs[0].execution_count == 4
    # A hidden solution stays hidden in JupyterLab after re-execution.
    assert code[4].metadata == {"tags": ["solution"], "jupyter": {"source_hidden": True}}
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert "widgets" not in nb.metadata and "version" not in nb.metadata["language_info"]


def test_untagged_error_stops_and_leaves_the_file(tmp_path: Path) -> None:
    from nbclient.exceptions import CellExecutionError

    path = tmp_path / "01_test.ipynb"
    _messy_notebook(path, tag_the_error=False)
    before = path.read_bytes()
    with pytest.raises(CellExecutionError, match="on purpose"):
        ex.execute_notebook(path)
    assert path.read_bytes() == before
    assert ex.main([str(path)]) == 1


def test_rejects_bad_paths(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not an existing .ipynb"):
        ex.execute_notebook(tmp_path / "missing.ipynb")
    with pytest.raises(TypeError, match="pathlib.Path"):
        ex.execute_notebook("notebooks/01.ipynb")


def test_split_stream_outputs_are_merged(tmp_path: Path) -> None:
    """A cell that flushes stdout twice, with stderr between, is stored as the kernel ordered it,
    each run of one stream joined into one output."""
    path = tmp_path / "01_test.ipynb"
    nb = new_notebook()
    source = (
        # The pause makes the kernel send 'a' and 'b' as two messages (checked: nbclient alone
        # stores them as two outputs), so the test fails if the merge is dropped.
        "import sys, time\n"
        "print('a', flush=True)\ntime.sleep(0.2)\nprint('b', flush=True)\n"
        "print('warn', file=sys.stderr, flush=True)\nprint('c', flush=True)"
    )
    nb.cells = [new_code_cell(source)]
    nbformat.write(nb, path)
    ex.execute_notebook(path)
    outs = nbformat.read(path, as_version=4).cells[0].outputs
    assert [(o.name, o.text) for o in outs] == [("stdout", "a\nb\n"), ("stderr", "warn\n"), ("stdout", "c\n")]


def test_merge_streams_keeps_other_outputs_in_place() -> None:
    outs = [new_output("stream", name="stdout", text="x\n"), new_output("stream", name="stdout", text="y\n"),
            new_output("display_data", data={"text/plain": "fig"}), new_output("stream", name="stdout", text="z\n")]
    merged = ex.merge_streams(outs)
    assert [o.output_type for o in merged] == ["stream", "display_data", "stream"]
    assert merged[0].text == "x\ny\n" and merged[2].text == "z\n"
