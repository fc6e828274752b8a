"""Draw a `StorageMap` as SVG: each storage as a row of numbered cells, each tensor as
its logical grid whose cells name the storage element they read.

The SVG is written here, with no Graphviz or matplotlib, so it is the same text on every
machine. Colour says which element: within one storage the fill darkens with the storage
index, so ``x.t()`` shows the shades running down its columns, a slice starts at a later
shade, and ``expand`` repeats one row of shades. Each storage has its own hue, so a copy
(``x.t().contiguous()``) stands apart from the buffer it was copied from.

Sizes are chosen for a book page: the drawing is at most `max_width` pixels wide
(wider only when one tensor's rows do not fit), and the tensors wrap onto several rows,
so that scaled down to a phone the numbers stay readable.

This module reads records only (no torch); the record reaches it through one lazy import.
"""
from __future__ import annotations

import colorsys
import html as _html
import itertools
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only for annotations: records.py imports this module lazily
    from .records import StorageBlock, StorageMap, TensorLayout

__all__ = ["render_storage_svg"]

FONT = "Helvetica,Arial,sans-serif"
MARGIN = 8
TEXT = 11  # font size of labels and cell numbers
VALUE = 10  # font size of the values in storage cells
SMALL = 9  # font size of the storage index above each storage cell
LINE = 14  # height of one text line
CELL_W, CELL_H = 30, 22  # a storage cell (wide enough for a value like "-.125")
VIEW_CELL = 22  # a tensor's cell (holds a storage index, at most three digits)
PANEL_GAP = 18  # between two tensors in a row of tensors
BLOCK_GAP = 12  # around the line between two storages
HUES = (0.58, 0.08, 0.36, 0.78, 0.97, 0.14)  # one per storage, cycled
INK, MUTED, EDGE = "#1a1a1a", "#666666", "#555555"


def _width(text: str, size: float, bold: bool = False) -> float:
    """Estimated width of `text` in the sans-serif font (generous, so nothing overlaps)."""
    return len(text) * size * (0.62 if bold else 0.58)


def _fill(block: StorageBlock, k: int) -> str:
    """Fill of storage element `k`: the storage's hue, darker for later elements."""
    frac = k / (block.numel - 1) if block.numel > 1 else 0.0
    r, g, b = colorsys.hls_to_rgb(HUES[block.index % len(HUES)], 0.93 - 0.28 * frac, 0.75)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def _fmt(value: object) -> str:
    """A storage value in at most about five characters, to fit its cell."""
    if isinstance(value, bool):
        return "T" if value else "F"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e3:
            return f"{int(value)}."  # the dot marks a float, as torch prints it
        text = ""
        for spec in (".2g", ".1g", ".0e"):  # two digits: the tooltip has the rest
            # Charts drop the leading zero: ".088", "-.31".
            text = format(value, spec).replace("0.", ".", 1) if abs(value) < 1 else \
                format(value, spec)
            text = text.replace("e+0", "e").replace("e-0", "e-").replace("e+", "e")
            if len(text) <= 5:
                break
        return text
    if isinstance(value, complex):
        return f"{value:.1g}"
    return str(value)


def _text(x: float, y: float, text: str, size: int = TEXT, *, anchor: str = "start",
          weight: str | None = None, fill: str = INK) -> str:
    bold = f' font-weight="{weight}"' if weight else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"'
            f'{bold} fill="{fill}">{_html.escape(text)}</text>')


def _cell(x: float, y: float, w: float, h: float, fill: str, label: str, tip: str, *,
          dashed: bool = False, label_fill: str = INK, size: int = TEXT) -> str:
    dash = ' stroke-dasharray="3,2"' if dashed else ""
    return (f'<g><title>{_html.escape(tip)}</title>'
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{fill}" '
            f'stroke="{EDGE}" stroke-width="0.8"{dash}/>'
            + _text(x + w / 2, y + h / 2 + size * 0.36, label, size, anchor="middle",
                    fill=label_fill) + "</g>")


def _tuple(values: tuple[int, ...]) -> str:
    return f"({values[0]},)" if len(values) == 1 else f"({', '.join(map(str, values))})"


def _grid_shape(t: TensorLayout, fit: int) -> tuple[int, int, int]:
    """(rows, columns, rows per block): a tensor of three or more dims is drawn as its 2-D
    slices stacked with a gap; a 1-D tensor longer than `fit` cells wraps."""
    if not t.shape:
        return 1, 1, 1
    if len(t.shape) == 1:
        cols = max(1, min(t.shape[0], fit))
        rows = math.ceil(t.shape[0] / cols) if t.shape[0] else 0
        return rows, cols, max(rows, 1)
    cols, block = t.shape[-1], t.shape[-2]
    return math.prod(t.shape[:-1]), cols, max(block, 1)


