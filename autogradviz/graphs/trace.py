"""Record an autograd graph as plain records: the one graph walk of the package.

`trace()` walks ``grad_fn.next_functions`` from the roots, iteratively (an
unrolled RNN is thousands of Nodes deep), and copies what it sees into the
`GraphNode` records of :mod:`autogradviz.graphs.records`. Views (DOT, SVG, HTML in
:mod:`autogradviz.graphs.render`) read only these records and never reach back into torch.

The walk is `GraphWalk`: `trace()` runs it once, `backward_order()` runs it once
and keeps its Node index for the pre-hooks, and `live()` extends one walk as the
forward pass creates Nodes, reading each Node once (frames cost the new Nodes only).

Edge direction: ``(src, dst)`` means ``dst`` is in ``src.next_functions``, i.e.
the direction gradients flow during ``backward()`` (from the loss towards the
leaves). ``Graph.edges`` holds exactly one pair per non-None
``(node, next_function)`` pair, duplicates included (``x * x`` gives two).
Edges that attach drawn tensors (leaves, saved tensors, outputs) live apart in
``Graph.tensor_edges`` so function edges stay countable.

Hooks: hooks on drawn tensors are shown (``tensor._backward_hooks`` and
``_post_accumulate_grad_hooks`` are Python dicts on the tensor). Hooks on a
Node (``node.register_hook`` / ``node.register_prehook``) are NOT shown: torch
(checked on 2.13) keeps them only in the C++ Node's hook lists, wrapped in
C++ hook objects; the Python Node exposes ways to add them and none to read
them back. A trace therefore cannot tell whether someone else hooked a Node;
`backward_order` knows about the pre-hooks because it registers them itself.
"""
from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..ops.storage import held_storage
from .records import Graph, GraphNode, Kind, ModuleRecord, SavedState

__all__ = ["trace", "function_name", "GraphWalk"]

Params = torch.nn.Module | Mapping[str, torch.Tensor] | None

# Drawing options that used to be trace() arguments: where they went.
_MOVED_TO_VIEWS = ("group_modules", "depth", "rollup", "expand")


def function_name(node: Any) -> str:
    """Display name of an autograd Node.

    C++ Nodes outside the generated set carry a namespace ("torch::autograd::
    AccumulateGrad"); custom Functions are named after the user's class ("MyFn"),
    since "MyFnBackward" is torch's wrapper and not what the reader wrote.
    """
    forward_cls = getattr(type(node), "_forward_cls", None)
    if forward_cls is not None:
        return forward_cls.__name__
    name = node.name()
    return name.rsplit("::", 1)[-1]


def as_roots(roots: Any, caller: str = "trace") -> list[torch.Tensor]:
    """`roots` as a non-empty list of tensors that have an autograd graph, or a clear error."""
    if isinstance(roots, torch.Tensor):
        roots = [roots]
    elif isinstance(roots, (str, bytes)) or not isinstance(roots, Iterable):
        raise TypeError(
            f"{caller}() takes a tensor or a sequence of tensors, got {type(roots).__name__}; "
            f"pass the output of your forward pass, e.g. {caller}(loss) or {caller}([out1, out2])"
        )
    roots = list(roots)
    if not roots:
        raise ValueError(
            f"{caller}() got an empty sequence; pass at least one tensor, e.g. {caller}(loss)"
        )
    for i, t in enumerate(roots):
        if not isinstance(t, torch.Tensor):
            raise TypeError(
                f"{caller}() root {i} is a {type(t).__name__}, not a tensor; pass tensors "
                "produced by operations on tensors with requires_grad=True"
            )
        if t.grad_fn is None and not t.requires_grad:
            raise ValueError(
                f"{caller}() root {i} (shape {tuple(t.shape)}) has no grad_fn and does not "
                "require grad, so it has no autograd graph; compute it from a tensor with "
                "requires_grad=True outside torch.no_grad(), or pass a tensor that has a grad_fn"
            )
    return roots


