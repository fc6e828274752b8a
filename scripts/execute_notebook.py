"""Re-execute chapter notebooks in place, top to bottom, in a fresh kernel.

    .venv/bin/python scripts/execute_notebook.py notebooks/01_define_by_run.ipynb [more.ipynb ...]
    make execute NB=notebooks/01_define_by_run.ipynb

Why a script and not "Restart & Run All": nbval compares against the stored outputs, so
the stored notebook must be exactly what a fresh top-to-bottom run produces (execution
counts 1..N, no half-run cells) and must not carry per-machine noise (timestamps, widget
state, the kernel's display name or Python patch version) that makes every re-run a diff.
Cells tagged `raises-exception` may raise; any other error stops the run and nothing is
written. Prints the execution seconds of each notebook.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

__all__ = ["clean_notebook", "execute_notebook", "merge_streams", "main"]

KERNEL_NAME = "python3"
# The kernelspec every notebook is stored with; scripts/setup.sh points "python3" at the venv.
KERNELSPEC = {"name": KERNEL_NAME, "display_name": "Python 3", "language": "python"}
# Notebook-level metadata worth keeping; everything else (widgets, papermill, vscode, ...) is noise.
KEPT_NB_METADATA = ("kernelspec", "language_info")
# Cell-level metadata worth keeping; "execution" timestamps, "collapsed", "scrolled" are noise.
# "jupyter" holds JupyterLab's source_hidden / outputs_hidden: how exercise solutions stay
# hidden until the reader opens them.
KEPT_CELL_METADATA = ("tags", "name", "jupyter")


def merge_streams(outputs: list) -> list:
    """Join consecutive stream outputs of the same stream (stdout, stderr) into one.

    A kernel sends printed text in chunks as it flushes; stored as they came, one cell shows
    several output boxes on the site, some of them empty-looking. nbval joins them the same
    way before comparing, so merging changes nothing it checks.
    """
    merged: list = []
    for out in outputs:
        prev = merged[-1] if merged else None
        if (
            out.get("output_type") == "stream"
            and prev is not None
            and prev.get("output_type") == "stream"
            and prev.get("name") == out.get("name")
        ):
            prev["text"] = prev["text"] + out["text"]
        else:
            merged.append(out)
    return merged


def clean_notebook(nb) -> None:
    """Strip per-machine metadata, merge split stream outputs, renumber code cells 1..N in place.

    Empty code cells get no count and no outputs, which is what nbval and a fresh run expect.
    """
    meta = {k: nb.metadata[k] for k in KEPT_NB_METADATA if k in nb.metadata}
    meta["kernelspec"] = dict(KERNELSPEC)
    # Only the language name: the Python patch version would differ on every machine.
    meta["language_info"] = {"name": "python", "pygments_lexer": "ipython3"}
    nb.metadata = meta
    count = 0
    for cell in nb.cells:
        cell.metadata = {k: cell.metadata[k] for k in KEPT_CELL_METADATA if k in cell.metadata}
        if cell.cell_type != "code":
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
            continue
        if not cell.source.strip():
            cell.execution_count = None
            cell.outputs = []
            continue
        count += 1
        cell.execution_count = count
        cell.outputs = merge_streams(cell.outputs)
        for out in cell.outputs:
            if out.get("output_type") == "execute_result":
                out["execution_count"] = count


def execute_notebook(path: Path, timeout: int = 600) -> float:
    """Run `path` in a fresh `python3` kernel with its folder as cwd, clean it, write it back.

    Returns the execution seconds. Raises nbclient's CellExecutionError (file untouched)
    if a cell not tagged `raises-exception` fails.
    """
    import nbformat
    from nbclient import NotebookClient

    if not isinstance(path, Path):
        raise TypeError(f"path must be a pathlib.Path, got {type(path).__name__}")
    if path.suffix != ".ipynb" or not path.is_file():
        raise ValueError(f"{path} is not an existing .ipynb file; pass notebooks/<chapter>.ipynb")
    nb = nbformat.read(path, as_version=4)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    client = NotebookClient(
        nb,
        kernel_name=KERNEL_NAME,
        timeout=timeout,
        record_timing=False,
        resources={"metadata": {"path": str(path.parent.resolve())}},
    )
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    clean_notebook(nb)
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path, help="notebook files to re-execute in place")
    parser.add_argument("--timeout", type=int, default=600, help="seconds allowed per cell (default 600)")
    args = parser.parse_args(argv)
    from nbclient.exceptions import CellExecutionError

    failed = 0
    for path in args.notebooks:
        try:
            seconds = execute_notebook(path, timeout=args.timeout)
        except (CellExecutionError, ValueError) as exc:
            failed += 1
            print(f"FAILED  {path}: {exc}", file=sys.stderr)
            continue
        print(f"{seconds:7.1f} s  {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
