"""Views over several drawings: frame strips (a grid of SVGs) and the backward animation.

Reads records only (`BackwardOrder`, `LiveGraph` from :mod:`autogradviz.graphs.records`) and
draws through :mod:`autogradviz.graphs.render`. A strip is one SVG, so a static page shows it
without JavaScript; frames go `per_row` to a row (2 by default) so a strip of
several frames stays legible at page width.
"""
from __future__ import annotations

import hashlib
import html as _html
import re
from typing import Any

from .records import BackwardOrder, LiveGraph
from .render import SVG, render_svg, to_dot

__all__ = ["compose_strip", "backward_strip", "backward_animation", "live_strip",
           "content_prefix"]

#: Fill colours of the backward stepper: not run yet, running now, done.
BASE, CURRENT, DONE = "#e8e8e8", "#ff6f61", "#9fd39f"

_ROOT = re.compile(r"<svg\b[^>]*>")
_NUM = r"([0-9.]+)(?:pt|px)?"


def _size(svg: str) -> tuple[float, float, str]:
    root = _ROOT.search(svg)
    if root is None:
        raise ValueError("not an SVG document")
    tag = root.group(0)
    w = re.search(r'width="' + _NUM + '"', tag)
    h = re.search(r'height="' + _NUM + '"', tag)
    if w is None or h is None:
        raise ValueError("the SVG root has no width/height")
    width, height = float(w.group(1)), float(h.group(1))
    vb = re.search(r'viewBox="([^"]+)"', tag)
    return width, height, vb.group(1) if vb else f"0 0 {width} {height}"


def _check_per_row(per_row: int) -> None:
    if isinstance(per_row, bool) or not isinstance(per_row, int) or per_row < 1:
        raise ValueError(f"per_row must be a positive int, got {per_row!r}")


def compose_strip(svgs: list[str], labels: list[str], *, per_row: int = 2,
                  height: float | None = None, gap: float = 14.0) -> str:
    """Lay SVGs out in a grid, `per_row` to a row, with each label above its drawing.

    Frames keep their natural size unless `height` caps them: shrinking a tall graph to a
    common height is what made its labels unreadable, so by default a row is as tall as
    its tallest frame and frames sit on a common baseline. Returns one SVG document.
    """
    if not svgs:
        raise ValueError("compose_strip() needs at least one SVG")
    if len(labels) != len(svgs):
        raise ValueError(f"compose_strip() got {len(svgs)} SVGs and {len(labels)} labels; "
                         "pass one label per SVG")
    _check_per_row(per_row)
    if height is not None and (isinstance(height, bool) or not isinstance(height, (int, float))
                               or height <= 0):
        raise ValueError(f"height must be a positive number or None, got {height!r}")
    sizes = []
    for svg in svgs:
        w, h, vb = _size(svg)
        scale = height / h if height is not None and h > height else 1.0
        sizes.append((w * scale, h * scale, vb))
    # Each label sits above its drawing: below it, a label read as the title of the
    # drawing after it once frames stack one per row.
    label_h = 24.0
    parts: list[str] = []
    widths: list[float] = []
    y0 = 0.0
    for first in range(0, len(svgs), per_row):
        row = range(first, min(first + per_row, len(svgs)))
        drawing_h = max(sizes[k][1] for k in row)
        x = 0.0
        for k in row:
            fw, fh, vb = sizes[k]
            parts.append(_ROOT.sub(
                f'<svg x="{x:.1f}" y="{y0 + label_h + drawing_h - fh:.1f}" width="{fw:.1f}" '
                f'height="{fh:.1f}" viewBox="{vb}" preserveAspectRatio="xMidYMax meet">',
                svgs[k], count=1))
            parts.append(f'<text x="{x + fw / 2:.1f}" y="{y0 + 16:.1f}" '
                         'text-anchor="middle" font-family="Helvetica,Arial,sans-serif" '
                         f'font-size="12" font-weight="bold">{_html.escape(labels[k])}</text>')
            x += fw + gap
        widths.append(x - gap)
        y0 += drawing_h + label_h + gap
    total_w, total_h = max(widths), y0 - gap
    return (f'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
            f'width="{total_w:.1f}pt" height="{total_h:.1f}pt" '
            f'viewBox="0 0 {total_w:.1f} {total_h:.1f}">' + "".join(parts) + "</svg>")


