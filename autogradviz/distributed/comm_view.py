"""The communication timeline of a `CommTrace`: backward Nodes against DDP's all-reduces.

One panel per backward pass and per rank, stacked in one column (rank by rank, each
rank's passes in order; `fig.axes` keeps the order of the former rows-by-columns grid),
so the figure stays narrow enough for a phone. In a panel, time runs to the
right in ms from the start of that backward pass; the top lane holds the autograd Nodes
(AccumulateGrad, where a gradient becomes ready, in its own colour), and each lane below
holds one bucket's all-reduce, from launch to completion. A dashed line marks the end of
the last Node: an all-reduce left of it overlapped the backward computation, the part
right of it is communication the backward had to wait for. Each backward pass has its
own time axis, fitted to it, so a short pass is not squeezed to a sliver beside a long
one (the first pass, with DDP's initial buckets, is often several times longer); the
ranks of one pass share it, so they compare. Each all-reduce bar is labelled with
its bucket's bytes (`format_bytes`). All backward passes are drawn up to `MAX_PANELS`;
beyond that the last `MAX_PANELS` are, and a line under the panels names the ones left
out. An AccumulateGrad bar ends after DDP's
own hook on that Node ran (it copies the gradient into its bucket and, once the bucket is
complete, calls the communication hook), so it includes that work.

Reads records only (no torch), like the other views; made at 110 dpi, 4.6 in (~510 px)
wide, which a 390 px phone shows at about 70%, with text of at least 9 pt, the legend
below the panels.
"""
from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..records import format_bytes
from ..style import FIGURE_DPI, PHONE_WIDTH_IN, SMALL_PT
from .records import CommTrace

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from .records import BackwardPass

__all__ = ["MAX_PANELS", "plot_comm"]

#: Backward passes drawn by default; more would make the stacked figure too tall to follow.
MAX_PANELS = 6
_WIDTH_IN = PHONE_WIDTH_IN  # ~510 px at 110 dpi: a phone's ~350 px column shows it at >= 65%
_SMALL = SMALL_PT
NODE_COLOR = "#9a9a9a"
READY_COLOR = "#55a868"  # AccumulateGrad: the gradient is ready for its bucket
COMM_COLOR = "#4c72b0"


def _as_traces(traces: Any) -> list[CommTrace]:
    if isinstance(traces, (CommTrace, dict)):
        traces = [traces]
    if isinstance(traces, (str, bytes)) or not isinstance(traces, Sequence) or not traces:
        raise TypeError("plot_comm takes a CommTrace, its to_dict(), or a non-empty list of "
                        f"them (one per rank), got {type(traces).__name__}")
    out = []
    for t in traces:
        if isinstance(t, dict):
            t = CommTrace.from_dict(t)
        if not isinstance(t, CommTrace):
            raise TypeError(f"plot_comm takes CommTrace records or their to_dict(), "
                            f"got {type(t).__name__}")
        out.append(t)
    return out


def _pick(trace: CommTrace, micro_steps: Sequence[int] | None) -> list[int]:
    recorded = [b.micro_step for b in trace.backwards]
    if micro_steps is None:
        return recorded[-MAX_PANELS:]
    if isinstance(micro_steps, (str, bytes)) or not isinstance(micro_steps, Sequence) or not all(
            isinstance(m, int) and not isinstance(m, bool) for m in micro_steps):
        raise TypeError(f"micro_steps must be a list of backward-pass numbers (ints, from 1), "
                        f"got {micro_steps!r}; recorded micro-steps are {recorded}")
    wanted = list(micro_steps)
    missing = [m for m in wanted if m not in recorded]
    if missing:
        raise ValueError(f"no backward pass {missing} in the trace of rank {trace.rank}; "
                         f"recorded micro-steps are {recorded}")
    return wanted


def _panel_title(trace: CommTrace, bwd: BackwardPass) -> str:
    later = [b.start_s for b in trace.backwards if b.start_s > bwd.start_s]
    until = min(later, default=float("inf"))
    stepped = any(bwd.end_s <= s < until for s in trace.steps)
    mode = "synced" if bwd.synced else "no_sync"
    return f"backward {bwd.micro_step}\n{mode}{' + step' if stepped else ''}"


