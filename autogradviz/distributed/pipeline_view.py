"""Matplotlib view of a simulated pipeline: one lane per stage, one box per operation.

Reads `records.PipelineSchedule` only (no torch). Forward boxes are blue, backward boxes
orange, each labelled with its microbatch (numbered from 0, as in the record); with
interleaving the second and later model chunks are drawn in lighter shades. A lane's grey
background is its idle time: the bubble. Legends sit below the axes, outside the data. All
text is at least 9 pt. The default width, 4.6 in at 110 dpi (~510 px), is one a 390 px phone shows at
about 70% (so 9 pt stays at least ~6.5 px there, and a desktop page shows it at full size);
schedules compare in rows, never side by side. A box too narrow for its number at 9 pt is
left unlabelled rather than labelled in smaller type.
"""
from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..style import FIGURE_DPI, PHONE_WIDTH_IN, SMALL_PT

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from .records import PipelineSchedule

__all__ = ["compare_pipelines", "plot_pipeline"]

_WIDTH_IN = PHONE_WIDTH_IN  # ~510 px at 110 dpi; a phone's ~350 px column shows it at >= 65%
# (forward, backward) fill per model chunk; later chunks lighter.
_FILLS = (("#4c72b0", "#dd8452"), ("#a5bbdd", "#efc1a1"), ("#d2ddee", "#f7e0d0"))
_IDLE = "#e6e6e6"
_LABEL_PT = SMALL_PT  # the one size of the microbatch numbers


def _fill(kind: str, chunk: int) -> str:
    return _FILLS[min(chunk, len(_FILLS) - 1)][0 if kind == "F" else 1]


def _draw(ax: Axes, sched: PipelineSchedule, title: str | None, xmax: float) -> None:
    from matplotlib.patches import Rectangle

    lane_h = 0.8
    ax.set_xlim(0, xmax)
    ax.set_ylim(sched.stages - 0.5, -0.5)  # stage 0 on top
    ax.figure.canvas.draw_idle()
    # Box width in points, to size the microbatch labels.
    bbox = ax.get_position()
    axes_w_pt = bbox.width * ax.figure.get_figwidth() * 72
    for s in range(sched.stages):
        ax.add_patch(Rectangle((0, s - lane_h / 2), sched.makespan, lane_h, color=_IDLE,
                               lw=0, zorder=0))
    for op in sched.ops:
        width = op.end - op.start
        ax.add_patch(Rectangle((op.start, op.stage - lane_h / 2), width, lane_h,
                               facecolor=_fill(op.kind, op.chunk), edgecolor="white",
                               lw=0.8, zorder=1))
        label = str(op.microbatch)
        box_pt = width / xmax * axes_w_pt
        if box_pt >= _LABEL_PT * (0.62 * len(label) + 0.3):  # the number fits
            dark = op.chunk == 0
            ax.text(op.start + width / 2, op.stage, label, ha="center", va="center",
                    fontsize=_LABEL_PT, color="white" if dark else "#222222", zorder=2)
    ax.set_yticks(range(sched.stages), [f"stage {s}" for s in range(sched.stages)])
    ax.tick_params(axis="y", length=0)
    ax.set_xlabel("time (t_forward = %g, t_backward = %g per stage)"
                  % (sched.t_forward, sched.t_backward))
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    # A caption longer than the narrow axes wraps (~0.55 em per character at 10 pt).
    text = title if title is not None else sched.caption()
    ax.set_title(textwrap.fill(text, max(20, int(axes_w_pt / 5.5))), fontsize=10, loc="left")


def _legend_handles(max_chunks: int) -> list:
    from matplotlib.patches import Patch

    # One chunk: a single row. More: legends fill column by column, so this order gives a
    # forward column (idle at its foot) and a backward column, two columns a narrow figure holds.
    suffix = (lambda c: f" (chunk {c})") if max_chunks > 1 else (lambda c: "")
    forward = [Patch(color=_fill("F", c), label=f"forward{suffix(c)}") for c in range(max_chunks)]
    backward = [Patch(color=_fill("B", c), label=f"backward{suffix(c)}") for c in range(max_chunks)]
    return [*forward, Patch(color=_IDLE, label="idle (bubble)"), *backward]


def _legend(target: Figure | Axes, max_chunks: int, **where: object) -> None:
    handles = _legend_handles(max_chunks)
    ncol = len(handles) if max_chunks == 1 else 2
    target.legend(handles=handles, ncol=ncol, fontsize=9, frameon=False, **where)


def plot_pipeline(sched: PipelineSchedule, ax: Axes | None = None,
                  title: str | None = None) -> Figure:
    """One schedule: stage lanes over time, microbatch numbers in the boxes."""
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=(_WIDTH_IN, 0.45 * sched.stages + 1.5),
                               layout="constrained", dpi=FIGURE_DPI)
        plt.close(fig)
        _draw(ax, sched, title, sched.makespan)
        _legend(fig, sched.chunks, loc="outside lower center")
        return fig
    _draw(ax, sched, title, sched.makespan)
    _legend(ax, sched.chunks, loc="upper center", bbox_to_anchor=(0.5, -0.3))
    return ax.figure


def compare_pipelines(schedules: Sequence[PipelineSchedule],
                      titles: Sequence[str] | None = None) -> Figure:
    """Several schedules, one per row, on one time axis, so bubbles compare by length."""
    import matplotlib.pyplot as plt

    if not schedules:
        raise ValueError("compare_pipelines needs at least one PipelineSchedule")
    if titles is not None and len(titles) != len(schedules):
        raise ValueError(f"got {len(titles)} titles for {len(schedules)} schedules")
    heights = [0.45 * s.stages + 0.9 for s in schedules]
    fig, axes = plt.subplots(len(schedules), 1, figsize=(_WIDTH_IN, sum(heights) + 0.8),
                             layout="constrained", dpi=FIGURE_DPI, squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    plt.close(fig)
    xmax = max(s.makespan for s in schedules)
    for i, (ax, sched) in enumerate(zip(axes[:, 0], schedules)):
        _draw(ax, sched, titles[i] if titles is not None else None, xmax)
        if i < len(schedules) - 1:
            ax.set_xlabel("")
    _legend(fig, max(s.chunks for s in schedules), loc="outside lower center")
    return fig
