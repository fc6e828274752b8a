"""Records of autograd graphs and module calls: dataclasses and vocabularies, no torch.

Filled by the recorders of this folder (trace.py, modules.py, live.py,
backward_order.py, module_graph.py), drawn by its views (render.py, strips.py,
module_view.py). A record reaches its view through one lazy import.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from ..records import TensorMeta, format_bytes

# --- graph -------------------------------------------------------------------
# Records of an autograd graph (filled by trace.py, modules.py, live.py,
# backward_order.py) and drawn by render.py / strips.py. Edge direction: ``(src, dst)``
# means ``dst`` is in ``src.next_functions``, the direction gradients flow during
# ``backward()``.

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
        """DOT text; options as `autogradviz.graphs.render.to_dot` (group_modules, depth, ...)."""
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