def content_prefix(text: str) -> str:
    """A short id prefix derived from content, so drawings on one page never share ids."""
    return "a" + hashlib.sha1(text.encode()).hexdigest()[:8] + "-"


def _colors(bo: BackwardOrder, upto: int) -> dict[int, str]:
    """Fill colours after `upto` steps: run ones green, the latest red."""
    return {s.node_id: CURRENT if s.index == upto else DONE for s in bo.steps[:upto]}


def backward_strip(bo: BackwardOrder, max_frames: int = 6, *, per_row: int = 2,
                   **options: Any) -> SVG:
    """Snapshots of the backward pass, before it and after evenly spaced steps."""
    if isinstance(max_frames, bool) or not isinstance(max_frames, int) or max_frames < 2:
        raise ValueError(f"max_frames must be an int of at least 2, got {max_frames!r}")
    k = len(bo.steps)
    marks = sorted({round(i * k / (max_frames - 1)) for i in range(max_frames)})
    svgs = [render_svg(bo.graph, colors=_colors(bo, m), **options) for m in marks]
    labels = ["before backward" if m == 0 else f"after step {m}" for m in marks]
    return SVG(compose_strip(svgs, labels, per_row=per_row))


def backward_animation(bo: BackwardOrder, seconds_per_step: float = 0.6,
                       **options: Any) -> SVG:
    """SVG whose CSS keyframes light up Node k at time k, looping. No JavaScript needed."""
    if not isinstance(seconds_per_step, (int, float)) or seconds_per_step <= 0:
        raise ValueError(f"seconds_per_step must be a positive number, got {seconds_per_step!r}")
    prefix = content_prefix(to_dot(bo.graph, **options) + "animation")
    svg = render_svg(bo.graph, id_prefix=prefix, **options)
    total = len(bo.steps) + 3  # hold the finished picture for a moment before looping
    rules = []
    for s in bo.steps:
        a = 100 * (s.index - 1) / total
        b = 100 * s.index / total
        sel = f"#{prefix}n{s.node_id}"
        rules.append(
            f"@keyframes {prefix}k{s.index}{{0%{{fill:{BASE}}}{a:.3f}%{{fill:{CURRENT}}}"
            f"{b:.3f}%{{fill:{DONE}}}100%{{fill:{DONE}}}}}"
            f"{sel} path,{sel} polygon{{animation:{prefix}k{s.index} "
            f"{total * seconds_per_step:.2f}s step-end infinite}}"
        )
    style = "<style>" + "".join(rules) + "</style>"
    head_end = svg.index(">", svg.index("<svg")) + 1
    return SVG(svg[:head_end] + style + svg[head_end:])


def live_strip(lg: LiveGraph, max_frames: int = 6, *, per_row: int = 2,
               **options: Any) -> SVG:
    """Evenly spaced frames of `live()`, the last one included."""
    if isinstance(max_frames, bool) or not isinstance(max_frames, int) or max_frames < 1:
        raise ValueError(f"max_frames must be a positive int, got {max_frames!r}")
    if not lg.frames:
        raise ValueError("no frames were recorded: run a forward pass with grad enabled "
                         "inside live()")
    n = len(lg.frames)
    picks = [n - 1]
    if n > 1 and max_frames > 1:
        picks = sorted({round(i * (n - 1) / (max_frames - 1)) for i in range(max_frames)})
    svgs = [render_svg(lg.frames[i], **options) for i in picks]
    # The frame's own caption already counts its Nodes; the label says where it falls.
    labels = [f"frame {i + 1} of {n}" for i in picks]
    return SVG(compose_strip(svgs, labels, per_row=per_row))
