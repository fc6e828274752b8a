"""Record an autograd graph as plain dataclasses.

`trace()` walks ``grad_fn.next_functions`` from the roots, iteratively (an
unrolled RNN is thousands of Nodes deep), and copies what it sees into
`GraphNode` records. Views (DOT, SVG, HTML in :mod:`autogradviz.render`) read
only these records and never reach back into torch.

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
them back (no ``_pre_hooks``/``pre_hooks()``; the dict of each hook is held by
the returned handle and the C++ hook, not by the Node). A trace therefore
cannot tell whether someone else hooked a Node; `backward_order` knows about
the pre-hooks because it registers them itself.
"""
from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .modules import ModuleRecord

__all__ = ["GraphNode", "Graph", "trace", "function_name"]

# Kinds of drawn records. Autograd Nodes are all "function"; the rest are tensors.
FUNCTION = "function"
PARAM = "param"  # a leaf named by `params`
LEAF = "leaf"  # a leaf requiring grad that `params` does not name
SAVED = "saved"  # a tensor a Node saved for backward
OUTPUT = "output"  # a root passed to trace()
KINDS = (FUNCTION, PARAM, LEAF, SAVED, OUTPUT)


@dataclass(frozen=True)
class GraphNode:
    """One drawn thing: an autograd Node (kind "function") or a tensor."""

    id: int
    name: str
    kind: str
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    nbytes: int | None = None
    # Saved tensors only: False once backward() freed the buffer; None if unknown.
    alive: bool | None = None
    module: str | None = None  # path of the nn.Module that produced it ("" = root)
    # Position in the real backward execution order (set by backward_order()).
    step: int | None = None
    # Ordered (key, value) strings shown in tooltips; never addresses.
    details: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"GraphNode.kind must be one of {KINDS}, got {self.kind!r}")


@dataclass
class Graph:
    """An autograd graph as records. Render with `.svg()`, `.to_dot()`, `.html()`."""

    nodes: list[GraphNode]
    edges: list[tuple[int, int]]  # function -> next function (gradient direction)
    tensor_edges: list[tuple[int, int]] = field(default_factory=list)
    group_modules: bool = False
    depth: int | None = None
    module_types: dict[str, str] = field(default_factory=dict)
    # Rolled-up repeated blocks: representative module path -> (label, count).
    rolled: dict[str, tuple[str, int]] = field(default_factory=dict)
    title: str | None = None
    # Total bytes of distinct saved storages that are still alive.
    saved_bytes: int = 0

    @property
    def function_nodes(self) -> list[GraphNode]:
        return [n for n in self.nodes if n.kind == FUNCTION]

    @property
    def function_edges(self) -> list[tuple[int, int]]:
        """Same as `edges`: one per (Node, next_function) pair."""
        return self.edges

    @property
    def num_functions(self) -> int:
        return sum(1 for n in self.nodes if n.kind == FUNCTION)

    def node(self, node_id: int) -> GraphNode:
        return self.nodes[node_id]

    def names(self) -> list[str]:
        return [n.name for n in self.nodes if n.kind == FUNCTION]

    def caption(self) -> str:
        from .render import human_bytes

        return f"{self.num_functions} autograd Nodes · saved tensors {human_bytes(self.saved_bytes)}"

    # Views live in render.py; these only forward to them.
    def to_dot(self, **options: Any) -> str:
        from .render import to_dot

        return to_dot(self, **options)

    def svg(self, **options: Any) -> str:
        from .render import render_svg

        return render_svg(self, **options)

    def png(self, **options: Any) -> bytes:
        from .render import render_png

        return render_png(self, **options)

    def html(self, **options: Any) -> str:
        from .render import render_html

        return render_html(self, **options)

    def save(self, path: Any, **options: Any) -> None:
        from .render import save

        save(self, path, **options)

    def _repr_svg_(self) -> str:
        return self.svg()

    def __repr__(self) -> str:
        return f"Graph({self.caption()}, {len(self.nodes)} drawn records)"


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