def root_node(t: torch.Tensor) -> Any:
    """The Node that starts backward from `t`."""
    if t.grad_fn is not None:
        return t.grad_fn
    # A leaf that requires grad: its gradient edge is its AccumulateGrad Node.
    return torch.autograd.graph.get_gradient_edge(t).node


# ---------------------------------------------------------------- saved tensors

# Per Node class: sorted names of tensor and non-tensor saved attributes.
_SAVED_ATTRS: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _saved_attrs(node: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    cls = type(node)
    hit = _SAVED_ATTRS.get(cls)
    if hit is None:
        names = dir(node)
        raw = tuple(sorted(a[len("_raw_saved_"):] for a in names if a.startswith("_raw_saved_")))
        other = tuple(sorted(
            a[len("_saved_"):] for a in names
            if a.startswith("_saved_") and a[len("_saved_"):] not in raw
        ))
        hit = _SAVED_ATTRS[cls] = (raw, other)
    return hit


@dataclass(frozen=True)
class _SavedInfo:
    attr: str
    tensor: torch.Tensor | None
    state: SavedState


def _own_packed_tensor(packed: Any) -> torch.Tensor | None:
    """The tensor inside a value packed by the package's own saved-tensor hooks.

    `track_memory` and friends pack every saved tensor into a ticket that holds the
    tensor itself (memory/recorder.py); seeing through it keeps a graph traced inside their
    block identical to one traced outside. Anything else packed (checkpoint's handle,
    save_on_cpu's copy) stays "packed": reading it would mean running user code.
    """
    from ..memory.recorder import own_saved_tensor  # lazy: the memory side's recorder

    return own_saved_tensor(packed)


def _read_saved(node: Any, attr: str) -> list[_SavedInfo]:
    """Read one saved-tensor slot without triggering unpack hooks.

    `_raw_saved_x.data` gives the stored tensor without running unpack hooks
    (checkpoint recomputes on unpack!) and is None once backward freed it; with a
    hook pair it gives the packed value instead.
    """
    try:
        raw = getattr(node, "_raw_saved_" + attr)
    except RuntimeError:
        return [_SavedInfo(attr, None, "freed")]
    items = list(raw) if isinstance(raw, (list, tuple)) else [raw]
    out = []
    for k, item in enumerate(items):
        label = attr if len(items) == 1 else f"{attr}[{k}]"
        if item is None:
            continue
        try:
            data = item.data
        except (RuntimeError, AttributeError):
            data = None
        if getattr(item, "unpack_hook", None) is not None:
            data = _own_packed_tensor(data)
            if data is None:
                out.append(_SavedInfo(label, None, "packed"))
                continue
        if isinstance(data, torch.Tensor):
            out.append(_SavedInfo(label, data, "alive"))
            continue
        # No data: either never saved (an undefined slot, e.g. a grad that was
        # not needed) or freed by backward. Only the freed case raises here;
        # without an unpack hook, unpacking runs no user code.
        try:
            getattr(node, "_saved_" + attr)
        except RuntimeError:
            out.append(_SavedInfo(label, None, "freed"))
    return out


def _fmt_value(v: Any) -> str | None:
    text = repr(v)
    if "0x" in text or " at " in text:  # never put an address in a record
        return None
    return text if len(text) <= 60 else text[:57] + "..."


def _node_attrs(node: Any) -> tuple[tuple[str, str], ...]:
    """Non-tensor saved attributes (dim, stride, ...) as (name, repr) pairs."""
    out = []
    for attr in _saved_attrs(node)[1]:
        try:
            text = _fmt_value(getattr(node, "_saved_" + attr))
        except RuntimeError:  # freed by backward
            text = None
        if text is not None:
            out.append((attr, text))
    return tuple(out)


# ---------------------------------------------------------------- tensors


def _tensor_fields(t: torch.Tensor) -> dict[str, Any]:
    return {
        "shape": tuple(t.shape),
        "dtype": str(t.dtype).replace("torch.", ""),
        "nbytes": t.numel() * t.element_size(),
    }


def _storage_key(t: torch.Tensor) -> tuple[int, int] | None:
    """Key used only to count a storage once (a DTensor's local shard); never displayed."""
    st = held_storage(t)
    try:
        return None if st is None else (st.data_ptr(), st.nbytes())
    except (RuntimeError, NotImplementedError):  # a wrapper's own storage: no data pointer
        return None


def _tensor_details(t: torch.Tensor) -> list[tuple[str, str]]:
    d = [("shape", str(tuple(t.shape))), ("dtype", str(t.dtype).replace("torch.", ""))]
    d.append(("bytes", str(t.numel() * t.element_size())))
    if t.device.type != "cpu":
        d.append(("device", str(t.device)))
    if t._is_view():
        base = t._base
        d.append(("view of", f"base {tuple(base.shape)}" if base is not None else "a base tensor"))
    hooks = getattr(t, "_backward_hooks", None)
    if hooks:
        d.append(("tensor hooks", str(len(hooks))))
    post = getattr(t, "_post_accumulate_grad_hooks", None)
    if post:
        d.append(("post-accumulate hooks", str(len(post))))
    if not t.is_leaf and t.retains_grad:
        d.append(("retains grad", "yes"))
    return d


def param_names(params: Params) -> dict[int, tuple[tuple[str, ...], torch.Tensor]]:
    """id(tensor) -> (its names, tensor). The tensor is kept so the id stays valid."""
    if params is None:
        return {}
    if isinstance(params, torch.nn.Module):
        pairs: Iterable[tuple[str, Any]] = params.named_parameters(remove_duplicate=False)
    elif isinstance(params, Mapping):
        pairs = params.items()
    else:
        raise TypeError(
            f"params must be an nn.Module or a Mapping[str, Tensor], got "
            f"{type(params).__name__}; pass params=model or params=dict(model.named_parameters())"
        )
    out: dict[int, tuple[tuple[str, ...], torch.Tensor]] = {}
    for name, p in pairs:
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"params[{name!r}] is a {type(p).__name__}, not a tensor")
        key = id(p)
        # Weight tying: one tensor, several names; all are kept.
        out[key] = ((*out[key][0], str(name)) if key in out else (str(name),), p)
    return out


