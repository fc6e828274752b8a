"""Jupyter server config for `make lab`: the chapters as JupyterLab should show them.

Loaded with `jupyter lab --config=scripts/lab_config.py` (no lab extension, nothing installed).
It swaps in a contents manager that changes two things in a chapter as it is sent to the
browser, and undoes both when the browser saves it, so the file on disk keeps the form the
site build, nbval and the notebook rules read:

- A link to another chapter's question is stored as `../book/questions.md#q<n>` (that
  path resolves on the site; docs/chapter-markup.md). Outside the lab's root it is a 404,
  so the browser gets `<NN>_<slug>.ipynb#q<n>` instead: a click opens that chapter at the
  question's anchor.
- The stored `language_info` is the machine-independent `{"name": "python",
  "pygments_lexer": "ipython3"}`. When a kernel starts, JupyterLab writes the kernel's
  full `language_info` (with its Python version) into the notebook, which marks every
  chapter unsaved on open; the browser gets the full one of this environment's kernel
  instead, so nothing changes when the kernel starts.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager

STORED_LANGUAGE_INFO = {"name": "python", "pygments_lexer": "ipython3"}
_TO_INDEX = re.compile(r"\]\(\.\./book/questions\.md#q(\d+)\)")
_TO_CHAPTER = re.compile(r"\]\((\d{2}_[a-z0-9_]+\.ipynb)#cell-id=([\w-]+)\)")
_ANCHOR = re.compile(r'<a id="q(\d+)"></a>')


def kernel_language_info() -> dict:
    """What this environment's ipykernel reports on start (ipykernel's own dict plus version)."""
    from ipykernel.ipkernel import IPythonKernel

    return {**IPythonKernel.language_info, "version": sys.version.split()[0]}


class BookContentsManager(AsyncLargeFileManager):
    """The default contents manager, with the two edits above on chapter notebooks."""

    def _question_cells(self) -> dict[int, tuple[str, str]]:
        """Question number -> (chapter notebook's file name, id of the cell holding its anchor)."""
        where: dict[int, tuple[str, str]] = {}
        for path in sorted(Path(self.root_dir).glob("[0-9][0-9]_*.ipynb")):
            for cell in json.loads(path.read_text(encoding="utf-8")).get("cells", []):
                source = "".join(cell.get("source", ""))
                if cell.get("cell_type") == "markdown" and cell.get("id"):
                    for n in _ANCHOR.findall(source):
                        where.setdefault(int(n), (path.name, cell["id"]))
        return where

    async def get(self, path, content=True, type=None, format=None, **kwargs):  # noqa: A002
        model = await super().get(path, content=content, type=type, format=format, **kwargs)
        if model.get("type") == "notebook" and model.get("content") is not None:
            nb = model["content"]
            where = self._question_cells()
            for cell in nb.cells:
                if cell.cell_type == "markdown":
                    cell.source = _TO_INDEX.sub(
                        lambda m: "](%s#cell-id=%s)" % where[int(m[1])] if int(m[1]) in where else m[0],
                        cell.source)
            if nb.metadata.get("language_info") == STORED_LANGUAGE_INFO:
                nb.metadata["language_info"] = kernel_language_info()
        return model

    async def save(self, model, path=""):
        if model.get("type") == "notebook" and model.get("content") is not None:
            nb = model["content"]
            question_of = {cell: n for n, cell in self._question_cells().items()}
            for cell in nb.get("cells", []):
                if cell.get("cell_type") == "markdown":
                    src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
                    cell["source"] = _TO_CHAPTER.sub(
                        lambda m: (f"](../book/questions.md#q{question_of[(m[1], m[2])]})"
                                   if (m[1], m[2]) in question_of else m[0]),
                        src)
            meta = nb.get("metadata", {})
            if meta.get("language_info") == kernel_language_info():
                meta["language_info"] = dict(STORED_LANGUAGE_INFO)
        return await super().save(model, path)


c = get_config()  # noqa: F821 - provided by traitlets when it loads this file
c.ServerApp.contents_manager_class = BookContentsManager
