"""The communication timeline of a `CommTrace`: backward Nodes against DDP's all-reduces.

One panel per backward pass (columns) and per rank (rows). In a panel, time runs to the
right in ms from the start of that backward pass; the top lane holds the autograd Nodes
(AccumulateGrad, where a gradient becomes ready, in its own colour), and each lane below
holds one bucket's all-reduce, from launch to completion. A dashed line marks the end of
the last Node: an all-reduce left of it overlapped the backward computation, the part
right of it is communication the backward had to wait for. Every panel has the same
scale, so lengths compare across panels and ranks. An AccumulateGrad bar ends after DDP's
own hook on that Node ran (it copies the gradient into its bucket and, once the bucket is
complete, calls the communication hook), so it includes that work.

Reads records only (no torch), like the other views; made at 110 dpi, 730 px wide, with
text of at least 9 pt, the legend below the panels.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .plots import FIGURE_DPI
from .records import CommTrace, format_bytes

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from .records import BackwardPass

__all__ = ["MAX_PANELS", "plot_comm"]

#: Backward passes drawn by default; more would make panels too narrow to read at 730 px.
MAX_PANELS = 6
_WIDTH_IN = 730 / FIGURE_DPI
_SMALL = 9  # pt
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


def _span_ms(trace: CommTrace, bwd: BackwardPass) -> float:
    ends = [bwd.end_s] + [c.end_s for c in trace.calls_of(bwd.micro_step) if c.end_s is not None]
    return (max(ends) - bwd.start_s) * 1e3


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
    ax.axvline((bwd.nodes_end_s - t0) * 1e3, color="black", ls="--", lw=0.9)
    ax.set_ylim(lanes - 0.5, -0.5)
    ax.tick_params(labelsize=_SMALL)
    ax.grid(axis="x", lw=0.4, alpha=0.5)


def _lane_labels(trace: CommTrace, steps: list[int], lanes: int) -> list[str]:
    labels = ["Nodes"]
    for b in range(lanes - 1):
        sizes = {c.nbytes for m in steps for c in trace.calls_of(m) if c.bucket == b}
        # A bucket's size is shown only when it is the same in every panel of the row:
        # DDP rebuilds its buckets after the first backward.
        labels.append(f"bucket {b}" + (f"\n{format_bytes(sizes.pop())}" if len(sizes) == 1
                                       else ""))
    return labels


def plot_comm(traces: Any, micro_steps: Sequence[int] | None = None,
              title: str | None = None) -> Figure:
    """Draw the backward Nodes and the all-reduces of one or more ranks' traces.

    ``traces`` is a `CommTrace` or its ``to_dict()``, or a list of them (one per rank,
    drawn as rows). ``micro_steps`` picks the backward passes to draw (default: the
    last `MAX_PANELS` of the first trace).
    """
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
    fig = plt.figure(figsize=(_WIDTH_IN, sum(heights) + 1.6), dpi=FIGURE_DPI,
                     layout="constrained")
    plt.close(fig)
    # The legend gets a strip of its own below the panels: placed on the figure, it
    # collided with the figure's title or x label.
    main, foot = fig.subfigures(2, 1, height_ratios=[sum(heights) + 1.1, 0.5])
    axes = main.subplots(len(rows), len(steps), sharex=True, squeeze=False,
                         gridspec_kw={"height_ratios": heights})
    span = max(_span_ms(t, b) for t in rows for b in t.backwards if b.micro_step in steps)
    for r, trace in enumerate(rows):
        by_step = {b.micro_step: b for b in trace.backwards}
        labels = _lane_labels(trace, steps, lanes[r])
        for c, m in enumerate(steps):
            ax = axes[r][c]
            _draw_panel(ax, trace, by_step[m], lanes[r])
            ax.set_yticks(range(lanes[r]))
            ax.set_yticklabels(labels if c == 0 else [""] * lanes[r], fontsize=_SMALL)
            if r == 0:
                ax.set_title(_panel_title(trace, by_step[m]), fontsize=_SMALL)
        axes[r][0].set_ylabel(f"rank {trace.rank}", fontsize=10)
    axes[0][0].set_xlim(0, span * 1.05)
    main.supxlabel("ms since the backward pass started", fontsize=10)
    if title is None:
        t = rows[0]
        title = (f"DDP all-reduces against backward Nodes · {t.world_size} "
                 f"rank{'s' * (t.world_size != 1)}, {t.backend}")
    main.suptitle(title, fontsize=10)
    handles = [Patch(color=NODE_COLOR, label="autograd Node"),
               Patch(color=READY_COLOR, label="AccumulateGrad (grad ready)"),
               Patch(facecolor=COMM_COLOR, edgecolor="black", label="all-reduce: launch → done"),
               Line2D([], [], color="black", ls="--", lw=0.9, label="last Node finished")]
    foot.legend(handles=handles, loc="center", ncol=2, fontsize=_SMALL, frameon=False)
    return fig
