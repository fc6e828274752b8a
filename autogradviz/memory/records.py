"""Records of memory timelines and gradient events: dataclasses and vocabularies, no torch.

Filled by the recorders of this folder (track.py, gradtrace.py), drawn by plots.py.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from os import PathLike
from typing import TYPE_CHECKING, Any, Literal, get_args

if TYPE_CHECKING:
    from collections.abc import Sequence

    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# --- memory and gradient records ---------------------------------------------
# Filled by `track.py` and `gradtrace.py` while their with-blocks run,
# drawn by `plots.py`. Plain Python values only, so a finished record pickles and
# draws in a process without torch.

#: Where a live byte belongs. The order is the precedence (highest first: a weight saved for
#: backward stays "parameter") and the stacking order of the memory plots.
Category = Literal["parameter", "gradient", "optimizer_state", "input", "activation", "temporary"]
CATEGORIES: tuple[Category, ...] = get_args(Category)
#: What the training step was doing when a memory sample was taken.
Phase = Literal["forward", "backward", "optimizer", "zero_grad", "other"]
PHASES: tuple[Phase, ...] = get_args(Phase)
#: What happened to gradients in one `GradEvent`.
GradEventKind = Literal["backward", "zero_grad", "step", "allreduce"]
GRAD_EVENT_KINDS: tuple[GradEventKind, ...] = get_args(GradEventKind)
#: What a backward or zero_grad did to one parameter's ``.grad``.
GradAction = Literal["created", "accumulated", "zeroed", "set_to_none"]
GRAD_ACTIONS: tuple[GradAction, ...] = get_args(GradAction)

@dataclass(frozen=True)
class MemorySample:
    """Live bytes right after one allocating op (or at a phase boundary).

    ``index`` is the position in the timeline, ``op`` the aten op that allocated
    (or a label such as "optimizer.step"), ``optimizer_steps`` how many steps had
    finished. ``cuda_allocated``/``cuda_reserved`` are
    ``torch.cuda.memory_allocated()``/``memory_reserved()`` at the same moment
    on a CUDA device, None elsewhere.
    """

    index: int
    phase: Phase
    op: str
    bytes: dict[Category, int]
    optimizer_steps: int
    cuda_allocated: int | None = None
    cuda_reserved: int | None = None

    @property
    def total(self) -> int:
        return sum(self.bytes.values())


@dataclass(eq=False)
class MemoryRecord:
    """A memory timeline by category, as `track_memory` yields it.

    The recorder appends to it while the with-block runs (read it inside the block for
    the numbers so far); after the block it is final. The rows are kept compact (one list
    of bytes per category, and one (phase, op, optimizer steps, CUDA counters) tuple per
    sample); `samples` turns them into `MemorySample` objects on demand.
    """

    #: The watched device, as ``str(torch.device)``: "cpu", "cuda:0", "meta".
    device: str
    #: Bytes per category (in `CATEGORIES` order) at each sample.
    rows: list[list[int]] = field(default_factory=list, repr=False)
    #: (phase, op, optimizer steps, (cuda allocated, cuda reserved) or None) per sample.
    info: list[tuple[Phase, str, int, tuple[int, int] | None]] = field(
        default_factory=list, repr=False)
    #: Index of the first sample with the largest total; -1 before the first sample.
    peak_index: int = -1
    #: Live bytes per category now (while recording) or at the end of the block.
    current: list[int] = field(default_factory=lambda: [0] * len(CATEGORIES), repr=False)
    #: The CUDA allocator snapshot taken at the end (``track_memory(cuda_history=True)``).
    cuda_snapshot: Any = field(default=None, repr=False)
    #: While recording with ``cuda_history=True``: takes a snapshot now. None otherwise.
    take_cuda_snapshot: Callable[[], Any] | None = field(
        default=None, repr=False, compare=False)
    cuda_history: bool = False

    def _by_category(self, row: Sequence[int]) -> dict[Category, int]:
        return dict(zip(CATEGORIES, row))

    @property
    def samples(self) -> tuple[MemorySample, ...]:
        """Every sample in order (one after each allocating op, plus phase boundaries)."""
        return tuple(MemorySample(i, phase, op, self._by_category(row), steps,
                                  *(cuda or (None, None)))
                     for i, (row, (phase, op, steps, cuda)) in enumerate(zip(self.rows, self.info)))

    @property
    def peak(self) -> MemorySample | None:
        """The sample with the largest total (the first one if several tie)."""
        if self.peak_index < 0:
            return None
        phase, op, steps, cuda = self.info[self.peak_index]
        return MemorySample(self.peak_index, phase, op, self.peak_by_category, steps,
                            *(cuda or (None, None)))

    @property
    def peak_bytes(self) -> int:
        """Largest total of live bytes seen (sampled after every allocating op)."""
        return sum(self.rows[self.peak_index]) if self.peak_index >= 0 else 0

    @property
    def peak_by_category(self) -> dict[Category, int]:
        """The breakdown AT the moment of the overall peak (sums to `peak_bytes`)."""
        if self.peak_index < 0:
            return self._by_category([0] * len(CATEGORIES))
        return self._by_category(self.rows[self.peak_index])

    @property
    def max_by_category(self) -> dict[Category, int]:
        """Each category's own maximum over the timeline (these need not coincide)."""
        return {c: max((r[i] for r in self.rows), default=0) for i, c in enumerate(CATEGORIES)}

    @property
    def current_by_category(self) -> dict[Category, int]:
        """Live bytes now (while recording) or at the end of the with-block."""
        return self._by_category(self.current)

    @property
    def current_bytes(self) -> int:
        return sum(self.current)

    def plot(self, ax: Axes | None = None, title: str | None = None) -> Figure:
        """Stacked-area timeline by category, phases as bands, the peak annotated."""
        # The one lazy import of the view: records stay importable without matplotlib.
        from .plots import plot_memory

        return plot_memory(self, ax=ax, title=title)

    def save_snapshot(self, path: str | PathLike[str]) -> str:
        """Write the CUDA allocator snapshot (open it at pytorch.org/memory_viz).

        Needs ``track_memory(..., cuda_history=True)`` on a CUDA device. Inside the
        with-block it writes the history so far.
        """
        import os
        import pickle

        if not self.cuda_history:
            raise RuntimeError("no allocator history was recorded: start tracking with "
                               "track_memory(model, opt, cuda_history=True) on a CUDA device")
        path = os.fspath(path)
        snapshot = (self.take_cuda_snapshot() if self.take_cuda_snapshot is not None
                    else self.cuda_snapshot)
        with open(path, "wb") as f:
            pickle.dump(snapshot, f)
        return path