class _Panel:
    """One tensor: its caption lines over its grid, measured before it is placed."""

    def __init__(self, t: TensorLayout, block: StorageBlock, fit: int) -> None:
        self.t, self.block = t, block
        self.lines = [f"shape {_tuple(t.shape) if t.shape else '()'}",
                      f"stride {_tuple(t.stride) if t.stride else '()'}",
                      f"offset {t.storage_offset}",
                      f"contiguous: {'yes' if t.contiguous else 'no'}"]
        if len(t.shape) == 1 and t.shape[0] > fit:
            self.lines[0] += " (wrapped)"
        if t.cells_read < t.numel:  # stride 0 or overlapping: say what the colours show
            self.lines.append(f"{t.numel} elements, {t.cells_read} cells")
        self.rows, self.cols, self.per_block = _grid_shape(t, fit)
        gaps = (self.rows - 1) // self.per_block if self.rows else 0
        self.grid_h = self.rows * VIEW_CELL + gaps * 4 if t.numel else LINE
        text_w = max([_width(t.name, TEXT, bold=True)]
                     + [_width(s, TEXT) for s in self.lines])
        self.w = max(text_w, self.cols * VIEW_CELL)
        self.h = LINE * (1 + len(self.lines)) + 4 + self.grid_h

    def draw(self, x: float, y: float) -> list[str]:
        t = self.t
        out = [_text(x, y + TEXT, t.name, weight="bold")]
        for i, line in enumerate(self.lines, start=1):
            out.append(_text(x, y + TEXT + i * LINE, line, fill=MUTED))
        top = y + LINE * (1 + len(self.lines)) + 4
        if not t.numel:
            out.append(_text(x, top + TEXT, "(no elements)", fill=MUTED))
            return out
        positions = itertools.product(*(range(n) for n in t.shape))
        for n, (pos, k) in enumerate(zip(positions, t.indices)):
            row, col = divmod(n, self.cols)
            cy = top + row * VIEW_CELL + (row // self.per_block) * 4
            tip = (f"{t.name}[{', '.join(map(str, pos))}] reads storage "
                   f"{self.block.label}[{k}] = {self.block.values[k]!r}")
            out.append(_cell(x + col * VIEW_CELL, cy, VIEW_CELL, VIEW_CELL,
                             _fill(self.block, k), str(k), tip))
        return out


def _storage_rows(block: StorageBlock, avail: float) -> tuple[int, int]:
    """(rows, cells per row) for the storage, rows balanced (24 cells: 12 + 12)."""
    fit = max(1, int(avail // CELL_W))
    rows = max(1, math.ceil(block.numel / fit))
    return rows, max(1, math.ceil(block.numel / rows))


def render_storage_svg(record: StorageMap, *, max_width: int = 420) -> str:
    """The drawing as SVG text (deterministic: the same record gives the same text).

    `max_width` (pixels) bounds the storage rows and the rows of tensors; a tensor whose
    own rows are wider than that widens the drawing instead of being cut.
    """
    if max_width < 120:
        raise ValueError(f"max_width must be at least 120 pixels, got {max_width}")
    avail = max_width - 2 * MARGIN
    fit = max(1, int(avail // VIEW_CELL))
    out: list[str] = []
    y = MARGIN
    right = 0.0  # widest content so far, for the drawing's width
    rules: list[float] = []  # heights of the lines between storages
    for line in ("A tensor's cell shows the storage element it reads:",
                 "storage_offset + Σ index_k × stride_k"):
        out.append(_text(MARGIN, y + TEXT, line, fill=MUTED))
        right = max(right, MARGIN + _width(line, TEXT))
        y += LINE
    y += 6

    for b, block in enumerate(record.storages):
        if b:
            rules.append(y + BLOCK_GAP / 2)  # drawn once the width is known
            y += BLOCK_GAP
        tensors = [t for t in record.tensors if t.storage == block.index]
        read = {k for t in tensors for k in t.indices}
        caption = block.caption()
        out.append(_text(MARGIN, y + TEXT, caption, weight="bold"))
        right = max(right, MARGIN + _width(caption, TEXT, bold=True))
        y += LINE + 2
        if block.numel == 0:
            out.append(_text(MARGIN, y + TEXT, "(empty storage)", fill=MUTED))
            y += LINE
        rows, per_row = _storage_rows(block, avail)
        for r in range(rows if block.numel else 0):
            for c in range(per_row):
                k = r * per_row + c
                if k >= block.numel:
                    break
                x = MARGIN + c * CELL_W
                out.append(_text(x + CELL_W / 2, y + SMALL, str(k), SMALL, anchor="middle",
                                 fill=MUTED))
                unread = k not in read
                out.append(_cell(x, y + SMALL + 2, CELL_W, CELL_H,
                                 "#ffffff" if unread else _fill(block, k), _fmt(block.values[k]),
                                 f"storage {block.label}[{k}] = {block.values[k]!r}"
                                 + (" (no tensor drawn reads it)" if unread else ""),
                                 dashed=unread, label_fill=MUTED if unread else INK,
                                 size=VALUE))
            right = max(right, MARGIN + min(per_row, block.numel) * CELL_W)
            y += SMALL + 2 + CELL_H + 4
        if block.numel and len(read) < block.numel:
            note = "white: no tensor drawn reads it"
            out.append(_text(MARGIN, y + SMALL, note, SMALL, fill=MUTED))
            y += LINE
        y += 6

        # Tensors of this storage, packed left to right and wrapped at max_width.
        panels = [_Panel(t, block, fit) for t in tensors]
        x, row_h = float(MARGIN), 0.0
        for p in panels:
            if x > MARGIN and x + p.w > max_width - MARGIN:
                x, y, row_h = float(MARGIN), y + row_h + 10, 0.0
            out.extend(p.draw(x, y))
            right = max(right, x + p.w)
            x += p.w + PANEL_GAP
            row_h = max(row_h, p.h)
        y += row_h + 4

    width = math.ceil(right + MARGIN)
    height = math.ceil(y + MARGIN)
    out.extend(f'<line x1="{MARGIN}" y1="{ry:.1f}" x2="{width - MARGIN}" y2="{ry:.1f}" '
               'stroke="#bbbbbb" stroke-width="1"/>' for ry in rules)
    title = _html.escape(record.caption())
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="{FONT}">'
            f'<title>{title}</title>'
            f'<rect width="{width}" height="{height}" fill="#ffffff"/>'
            + "".join(out) + "</svg>")