# ---------------------------------------------------------------- the walk


def _as_roots(roots: Any) -> list[torch.Tensor]:
    if isinstance(roots, torch.Tensor):
        roots = [roots]
    elif isinstance(roots, (str, bytes)) or not isinstance(roots, Iterable):
        raise TypeError(
            f"trace() takes a tensor or a sequence of tensors, got {type(roots).__name__}; "
            "pass the output of your forward pass, e.g. trace(loss) or trace([out1, out2])"
        )
    roots = list(roots)
    if not roots:
        raise ValueError("trace() got an empty sequence; pass at least one tensor, e.g. trace(loss)")
    for i, t in enumerate(roots):
        if not isinstance(t, torch.Tensor):
            raise TypeError(
                f"trace() root {i} is a {type(t).__name__}, not a tensor; pass tensors produced by "
                "operations on tensors with requires_grad=True"
            )
        if t.grad_fn is None and not t.requires_grad:
            raise ValueError(
                f"trace() root {i} (shape {tuple(t.shape)}) has no grad_fn and does not require grad, "
                "so it has no autograd graph; compute it from a tensor with requires_grad=True "
                "outside torch.no_grad(), or pass a tensor that has a grad_fn"
            )
    return roots


def _root_node(t: torch.Tensor) -> Any:
    if t.grad_fn is not None:
        return t.grad_fn
    # A leaf that requires grad: its gradient edge is its AccumulateGrad Node.
    return torch.autograd.graph.get_gradient_edge(t).node


def walk(root_nodes: Sequence[Any]) -> tuple[list[Any], dict[Any, int], list[tuple[int, int]]]:
    """Breadth-first walk over Nodes. Returns (nodes in order, node -> index, edges).

    Iterative on purpose: recursion depth would grow with graph depth.
    """
    order: list[Any] = []
    index: dict[Any, int] = {}
    for n in root_nodes:
        if n not in index:
            index[n] = len(order)
            order.append(n)
    edges: list[tuple[int, int]] = []
    queue = deque(order)
    while queue:
        n = queue.popleft()
        src = index[n]
        for nxt, _ in n.next_functions:
            if nxt is None:
                continue
            dst = index.get(nxt)
            if dst is None:
                dst = index[nxt] = len(order)
                order.append(nxt)
                queue.append(nxt)
            edges.append((src, dst))
    return order, index, edges