@dataclass(frozen=True)
class GradEvent:
    """One thing that happened to gradients.

    ``micro_step`` counts the backward calls seen so far (a backward event of
    the 3rd backward has micro_step 3; a zero_grad right after it also has 3).
    ``norm`` is the L2 norm of ``.grad`` after the event (None when there is no
    grad). ``synced`` is, under DDP, whether that backward all-reduced (False
    inside ``no_sync()``); None without DDP. An "allreduce" event is one DDP
    bucket; ``bucket`` names its parameters and ``nbytes`` is its buffer size.
    """

    micro_step: int
    kind: GradEventKind
    param: str | None
    action: GradAction | None
    norm: float | None
    nbytes: int
    synced: bool | None = None
    bucket: tuple[str, ...] = ()


@dataclass(eq=False)
class GradTraceRecord:
    """Per-parameter gradient events over steps, as `trace_grads` yields it: the
    parameter names in model order and the events, appended while the block runs."""

    params: tuple[str, ...]
    events: list[GradEvent] = field(default_factory=list)

    def norms(self, name: str) -> list[float]:
        """Grad norm of ``name`` after each backward that reached it, in order."""
        if name not in self.params:
            raise ValueError(f"unknown parameter {name!r}; "
                             f"traced parameters are {list(self.params)}")
        return [e.norm for e in self.events
                if e.kind == "backward" and e.param == name and e.norm is not None]

    def plot(self, ax: Axes | None = None, title: str | None = None,
             params: Sequence[str] | None = None) -> Figure:
        """Grad norm per parameter across micro-steps, with zero_grad, step and
        all-reduce marked. ``params`` picks which parameters to draw."""
        # The one lazy import of the view: records stay importable without matplotlib.
        from .plots import plot_gradtrace

        return plot_gradtrace(self, ax=ax, title=title, params=params)