def _ranges(steps: Sequence[int]) -> str:
    """``[1, 2, 3, 5]`` -> ``"1-3, 5"``."""
    parts: list[tuple[int, int]] = []
    for m in sorted(steps):
        if parts and parts[-1][1] == m - 1:
            parts[-1] = (parts[-1][0], m)
        else:
            parts.append((m, m))
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in parts)


def _left_out(trace: CommTrace, steps: Sequence[int]) -> list[int]:
    return [b.micro_step for b in trace.backwards if b.micro_step not in steps]


def _span_ms(trace: CommTrace, bwd: BackwardPass) -> float:
    ends = [bwd.end_s] + [c.end_s for c in trace.calls_of(bwd.micro_step) if c.end_s is not None]
    return (max(ends) - bwd.start_s) * 1e3


# Past this fraction of a panel's width, a bytes label ends at its launch rather than
# starting there, so that the panel's edge does not clip it.
RIGHT_LABEL_FRACTION = 0.8


def _draw_panel(ax: Axes, trace: CommTrace, bwd: BackwardPass, lanes: int) -> None:
    t0 = bwd.start_s
    h = 0.6
    for kind, color in (("node", NODE_COLOR), ("ready", READY_COLOR)):
        bars = [((n.start_s - t0) * 1e3, max((n.end_s - n.start_s) * 1e3, 1e-4))
                for n in trace.nodes if n.micro_step == bwd.micro_step
                and (n.name == "AccumulateGrad") == (kind == "ready")]
        if bars:
            ax.broken_barh(bars, (-h / 2, h), facecolors=color, edgecolor=color, lw=0.4)
    for c in trace.calls_of(bwd.micro_step):
        end = c.end_s if c.end_s is not None else bwd.end_s
        ax.broken_barh([((c.start_s - t0) * 1e3, max((end - c.start_s) * 1e3, 1e-4))],
                       (c.bucket + 1 - h / 2, h), facecolors=COMM_COLOR, edgecolor="black",
                       lw=0.5)
        # The bucket's bytes at the launch end of its bar, on a white ground so the text
        # stays legible where it crosses the bar.
        ax.text((c.start_s - t0) * 1e3, c.bucket + 1, f" {format_bytes(c.nbytes)}",
                ha="left", va="center", fontsize=_SMALL, clip_on=True,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.6, "alpha": 0.8})
    ax.axvline((bwd.nodes_end_s - t0) * 1e3, color="black", ls="--", lw=0.9)
    ax.set_ylim(lanes - 0.5, -0.5)
    ax.tick_params(labelsize=_SMALL)
    ax.grid(axis="x", lw=0.4, alpha=0.5)


def _lane_labels(trace: CommTrace, steps: list[int], lanes: int) -> list[str]:
    labels = ["Nodes"]
    for b in range(lanes - 1):
        # The bytes are on the bars: DDP rebuilds its buckets after the first backward,
        # so one lane can hold different sizes in different panels.
        labels.append(f"bucket {b}")
    return labels


