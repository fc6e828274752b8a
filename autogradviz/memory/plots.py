"""Matplotlib views of memory and gradient records.

They read the dataclass records of `autogradviz.memory.records` only: nothing here imports torch
or a recorder, so a pickled record draws in a process without torch. Byte counts are
written by `records.format_bytes`, the package's one byte formatter, and axes are scaled
by `records.byte_unit`, which picks the same unit.

Figures are made with pyplot and closed before they are returned, so a notebook
shows each one once (as the cell's value) and no global figure state leaks. They are
made at `FIGURE_DPI` with text of at least 9 pt, readable at the ~730 px the site shows.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..records import byte_unit, format_bytes
from ..style import FIGURE_DPI, PHONE_WIDTH_IN, SMALL_PT
from .records import CATEGORIES, PHASES

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from .records import Category, GradEventKind, GradTraceRecord, MemoryRecord, Phase

__all__ = ["CATEGORY_COLORS", "PHASE_COLORS", "FIGURE_DPI", "plot_memory", "plot_memory_compare",
           "plot_gradtrace"]

# Fixed colours so the same category looks the same in every chapter.
CATEGORY_COLORS: dict[Category, str] = {
    "parameter": "#4c72b0",
    "gradient": "#dd8452",
    "optimizer_state": "#8172b3",
    "input": "#937860",
    "activation": "#55a868",
    "temporary": "#c44e52",
}
PHASE_COLORS: dict[Phase, str] = {
    "forward": "#a6cee3",
    "backward": "#fdbf6f",
    "optimizer": "#cab2d6",
    "zero_grad": "#b2df8a",
    "other": "#ffffff",
}
_SMALL = SMALL_PT  # the smallest text drawn (legends, the peak note)


def _new_axes(ax: Axes | None, size: tuple[float, float]) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.figure, ax
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=size, layout="constrained", dpi=FIGURE_DPI)
    plt.close(fig)
    return fig, ax


def _phase_runs(phases: Sequence[str]) -> list[tuple[str, int, int]]:
    runs: list[tuple[str, int, int]] = []
    for i, ph in enumerate(phases):
        if runs and runs[-1][0] == ph:
            runs[-1] = (ph, runs[-1][1], i)
        else:
            runs.append((ph, i, i))
    return runs


def _draw_memory(ax: Axes, record: MemoryRecord, unit: tuple[str, int], title: str | None,
                 legend: bool) -> None:
    """One timeline on ``ax``, scaled by ``unit`` (a `byte_unit` pair)."""
    name, scale = unit
    samples = record.samples
    x = [s.index for s in samples]
    ys = [[s.bytes[c] / scale for s in samples] for c in CATEGORIES]
    for ph, a, b in _phase_runs([s.phase for s in samples]):
        if ph != "other":
            ax.axvspan(a, b + 1, color=PHASE_COLORS[ph], alpha=0.35, lw=0, zorder=0)
    ax.stackplot(x, *ys, labels=CATEGORIES, colors=[CATEGORY_COLORS[c] for c in CATEGORIES],
                 step="post", zorder=2)
    peak = record.peak
    if peak is not None:
        top = peak.total / scale
        ax.axvline(peak.index, color="black", ls="--", lw=0.8, zorder=3)
        ax.plot([peak.index], [top], marker="v", color="black", zorder=4)
        ax.annotate(f"peak {format_bytes(peak.total)}\nafter {peak.op} ({peak.phase})",
                    (peak.index, top), xytext=(0.02, 0.97), textcoords="axes fraction", va="top",
                    fontsize=_SMALL,
                    arrowprops={"arrowstyle": "->", "lw": 0.6}, zorder=5)
    ax.set_xlabel("sample (one per allocating op)")
    ax.set_ylabel(f"live memory ({name})")
    ax.set_xlim(0, max(len(samples), 1))
    ax.set_ylim(0, max(peak.total / scale if peak else 0, 1e-9) * 1.25)
    ax.set_title(title if title is not None else f"memory on {record.device}")
    if legend:
        handles, labels = _legend_entries(ax, [record])
        # Outside the axes, under them: inside, it hid the curve (a late optimizer-step
        # peak sits in the upper right); beside them, it took half of a phone-wide figure.
        # Constrained layout shortens the axes to make room.
        ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.18),
                  borderaxespad=0.0, fontsize=_SMALL, ncols=2)


def _legend_entries(ax: Axes, records: Sequence[MemoryRecord]) -> tuple[list, list[str]]:
    """The categories drawn on ``ax`` (top of the stack first), then the phases that
    occur in any of ``records``."""
    from matplotlib.patches import Patch

    handles, labels = ax.get_legend_handles_labels()
    phases = {info[0] for r in records for info in r.info}  # (phase, op, ...) per sample
    present = [p for p in PHASES if p != "other" and p in phases]
    handles = handles[::-1] + [Patch(color=PHASE_COLORS[p], alpha=0.35) for p in present]
    return handles, labels[::-1] + [f"phase: {p}" for p in present]


def plot_memory(record: MemoryRecord, ax: Axes | None = None, title: str | None = None) -> Figure:
    """Stacked live bytes by category over the samples, phase bands behind."""
    fig, ax = _new_axes(ax, (PHONE_WIDTH_IN, 4.4))
    peak = record.peak
    _draw_memory(ax, record, byte_unit(peak.total if peak else 0), title, legend=True)
    return fig


_COMPARE_COLUMNS = 1  # panels stacked: side by side, a phone shows each at half its size


def _compare_figsize(runs: int) -> tuple[float, float]:
    """The default size in inches of `plot_memory_compare` for ``runs`` panels: one panel
    a row, `PHONE_WIDTH_IN` wide, 2.4 in a row plus room for the legend underneath."""
    rows = -(-runs // _COMPARE_COLUMNS)
    return (PHONE_WIDTH_IN, 2.4 * rows + 1.1)


def plot_memory_compare(records: Sequence[MemoryRecord], titles: Sequence[str],
                        figsize: tuple[float, float] | None = None) -> Figure:
    """One panel per record, two a row, sharing the y axis so the heights compare
    directly; one legend under the panels. ``figsize`` (inches) defaults to
    `_compare_figsize`."""
    import matplotlib.pyplot as plt

    n = len(records)
    cols = min(n, _COMPARE_COLUMNS)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=figsize or _compare_figsize(n), sharey=True,
                             layout="constrained", squeeze=False, dpi=FIGURE_DPI)
    plt.close(fig)
    flat = list(axes.flat)
    for spare in flat[n:]:  # an odd count leaves the last slot of the last row empty
        fig.delaxes(spare)
    top = max((r.peak_bytes for r in records), default=0)
    unit = byte_unit(top)
    for i, (ax, rec, title) in enumerate(zip(flat, records, titles)):
        _draw_memory(ax, rec, unit, title, legend=False)
        if i % cols:
            ax.set_ylabel("")
    flat[0].set_ylim(0, max(top / unit[1], 1e-9) * 1.25)
    # Under the panels rather than beside them, so the panels get the page's width.
    handles, labels = _legend_entries(flat[0], records)
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=_SMALL)
    return fig


# (colour, line style) of the vertical event lines.
_EVENT_STYLE: dict[GradEventKind, tuple[str, str]] = {
    "zero_grad": ("#2ca02c", ":"), "step": ("#d62728", "--"), "allreduce": ("#9467bd", "-."),
}


# Where an event after backward k is drawn: at k + its slot. Fixed slots (not spread over
# the events of each gap) keep, say, every optimizer step at the same x in two panels that
# compare loops with and without zero_grad.
_SLOT = 0.25


def plot_gradtrace(record: GradTraceRecord, ax: Axes | None = None, title: str | None = None,
                   params: Sequence[str] | None = None) -> Figure:
    """Grad norm per parameter across backward and zero_grad events.

    Backward k is drawn at x = k; the zero_grad and step calls that follow it sit at
    k + 0.25, k + 0.5, ... in the order they happened, as vertical lines. A parameter's
    line drops to 0 at a zero_grad that zeroed the gradient (a filled square); where the
    gradient became ``None`` it has no norm, so the line breaks there (a cross under the
    axis) until the next backward creates ``.grad`` again. A zero_grad with no gradient to clear
    (before the first backward) changes nothing and is not drawn. All-reduce is a line
    at its backward.
    """
    names = list(record.params if params is None else params)
    unknown = [n for n in names if n not in record.params]
    if unknown:
        raise ValueError(f"unknown parameters {unknown}; "
                         f"traced parameters are {list(record.params)}")
    fig, ax = _new_axes(ax, (PHONE_WIDTH_IN, 4.0))
    # x of every backward / zero_grad / step event, one zero_grad or step call per slot
    # (a call emits one event per parameter).
    xs: list[float] = []
    calls: list[tuple[str, float]] = []
    slot, last = 0, None
    for e in record.events:
        if e.kind == "backward":
            slot, last = 0, None
            xs.append(float(e.micro_step))
        elif e.kind in ("zero_grad", "step"):
            if last != (e.kind, e.micro_step):
                slot += 1
                calls.append((e.kind, e.micro_step + slot * _SLOT))
                last = (e.kind, e.micro_step)
            xs.append(e.micro_step + slot * _SLOT)
        else:
            xs.append(float(e.micro_step))
    colors: dict[str, str] = {}
    for name in names:
        line_x: list[float] = []
        line_y: list[float] = []
        measured: list[int] = []  # indices of the points that are a norm torch reported
        for x, e in zip(xs, record.events):
            if e.param != name:
                continue
            if e.kind == "backward" and e.norm is not None:
                measured.append(len(line_x))
                line_x.append(x)
                line_y.append(e.norm)
            elif e.kind == "zero_grad" and line_x:  # nothing to clear before the first grad
                if e.action == "set_to_none":
                    # No tensor, so no norm: the line holds its value up to the call, then
                    # breaks until the next backward creates .grad again. Drawing 0 here
                    # would confuse None with zeros, the very distinction zero_grad makes.
                    line_x += [x, x]
                    line_y += [line_y[-1], float("nan")]
                else:
                    line_x.append(x)
                    line_y.append(0.0)
        if line_x:
            # steps-post: .grad keeps its value until the next event changes it.
            (ln,) = ax.plot(line_x, line_y, marker="o", ms=4, markevery=measured,
                            drawstyle="steps-post", label=name)
            colors[name] = ln.get_color()
    labelled: set[str] = set()
    for x, e in zip(xs, record.events):
        if e.kind == "zero_grad" and e.param in colors:
            is_none = e.action == "set_to_none"
            label = ".grad set to None" if is_none else ".grad zeroed"
            # A zeroed grad has norm 0 and sits on the axis; a None one has no norm, so its
            # cross is drawn under the axis (axes coordinates), off the scale of norms.
            ax.plot([x], [-0.06 if is_none else 0.0], ls="none", color=colors[e.param],
                    ms=7, clip_on=False, zorder=3, marker="x" if is_none else "s",
                    transform=ax.get_xaxis_transform() if is_none else ax.transData,
                    label=label if label not in labelled else None)
            labelled.add(label)
    seen: set[str] = set()
    for kind, x in calls:
        color, ls = _EVENT_STYLE[kind]
        ax.axvline(x, color=color, ls=ls, lw=1.2, label=kind if kind not in seen else None)
        seen.add(kind)
    for k in sorted({e.micro_step for e in record.events if e.kind == "allreduce"}):
        color, ls = _EVENT_STYLE["allreduce"]
        ax.axvline(k, color=color, ls=ls, lw=1.0, alpha=0.7,
                   label="allreduce" if "allreduce" not in seen else None)
        seen.add("allreduce")
    steps = sorted({e.micro_step for e in record.events if e.kind == "backward"})
    if steps:
        ax.set_xticks(steps)
    if xs:
        ax.set_xlim(min(xs) - _SLOT, max(xs) + _SLOT)
    # In a column of panels sharing x, only the bottom one needs the axis label.
    spec = ax.get_subplotspec()
    if spec is None or spec.is_last_row():
        ax.set_xlabel("backward call (micro-step)")
    ax.set_ylabel("‖grad‖₂")
    ax.set_ylim(bottom=0)
    ax.set_title(title if title is not None else "gradient accumulation trace")
    if ax.get_legend_handles_labels()[0]:
        # Outside the axes, under them, so no point hides under it and the axes keep the
        # figure's width.
        ax.legend(fontsize=_SMALL, loc="upper center", bbox_to_anchor=(0.5, -0.2),
                  borderaxespad=0.0, ncols=3)
    return fig
