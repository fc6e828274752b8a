"""An independent walk over grad_fn.next_functions, written apart from autogradviz.graphs.trace.

Depth-first with an explicit stack and a set of Nodes: a different traversal from the
package's breadth-first walk, so a bug in one is unlikely to be repeated in the other.
"""
from __future__ import annotations

from collections import Counter

import torch


def display_name(node) -> str:
    cls = getattr(type(node), "_forward_cls", None)
    return cls.__name__ if cls is not None else node.name().split("::")[-1]


def start_nodes(roots) -> list:
    roots = [roots] if isinstance(roots, torch.Tensor) else list(roots)
    return [r.grad_fn if r.grad_fn is not None else torch.autograd.graph.get_gradient_edge(r).node for r in roots]


def reachable(roots) -> tuple[set, Counter]:
    """(set of Nodes, Counter of (src name, dst name) edges, one per non-None next function)."""
    seen: set = set()
    edges: Counter = Counter()
    stack = start_nodes(roots)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        for nxt, _ in n.next_functions:
            if nxt is not None:
                edges[(display_name(n), display_name(nxt))] += 1
                stack.append(nxt)
    return seen, edges


def name_counts(nodes: set) -> Counter:
    return Counter(display_name(n) for n in nodes)
