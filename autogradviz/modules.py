"""Which nn.Module produced which autograd Node.

Usage::

    with autogradviz.record_modules(model) as rec:
        loss = model(x).sum()
    g = autogradviz.trace(loss, params=model, modules=rec, group_modules=True)

How: autograd numbers Nodes as it creates them (``Node._sequence_nr()``, per
thread, increasing). A forward pre-hook notes the counter when a module starts;
its forward hook then claims every not-yet-claimed Node reachable from the
module's outputs whose number is above that mark. Children finish first, so
each Node goes to the innermost module that created it; a parent walks
through its children's Nodes to reach its own. The hooks only read;
the model computes exactly what it would without them.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from .graph import FUNCTION, Graph, GraphNode

__all__ = ["ModuleRecord", "record_modules", "roll_up"]

# AccumulateGrad Nodes carry the largest sequence number; they belong to no call.
_NO_SEQ = 2**64 - 1


@dataclass
class ModuleRecord:
    """Node -> module path ("" is the root module), and path -> class name.

    Holds the Nodes themselves (not their ids) so the mapping cannot alias a
    freed Node; drop the record to release them.
    """

    owner: dict[Any, str] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)

    def module_of(self, node: Any) -> str | None:
        return self.owner.get(node)

    def __len__(self) -> int:
        return len(self.owner)


_probe_leaf: torch.Tensor | None = None


def _sequence_mark() -> int:
    """Sequence number of a throwaway Node: every later Node gets a larger one."""
    global _probe_leaf
    if _probe_leaf is None:
        _probe_leaf = torch.zeros((), requires_grad=True)
    # Keep the probe out of user TorchFunctionModes (live() counts ops).
    with torch._C.DisableTorchFunction(), torch.enable_grad():
        return _probe_leaf.view(()).grad_fn._sequence_nr()


def _tensors(obj: Any) -> Iterator[torch.Tensor]:
    stack = [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, torch.Tensor):
            yield o
        elif isinstance(o, (list, tuple)):
            stack.extend(reversed(o))
        elif isinstance(o, dict):
            stack.extend(reversed(list(o.values())))


@contextmanager
def record_modules(model: torch.nn.Module) -> Iterator[ModuleRecord]:
    """Record which submodule of `model` produced each Node during the block."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"record_modules() takes an nn.Module, got {type(model).__name__}; pass the model you call in the block"
        )
    rec = ModuleRecord()
    marks: list[int | None] = []
    handles = []

    def recording() -> bool:
        return torch.is_grad_enabled() and not torch.is_inference_mode_enabled()

    def pre(path: str):
        def hook(mod: torch.nn.Module, args: Any) -> None:
            marks.append(_sequence_mark() if recording() else None)

        return hook

    def post(path: str):
        def hook(mod: torch.nn.Module, args: Any, output: Any) -> None:
            mark = marks.pop() if marks else None
            if mark is None:
                return
            stack = [t.grad_fn for t in _tensors(output) if t.grad_fn is not None]
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
        handles.append(mod.register_forward_pre_hook(pre(path)))
        handles.append(mod.register_forward_hook(post(path)))
    try:
        yield rec
    finally:
        for h in handles:
            h.remove()


# ---------------------------------------------------------------- roll-up

_INDEXED = re.compile(r"^(?P<parent>.*?)\.?(?P<idx>\d+)$")


def _instance_of(path: str | None, parents: dict[str, list[str]]) -> tuple[str, str] | None:
    """(group parent, instance path) if `path` lies inside an indexed child."""
    if not path:
        return None
    parts = path.split(".")
    for k in range(len(parts)):
        if parts[k].isdigit():
            parent = ".".join(parts[:k])
            inst = ".".join(parts[: k + 1])
            if parent in parents:
                return parent, inst
    return None


def roll_up(graph: Graph, *, expand: Iterable[str] = ()) -> Graph:
    """Draw runs of identical indexed blocks (``h.0`` ... ``h.11``) as one "×12" cluster.

    Blocks are identical when they have the same class and the same sequence
    of Node names in walk order. Nodes of the later blocks map, by position,
    onto the first; edges between different blocks are dropped (they only say
    "the next block follows") and remaining duplicates merged.
    """
    expand = tuple(expand)
    # Candidate groups: indexed children of the same parent.
    children: dict[str, list[str]] = {}
    for path in graph.module_types:
        m = _INDEXED.match(path)
        if m and path.rsplit(".", 1)[-1].isdigit():
            children.setdefault(m.group("parent"), []).append(path)
    members: dict[str, list[int]] = {}
    for node in graph.nodes:
        hit = _instance_of(node.module, children)
        if hit is not None:
            members.setdefault(hit[1], []).append(node.id)

    remap: dict[int, int] = {}
    drop_inst: dict[int, str] = {}
    rolled: dict[str, tuple[str, int]] = {}
    for parent, insts in sorted(children.items()):
        if parent in expand:
            continue
        insts = sorted((p for p in insts if p in members and p not in expand), key=lambda p: int(p.rsplit(".", 1)[1]))
        if len(insts) < 2:
            continue

        def signature(p: str) -> tuple[str, ...]:
            return (graph.module_types.get(p, ""),) + tuple(
                f"{graph.nodes[i].kind}:{graph.nodes[i].name if graph.nodes[i].kind == FUNCTION else ''}"
                for i in members[p]
            )

        # Maximal runs of consecutive blocks with one signature (the first block
        # often differs: its input needs no grad, so it has fewer Nodes).
        runs: list[list[str]] = []
        for p in insts:
            if runs and signature(runs[-1][0]) == signature(p):
                runs[-1].append(p)
            else:
                runs.append([p])
        for same in runs:
            if len(same) < 2:
                continue
            rep = same[0]
            for p in same[1:]:
                for a, b in zip(members[p], members[rep]):
                    remap[a] = b
                    drop_inst[a] = p
            for a in members[rep]:
                drop_inst[a] = rep
            first, last = same[0].rsplit(".", 1)[1], same[-1].rsplit(".", 1)[1]
            label = f"{parent}.{first}–{last}: {graph.module_types.get(rep, '')} ×{len(same)}".lstrip(".")
            rolled[rep] = (label, len(same))

    if not rolled:
        return graph
    keep = [n for n in graph.nodes if n.id not in remap]
    new_id = {n.id: k for k, n in enumerate(keep)}
    for a, b in remap.items():
        new_id[a] = new_id[b]

    def mapped(pairs: list[tuple[int, int]], dedupe: bool) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        seen: set[tuple[int, int]] = set()
        for s, d in pairs:
            si, di = drop_inst.get(s), drop_inst.get(d)
            if si is not None and di is not None and si != di:
                continue
            e = (new_id[s], new_id[d])
            if e[0] == e[1] or (dedupe and e in seen):
                continue
            seen.add(e)
            out.append(e)
        return out

    nodes: list[GraphNode] = [dataclasses.replace(n, id=new_id[n.id]) for n in keep]
    return dataclasses.replace(
        graph,
        nodes=nodes,
        edges=mapped(graph.edges, True),
        tensor_edges=mapped(graph.tensor_edges, True),
        rolled=rolled,
    )