# Per Node class: sorted names of tensor and non-tensor saved attributes.
_SAVED_ATTRS: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _saved_attrs(node: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    cls = type(node)
    hit = _SAVED_ATTRS.get(cls)
    if hit is None:
        names = dir(node)
        raw = tuple(sorted(a[len("_raw_saved_"):] for a in names if a.startswith("_raw_saved_")))
        other = tuple(
            sorted(a[len("_saved_"):] for a in names if a.startswith("_saved_") and a[len("_saved_"):] not in raw)
        )
        hit = _SAVED_ATTRS[cls] = (raw, other)
    return hit


@dataclass(frozen=True)
class _SavedInfo:
    attr: str
    tensor: torch.Tensor | None
    state: str  # "alive" | "freed" | "packed"


def _read_saved(node: Any, attr: str) -> list[_SavedInfo]:
    """Read one saved-tensor slot without triggering unpack hooks.

    `_raw_saved_x.data` gives the stored tensor without running unpack hooks
    (checkpoint recomputes on unpack!) and is None once backward freed it.
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
        if getattr(item, "unpack_hook", None) is not None:
            out.append(_SavedInfo(label, None, "packed"))
            continue
        try:
            data = item.data
        except (RuntimeError, AttributeError):
            data = None
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


def _tensor_fields(t: torch.Tensor) -> dict[str, Any]:
    return {
        "shape": tuple(t.shape),
        "dtype": str(t.dtype).replace("torch.", ""),
        "nbytes": t.numel() * t.element_size(),
    }


def _storage_key(t: torch.Tensor) -> tuple[int, int] | None:
    """Key used only to count a storage once; never displayed."""
    try:
        st = t.untyped_storage()
        return (st.data_ptr(), st.nbytes())
    except (RuntimeError, NotImplementedError):
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


def _param_names(params: Any) -> dict[int, tuple[str, torch.Tensor]]:
    """id(tensor) -> (name, tensor). The tensor is kept so the id stays valid."""
    if params is None:
        return {}
    if isinstance(params, torch.nn.Module):
        pairs: Iterable[tuple[str, Any]] = params.named_parameters(remove_duplicate=False)
    elif isinstance(params, Mapping):
        pairs = params.items()
    else:
        raise TypeError(
            f"params must be an nn.Module or a Mapping[str, Tensor], got {type(params).__name__}; "
            "pass params=model or params=dict(model.named_parameters())"
        )
    out: dict[int, tuple[str, torch.Tensor]] = {}
    for name, p in pairs:
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"params[{name!r}] is a {type(p).__name__}, not a tensor")
        key = id(p)
        if key in out:
            # Weight tying: one tensor, several names; show them all.
            out[key] = (f"{out[key][0]} = {name}", p)
        else:
            out[key] = (str(name), p)
    return out


def trace(
    roots: torch.Tensor | Sequence[torch.Tensor],
    params: torch.nn.Module | Mapping[str, torch.Tensor] | None = None,
    *,
    saved: bool = True,
    group_modules: bool = False,
    depth: int | None = None,
    rollup: bool = False,
    expand: Iterable[str] = (),
    modules: ModuleRecord | None = None,
) -> Graph:
    """Record the autograd graph behind `roots`.

    Args:
        roots: a tensor or a sequence of tensors (e.g. the loss).
        params: an nn.Module or a name -> tensor mapping, used to name leaves.
        saved: also record the tensors each Node saved for backward.
        group_modules: cluster Nodes by the nn.Module that produced them. Needs
            `modules`, a record from ``with record_modules(model) as rec: ...``.
        depth: deepest module nesting shown as clusters (None: all).
        rollup: draw repeated identical blocks (``h.0`` ... ``h.11``) once, as "×12".
        expand: module paths whose repeated blocks stay expanded.
        modules: the `ModuleRecord` that says which module produced which Node.
    """
    root_tensors = _as_roots(roots)
    if depth is not None and (not isinstance(depth, int) or depth < 1):
        raise ValueError(f"depth must be a positive int or None, got {depth!r}")
    if (group_modules or rollup) and modules is None:
        raise ValueError(
            "group_modules/rollup need to know which module produced each Node; record the forward with "
            "`with autogradviz.record_modules(model) as rec: out = model(x)` and pass trace(out, params=model, "
            "modules=rec, group_modules=True)"
        )
    names = _param_names(params)
    order, index, edges = walk([_root_node(t) for t in root_tensors])
    return _build(
        order,
        edges,
        root_tensors=root_tensors,
        names=names,
        saved=saved,
        modules=modules,
        group_modules=group_modules or rollup,
        depth=depth,
        rollup=rollup,
        expand=tuple(expand),
    )


def _build(
    order: list[Any],
    edges: list[tuple[int, int]],
    *,
    root_tensors: Sequence[torch.Tensor],
    names: dict[int, tuple[str, torch.Tensor]],
    saved: bool,
    modules: ModuleRecord | None,
    group_modules: bool,
    depth: int | None,
    rollup: bool,
    expand: tuple[str, ...],
) -> Graph:
    index = {n: i for i, n in enumerate(order)}
    owner = modules.owner if modules is not None else {}
    nodes: list[GraphNode] = []
    fn_module: list[str | None] = []
    for i, n in enumerate(order):
        name = function_name(n)
        mod = owner.get(n)
        details: list[tuple[str, str]] = [("node", name)]
        if mod is not None:
            details.append(("module", mod or "(top level)"))
        details.append(("next functions", str(sum(1 for f, _ in n.next_functions if f is not None))))
        if saved:
            for attr in _saved_attrs(n)[1]:
                try:
                    text = _fmt_value(getattr(n, "_saved_" + attr))
                except RuntimeError:
                    text = None
                if text is not None:
                    details.append((attr, text))
        fn_module.append(mod)
        nodes.append(GraphNode(i, name, FUNCTION, module=mod, details=tuple(details)))

    tensor_edges: list[tuple[int, int]] = []
    seen_storage: set[tuple[int, int]] = set()
    saved_bytes = 0

    def add(kind: str, name: str, t: torch.Tensor | None, module: str | None, extra=()) -> int:
        nid = len(nodes)
        fields: dict[str, Any] = _tensor_fields(t) if t is not None else {}
        details = [("tensor", name)] + (_tensor_details(t) if t is not None else []) + list(extra)
        if module:
            details.append(("module", module))
        nodes.append(GraphNode(nid, name, kind, module=module, details=tuple(details), **fields))
        return nid

    # Roots are drawn as outputs pointing at the Node that starts backward.
    for k, t in enumerate(root_tensors):
        label = "output" if len(root_tensors) == 1 else f"output {k}"
        nid = add(OUTPUT, label, t, None)
        tensor_edges.append((nid, index[_root_node(t)]))

    for i, n in enumerate(order):
        var = getattr(n, "variable", None)
        if isinstance(var, torch.Tensor):
            hit = names.get(id(var))
            if hit is not None and hit[1] is var:
                pname = hit[0]
                mod = pname.split(" = ")[0].rpartition(".")[0] if modules is not None else None
                if mod is not None:
                    # A parameter's AccumulateGrad belongs with the module that owns it.
                    nodes[i] = dataclasses.replace(nodes[i], module=mod)
                    fn_module[i] = mod
                nid = add(PARAM, pname, var, mod)
            else:
                nid = add(LEAF, "leaf", var, fn_module[i])
            tensor_edges.append((i, nid))
        if not saved:
            continue
        for attr in _saved_attrs(n)[0]:
            for info in _read_saved(n, attr):
                t = info.tensor
                extra = [("saved by", nodes[i].name), ("state", info.state)]
                label = info.attr
                if t is not None:
                    hit = names.get(id(t))
                    if hit is not None and hit[1] is t:
                        label = f"{info.attr} ({hit[0]})"
                    key = _storage_key(t)
                    if key is not None and key not in seen_storage:
                        seen_storage.add(key)
                        saved_bytes += key[1]
                nid = add(SAVED, label, t, fn_module[i], extra)
                alive = None if info.state == "packed" else info.state == "alive"
                nodes[nid] = dataclasses.replace(nodes[nid], alive=alive)
                tensor_edges.append((nid, i))

    module_types = dict(modules.types) if modules is not None else {}
    graph = Graph(
        nodes=nodes,
        edges=edges,
        tensor_edges=tensor_edges,
        group_modules=group_modules,
        depth=depth,
        module_types=module_types,
        saved_bytes=saved_bytes,
    )
    if rollup:
        from .modules import roll_up

        graph = roll_up(graph, expand=expand)
    return graph


def trace_nodes(root_nodes: Sequence[Any], **kwargs: Any) -> Graph:
    """Trace from autograd Nodes rather than tensors (used by live())."""
    order, _, edges = walk(list(root_nodes))
    return _build(
        order,
        edges,
        root_tensors=(),
        names=_param_names(kwargs.get("params")),
        saved=kwargs.get("saved", True),
        modules=kwargs.get("modules"),
        group_modules=kwargs.get("group_modules", False),
        depth=kwargs.get("depth"),
        rollup=False,
        expand=(),
    )