def plot_comm(traces: Any, micro_steps: Sequence[int] | None = None,
              title: str | None = None, time_scale: str = "linear") -> Figure:
    """Draw the backward Nodes and the all-reduces of one or more ranks' traces.

    ``traces`` is a `CommTrace` or its ``to_dict()``, or a list of them (one per rank,
    drawn as rows). ``micro_steps`` picks the backward passes to draw (default: all of
    them, or the last `MAX_PANELS` when there are more, the others named under the
    panels). Each column has its own time axis in ms from the start of its backward
    pass; each all-reduce is labelled with its bucket's bytes. ``time_scale="symlog"``
    makes every pass's axis linear to 1 ms and logarithmic beyond (ticks 0, 0.5, 1,
    10, 100 ms), so sub-millisecond Nodes and slow all-reduces both show.
    """
    if time_scale not in ("linear", "symlog"):
        raise ValueError(f"time_scale must be 'linear' or 'symlog', not {time_scale!r}")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from matplotlib.lines import Line2D

    rows = _as_traces(traces)
    steps = _pick(rows[0], micro_steps)
    if not steps:
        raise ValueError("the trace holds no backward pass: run backward inside "
                         "record_comm(...)")
    for t in rows[1:]:
        _pick(t, steps)  # every rank must hold the same backward passes
    lanes = [1 + max((c.bucket + 1 for m in steps for c in t.calls_of(m)), default=0)
             for t in rows]
    heights = [0.45 + 0.34 * n for n in lanes]
    # Panels in one column: rank by rank, each rank's backward passes one under the other.
    panels = [(m, r) for r in range(len(rows)) for m in steps]
    panel_h = [heights[r] + 0.25 for _, r in panels]  # room for the pass's title
    fig = plt.figure(figsize=(_WIDTH_IN, sum(panel_h) + 2.0 + 0.3 * (
                         micro_steps is None and len(rows[0].backwards) > len(steps))),
                     dpi=FIGURE_DPI,
                     layout="constrained")
    plt.close(fig)
    # The legend gets a strip of its own below the panels: placed on the figure, it
    # collided with the figure's title or x label.
    omitted = _left_out(rows[0], steps) if micro_steps is None else []
    main, foot = fig.subfigures(2, 1, height_ratios=[sum(panel_h) + 1.0,
                                                     1.3 if omitted else 1.0])
    axes = main.subplots(len(panels), 1, squeeze=False, gridspec_kw={"height_ratios": panel_h})[:, 0]
    first = {}
    for ax, (m, r) in zip(axes, panels):
        trace = rows[r]
        bwd = next(b for b in trace.backwards if b.micro_step == m)
        _draw_panel(ax, trace, bwd, lanes[r])
        ax.set_yticks(range(lanes[r]))
        ax.set_yticklabels(_lane_labels(trace, steps, lanes[r]), fontsize=_SMALL)
        ax.set_ylabel(f"rank {trace.rank}", fontsize=10)
        ax.set_title(_panel_title(trace, bwd), fontsize=_SMALL)
        if m in first:  # one time axis per backward pass, shared by its ranks
            ax.sharex(first[m])
        else:
            first[m] = ax
    for m in steps:
        span = max(_span_ms(t, b) for t in rows for b in t.backwards if b.micro_step == m)
        first[m].set_xlim(0, span * 1.05)
        if time_scale == "symlog":  # the ranks' panels of pass m share this axis
            first[m].set_xscale("symlog", linthresh=1, linscale=1.5)
            ticks = [t for t in (0, 0.5, 1, 10, 100) if t <= span * 1.05]
            first[m].set_xticks(ticks, [f"{t:g}" for t in ticks])
    for ax in axes:  # a bytes label launched near the right edge would be clipped:
        to_axes = ax.transAxes.inverted()  # end it at the launch instead
        for text in ax.texts:
            x = ax.transData.transform((text.get_position()[0], 0))
            if to_axes.transform(x)[0] > RIGHT_LABEL_FRACTION:
                text.set_horizontalalignment("right")
                text.set_text(text.get_text().strip() + " ")
    main.supxlabel("ms since the backward pass started (" + (
                   "log beyond 1 ms)" if time_scale == "symlog" else "each pass its own scale)"),
                   fontsize=10)
    if title is None:
        t = rows[0]
        title = (f"DDP all-reduces against backward Nodes · {t.world_size} "
                 f"rank{'s' * (t.world_size != 1)}, {t.backend}")
    main.suptitle(textwrap.fill(title, 56), fontsize=10)
    handles = [Patch(color=NODE_COLOR, label="autograd Node"),
               Patch(color=READY_COLOR, label="AccumulateGrad (grad ready)"),
               Patch(facecolor=COMM_COLOR, edgecolor="black", label="all-reduce: launch → done"),
               Line2D([], [], color="black", ls="--", lw=0.9, label="last Node finished")]
    if omitted:
        foot.legend(handles=handles, loc="upper center", ncol=1, fontsize=_SMALL,
                    frameon=False)
        foot.text(0.5, 0.02, f"not drawn: backward pass{'es' * (len(omitted) > 1)} "
                  f"{_ranges(omitted)} of {len(rows[0].backwards)} (pass micro_steps=[...] "
                  "to choose)", ha="center", va="bottom", fontsize=_SMALL)
    else:
        foot.legend(handles=handles, loc="center", ncol=1, fontsize=_SMALL, frameon=False)
    return fig
