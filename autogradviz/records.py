"""Plain records at the bottom of the package: dataclasses and vocabularies, no torch.

Recorders (graph walk, module attribution, live capture, memory tracking) fill these
records; views (DOT/SVG/HTML, matplotlib) read them. Nothing here imports torch or any
other package module, so a record can be built, pickled and drawn without torch loaded.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

# --- units -------------------------------------------------------------------

_BINARY_UNITS: tuple[tuple[str, int], ...] = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def format_bytes(n: int) -> str:
    """Bytes in binary units, one decimal: ``format_bytes(1536) == "1.5 KiB"``.

    The one byte formatter of the package, so captions, tables and plots agree.
    Below one KiB the exact count is shown (``"64 B"``).
    """
    if isinstance(n, bool) or not isinstance(n, (int, float)):
        raise TypeError(f"format_bytes expects a byte count (int), got {type(n).__name__}")
    for unit, size in _BINARY_UNITS:
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


# --- graph -------------------------------------------------------------------
# Records of an autograd graph (filled by graph.py, modules.py, live.py, stepper.py)
# and drawn by render.py / strips.py. Edge direction: ``(src, dst)`` means ``dst`` is
# in ``src.next_functions``, the direction gradients flow during ``backward()``.

#: What a drawn record stands for. Autograd Nodes are all "function"; the rest are tensors:
#: "param" a leaf named by `params`, "leaf" an unnamed leaf that requires grad, "saved" a
#: tensor a Node saved for backward, "output" a root passed to `trace()`.
Kind = Literal["function", "param", "leaf", "saved", "output"]
KINDS: tuple[Kind, ...] = get_args(Kind)
#: A saved tensor's state when traced: its buffer is there, backward freed it, or a
#: saved-tensor hook that is not the package's own (checkpoint, save_on_cpu) holds it.
SavedState = Literal["alive", "freed", "packed"]
SAVED_STATES: tuple[SavedState, ...] = get_args(SavedState)
#: Drawing direction: "backward" puts the loss on top (gradient flow, the default);
#: "forward" puts the inputs on top with arrows in forward order, as torchviz does.
Direction = Literal["backward", "forward"]
DIRECTIONS: tuple[Direction, ...] = get_args(Direction)


@dataclass(frozen=True)
class GraphNode:
    """One drawn thing: an autograd Node (kind "function") or a tensor."""

    id: int
    name: str
    kind: Kind
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    nbytes: int | None = None
    saved_state: SavedState | None = None  # saved tensors only
    module: str | None = None  # path of the nn.Module that produced it ("" = root)
    # Position in the real backward execution order (set by backward_order()).
    step: int | None = None
    # Parameters only: every name of the tensor (several when weights are tied).
    param_names: tuple[str, ...] = ()
    # Functions only: non-tensor saved attributes (dim, stride, ...) as (name, repr).
    attrs: tuple[tuple[str, str], ...] = ()
    # Ordered (key, value) strings shown in tooltips; never addresses.
    details: tuple[tuple[str, str], ...] = ()
    # Functions only: autograd's creation number (``Node._sequence_nr()``). `roll_up`
    # orders the steps of a loop by it; it differs between runs, so it is never drawn
    # and two records that differ only in it are equal.
    seq: int | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"GraphNode.kind must be one of {KINDS}, got {self.kind!r}")
        if self.saved_state is not None and self.saved_state not in SAVED_STATES:
            raise ValueError(
                f"GraphNode.saved_state must be one of {SAVED_STATES} or None, "
                f"got {self.saved_state!r}"
            )

    @property
    def alive(self) -> bool | None:
        """Saved tensors: True while the buffer exists, False once freed, None if unknown."""
        return {"alive": True, "freed": False}.get(self.saved_state or "")


@dataclass
class Graph:
    """An autograd graph as records. Draw with `.svg()`, `.to_dot()`, `.html()`, `.save()`.

    Drawing choices (module clusters, depth, roll-up, direction, attributes) are
    arguments of those calls, so one `Graph` can be drawn several ways.
    """

    nodes: list[GraphNode]
    edges: list[tuple[int, int]]  # function -> next function (gradient direction)
    tensor_edges: list[tuple[int, int]] = field(default_factory=list)
    module_types: dict[str, str] = field(default_factory=dict)  # module path -> class name
    # Set by `roll_up`: representative module path -> (label, count).
    rolled: dict[str, tuple[str, int]] = field(default_factory=dict)
    title: str | None = None
    saved_bytes: int = 0  # total bytes of distinct saved storages that are still alive
    # Set by `roll_up`: autograd Nodes in the graph before repeated blocks were merged.
    traced_functions: int | None = None
    # Set by `roll_up` when it folds the steps of a loop: the edges (pairs of `edges`)
    # that go from one step into the step before it, e.g. the hidden state.
    carried: list[tuple[int, int]] = field(default_factory=list)

    @property
    def function_nodes(self) -> list[GraphNode]:
        return [n for n in self.nodes if n.kind == "function"]

    @property
    def num_functions(self) -> int:
        return sum(1 for n in self.nodes if n.kind == "function")

    def names(self) -> list[str]:
        return [n.name for n in self.nodes if n.kind == "function"]

    def caption(self) -> str:
        saved = format_bytes(self.saved_bytes)
        if self.traced_functions is not None and self.traced_functions != self.num_functions:
            return (f"{self.num_functions} of {self.traced_functions} autograd Nodes drawn "
                    f"(repeated blocks rolled up) · saved tensors {saved} "
                    f"(all {self.traced_functions} Nodes)")
        return f"{self.num_functions} autograd Nodes · saved tensors {saved}"

    # Views: each method reaches render.py through `_views()`, the one lazy import of
    # this record (render.py imports records.py, so a module-level import would be a cycle).
    def to_dot(self, **options: Any) -> str:
        """DOT text; options as `autogradviz.render.to_dot` (group_modules, depth, ...)."""
        return _views().to_dot(self, **options)

    def svg(self, **options: Any) -> str:
        """SVG text through Graphviz `dot`; options as `to_dot` plus `timeout`."""
        return _views().render_svg(self, **options)

    def png(self, **options: Any) -> bytes:
        return _views().render_png(self, **options)

    def html(self, **options: Any) -> str:
        """A self-contained page (inline SVG, pan/zoom, tooltips)."""
        return _views().render_html(self, **options)

    def save(self, path: Any, **options: Any) -> None:
        """Write .dot, .svg, .png or .html, chosen by the suffix of `path`."""
        _views().save(self, path, **options)

    def _repr_svg_(self) -> str:
        return self.svg()

    def __repr__(self) -> str:
        return f"Graph({self.caption()}, {len(self.nodes)} drawn records)"


def _views() -> Any:
    """The graph views (lazy: render.py imports this module)."""
    from . import render

    return render


def _strips() -> Any:
    """The frame strips and animation (lazy: strips.py imports this module)."""
    from . import strips

    return strips


@dataclass(frozen=True)
class Step:
    """One Node run by the engine: `index` counts from 1 in execution order."""

    index: int
    node_id: int  # position in `BackwardOrder.graph.nodes`
    name: str


@dataclass
class BackwardOrder:
    """Execution order of one backward pass, plus the graph numbered by it."""

    steps: list[Step]
    graph: Graph  # function nodes carry .step (None: not run, e.g. outside `inputs=`)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.steps]

    def __len__(self) -> int:
        return len(self.steps)

    def strip(self, max_frames: int = 6, *, per_row: int = 2, **options: Any) -> Any:
        """Snapshots of the backward pass in a grid, `per_row` to a row (one SVG)."""
        return _strips().backward_strip(self, max_frames, per_row=per_row, **options)

    def animation(self, seconds_per_step: float = 0.6, **options: Any) -> Any:
        """SVG whose CSS keyframes light up Node k at time k, looping. No JavaScript."""
        return _strips().backward_animation(self, seconds_per_step, **options)

    def _repr_svg_(self) -> str:
        return self.graph.svg()


@dataclass
class LiveGraph:
    """What `live()` saw: snapshots in order, and the final graph."""

    every: int
    frames: list[Graph] = field(default_factory=list)
    graph: Graph | None = None
    ops: int = 0  # torch calls that produced a tensor with a new grad_fn
    visited: int = 0  # autograd Nodes read while recording (each one once)

    def strip(self, max_frames: int = 6, *, per_row: int = 2, **options: Any) -> Any:
        """Evenly spaced frames, the last one included, in a grid (one SVG)."""
        return _strips().live_strip(self, max_frames, per_row=per_row, **options)

    def _repr_svg_(self) -> str:
        if self.graph is None:
            raise ValueError("live() has not finished; display it after the with-block")
        return self.graph.svg()


@dataclass
class ModuleRecord:
    """Node -> module path ("" is the root module), and path -> class name.

    Holds the autograd Nodes themselves (not their ids) so the mapping cannot alias
    a freed Node; drop the record to release them. Keys are in the order the
    modules claimed them, which lets `live()` read only the new claims.
    """

    owner: dict[Any, str] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.owner)


# --- module graph records ----------------------------------------------------
# One record per nn.Module CALL (filled by module_graph.py, drawn by module_view.py):
# the architecture view, where the autograd records above are the mechanics view.
# Endpoints of a `FlowEdge` are keys: "input:k", "call:k", "op:k", "output:k".

#: How the consumer's tensor relates to what the producer returned: the very tensor
#: ("same"), a view of its storage ("view"), or a new tensor computed from it by
#: functional code between the two modules ("ops").
FlowKind = Literal["same", "view", "ops"]
FLOW_KINDS: tuple[FlowKind, ...] = get_args(FlowKind)


@dataclass(frozen=True)
class TensorMeta:
    """One tensor seen at a call boundary: where it sat, its shape and its dtype."""

    path: str  # pytree key path inside args/kwargs or the output: "args[0]", "[1]", "['x']"
    shape: tuple[int, ...]
    dtype: str  # "float32", "int64", ...


@dataclass(frozen=True)
class ModuleCall:
    """One call of one module's forward, in the order the calls started."""

    index: int  # position in `ModuleGraph.calls`; call 0 is the model itself
    order: int  # position among calls and ops together (sibling order for the view)
    name: str  # qualified name from `named_modules()`, "" for the model
    type: str  # class name
    parent: int | None  # index of the call whose forward made this call
    depth: int  # dots in the name plus one; 0 for the model
    inputs: tuple[TensorMeta, ...]
    outputs: tuple[TensorMeta, ...]
    num_params: int  # parameters of the module and its children, each counted once
    # Other modules holding one of this module's parameters (weight tying).
    tied_with: tuple[str, ...] = ()


