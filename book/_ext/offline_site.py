"""Sphinx extension: the book's pages, offline and readable.

Three jobs, each run on every page before any link is resolved:

- **No online server.** Jupyter Book 1.x always loads sphinx-thebe, even with thebe turned
  off. Its set-up hook adds an inline script declaring the thebe bundle's CDN address, and on
  these builds it runs twice, so every page raises "Identifier 'THEBE_JS_URL' has already been
  declared". It also writes a Binder configuration into each page. The book runs its code in
  JupyterLab, not in the page, so both hooks are dropped before any page is read.
- **Question anchors.** A chapter marks each question with `<a id="q<n>"></a>` before its
  heading (docs/chapter-markup.md). Left as raw HTML, Sphinx would not know the target, so
  `[Q3](#q3)` would be a broken reference. The raw anchor moves to the top of the
  question's section and becomes a name MyST resolves, within the page and from other pages.
- **Figure text.** A notebook figure has no alt text of its own, and Sphinx falls back to
  the image's hashed file name. The `*Figure: ...*` line after the figure's cell becomes
  the alt text of every picture in that cell, and the line is styled as its caption.
"""
from __future__ import annotations

import re

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms import SphinxTransform

__all__ = ["QuestionAnchors", "FigureText", "tex_to_text", "setup"]

_THEBE_HOOKS = {"init_thebe_core", "update_thebe_context"}
_ANCHOR_OPEN = re.compile(r"""^\s*<a\s+(?:id|name)\s*=\s*["'](q\d+)["']\s*>\s*(?:</a>)?\s*$""", re.I)
_CAPTION = re.compile(r"^\s*Figure:\s*(.+?)\s*$", re.S)


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


class QuestionAnchors(SphinxTransform):
    """Turn `<a id="q<n>"></a>` into an id of the next section and a slug MyST resolves."""

    # Before MyST's ResolveAnchorIds (879), which resolves `[text](#slug)` within the page.
    default_priority = 870

    def apply(self, **kwargs: object) -> None:
        slugs = getattr(self.document, "myst_slugs", None)
        for raw in list(self.document.findall(nodes.raw)):
            m = _ANCHOR_OPEN.match(raw.astext()) if "html" in raw.get("format", "") else None
            if not m:
                continue
            name = m.group(1)
            # CommonMark reads `<a id="q3"></a>` alone on a line as a paragraph of two inline tags.
            parts = [raw]
            nxt = raw.next_node(descend=False, siblings=True)
            if isinstance(nxt, nodes.raw) and nxt.astext().strip().lower() == "</a>":
                parts.append(nxt)
            paragraph = raw.parent
            alone = isinstance(paragraph, nodes.paragraph) and not any(
                child.astext().strip() for child in paragraph.children if child not in parts
            )
            if alone or not isinstance(paragraph, nodes.TextElement):
                # Before a heading, as in the chapters: the id goes on the section that follows.
                target = raw.next_node(nodes.section, include_self=False, descend=False, siblings=True, ascend=True)
                heading = target.next_node(nodes.title) if target is not None else None
                title = heading.astext() if heading is not None else name
            else:
                # Inside a line, as in the question index's items: the id goes on the item itself.
                target = paragraph.parent if isinstance(paragraph.parent, nodes.list_item) else paragraph
                title = paragraph.astext()
            if target is None or name in self.document.ids:
                continue  # nothing to attach to, or the page already has that id: leave the HTML as is
            if isinstance(target, nodes.section):
                # The HTML writer prints only a section's first id, and the heading's slug must
                # stay that id (the question index links to it): "q3" goes on an empty span after
                # the title (before it, the table of contents would take the span for the title).
                target.insert(1, nodes.raw("", f'<span id="{name}" class="question-anchor"></span>', format="html"))
            else:
                target["ids"].append(name)
                self.document.ids[name] = target
            if slugs is not None:
                # (line, id to link to, text): MyST then resolves "#q3" here and "page#q3" elsewhere.
                slugs.setdefault(name, (target.line, target["ids"][0], title))
            for part in parts:
                part.parent.remove(part)
            if alone:
                paragraph.parent.remove(paragraph)


_TEX_SYMBOLS = {
    r"\times": "×", r"\cdot": "·", r"\le": "≤", r"\ge": "≥", r"\approx": "≈", r"\to": "→",
    r"\alpha": "α", r"\beta": "β", r"\gamma": "γ", r"\epsilon": "ε", r"\varepsilon": "ε",
    r"\|": "‖", r"\mu": "μ", r"\sigma": "σ", r"\partial": "∂", r"\sum": "Σ", r"\infty": "∞",
}


def tex_to_text(tex: str) -> str:
    """A formula as plain text for alt text, which a browser shows and a screen reader says
    as written: `6\\times10^{-8}` becomes `6×10^-8`."""
    s = tex
    for name in sorted(_TEX_SYMBOLS, key=len, reverse=True):
        s = re.sub(re.escape(name) + r"(?![A-Za-z])", _TEX_SYMBOLS[name], s)
    s = re.sub(r"\\(?:mathrm|text|mathbf|mathit|operatorname|mathsf)\{([^{}]*)\}", r"\1", s)
    s = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"(\1)/(\2)", s)
    s = re.sub(r"\\[,;:! ]", " ", s)
    s = re.sub(r"\\([A-Za-z]+)", r"\1", s)
    s = s.replace("{", "").replace("}", "")
    return " ".join(s.split())


def _plain(node: nodes.Node) -> str:
    """A node's text with its formulas as plain text (not TeX)."""
    if isinstance(node, nodes.math):
        return tex_to_text(node.astext())
    if isinstance(node, nodes.Text):
        return str(node)
    return "".join(_plain(child) for child in node.children)


class FigureText(SphinxTransform):
    """Alt text and caption for notebook figures, from the "*Figure: ...*" line after the cell."""

    default_priority = 880

    def apply(self, **kwargs: object) -> None:
        for cell in list(self.document.findall(nodes.container)):
            if cell.get("nb_element") != "cell_code":
                continue
            images = list(cell.findall(nodes.image))
            caption = self._caption_after(cell)
            if caption is None:
                continue
            paragraph, text = caption
            paragraph["classes"].append("figure-caption")
            for image in images:
                image["alt"] = text

    @staticmethod
    def _caption_after(cell: nodes.Element) -> tuple[nodes.paragraph, str] | None:
        parent = cell.parent
        if parent is None:
            return None
        i = parent.index(cell)
        nxt = parent[i + 1] if i + 1 < len(parent) else None
        if not isinstance(nxt, nodes.paragraph) or not nxt.children:
            return None
        first = nxt.children[0]
        if not isinstance(first, nodes.emphasis):
            return None
        m = _CAPTION.match(_plain(first))
        return (nxt, " ".join(m.group(1).split())) if m else None


def setup(app: Sphinx) -> dict[str, object]:
    app.connect("builder-inited", _drop_thebe_hooks)
    app.add_transform(QuestionAnchors)
    app.add_transform(FigureText)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
