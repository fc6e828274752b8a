"""Which hooks fired around which Node of a backward pass, written into the drawing.

Chapter 4 (Q19) logs every hook as it fires, and every Node through a Node pre-hook,
into one list of ``(kind, what)`` pairs; `label_hooks` reads that log against the
`BackwardOrder` of the same pass and returns the numbered graph with each Node's box
labelled. A tensor hook fires before the Node it sits on runs, so it labels the next
Node; a module hook (pre or full) and a post-accumulate hook fire inside or right after
the Node that calls them, so they label the Node that ran last. Reads records only.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from .records import BackwardOrder, Graph

__all__ = ["HOOK_FILL", "MODULE_HOOK_FILL", "NODE_EVENT", "label_hooks"]

#: The log entry a Node pre-hook writes: ``("Node", node.name())``.
NODE_EVENT = "Node"
_TENSOR_HOOK = "tensor hook"  # Tensor.register_hook: fires before its Node runs
_POST_ACCUMULATE = "post-accumulate"  # register_post_accumulate_grad_hook
#: Fill of a box where a module's full backward (pre-)hook fired: torch runs those hooks
#: from the BackwardHookFunction Nodes it inserts around the module.
MODULE_HOOK_FILL = "#f4a261"
#: Fill of any other box that has a hook label.
HOOK_FILL = "#f6e3a1"


def label_hooks(order: BackwardOrder, events: Sequence[tuple[str, str]],
                param_names: Iterable[str] = ()) -> tuple[Graph, dict[int, str]]:
    """``order.graph`` with each Node's box labelled by the hooks that fired there,
    and the box fills to pass as ``graph.svg(colors=...)``.

    `events` is the pass's log in firing order: ``("Node", name)`` once per Node run
    (as many as ``order.steps``), ``("tensor hook", tensor name)``,
    ``("post-accumulate", parameter name)``, and any other ``(kind, module name)``
    for module hooks ("module hook", "module pre-hook"), labelled "<name> <kind>". A
    tensor hook on one of `param_names` is labelled without its name (the
    AccumulateGrad box it precedes already belongs to that parameter).
    """
    params = set(param_names)
    runs = sum(1 for kind, _ in events if kind == NODE_EVENT)
    if runs != len(order.steps):
        raise ValueError(
            f"the log holds {runs} Node runs but the backward order has {len(order.steps)} "
            f"steps; log ({NODE_EVENT!r}, name) from a pre-hook on every Node of the pass "
            "that `order` recorded, and nothing from other passes")
    fired: dict[int, list[str]] = {}
    waiting: list[str] = []
    step = 0
    for kind, what in events:
        if kind == NODE_EVENT:
            step += 1
            fired[step], waiting = waiting, []
        elif kind == _TENSOR_HOOK:
            waiting.append("before: tensor hook" + ("" if what in params else f" on {what}"))
        elif step == 0:
            raise ValueError(f"({kind!r}, {what!r}) fired before any Node ran; only a "
                             f"{_TENSOR_HOOK!r} can come before the first Node")
        elif kind == _POST_ACCUMULATE:
            fired[step].append("after: post-accumulate hook")
        else:
            fired[step].append(f"{what} {kind}")
    if waiting:
        raise ValueError(f"tensor hooks after the last Node ran: {waiting}; the log must "
                         "end with the pass's last Node or the hooks it ran")
    nodes, colors = list(order.graph.nodes), {}
    for st in order.steps:
        if fired[st.index]:
            n = nodes[st.node_id]
            nodes[st.node_id] = dataclasses.replace(n, name="\n".join([n.name,
                                                                        *fired[st.index]]))
            module_hook = st.name == "BackwardHookFunction"
            colors[st.node_id] = MODULE_HOOK_FILL if module_hook else HOOK_FILL
    return dataclasses.replace(order.graph, nodes=nodes), colors