@dataclass(frozen=True)
class OpCall:
    """A functional op (``x + y``, ``torch.cat``) that joined tensors from two or more
    producers inside a module's forward: residual adds and concatenations. Ops fed by
    one producer are not recorded; they only mark the edge as kind "ops"."""

    index: int
    order: int
    name: str  # "add", "cat", "matmul", ...
    parent: int  # index of the call whose forward ran it
    inputs: tuple[TensorMeta, ...]
    outputs: tuple[TensorMeta, ...]


@dataclass(frozen=True)
class FlowEdge:
    """Data flow: a tensor from `src` is an input of `dst` (one edge per input tensor)."""

    src: str
    dst: str
    kind: FlowKind
    via: tuple[str, ...] = ()  # functional ops on the way (first few), for kind "ops"/"view"

    def __post_init__(self) -> None:
        if self.kind not in FLOW_KINDS:
            raise ValueError(f"FlowEdge.kind must be one of {FLOW_KINDS}, got {self.kind!r}")


@dataclass
class ModuleGraph:
    """Module calls of one forward pass, as `trace_modules` returns it.

    Draw with `.svg()` or `.to_dot()`; roll-up and direction are arguments of those
    calls, so one record can be drawn several ways.
    """

    calls: list[ModuleCall]
    ops: list[OpCall]
    edges: list[FlowEdge]
    inputs: list[TensorMeta]
    outputs: list[TensorMeta]
    depth: int | None = None  # the depth limit the calls were recorded with

    def call_edges(self) -> list[tuple[int, int]]:
        """(producer call, consumer call) index pairs, one per input tensor, in order."""
        return [(int(e.src[5:]), int(e.dst[5:])) for e in self.edges
                if e.src.startswith("call:") and e.dst.startswith("call:")]

    def caption(self) -> str:
        params = self.calls[0].num_params if self.calls else 0
        return (f"{len(self.calls)} module calls · {len(self.ops)} joining ops · "
                f"{params:,} parameters")

    # Views reach module_view.py through `_module_view()`, this record's one lazy import
    # (module_view.py imports records.py, so a module-level import would be a cycle).
    def to_dot(self, rollup: bool = True, direction: str = "TB") -> str:
        """DOT text, one box per call; `rollup` merges consecutive calls of one module."""
        return _module_view().to_dot(self, rollup=rollup, direction=direction)

    def svg(self, rollup: bool = True, direction: str = "TB", timeout: float = 30.0) -> str:
        """SVG text through Graphviz `dot` (cleaned, deterministic for one dot version)."""
        return _module_view().render_svg(self, rollup=rollup, direction=direction,
                                         timeout=timeout)

    def _repr_svg_(self) -> str:
        return self.svg()

    def __repr__(self) -> str:
        return f"ModuleGraph({self.caption()})"