# ---------------------------------------------------------------- the walk


class GraphWalk:
    """The one graph walk: reads each autograd Node once and keeps its records.

    `extend(root_nodes)` walks breadth-first from the given Nodes, stopping at Nodes
    already read, and records the new ones in three parts: function records
    (`_function_record`), tensor attachments (`_attach_tensor`: parameters and
    leaves) and saved tensors (`_attach_saved`). `graph()` is a snapshot of all
    records so far. Iterative on purpose: recursion depth would grow with graph depth.
    """

    def __init__(self, params: Params = None, *, saved: bool = True,
                 modules: ModuleRecord | None = None) -> None:
        self.names = param_names(params)
        self.saved = saved
        self.modules = modules
        self.order: list[Any] = []  # autograd Nodes in walk order
        self.index: dict[Any, int] = {}  # Node -> id of its function record
        self.nodes: list[GraphNode] = []
        self.edges: list[tuple[int, int]] = []
        self.tensor_edges: list[tuple[int, int]] = []
        self.saved_bytes = 0
        self._seen_storage: set[tuple[int, int]] = set()
        self._attached: dict[int, list[int]] = {}  # function id -> ids of its tensors
        self._owners_read = 0  # entries of modules.owner already applied

    @property
    def visited(self) -> int:
        """Autograd Nodes read so far (each exactly once)."""
        return len(self.order)

    def extend(self, root_nodes: Sequence[Any],
               root_tensors: Sequence[torch.Tensor] = ()) -> list[Any]:
        """Read the Nodes reachable from `root_nodes` that are not read yet; return them."""
        start = len(self.order)
        self._walk(root_nodes)
        new = self.order[start:]
        ids = [self.index[n] for n in new]
        for n, i in zip(new, ids):
            self._function_record(i, n)
        for k, t in enumerate(root_tensors):
            # Roots are drawn as outputs pointing at the Node that starts backward.
            label = "output" if len(root_tensors) == 1 else f"output {k}"
            nid = self._add_tensor("output", label, t, None)
            self.tensor_edges.append((nid, self.index[root_node(t)]))
        for n, i in zip(new, ids):
            self._attach_tensor(i, n)
            if self.saved:
                self._attach_saved(i, n)
        return new

    def _walk(self, root_nodes: Sequence[Any]) -> None:
        # Function ids are reserved in walk order; records are filled in by `extend`
        # (a placeholder keeps ids equal to positions in `nodes`).
        queue: deque[Any] = deque()
        for n in root_nodes:
            if n not in self.index:
                self._reserve(n)
                queue.append(n)
        while queue:
            n = queue.popleft()
            src = self.index[n]
            for nxt, _ in n.next_functions:
                if nxt is None:
                    continue
                dst = self.index.get(nxt)
                if dst is None:
                    dst = self._reserve(nxt)
                    queue.append(nxt)
                self.edges.append((src, dst))

    def _reserve(self, n: Any) -> int:
        i = len(self.nodes)
        self.index[n] = i
        self.order.append(n)
        self.nodes.append(_PLACEHOLDER)
        return i

    def _param_of(self, n: Any) -> tuple[tuple[str, ...], torch.Tensor] | None:
        var = getattr(n, "variable", None)
        if not isinstance(var, torch.Tensor):
            return None
        hit = self.names.get(id(var))
        return hit if hit is not None and hit[1] is var else None

    def _module_of(self, n: Any) -> str | None:
        if self.modules is None:
            return None
        hit = self._param_of(n)
        if hit is not None:
            # A parameter's AccumulateGrad belongs with the module that owns it.
            return hit[0][0].rpartition(".")[0]
        return self.modules.owner.get(n)

    def _function_record(self, i: int, n: Any) -> None:
        name = function_name(n)
        mod = self._module_of(n)
        attrs = _node_attrs(n) if self.saved else ()
        details: list[tuple[str, str]] = [("node", name)]
        if mod is not None:
            details.append(("module", mod or "(top level)"))
        n_next = sum(1 for f, _ in n.next_functions if f is not None)
        details.append(("next functions", str(n_next)))
        details.extend(attrs)
        try:
            seq = n._sequence_nr()
        except (AttributeError, RuntimeError):  # not a torch Node (a test double)
            seq = None
        self.nodes[i] = GraphNode(i, name, "function", module=mod, attrs=attrs,
                                  details=tuple(details), seq=seq)

    def _add_tensor(self, kind: Kind, name: str, t: torch.Tensor | None, module: str | None,
                    extra: Sequence[tuple[str, str]] = (), state: SavedState | None = None,
                    names: tuple[str, ...] = ()) -> int:
        nid = len(self.nodes)
        fields: dict[str, Any] = _tensor_fields(t) if t is not None else {}
        details = [("tensor", name), *(_tensor_details(t) if t is not None else []), *extra]
        if module:
            details.append(("module", module))
        self.nodes.append(GraphNode(nid, name, kind, module=module, details=tuple(details),
                                    saved_state=state, param_names=names, **fields))
        return nid

    def _attach_tensor(self, i: int, n: Any) -> None:
        """The leaf tensor of an AccumulateGrad Node: a named parameter or a plain leaf."""
        var = getattr(n, "variable", None)
        if not isinstance(var, torch.Tensor):
            return
        hit = self._param_of(n)
        mod = self.nodes[i].module
        if hit is not None:
            nid = self._add_tensor("param", " = ".join(hit[0]), var, mod, names=hit[0])
        else:
            nid = self._add_tensor("leaf", "leaf", var, mod)
        self.tensor_edges.append((i, nid))
        self._attached.setdefault(i, []).append(nid)

    def _attach_saved(self, i: int, n: Any) -> None:
        """The tensors Node `n` saved for backward, each storage counted once in bytes."""
        fn = self.nodes[i]
        for attr in _saved_attrs(n)[0]:
            for info in _read_saved(n, attr):
                t = info.tensor
                label = info.attr
                if t is not None:
                    hit = self.names.get(id(t))
                    if hit is not None and hit[1] is t:
                        label = f"{info.attr} ({' = '.join(hit[0])})"
                    key = _storage_key(t)
                    if key is not None and key not in self._seen_storage:
                        self._seen_storage.add(key)
                        self.saved_bytes += key[1]
                extra = [("saved by", fn.name), ("state", info.state)]
                nid = self._add_tensor("saved", label, t, fn.module, extra, state=info.state)
                self.tensor_edges.append((nid, i))
                self._attached.setdefault(i, []).append(nid)

    def apply_new_owners(self) -> None:
        """Give already-read Nodes the modules that claimed them since the last call.

        `record_modules` claims a Node when its module's forward returns, after the
        Node was created (and, in `live()`, already read); claims are read in order,
        each once.
        """
        if self.modules is None:
            return
        owner = self.modules.owner
        if len(owner) == self._owners_read:
            return
        items = list(owner.items())[self._owners_read:]
        self._owners_read = len(owner)
        for n, path in items:
            i = self.index.get(n)
            if i is None or self.nodes[i].module is not None:
                continue
            self.nodes[i] = _with_module(self.nodes[i], path)
            for t in self._attached.get(i, ()):
                if self.nodes[t].kind != "param":
                    self.nodes[t] = _with_module(self.nodes[t], path)

    def graph(self, title: str | None = None) -> Graph:
        """A snapshot of every record so far (later `extend` calls do not change it)."""
        types = dict(self.modules.types) if self.modules is not None else {}
        return Graph(nodes=list(self.nodes), edges=list(self.edges),
                     tensor_edges=list(self.tensor_edges), module_types=types,
                     title=title, saved_bytes=self.saved_bytes)


