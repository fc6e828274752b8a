"""The real order in which the autograd engine runs Nodes during backward().

`backward_order()` puts a pre-hook (``Node.register_prehook``) on every Node
reachable from the roots, runs backward, and records the order in which the
hooks fire: that is the engine's execution order, not a guess from a
topological sort. The hooks only append to a list and are removed afterwards.
The graph is read by the package's one walk (`GraphWalk`), whose Node index
maps each hook back to its record. Drawing (strip, animation) is in strips.py.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .trace import GraphWalk, Params, as_roots, root_node
from .records import BackwardOrder, Step

__all__ = ["backward_order"]


def backward_order(
    loss: torch.Tensor | Sequence[torch.Tensor],
    *,
    inputs: torch.Tensor | Sequence[torch.Tensor] | None = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    params: Params = None,
    grad: torch.Tensor | Sequence[torch.Tensor] | None = None,
) -> BackwardOrder:
    """Run ``torch.autograd.backward`` and return the order in which Nodes ran.

    Arguments mean what they mean for ``torch.autograd.backward`` (`grad` is
    its `grad_tensors`). The graph is recorded before backward runs, so saved
    tensors are drawn as they were when backward started.
    """
    roots = as_roots(loss, caller="backward_order")
    walk = GraphWalk(params)
    walk.extend([root_node(t) for t in roots], roots)
    log: list[Any] = []
    handles = []
    try:
        for node in walk.order:
            handles.append(node.register_prehook(_make_hook(log, node)))
        torch.autograd.backward(roots, grad_tensors=grad, retain_graph=retain_graph,
                                create_graph=create_graph, inputs=inputs)
    finally:
        for h in handles:
            h.remove()
    steps: list[Step] = []
    ran: set[int] = set()
    for node in log:
        nid = walk.index[node]
        if nid in ran:  # a Node runs once per backward; guard anyway
            continue
        ran.add(nid)
        steps.append(Step(len(steps) + 1, nid, walk.nodes[nid].name))
    # The step numbers exist only after backward ran, after the records were read.
    for s in steps:
        walk.nodes[s.node_id] = dataclasses.replace(walk.nodes[s.node_id], step=s.index)
    graph = walk.graph(title=f"backward order: {len(steps)} Nodes ran")
    return BackwardOrder(steps=steps, graph=graph)


def _make_hook(log: list[Any], node: Any) -> Callable[[Any], None]:
    def prehook(grad_outputs: Any) -> None:
        log.append(node)

    return prehook