def _module_view() -> Any:
    """The module-graph view (lazy: module_view.py imports this module)."""
    from . import module_view

    return module_view


# --- memory and gradient records ---------------------------------------------
# Filled by `autogradviz.memory` and `autogradviz.gradtrace` while their with-blocks run,
# drawn by `autogradviz.plots`. Plain Python values only, so a finished record pickles and
# draws in a process without torch.

import dataclasses as _dc
from collections.abc import Callable as _Callable
from os import PathLike as _PathLike
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any
from typing import Literal as _Literal
from typing import get_args as _get_args

if _TYPE_CHECKING:
    from collections.abc import Sequence as _Sequence

    from matplotlib.axes import Axes as _Axes
    from matplotlib.figure import Figure as _Figure

#: Where a live byte belongs. The order is the precedence (highest first: a weight saved for
#: backward stays "parameter") and the stacking order of the memory plots.
Category = _Literal["parameter", "gradient", "optimizer_state", "input", "activation", "temporary"]
CATEGORIES: tuple[Category, ...] = _get_args(Category)
#: What the training step was doing when a memory sample was taken.
Phase = _Literal["forward", "backward", "optimizer", "zero_grad", "other"]
PHASES: tuple[Phase, ...] = _get_args(Phase)
#: What happened to gradients in one `GradEvent`.
GradEventKind = _Literal["backward", "zero_grad", "step", "allreduce"]
GRAD_EVENT_KINDS: tuple[GradEventKind, ...] = _get_args(GradEventKind)
#: What a backward or zero_grad did to one parameter's ``.grad``.
GradAction = _Literal["created", "accumulated", "zeroed", "set_to_none"]
GRAD_ACTIONS: tuple[GradAction, ...] = _get_args(GradAction)


def byte_unit(n: float) -> tuple[str, int]:
    """The unit `format_bytes` writes ``n`` in, and its size: ``byte_unit(3 * 2**20) ==
    ("MiB", 2**20)``; ``("B", 1)`` below one KiB. For axes that scale many values at once."""
    for unit, size in _BINARY_UNITS:
        if abs(n) >= size:
            return unit, size
    return "B", 1


@_dc.dataclass(frozen=True)
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


@_dc.dataclass(eq=False)
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
    rows: list[list[int]] = _dc.field(default_factory=list, repr=False)
    #: (phase, op, optimizer steps, (cuda allocated, cuda reserved) or None) per sample.
    info: list[tuple[Phase, str, int, tuple[int, int] | None]] = _dc.field(
        default_factory=list, repr=False)
    #: Index of the first sample with the largest total; -1 before the first sample.
    peak_index: int = -1
    #: Live bytes per category now (while recording) or at the end of the block.
    current: list[int] = _dc.field(default_factory=lambda: [0] * len(CATEGORIES), repr=False)
    #: The CUDA allocator snapshot taken at the end (``track_memory(cuda_history=True)``).
    cuda_snapshot: _Any = _dc.field(default=None, repr=False)
    #: While recording with ``cuda_history=True``: takes a snapshot now. None otherwise.
    take_cuda_snapshot: _Callable[[], _Any] | None = _dc.field(
        default=None, repr=False, compare=False)
    cuda_history: bool = False

    def _by_category(self, row: _Sequence[int]) -> dict[Category, int]:
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

    def plot(self, ax: _Axes | None = None, title: str | None = None) -> _Figure:
        """Stacked-area timeline by category, phases as bands, the peak annotated."""
        # The one lazy import of the view: records stay importable without matplotlib.
        from .plots import plot_memory

        return plot_memory(self, ax=ax, title=title)

    def save_snapshot(self, path: str | _PathLike[str]) -> str:
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


@_dc.dataclass(frozen=True)
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