_PLACEHOLDER = GraphNode(-1, "", "function")


def _with_module(n: GraphNode, path: str) -> GraphNode:
    return dataclasses.replace(n, module=path,
                               details=n.details + (("module", path or "(top level)"),))


def trace(
    roots: torch.Tensor | Sequence[torch.Tensor],
    params: Params = None,
    *,
    saved: bool = True,
    modules: ModuleRecord | None = None,
    **moved: Any,
) -> Graph:
    """Record the autograd graph behind `roots`.

    Args:
        roots: a tensor or a sequence of tensors (e.g. the loss).
        params: an nn.Module or a name -> tensor mapping, used to name leaves.
        saved: also record the tensors each Node saved for backward, and its other
            saved attributes (dim, stride, ...).
        modules: the `ModuleRecord` from ``with record_modules(model) as rec: ...``,
            which says which module produced each Node (drawn with
            ``g.svg(group_modules=True)`` or ``g.svg(rollup=True)``).
    """
    if moved:
        names = ", ".join(sorted(moved))
        if set(moved) <= set(_MOVED_TO_VIEWS):
            raise TypeError(
                f"trace() no longer takes {names}: it is a drawing choice, so pass it to the "
                f"call that draws, e.g. trace(loss, params=model, modules=rec)"
                f".svg({next(iter(sorted(moved)))}=...)"
            )
        raise TypeError(f"trace() got unexpected keyword arguments: {names}")
    root_tensors = as_roots(roots)
    if modules is not None and not isinstance(modules, ModuleRecord):
        raise TypeError(
            f"modules must be the ModuleRecord from `with record_modules(model) as rec:`, "
            f"got {type(modules).__name__}"
        )
    walk = GraphWalk(params, saved=saved, modules=modules)
    walk.extend([root_node(t) for t in root_tensors], root_tensors)
    return walk.graph()
