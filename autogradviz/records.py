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