@_dc.dataclass(eq=False)
class GradTraceRecord:
    """Per-parameter gradient events over steps, as `trace_grads` yields it: the
    parameter names in model order and the events, appended while the block runs."""

    params: tuple[str, ...]
    events: list[GradEvent] = _dc.field(default_factory=list)

    def norms(self, name: str) -> list[float]:
        """Grad norm of ``name`` after each backward that reached it, in order."""
        if name not in self.params:
            raise ValueError(f"unknown parameter {name!r}; "
                             f"traced parameters are {list(self.params)}")
        return [e.norm for e in self.events
                if e.kind == "backward" and e.param == name and e.norm is not None]

    def plot(self, ax: _Axes | None = None, title: str | None = None,
             params: _Sequence[str] | None = None) -> _Figure:
        """Grad norm per parameter across micro-steps, with zero_grad, step and
        all-reduce marked. ``params`` picks which parameters to draw."""
        # The one lazy import of the view: records stay importable without matplotlib.
        from .plots import plot_gradtrace

        return plot_gradtrace(self, ax=ax, title=title, params=params)


# --- storage records ---------------------------------------------------------
# Filled by `autogradviz.storage` (`storage_map`), drawn by `autogradviz.storage_view`:
# one flat buffer of elements, and each tensor as a rule for reading it (shape, stride,
# offset). The element values are copied out as plain Python numbers, so the record
# pickles and draws without torch.

#: Largest storage (and largest tensor) `storage_map` draws, in elements: past this the
#: cells are too small to read.
MAX_STORAGE_ELEMENTS = 256


@dataclass(frozen=True)
class StorageBlock:
    """One storage: every element in storage order, whether a tensor reads it or not."""

    index: int  # position in `StorageMap.storages`; drawn as "storage A", "B", ...
    dtype: str  # "float32", ...: the dtype of the tensors that read it
    itemsize: int  # bytes per element
    device: str  # "cpu", "cuda:0"
    values: tuple[Any, ...]  # int, float, bool or complex per element

    @property
    def label(self) -> str:
        """Its drawn name: "A" for the first storage, "B" for the second, ... "S27" past "Z"."""
        return chr(ord("A") + self.index) if self.index < 26 else f"S{self.index + 1}"

    @property
    def numel(self) -> int:
        return len(self.values)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    def caption(self) -> str:
        return (f"storage {self.label} · {self.numel} × {self.dtype} · "
                f"{format_bytes(self.nbytes)}")


@dataclass(frozen=True)
class TensorLayout:
    """One tensor as a way of reading a storage.

    ``indices`` holds, for every element in row-major order of ``shape``, the storage
    element it reads: ``storage_offset + sum(i_k * stride_k)``.
    """

    name: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    dtype: str
    contiguous: bool  # `Tensor.is_contiguous()`
    storage: int  # position of its storage in `StorageMap.storages`
    indices: tuple[int, ...]

    @property
    def numel(self) -> int:
        return len(self.indices)

    @property
    def cells_read(self) -> int:
        """Distinct storage elements read: fewer than `numel` when a stride is 0."""
        return len(set(self.indices))


@dataclass
class StorageMap:
    """Tensors grouped by the storage they read, as `storage_map` returns it.

    Draw with `.svg()`; in Jupyter the record displays as that drawing.
    """

    storages: list[StorageBlock]
    tensors: list[TensorLayout]

    def tensor(self, name: str) -> TensorLayout:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(f"no tensor named {name!r}; names are {[t.name for t in self.tensors]}")

    def storage_of(self, name: str) -> StorageBlock:
        return self.storages[self.tensor(name).storage]

    def shares(self, a: str, b: str) -> bool:
        """Whether tensors `a` and `b` read the same storage (a write to one can show in
        the other)."""
        return self.tensor(a).storage == self.tensor(b).storage

    def caption(self) -> str:
        n, s = len(self.tensors), len(self.storages)
        return (f"{n} tensor{'s' * (n != 1)} over {s} storage{'s' * (s != 1)}")

    # The view is reached through `_storage_view()`, this record's one lazy import, so
    # the record never loads drawing code it does not use.
    def svg(self, **options: Any) -> str:
        """SVG text drawn by the package itself (no Graphviz); options as
        `autogradviz.storage_view.render_storage_svg` (`max_width`)."""
        return _storage_view().render_storage_svg(self, **options)

    def _repr_svg_(self) -> str:
        return self.svg()

    def __repr__(self) -> str:
        return f"StorageMap({self.caption()})"


def _storage_view() -> Any:
    """The storage/stride view (lazy, as the other views of records)."""
    from . import storage_view

    return storage_view


# --- dispatch trace records --------------------------------------------------
# Filled by `autogradviz.dispatch` (`trace_dispatch`), drawn by `autogradviz.dispatch_view`:
# the Python-level calls a TorchFunctionMode saw, and the ATen ops a TorchDispatchMode saw
# below autograd, each tied to the call it ran under. Strings and tuples only.

#: When an ATen op ran: "backward" while the autograd engine runs a graph task, or under a
#: call that starts one (`Tensor.backward`, `torch.autograd.grad`: the seed gradient is made
#: there); "forward" for everything else, optimizer steps included.
DispatchPhase = Literal["forward", "backward"]
DISPATCH_PHASES: tuple[DispatchPhase, ...] = get_args(DispatchPhase)


@dataclass(frozen=True)
class PythonCall:
    """One call seen by ``__torch_function__``: ``torch.nn.functional.linear``,
    ``Tensor.sum``, ``Tensor.backward``; reads of a tensor attribute are spelled
    ``Tensor.shape``. Calls made inside another traced call are not seen (torch hides
    them from the mode), so every call here was made by the traced code itself."""

    index: int  # position in `DispatchTrace.calls`
    name: str
    phase: DispatchPhase


