"""Module calls of one forward pass: the architecture view, one box per call.

Usage::

    model = nn.Sequential(nn.Linear(16, 128), nn.ReLU(), nn.Linear(128, 10))
    g = trace_modules(model, torch.randn(64, 16))     # runs model(x) once
    g.calls[1].name, g.calls[1].outputs[0].shape      # ("0", (64, 128)); call 0 is the model
    g.svg()                                           # repeated calls rolled up

How: a forward pre-hook and a forward hook on every submodule (down to `depth`)
record each CALL in start order, with its inputs and outputs found by
`torch.utils._pytree`. Data flow is tracked per tensor: every tensor a module
returns is tagged with that call; a `TorchFunctionMode` carries the tag through
functional code between modules (``x.view(...)``, ``F.gelu``), so an edge from
call A to call B means a tensor B received was returned by A, is a view of it,
or was computed from it by ops with no other producer. Ops that JOIN tensors
from two or more producers (a residual ``x + attn(x)``, ``torch.cat``) are not
modules, yet they are where the architecture branches and merges, so they are
recorded as `OpCall`s and drawn as small nodes. Ops inside modules that have
no recorded children (Linear, LayerNorm, ...) are not looked at at all.

Gradients: the model runs under ``torch.no_grad()`` by default: an architecture
view needs no autograd graph, and no_grad frees activations as usual. Pass
``grad=True`` for models whose forward needs autograd (e.g. it calls
``torch.autograd.grad``). The model stays in its current train/eval mode.
The hooks and the mode only read; the model computes exactly what it would
without them, and everything is removed afterwards, also when forward raises.
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import keystr, tree_flatten_with_path
from torch.utils.weak import WeakIdKeyDictionary

from ..ops.storage import held_storage
from ..records import TensorMeta
from .records import FlowEdge, FlowKind, ModuleCall, ModuleGraph, OpCall

__all__ = ["trace_modules"]

# How many functional op names an "ops" edge remembers (enough to read it, bounded memory).
_VIA = 4

# A tensor's tag: (producer key, ops applied since, storage address of the producer's output).
_Tag = tuple[str, tuple[str, ...], int]


def _storage(t: torch.Tensor) -> int:
    st = held_storage(t)  # a DTensor's local shard
    try:
        return -1 if st is None else st.data_ptr()
    except (RuntimeError, NotImplementedError):  # fake and wrapper storages have no data
        return -1


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _flat_tensors(obj: Any, prefix: str) -> list[tuple[str, torch.Tensor]]:
    """(key path, tensor) for every tensor pytree finds in `obj`, in order."""
    leaves, _ = tree_flatten_with_path(obj)
    return [(prefix + keystr(path), leaf) for path, leaf in leaves
            if isinstance(leaf, torch.Tensor)]


def _quick_tensors(obj: Any) -> Iterator[torch.Tensor]:
    """Tensors in op arguments: flat lists, tuples and dicts (cheaper than pytree per op)."""
    stack = [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, torch.Tensor):
            yield o
        elif isinstance(o, (list, tuple)):
            stack.extend(reversed(o))
        elif isinstance(o, dict):
            stack.extend(reversed(list(o.values())))


def _meta(items: list[tuple[str, torch.Tensor]]) -> tuple[TensorMeta, ...]:
    return tuple(TensorMeta(p, tuple(t.shape), _dtype(t)) for p, t in items)


def _op_name(func: Callable[..., Any]) -> str:
    name = getattr(func, "__name__", None) or type(func).__name__
    return name.strip("_") or name


class _Recorder(TorchFunctionMode):
    """The hooks' shared state, and the mode that carries tags through functional code."""

    def __init__(self, leaves: set[int], names: dict[int, str],
                 params: dict[int, tuple[int, tuple[str, ...]]]) -> None:
        super().__init__()
        self.leaves = leaves  # id() of modules with no recorded children
        self.names = names  # id(module) -> qualified name
        self.params = params  # id(module) -> (parameter count, tied module names)
        self.tags: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self.calls: list[ModuleCall] = []
        self.ops: list[OpCall] = []
        self.edges: list[FlowEdge] = []
        self.stack: list[tuple[int, bool]] = []  # (call index, module is a leaf)
        self.parents: dict[str, int | None] = {}  # endpoint key -> enclosing call index
        self.order = 0

    # -- tags --------------------------------------------------------------------------

    def _edge(self, tag: _Tag, t: torch.Tensor, dst: str) -> None:
        src, via, storage = tag
        kind: FlowKind = "same" if not via else ("view" if _storage(t) == storage else "ops")
        self.edges.append(FlowEdge(src, dst, kind, via))

    def _inside(self, key: str, call: int) -> bool:
        """Whether endpoint `key` was produced inside call `call` (by it or a descendant)."""
        parent = self.parents.get(key)
        if key == f"call:{call}":
            return True
        while parent is not None:
            if parent == call:
                return True
            parent = self.calls[parent].parent
        return False

    # -- module hooks ------------------------------------------------------------------

    def pre_hook(self, mod: nn.Module, args: Any, kwargs: Any) -> None:
        with torch._C.DisableTorchFunction():
            items = _flat_tensors(args, "args") + _flat_tensors(kwargs, "kwargs")
            name = self.names[id(mod)]
            index = len(self.calls)
            parent = self.stack[-1][0] if self.stack else None
            count, tied = self.params[id(mod)]
            key = f"call:{index}"
            self.parents[key] = parent
            self.calls.append(ModuleCall(
                index=index, order=self.order, name=name, type=type(mod).__name__, parent=parent,
                depth=0 if not name else name.count(".") + 1, inputs=_meta(items), outputs=(),
                num_params=count, tied_with=tied))
            self.order += 1
            for _, t in items:
                tag = self.tags.get(t)
                if tag is not None:
                    self._edge(tag, t, key)
            self.stack.append((index, id(mod) in self.leaves))

    def post_hook(self, mod: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        with torch._C.DisableTorchFunction():
            index, _ = self.stack.pop()
            items = _flat_tensors(output, "")
            call = self.calls[index]
            self.calls[index] = dataclasses.replace(call, outputs=_meta(items))
            for _, t in items:
                tag = self.tags.get(t)
                # Keep a tag from inside this call (a child's output passed through, or a
                # joining op): the innermost producer is the one the view can always draw.
                if tag is None or not self._inside(tag[0], index):
                    self.tags[t] = (f"call:{index}", (), _storage(t))

    # -- functional ops ----------------------------------------------------------------

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        # Inside a leaf module its own output tag replaces whatever the ops did.
        if not self.stack or self.stack[-1][1]:
            return out
        outs = list(_quick_tensors(out))
        if not outs:
            return out
        with torch._C.DisableTorchFunction():
            sources: dict[str, tuple[_Tag, torch.Tensor]] = {}
            for t in _quick_tensors((args, kwargs)):
                tag = self.tags.get(t)
                if tag is not None and tag[0] not in sources:
                    sources[tag[0]] = (tag, t)
            if not sources:
                return out  # made from constants, parameters or buffers only
            name = _op_name(func)
            if len(sources) == 1:
                src, via, storage = next(iter(sources.values()))[0]
                if len(via) < _VIA:
                    via = via + (name,)
                for t in outs:  # in-place ops keep their producer and add the op name
                    self.tags[t] = (src, via, storage)
                return out
            # Two or more producers meet here: a joining op gets its own record.
            index = len(self.ops)
            key = f"op:{index}"
            parent = self.stack[-1][0]
            self.parents[key] = parent
            ins = [(f"[{k}]", t) for k, (_, t) in enumerate(sources.values())]
            self.ops.append(OpCall(index=index, order=self.order, name=name, parent=parent,
                                   inputs=_meta(ins),
                                   outputs=_meta([(f"[{k}]", t) for k, t in enumerate(outs)])))
            self.order += 1
            for tag, t in sources.values():
                self._edge(tag, t, key)
            for t in outs:
                self.tags[t] = (key, (), _storage(t))
        return out


def _param_info(model: nn.Module, modules: dict[str, nn.Module]
                ) -> dict[int, tuple[int, tuple[str, ...]]]:
    """id(module) -> (parameter count, names of other recorded modules sharing a parameter)."""
    owners: dict[int, list[str]] = {}  # id(parameter) -> modules holding it directly
    for name, mod in model.named_modules():
        for p in mod.parameters(recurse=False):
            owners.setdefault(id(p), []).append(name)
    info: dict[int, tuple[int, tuple[str, ...]]] = {}
    for name, mod in modules.items():
        params = list(mod.parameters())  # recurse; shared ones come once
        inside = {n for n, _ in mod.named_modules(prefix=name)}
        tied = sorted({o for p in params for o in owners.get(id(p), []) if o not in inside})
        info[id(mod)] = (sum(p.numel() for p in params), tuple(tied))
    return info


def trace_modules(model: nn.Module, *args: Any, depth: int | None = None, grad: bool = False,
                  **kwargs: Any) -> ModuleGraph:
    """Run ``model(*args, **kwargs)`` once and record every module call in it.

    `depth` limits which modules are recorded: 1 records the model's children only,
    2 their children too, None (the default) every submodule. A module at the limit
    is one box; what runs inside it is folded into it. The model runs under
    ``torch.no_grad()`` unless `grad` is True (see the module docstring). Other keyword
    arguments go to the model; one named `depth` or `grad` needs a wrapper module.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"trace_modules() takes an nn.Module first, got {type(model).__name__}; "
            "pass the model and then its inputs: trace_modules(model, x)")
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 0):
        raise ValueError(f"depth must be None (every submodule) or an int >= 0, got {depth!r}; "
                         "depth=1 records the model's direct children only")
    inputs = _flat_tensors(args, "args") + _flat_tensors(kwargs, "kwargs")
    if not inputs:
        raise ValueError(
            "trace_modules() found no tensor in the inputs after the model "
            f"(got {len(args)} positional and {len(kwargs)} keyword arguments); pass example "
            "inputs the way you call the model, e.g. trace_modules(model, torch.randn(8, 16))")

    modules: dict[str, nn.Module] = {}
    for name, mod in model.named_modules():
        level = 0 if not name else name.count(".") + 1
        if depth is None or level <= depth:
            modules[name] = mod
    names = {id(m): n for n, m in modules.items()}
    parents = {n.rpartition(".")[0] for n in modules if n}  # "" is the model itself
    leaves = {id(m) for n, m in modules.items() if n not in parents}
    rec = _Recorder(leaves, names, _param_info(model, modules))
    for k, (_, t) in enumerate(inputs):
        if rec.tags.get(t) is None:  # one tensor passed twice is tagged by its first place
            rec.tags[t] = (f"input:{k}", (), _storage(t))

    handles = []
    try:
        for mod in modules.values():
            handles.append(mod.register_forward_pre_hook(rec.pre_hook, with_kwargs=True))
            handles.append(mod.register_forward_hook(rec.post_hook, with_kwargs=True))
        grad_ctx = contextlib.nullcontext() if grad else torch.no_grad()
        with grad_ctx, rec:
            output = model(*args, **kwargs)
    except Exception as e:
        e.add_note(f"(raised while trace_modules() ran {type(model).__name__}; "
                   "its hooks were removed)")
        raise
    finally:
        for h in handles:
            h.remove()

    outs = _flat_tensors(output, "output")
    for k, (_, t) in enumerate(outs):
        tag = rec.tags.get(t)
        if tag is not None:
            rec._edge(tag, t, f"output:{k}")
    return ModuleGraph(calls=rec.calls, ops=rec.ops, edges=rec.edges, inputs=list(_meta(inputs)),
                       outputs=list(_meta(outs)), depth=depth)
