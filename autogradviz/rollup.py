"""Roll-up: a `Graph -> Graph` transform that draws repeated blocks once.

A view-side transform (torch-free, records in and out): ``roll_up(g)`` merges runs of
identical indexed blocks (``h.0`` ... ``h.11``) into one cluster labelled "×12".
Drawing calls apply it with ``g.svg(rollup=True)``; the traced `Graph` is unchanged.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from .records import Graph, GraphNode

__all__ = ["roll_up"]

_INDEXED = re.compile(r"^(?P<parent>.*?)\.?(?P<idx>\d+)$")


def _instance_of(path: str | None, parents: dict[str, list[str]]) -> tuple[str, str] | None:
    """(group parent, instance path) if `path` lies inside an indexed child."""
    if not path:
        return None
    parts = path.split(".")
    for k in range(len(parts)):
        if parts[k].isdigit():
            parent = ".".join(parts[:k])
            if parent in parents:
                return parent, ".".join(parts[: k + 1])
    return None


def roll_up(graph: Graph, *, expand: Iterable[str] = ()) -> Graph:
    """Draw runs of identical indexed blocks (``h.0`` ... ``h.11``) as one "×12" cluster.

    Blocks are identical when they have the same class and the same sequence of
    Node names in walk order. Nodes of the later blocks map, by position, onto the
    first; edges between different blocks are dropped (they only say "the next
    block follows") and remaining duplicates merged. `expand` names module paths
    (a parent such as ``"h"`` or one block) left as they are. The result remembers
    how many Nodes the traced graph had, so its caption can say both numbers.
    Needs module paths: trace with ``modules=`` from `record_modules`.
    """
    if isinstance(expand, str):
        raise TypeError(f"expand takes a list of module paths, got the string {expand!r}; "
                        f"pass expand=[{expand!r}]")
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

    def signature(p: str) -> tuple[str, ...]:
        """Class, then kind and (for functions) name of each member in walk order."""
        nodes = [graph.nodes[i] for i in members[p]]
        return (graph.module_types.get(p, ""),) + tuple(
            f"{n.kind}:{n.name if n.kind == 'function' else ''}" for n in nodes
        )

    remap: dict[int, int] = {}
    drop_inst: dict[int, str] = {}
    rolled: dict[str, tuple[str, int]] = {}
    for parent, insts in sorted(children.items()):
        if parent in expand:
            continue
        insts = sorted((p for p in insts if p in members and p not in expand),
                       key=lambda p: int(p.rsplit(".", 1)[1]))
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
            label = f"{parent}.{first}–{last}: {graph.module_types.get(rep, '')} ×{len(same)}"
            rolled[rep] = (label.lstrip("."), len(same))

    if not rolled:
        return graph
    keep = [n for n in graph.nodes if n.id not in remap]
    new_id = {n.id: k for k, n in enumerate(keep)}
    for a, b in remap.items():
        new_id[a] = new_id[b]

    def mapped(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        seen: set[tuple[int, int]] = set()
        for s, d in pairs:
            si, di = drop_inst.get(s), drop_inst.get(d)
            if si is not None and di is not None and si != di:
                continue
            e = (new_id[s], new_id[d])
            if e[0] == e[1] or e in seen:
                continue
            seen.add(e)
            out.append(e)
        return out

    nodes: list[GraphNode] = [dataclasses.replace(n, id=new_id[n.id]) for n in keep]
    return dataclasses.replace(
        graph, nodes=nodes, edges=mapped(graph.edges), tensor_edges=mapped(graph.tensor_edges),
        rolled=rolled, traced_functions=graph.traced_functions or graph.num_functions,
    )