@dataclass(frozen=True)
class DispatchEvent:
    """One ATen op seen by ``__torch_dispatch__``, in the order the ops ran.

    ``op`` is the overload, ``"aten.addmm.default"``. ``inputs``/``outputs`` are the
    tensors among the arguments and results (pytree order); ``input_keys`` holds, per
    input tensor, the names in ``torch._C._dispatch_keys(t)``. ``node`` names the autograd
    Node the engine was running (``"AddmmBackward0"``, ``"AccumulateGrad"``), None in
    the forward.
    """

    index: int  # position in `DispatchTrace.events`
    phase: DispatchPhase
    op: str
    call: str | None  # name of the Python call it ran under; None if outside any
    call_index: int | None  # that call's position in `DispatchTrace.calls`
    inputs: tuple[TensorMeta, ...]
    outputs: tuple[TensorMeta, ...]
    input_keys: tuple[tuple[str, ...], ...] = ()
    node: str | None = None

    def __post_init__(self) -> None:
        if self.phase not in DISPATCH_PHASES:
            raise ValueError(f"DispatchEvent.phase must be one of {DISPATCH_PHASES}, "
                             f"got {self.phase!r}")
        if len(self.input_keys) not in (0, len(self.inputs)):
            raise ValueError("DispatchEvent.input_keys needs one key tuple per input tensor")


@dataclass(eq=False)
class DispatchTrace:
    """What `trace_dispatch` saw, appended while its with-block runs, final after it.

    Print it (or call `.table()`) for a text table; in Jupyter it shows as an HTML table.
    """

    events: list[DispatchEvent] = field(default_factory=list)
    calls: list[PythonCall] = field(default_factory=list)
    max_events: int | None = None  # the recording limit; None: no limit
    dropped: int = 0  # ATen ops past `max_events`, counted but not recorded

    def __len__(self) -> int:
        return len(self.events)

    def ops(self, phase: DispatchPhase | None = None) -> list[str]:
        """Op overload names in order, of one phase or (None) of both."""
        if phase is not None and phase not in DISPATCH_PHASES:
            raise ValueError(f"phase must be one of {DISPATCH_PHASES} or None, got {phase!r}")
        return [e.op for e in self.events if phase is None or e.phase == phase]

    @property
    def forward(self) -> list[DispatchEvent]:
        return [e for e in self.events if e.phase == "forward"]

    @property
    def backward(self) -> list[DispatchEvent]:
        return [e for e in self.events if e.phase == "backward"]

    def under(self, call: str) -> list[DispatchEvent]:
        """The ops that ran under every call named `call` (e.g. "Tensor.backward")."""
        return [e for e in self.events if e.call == call]

    def caption(self) -> str:
        fwd = sum(1 for e in self.events if e.phase == "forward")
        text = (f"{len(self.events)} ATen ops ({fwd} forward, {len(self.events) - fwd} "
                f"backward) under "
                f"{len({e.call_index for e in self.events} - {None})} Python calls")
        if self.dropped:
            text += f" · {self.dropped} more not recorded (max_events={self.max_events})"
        return text

    # The view is reached through `_dispatch_view()`, this record's one lazy import.
    def table(self, max_rows: int | None = None, compact: bool = False) -> str:
        """Plain-text table: #, phase, Python call, ATen op, input and output shapes;
        ``compact=True`` for the narrow form (phase, call, op, shapes in → out)."""
        return _dispatch_view().text_table(self, max_rows=max_rows, compact=compact)

    def html(self, max_rows: int | None = None, compact: bool = False) -> str:
        """The same table as HTML (what Jupyter shows); ``compact`` as in `table`."""
        return _dispatch_view().html_table(self, max_rows=max_rows, compact=compact)

    def _repr_html_(self) -> str:
        return self.html(max_rows=300)  # a training loop's trace would swamp the notebook

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return f"DispatchTrace({self.caption()})"


def _dispatch_view() -> Any:
    """The dispatch-trace tables (lazy, as the other views of records)."""
    from . import dispatch_view

    return dispatch_view


# --- memory-plan records -----------------------------------------------------
# Filled by `autogradviz.planner` (arithmetic only, no torch): the bytes one GPU holds for
# a training layout. Decimal units (1 GB = 1e9 B), as the ZeRO and Megatron papers use.

#: What `plan_memory` recomputes in backward instead of storing (Korthikanti et al. 2022):
#: "none" stores every activation; "selective" drops the attention core (the s x s scores,
#: softmax and its dropout), which is also what a FlashAttention kernel never stores; "full"
#: keeps only each layer's input and reruns the layer.
Recompute = _Literal["none", "selective", "full"]
RECOMPUTE_POLICIES: tuple[Recompute, ...] = _get_args(Recompute)
#: Pipeline schedules `plan_memory` knows how many microbatches a stage holds for.
PlanSchedule = _Literal["gpipe", "1f1b"]
PLAN_SCHEDULES: tuple[PlanSchedule, ...] = _get_args(PlanSchedule)


@_dc.dataclass(frozen=True)
class ModelStateBytes:
    """Model states one GPU holds, in bytes: weights, gradients, optimizer states
    (for mixed-precision Adam: fp32 master weights, momentum and variance)."""

    params: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer

    def __str__(self) -> str:
        return (f"params {self.params / 1e9:.2f} GB + grads {self.grads / 1e9:.2f} GB"
                f" + optimizer {self.optimizer / 1e9:.2f} GB = {self.total / 1e9:.2f} GB")


