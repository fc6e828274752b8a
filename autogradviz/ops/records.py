"""Records of storages, strides and dispatched ops: dataclasses and vocabularies, no torch.

Filled by storage.py and dispatch.py, drawn by storage_view.py and dispatch_view.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from ..records import TensorMeta, format_bytes

# --- storage records ---------------------------------------------------------
# Filled by `storage.py` (`storage_map`), drawn by `storage_view.py`:
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
        `autogradviz.ops.storage_view.render_storage_svg` (`max_width`)."""
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
# Filled by `dispatch.py` (`trace_dispatch`), drawn by `dispatch_view.py`:
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
