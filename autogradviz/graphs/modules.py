"""Which nn.Module produced which autograd Node.

Usage::

    with autogradviz.record_modules(model) as rec:
        loss = model(x).sum()
    g = autogradviz.trace(loss, params=model, modules=rec)
    g.svg(group_modules=True)  # or rollup=True: repeated blocks drawn once

How: autograd numbers Nodes as it creates them (``Node._sequence_nr()``, per
thread, increasing). A forward pre-hook notes the counter when a module starts;
its forward hook then claims every not-yet-claimed Node reachable from the
module's outputs whose number is above that mark. Children finish first, so
each Node goes to the innermost module that created it; a parent walks
through its children's Nodes to reach its own. The hooks only read;
the model computes exactly what it would without them.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils import _pytree as pytree

from .records import ModuleRecord

__all__ = ["record_modules", "tensors_in"]

# AccumulateGrad Nodes carry the largest sequence number; they belong to no call.
_NO_SEQ = 2**64 - 1

_probe_leaf: torch.Tensor | None = None


def _sequence_mark() -> int:
    """Sequence number of a throwaway Node: every later Node gets a larger one."""
    global _probe_leaf
    if _probe_leaf is None:
        _probe_leaf = torch.zeros((), requires_grad=True)
    # Keep the probe out of user TorchFunctionModes (live() counts ops).
    with torch._C.DisableTorchFunction(), torch.enable_grad():
        return _probe_leaf.view(()).grad_fn._sequence_nr()


def tensors_in(obj: Any) -> list[torch.Tensor]:
    """The tensors in a (nested) output: torch's own pytree flattening, so tuples,
    lists, dicts, namedtuples and registered containers all count."""
    return [t for t in pytree.tree_leaves(obj) if isinstance(t, torch.Tensor)]


@contextmanager
def record_modules(model: torch.nn.Module) -> Iterator[ModuleRecord]:
    """Record which submodule of `model` produced each Node during the block."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"record_modules() takes an nn.Module, got {type(model).__name__}; "
            "pass the model you call in the block"
        )
    rec = ModuleRecord()
    marks: list[int | None] = []
    handles = []

    def recording() -> bool:
        return torch.is_grad_enabled() and not torch.is_inference_mode_enabled()

    def pre(mod: torch.nn.Module, args: Any) -> None:
        # Inside code torch.compile traces, the hooks do nothing: Dynamo would trace
        # them into the compiled graph (graph breaks on every grad_fn access).
        if torch.compiler.is_compiling():
            return
        marks.append(_sequence_mark() if recording() else None)

    def post(path: str):
        def hook(mod: torch.nn.Module, args: Any, output: Any) -> None:
            if torch.compiler.is_compiling():
                return
            mark = marks.pop() if marks else None
            if mark is None:
                return
            stack = [t.grad_fn for t in tensors_in(output) if t.grad_fn is not None]
            visited: set[Any] = set()
            while stack:
                n = stack.pop()
                if n in visited:
                    continue
                visited.add(n)
                seq = n._sequence_nr()
                if seq <= mark or seq == _NO_SEQ:
                    continue
                # Walk through Nodes a child already claimed: this module's own
                # ops (e.g. softmax between two Linear calls) lie beneath them.
                rec.owner.setdefault(n, path)
                stack.extend(f for f, _ in n.next_functions if f is not None)

        return hook

    for path, mod in model.named_modules():
        rec.types[path] = type(mod).__name__
        handles.append(mod.register_forward_pre_hook(pre))
        handles.append(mod.register_forward_hook(post(path)))
    try:
        yield rec
    finally:
        for h in handles:
            h.remove()
