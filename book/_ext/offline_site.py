"""Sphinx extension: keep the book's pages free of anything meant for an online server.

Jupyter Book 1.x always loads sphinx-thebe, even with thebe turned off. Its set-up hook adds
an inline script declaring the thebe bundle's CDN address, and on these builds it runs twice,
so every page raises "Identifier 'THEBE_JS_URL' has already been declared". It also writes a
Binder configuration into each page. The book runs its code in JupyterLab, not in the page,
so this drops both hooks before any page is read.
"""
from __future__ import annotations

from sphinx.application import Sphinx

__all__ = ["setup"]

_THEBE_HOOKS = {"init_thebe_core", "update_thebe_context"}


def _drop_thebe_hooks(app: Sphinx) -> None:
    for event in ("env-before-read-docs", "doctree-resolved"):
        listeners = app.events.listeners.get(event, [])
        listeners[:] = [
            lst
            for lst in listeners
            if not (
                getattr(lst.handler, "__module__", "").startswith("sphinx_thebe")
                and lst.handler.__name__ in _THEBE_HOOKS
            )
        ]


def setup(app: Sphinx) -> dict[str, object]:
    app.connect("builder-inited", _drop_thebe_hooks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