@_dc.dataclass(frozen=True)
class MemoryPlan:
    """Bytes per GPU of one training layout, as `plan_memory` returns it.

    ``states`` are the model states after tensor/pipeline sharding and ZeRO;
    ``activations`` are the transformer layers' saved activations on the busiest
    pipeline stage (the first), ``activation_per_layer`` times ``layers_per_stage``
    times ``in_flight`` microbatches, plus ``recompute_bytes``: under full recompute,
    the one layer whose activations backward rebuilds at a time. Embeddings, logits,
    communication buffers,
    the CUDA context and allocator fragmentation are not counted: ``margin`` keeps
    that share of the device free when judging ``fits``.
    """

    dp: int
    tp: int
    pp: int
    cp: int
    zero: int
    params: float
    layers: int
    hidden: int
    heads: int
    seq_len: int
    micro_batch: int
    microbatches: int
    schedule: PlanSchedule
    recompute: Recompute
    sequence_parallel: bool
    states: ModelStateBytes
    activation_per_layer: float
    layers_per_stage: int
    in_flight: int
    gpu_bytes: float
    margin: float
    recompute_bytes: float = 0.0

    @property
    def world(self) -> int:
        return self.dp * self.cp * self.tp * self.pp

    @property
    def activations(self) -> float:
        stored = self.activation_per_layer * self.layers_per_stage * self.in_flight
        return stored + self.recompute_bytes

    @property
    def total(self) -> float:
        return self.states.total + self.activations

    @property
    def usable_bytes(self) -> float:
        return self.gpu_bytes * (1.0 - self.margin)

    @property
    def fits(self) -> bool:
        """The counted bytes fit in the device less the margin."""
        return self.total <= self.usable_bytes

    @property
    def layout(self) -> str:
        """``"dp32 tp8 pp4 zero1"``: the parallel sizes (cp only when used)."""
        cp = f" cp{self.cp}" if self.cp > 1 else ""
        return f"dp{self.dp}{cp} tp{self.tp} pp{self.pp} zero{self.zero}"

    @property
    def tokens_per_step(self) -> int:
        """Tokens in one optimizer step: every data-parallel replica's microbatches."""
        return self.dp * self.micro_batch * self.microbatches * self.seq_len

    def rows(self) -> list[tuple[str, float]]:
        """(item, GB) rows of the breakdown, total last."""
        s = self.states
        return [("parameters", s.params / 1e9), ("gradients", s.grads / 1e9),
                ("optimizer states", s.optimizer / 1e9),
                ("activations", self.activations / 1e9), ("total", self.total / 1e9)]

    def table(self) -> str:
        """A plain-text breakdown in GB, with the verdict against the device."""
        lines = [f"{self.layout}: {self.world} GPUs, {self.params / 1e9:g}B params, "
                 f"s={self.seq_len}, b={self.micro_batch}, m={self.microbatches}",
                 f"activations: recompute={self.recompute}, sp={self.sequence_parallel}, "
                 f"{self.layers_per_stage} layers x {self.in_flight} microbatches "
                 f"({self.schedule})"]
        lines += [f"  {name:<17}{gb:>9.2f} GB" for name, gb in self.rows()]
        verdict = "fits" if self.fits else "does NOT fit"
        lines.append(f"  {verdict} in {self.gpu_bytes / 1e9:g} GB with a "
                     f"{self.margin:.0%} margin ({self.usable_bytes / 1e9:.1f} GB usable)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


# --- distributed job records -------------------------------------------------
# Filled by `autogradviz.launch` (`torchrun`): what a multi-process job left behind, read
# back from one JSON file per rank. Plain Python values only.


@dataclass
class DistributedRun:
    """One finished `torchrun` job: what each rank passed to `report`, in rank order.

    ``results[r]`` is rank ``r``'s report (``{}`` for a rank that reported nothing, only
    possible with ``check=False``). ``log`` is torchrun's console output, every rank's
    lines prefixed ``[default<r>]:``. ``backend`` is what `init_distributed` chose
    ("gloo", "nccl"), None when no rank called it. ``failed_ranks`` and ``error`` say
    which ranks failed first and with which Python error (empty / None on success).
    """

    results: tuple[dict, ...]
    returncode: int
    elapsed_s: float
    log: str
    nproc: int
    backend: str | None
    failed_ranks: tuple[int, ...] = ()
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def __len__(self) -> int:
        return len(self.results)

    def __getitem__(self, rank: int) -> dict:
        return self.results[rank]

    def __repr__(self) -> str:
        # No timings or paths: a notebook may show this line in a compared output.
        state = "ok" if self.ok else f"returncode={self.returncode}"
        failed = f", failed_ranks={list(self.failed_ranks)}" if self.failed_ranks else ""
        return (f"DistributedRun(nproc={self.nproc}, backend={self.backend!r}, {state}, "
                f"{sum(1 for r in self.results if r)} rank reports{failed})")


# --- pipeline schedule records -----------------------------------------------
# Filled by `autogradviz.pipeline` (`simulate_pipeline`, no torch), drawn by
# `autogradviz.pipeline_view`: every forward and backward pass of every microbatch on every
# pipeline stage, with the times the simulation gave it. Quantities such as the bubble are
# read off these times, never from a closed form.

#: The pipeline schedules `simulate_pipeline` knows (Huang et al. 2019 GPipe; Narayanan et
#: al. 2021 for 1F1B, i.e. PipeDream-Flush, and the interleaved schedule).
PipelineScheduleName = _Literal["gpipe", "1f1b", "interleaved"]
PIPELINE_SCHEDULES: tuple[PipelineScheduleName, ...] = _get_args(PipelineScheduleName)
#: One pipeline operation's kind: "F" forward, "B" backward.
PipelineOpKind = _Literal["F", "B"]


@_dc.dataclass(frozen=True)
class PipelineOp:
    """One forward or backward pass of one microbatch through one model chunk.

    ``stage`` is the device (0 is the first); ``chunk`` the model chunk on it (always 0
    unless the schedule is interleaved); ``virtual_stage`` = ``chunk * stages + stage`` is the
    position of that chunk in the model.
    """

    stage: int
    chunk: int
    virtual_stage: int
    microbatch: int
    kind: PipelineOpKind
    start: float
    end: float


@_dc.dataclass(frozen=True)
class PipelineSchedule:
    """A simulated pipeline timeline, as `simulate_pipeline` returns it.

    ``ops`` are in the order each stage ran them (stage by stage). The bubble is the idle
    share of the stages' time up to the last op's end: ``bubble_fraction`` of total time;
    ``bubble_over_ideal`` is Megatron's definition (idle time over the ideal, bubble-free
    time ``m (t_f + t_b)``).
    """

    stages: int
    microbatches: int
    schedule: PipelineScheduleName
    chunks: int
    t_forward: float
    t_backward: float
    ops: tuple[PipelineOp, ...]

    def ops_on(self, stage: int) -> tuple[PipelineOp, ...]:
        """The ops one stage ran, in its order."""
        return tuple(op for op in self.ops if op.stage == stage)

    @property
    def makespan(self) -> float:
        """Time from the first op's start to the last op's end (one training step)."""
        return max(op.end for op in self.ops) - min(op.start for op in self.ops)

    @property
    def busy_by_stage(self) -> tuple[float, ...]:
        return tuple(sum(op.end - op.start for op in self.ops_on(s)) for s in range(self.stages))

    @property
    def idle_by_stage(self) -> tuple[float, ...]:
        return tuple(self.makespan - busy for busy in self.busy_by_stage)

    @property
    def bubble_fraction(self) -> float:
        """Idle share of all stages' time over the step: sum(idle) / (stages * makespan)."""
        return sum(self.idle_by_stage) / (self.stages * self.makespan)

    @property
    def ideal_time(self) -> float:
        """One stage's compute with no bubble: m (t_f + t_b)."""
        return self.microbatches * (self.t_forward + self.t_backward)

    @property
    def bubble_over_ideal(self) -> float:
        """Megatron's bubble: the mean idle time per stage over the ideal time."""
        return sum(self.idle_by_stage) / self.stages / self.ideal_time

    @property
    def in_flight_by_stage(self) -> tuple[float, ...]:
        """Most microbatches whose activations a stage held at once: forwards run whose
        backward has not finished, in whole-stage units (a chunk counts 1/chunks)."""
        peaks = []
        for s in range(self.stages):
            # A forward holds its activations from its start; a backward frees them at its
            # end. At equal times the free comes first (-1 sorts before +1).
            events = sorted([(op.start, 1) for op in self.ops_on(s) if op.kind == "F"]
                            + [(op.end, -1) for op in self.ops_on(s) if op.kind == "B"])
            held = peak = 0
            for _, delta in events:
                held += delta
                peak = max(peak, held)
            peaks.append(peak / self.chunks)
        return tuple(peaks)

    @property
    def peak_in_flight(self) -> float:
        """The largest of `in_flight_by_stage` (the first stage's under these schedules)."""
        return max(self.in_flight_by_stage)

    def caption(self) -> str:
        v = f", {self.chunks} chunks" if self.chunks > 1 else ""
        return (f"{self.schedule}: p={self.stages}, m={self.microbatches}{v}; "
                f"bubble {self.bubble_fraction:.1%} of time, "
                f"peak in flight {self.peak_in_flight:g}")

    def plot(self, ax: _Axes | None = None, title: str | None = None) -> _Figure:
        """Stage lanes over time, F and B boxes labelled by microbatch, idle time blank."""
        # The one lazy import of the view: records stay importable without matplotlib.
        from .pipeline_view import plot_pipeline

        return plot_pipeline(self, ax=ax, title=title)

    def __repr__(self) -> str:
        return f"PipelineSchedule({self.caption()})"


# --- communication records ---------------------------------------------------
# Filled by `autogradviz.comm` (`record_comm`) inside a rank of a DDP job, drawn by
# `autogradviz.comm_view`. Times are seconds since the recording started (`t0_unix` is
# that moment on the host's clock, so ranks of one host can be aligned). Plain values
# only: a rank sends `trace.to_dict()` through `report`, the notebook rebuilds it.


@dataclass(frozen=True)
class CommCall:
    """One call of the DDP communication hook: one bucket's averaging all-reduce.

    ``bucket`` is DDP's bucket index (the first backward uses DDP's initial buckets, later
    ones the buckets rebuilt in the order gradients became ready). ``start_s`` is when
    the hook launched the all-reduce, ``end_s`` when its future completed (the callback
    ran; on nccl that is when the work was done on the stream the callback watched).
    """

    index: int  # order of the hook calls in the trace
    micro_step: int  # the backward pass it belongs to, from 1
    optimizer_step: int  # optimizer steps finished before that backward
    bucket: int
    numel: int
    nbytes: int
    dtype: str
    params: tuple[str, ...]  # parameter names in the bucket, in DDP's order
    start_s: float
    end_s: float | None


@dataclass(frozen=True)
class NodeSpan:
    """One autograd Node run during a backward pass, from its pre-hook to its hook.
    ``param`` names the parameter of an AccumulateGrad Node; its span includes DDP's hook
    on that Node (copying the gradient into the bucket, launching a complete bucket)."""

    micro_step: int
    name: str
    start_s: float
    end_s: float
    param: str | None = None


@dataclass(frozen=True)
class BackwardPass:
    """One backward pass of the DDP model: ``synced`` is False inside ``no_sync()``.
    ``nodes_end_s`` is when its last Node finished, ``end_s`` when backward returned
    (after DDP waited for the all-reduces and wrote the averaged gradients)."""

    micro_step: int
    synced: bool
    optimizer_step: int
    start_s: float
    nodes_end_s: float
    end_s: float


@dataclass(frozen=True)
class CommOverlap:
    """How one backward pass's all-reduces sat against its Nodes (`CommTrace.overlap`).

    ``overlapped_s``: seconds with an all-reduce in flight while the backward's Nodes
    still ran (communication hidden behind computation); ``exposed_s``: seconds of
    all-reduce after the last Node finished (communication the backward waited for).
    """

    micro_step: int
    overlapped_s: float
    exposed_s: float

    @property
    def overlapped_fraction(self) -> float:
        """The share of all-reduce time hidden behind the Nodes (0 when none ran)."""
        total = self.overlapped_s + self.exposed_s
        return self.overlapped_s / total if total > 0 else 0.0


def _union_length(spans: list[tuple[float, float]]) -> float:
    total, reach = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= reach:
            continue
        total += b - max(a, reach)
        reach = b
    return total


@dataclass(eq=False)
class CommTrace:
    """What `record_comm` saw on one rank: backward passes, their Nodes, and every
    all-reduce the DDP communication hook launched, with sizes and times.

    Plot with `.plot()` (or several ranks with `autogradviz.plot_comm`); send it from a
    rank with ``report({"comm": trace.to_dict()})`` and rebuild it with `from_dict`.
    """

    rank: int
    world_size: int
    backend: str
    params: tuple[str, ...]  # parameter names (``ddp.module.named_parameters()`` order)
    param_bytes: dict[str, int]  # gradient bytes of each parameter that requires grad
    t0_unix: float = 0.0
    calls: list[CommCall] = field(default_factory=list)
    nodes: list[NodeSpan] = field(default_factory=list)
    backwards: list[BackwardPass] = field(default_factory=list)
    steps: list[float] = field(default_factory=list)  # optimizer.step() end times

    # --- reading ------------------------------------------------------------------
    def calls_of(self, micro_step: int) -> list[CommCall]:
        """The all-reduces of one backward pass, in launch order."""
        return [c for c in self.calls if c.micro_step == micro_step]

    def calls_per_step(self) -> dict[int, list[CommCall]]:
        """Optimizer step (0 = before the first step) -> the all-reduces in it."""
        out: dict[int, list[CommCall]] = {}
        for c in self.calls:
            out.setdefault(c.optimizer_step, []).append(c)
        return out

    def overlap(self, micro_step: int) -> CommOverlap:
        """For one backward pass: seconds with an all-reduce in flight while its Nodes
        still ran (``overlapped_s``) and seconds of all-reduce after the last Node
        finished (``exposed_s``), as a `CommOverlap`."""
        bwd = next((b for b in self.backwards if b.micro_step == micro_step), None)
        if bwd is None:
            raise ValueError(f"no backward pass {micro_step}; recorded micro-steps are "
                             f"{[b.micro_step for b in self.backwards]}")
        spans = [(c.start_s, c.end_s if c.end_s is not None else bwd.end_s)
                 for c in self.calls_of(micro_step)]
        inside = [(a, min(b, bwd.nodes_end_s)) for a, b in spans if a < bwd.nodes_end_s]
        after = [(max(a, bwd.nodes_end_s), b) for a, b in spans if b > bwd.nodes_end_s]
        return CommOverlap(micro_step, _union_length(inside), _union_length(after))

    def table(self, times: bool = False) -> str:
        """One line per all-reduce: backward pass, bucket, size, parameters; launch and
        completion in ms with ``times=True`` (not stable from run to run)."""
        head = f"{'bwd':>3} {'step':>4} {'bucket':>6} {'numel':>7} {'bytes':>10}  params"
        lines = [head + ("   launch ms    done ms" if times else "")]
        for c in self.calls:
            names = ", ".join(c.params)
            row = (f"{c.micro_step:>3} {c.optimizer_step:>4} {c.bucket:>6} {c.numel:>7} "
                   f"{format_bytes(c.nbytes):>10}  {names}")
            if times:
                end = f"{c.end_s * 1e3:10.2f}" if c.end_s is not None else f"{'-':>10}"
                row += f"  {c.start_s * 1e3:10.2f} {end}"
            lines.append(row)
        return "\n".join(lines)

    def caption(self) -> str:
        synced = sum(1 for b in self.backwards if b.synced)
        return (f"rank {self.rank}/{self.world_size} ({self.backend}): "
                f"{len(self.backwards)} backward passes ({synced} synced), "
                f"{len(self.calls)} all-reduces, {len(self.steps)} optimizer steps")

    def __repr__(self) -> str:
        return f"CommTrace({self.caption()})"

    # --- transport ------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data (lists and numbers), for `autogradviz.report`."""
        return {
            "rank": self.rank, "world_size": self.world_size, "backend": self.backend,
            "params": list(self.params), "param_bytes": dict(self.param_bytes),
            "t0_unix": self.t0_unix, "steps": list(self.steps),
            "calls": [[c.index, c.micro_step, c.optimizer_step, c.bucket, c.numel, c.nbytes,
                       c.dtype, list(c.params), c.start_s, c.end_s] for c in self.calls],
            "nodes": [[n.micro_step, n.name, n.start_s, n.end_s, n.param] for n in self.nodes],
            "backwards": [[b.micro_step, b.synced, b.optimizer_step, b.start_s,
                           b.nodes_end_s, b.end_s] for b in self.backwards],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CommTrace:
        """The trace back from `to_dict` (after a JSON round trip)."""
        return cls(
            rank=data["rank"], world_size=data["world_size"], backend=data["backend"],
            params=tuple(data["params"]), param_bytes=dict(data["param_bytes"]),
            t0_unix=data["t0_unix"], steps=list(data["steps"]),
            calls=[CommCall(i, m, s, b, n, nb, dt, tuple(ps), a, e)
                   for i, m, s, b, n, nb, dt, ps, a, e in data["calls"]],
            nodes=[NodeSpan(*row) for row in data["nodes"]],
            backwards=[BackwardPass(*row) for row in data["backwards"]],
        )

    # The view is reached through `_comm_view()`, this record's one lazy import.
    def plot(self, micro_steps: Any = None, title: str | None = None) -> Any:
        """Timeline of each backward pass: a lane of Nodes, a lane per bucket's
        all-reduce (launch to completion); see `autogradviz.plot_comm`."""
        return _comm_view().plot_comm([self], micro_steps=micro_steps, title=title)


def _comm_view() -> Any:
    """The communication timeline (lazy, as the other views of records)."""
    from . import comm_view

    return comm_view
