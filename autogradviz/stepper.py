"""The real order in which the autograd engine runs Nodes during backward().

`backward_order()` puts a pre-hook (``Node.register_prehook``) on every Node
reachable from the roots, runs backward, and records the order in which the
hooks fire: that is the engine's execution order, not a guess from a
topological sort. The hooks only append to a list and are removed afterwards.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .graph import FUNCTION, Graph, _as_roots, _build, _param_names, _root_node, walk
from .render import SVG, compose_strip, content_prefix, render_svg, to_dot

__all__ = ["Step", "BackwardOrder", "backward_order"]

BASE, CURRENT, DONE = "#e8e8e8", "#ff6f61", "#9fd39f"


@dataclass(frozen=True)
class Step:
    """One Node run by the engine: `index` counts from 1 in execution order."""

    index: int
    node_id: int
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

    def _colors(self, upto: int) -> dict[int, str]:
        """Fill colours after `upto` steps: run ones green, the latest red."""
        colors = {}
        for s in self.steps[:upto]:
            colors[s.node_id] = CURRENT if s.index == upto else DONE
        return colors

    def strip(self, max_frames: int = 6) -> SVG:
        """A row of snapshots of the backward pass (one SVG, for static pages)."""
        if max_frames < 2:
            raise ValueError(f"max_frames must be at least 2, got {max_frames}")
        k = len(self.steps)
        marks = sorted({round(i * k / (max_frames - 1)) for i in range(max_frames)})
        svgs = [render_svg(self.graph, colors=self._colors(m)) for m in marks]
        labels = ["before backward" if m == 0 else f"after step {m}" for m in marks]
        return SVG(compose_strip(svgs, labels))

    def animation(self, seconds_per_step: float = 0.6) -> SVG:
        """SVG whose CSS keyframes light up Node k at time k, looping. No JavaScript needed."""
        if seconds_per_step <= 0:
            raise ValueError(f"seconds_per_step must be positive, got {seconds_per_step}")
        prefix = content_prefix(to_dot(self.graph) + "animation")
        svg = render_svg(self.graph, id_prefix=prefix)
        k = len(self.steps)
        total = k + 3  # hold the finished picture for a moment before looping
        rules = []
        for s in self.steps:
            a = 100 * (s.index - 1) / total
            b = 100 * s.index / total
            sel = f"#{prefix}n{s.node_id}"
            rules.append(
                f"@keyframes {prefix}k{s.index}{{0%{{fill:{BASE}}}{a:.3f}%{{fill:{CURRENT}}}"
                f"{b:.3f}%{{fill:{DONE}}}100%{{fill:{DONE}}}}}"
                f"{sel} path,{sel} polygon{{animation:{prefix}k{s.index} {total * seconds_per_step:.2f}s "
                f"step-end infinite}}"
            )
        style = "<style>" + "".join(rules) + "</style>"
        head_end = svg.index(">", svg.index("<svg")) + 1
        return SVG(svg[:head_end] + style + svg[head_end:])

    def _repr_svg_(self) -> str:
        return self.graph.svg()


def backward_order(
    loss: torch.Tensor | Sequence[torch.Tensor],
    *,
    inputs: torch.Tensor | Sequence[torch.Tensor] | None = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    params: torch.nn.Module | Mapping[str, torch.Tensor] | None = None,
    grad: torch.Tensor | Sequence[torch.Tensor] | None = None,
) -> BackwardOrder:
    """Run ``torch.autograd.backward`` and return the order in which Nodes ran.

    Arguments mean what they mean for ``torch.autograd.backward`` (`grad` is
    its `grad_tensors`). The graph is recorded before backward runs, so saved
    tensors are drawn as they were when backward started.
    """
    roots = _as_roots(loss)
    names = _param_names(params)
    order, index, edges = walk([_root_node(t) for t in roots])
    graph = _build(order, edges, root_tensors=roots, names=names, saved=True, modules=None,
                   group_modules=False, depth=None, rollup=False, expand=())
    log: list[Any] = []
    handles = []
    try:
        for node in order:
            handles.append(node.register_prehook(_make_hook(log, node)))
        torch.autograd.backward(roots, grad_tensors=grad, retain_graph=retain_graph,
                                create_graph=create_graph, inputs=inputs)
    finally:
        for h in handles:
            h.remove()
    steps: list[Step] = []
    seen: set[int] = set()
    for node in log:
        nid = index[node]
        if nid in seen:  # a Node runs once per backward; guard anyway
            continue
        seen.add(nid)
        steps.append(Step(len(steps) + 1, nid, graph.nodes[nid].name))
    numbered = list(graph.nodes)
    for s in steps:
        numbered[s.node_id] = dataclasses.replace(numbered[s.node_id], step=s.index)
    graph = dataclasses.replace(graph, nodes=numbered, title=f"backward order: {len(steps)} Nodes ran")
    assert all(n.kind == FUNCTION for n in (graph.nodes[s.node_id] for s in steps))
    return BackwardOrder(steps=steps, graph=graph)


def _make_hook(log: list[Any], node: Any):
    def prehook(grad_outputs: Any) -> None:
        log.append(node)

    return prehook
