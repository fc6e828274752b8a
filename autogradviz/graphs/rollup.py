"""Roll-up: a `Graph -> Graph` transform that draws repeated blocks once.

A view-side transform (torch-free, records in and out): ``roll_up(g)`` merges runs of
identical indexed blocks (``h.0`` ... ``h.11``) into one cluster labelled "×12", and
the time steps of an unrolled loop (an RNN cell applied 50 times) into one step
labelled "×50". Drawing calls apply it with ``g.svg(rollup=True)``; the traced
`Graph` is unchanged.

Loop steps are found from the graph alone (no module record needed). A loop body
applied again reuses the SAME parameters, so its backward Nodes point at the same
AccumulateGrad Nodes; repeated blocks with their own weights (a transformer's layers)
are never taken for loop steps. The fold is a map `shift` from each Node to the
Node that plays its part one step later, grown from one pair of Nodes by matching
names and next functions position by position (`_shift`). Chains ``v, shift(v),
shift(shift(v)), ...`` are the steps of one Node; each chain is drawn once.
"""
from __future__ import annotations

import bisect
import dataclasses
import re
from collections.abc import Iterable

from .records import Graph, GraphNode

__all__ = ["roll_up"]

#: Cluster path of the folded loop step (parentheses: never a module attribute name).
LOOP = "(loop)"

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
    Blocks need module paths (trace with ``modules=`` from `record_modules`).

    Then the steps of an unrolled loop are folded: Nodes that repeat once per step,
    with the same parameters, are drawn once inside a cluster "loop step ×N" (the
    module path `LOOP`); the edges from a step into the one before it (the carried
    state) are listed in ``carried`` and drawn dashed. Nodes that differ in some
    steps (the first step of a decoder whose initial state needs no grad) stay
    outside the cluster. Loops of two steps stay unrolled. Pass ``expand=["(loop)"]``
    to leave loops unrolled.
    """
    if isinstance(expand, str):
        raise TypeError(f"expand takes a list of module paths, got the string {expand!r}; "
                        f"pass expand=[{expand!r}]")
    expand = tuple(expand)
    blocks = _roll_blocks(graph, expand) if graph.module_types else graph
    return blocks if LOOP in expand else _fold_loop(blocks)


def _roll_blocks(graph: Graph, expand: tuple[str, ...]) -> Graph:
    """Runs of identical indexed blocks merged (see `roll_up`)."""
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
                       key=lambda p: int(p.rsplit(".", 1)[-1]))
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
            first, last = same[0].rsplit(".", 1)[-1], same[-1].rsplit(".", 1)[-1]
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


# ---------------------------------------------------------------- loop steps

# How far (Nodes) the search for the next step's copy of a Node may go.
_SEARCH = 5000
# More neighbours than a Node inside one step has: a hub joining all steps.
_HUB = 8


class _Adjacency:
    """Function Nodes of a graph with their next functions in order and their users."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.fn = {n.id for n in graph.nodes if n.kind == "function"}
        self.leaf = {n.id for n in graph.nodes if n.kind == "function"
                     and n.name == "AccumulateGrad"}
        self.out: dict[int, list[int]] = {}
        self.users: dict[int, list[tuple[int, int]]] = {}  # Node -> (user, slot in its out)
        for s, d in graph.edges:
            slots = self.out.setdefault(s, [])
            self.users.setdefault(d, []).append((s, len(slots)))
            slots.append(d)

    def signature(self, u: int) -> tuple:
        """Name and next functions; a leaf by identity (the same parameter), others by name."""
        names = self.graph.nodes
        return (names[u].name,) + tuple(
            ("leaf", c) if c in self.leaf else names[c].name for c in self.out.get(u, ())
        )

    def degree(self, u: int) -> int:
        return len(self.out.get(u, ())) + len(self.users.get(u, ()))


def _shift(adj: _Adjacency, a: int, b: int) -> dict[int, int]:
    """The map Node -> its counterpart one step on, grown from the pair (a, b).

    Two Nodes pair when they have the same `signature` (so shared parameters stay
    shared); then their next functions pair slot by slot, and their users pair when
    one user has the same signature and slot on each side. A Node reached on both sides
    (a hub, e.g. the StackBackward0 of all steps' outputs) is not part of a step.
    """
    fwd: dict[int, int] = {}
    back: dict[int, int] = {}
    todo = [(a, b)]
    while todo:
        u, v = todo.pop()
        if u == v or u in fwd or v in back or u in adj.leaf or v in adj.leaf:
            continue
        if adj.signature(u) != adj.signature(v):
            continue
        fwd[u], back[v] = v, u
        todo.extend(zip(adj.out.get(u, ()), adj.out.get(v, ())))
        # Users pair when their signature and slot pick out one user on each side
        # (a step's output may have one user fewer in the last step).
        mine: dict[tuple, list[int]] = {}
        theirs: dict[tuple, list[int]] = {}
        for side, users in ((mine, adj.users.get(u, ())), (theirs, adj.users.get(v, ()))):
            for w, k in users:
                side.setdefault((adj.signature(w), k), []).append(w)
        for key, ws in mine.items():
            match = theirs.get(key, [])
            if len(ws) == 1 and len(match) == 1:
                todo.append((ws[0], match[0]))
    return fwd


def _nearest_same(adj: _Adjacency, a: int, same: set[int], limit: int) -> list[int]:
    """Members of `same` nearest to `a`, walking edges both ways but not through hubs.

    A hub (a parameter's AccumulateGrad, a Node joining all steps) is next to every
    step; the walk around it finds the neighbouring step first.
    """
    seen = {a}
    frontier = [a]
    found: list[int] = []
    while frontier and len(found) < 3 and len(seen) < _SEARCH:
        nxt = []
        for u in frontier:
            if u != a and (u in adj.leaf or adj.degree(u) > _HUB):
                continue
            for w in [*adj.out.get(u, ()), *(x for x, _ in adj.users.get(u, ()))]:
                if w not in seen:
                    seen.add(w)
                    nxt.append(w)
                    if w in same:
                        found.append(w)
        frontier = nxt
    return found[:limit]


def _steps(adj: _Adjacency) -> tuple[dict[int, int], list[int]] | None:
    """(shift map, one Node's chain over all steps) for the loop in the graph, or None."""
    classes: dict[tuple, list[int]] = {}
    for u in sorted(adj.fn - adj.leaf):
        sig = adj.signature(u)
        if any(isinstance(c, tuple) for c in sig[1:]):  # uses a parameter: a step anchor
            classes.setdefault(sig, []).append(u)
    if not classes:
        return None
    anchors = max(classes.values(), key=len)
    if len(anchors) < 2:
        return None
    best: tuple[tuple[int, int], dict[int, int], list[int]] | None = None
    a = anchors[0]
    for b in _nearest_same(adj, a, set(anchors), limit=3):
        for pair in ((a, b), (b, a)):
            shift = _shift(adj, *pair)
            chain = _chain(shift, a)
            score = (len(chain), len(shift))
            if best is None or score > best[0]:
                best = (score, shift, chain)
    # Two steps are left unrolled: the first step usually differs (its initial state
    # needs no grad), so the carried state would connect no two folded Nodes.
    if best is None or len(best[2]) < 3:
        return None
    return best[1], best[2]


def _chain(shift: dict[int, int], u: int) -> list[int]:
    """The Nodes u stands for in every step: back to the first step, then forward."""
    back = {v: k for k, v in shift.items()}
    while u in back:
        u = back[u]
    out = [u]
    while out[-1] in shift and len(out) <= len(shift):
        out.append(shift[out[-1]])
    return out


def _fold_loop(graph: Graph) -> Graph:
    """Draw the steps of an unrolled loop once (see `roll_up`); `graph` if it has none."""
    adj = _Adjacency(graph)
    found = _steps(adj)
    if found is None:
        return graph
    shift, anchor = found
    back = {v: k for k, v in shift.items()}
    # Chains: each folded Node with its position in the chain.
    chain_of: dict[int, int] = {}  # Node -> id of its chain's first Node
    pos: dict[int, int] = {}
    chains: dict[int, list[int]] = {}
    for u in sorted(set(shift) | set(back)):
        if u in chain_of:
            continue
        first = u
        while first in back:
            first = back[first]
        members = _chain(shift, first)
        chains[first] = members
        for k, v in enumerate(members):
            chain_of[v], pos[v] = first, k
    step = _by_creation(graph, adj, chains, chain_of, len(anchor))
    if step is None:
        step = _by_potential(graph, chains, chain_of, pos, anchor[0])
    anchor_steps = sorted(step[v] for v in anchor)
    middle = anchor_steps[len(anchor_steps) // 2]
    rep = {c: min(members, key=lambda v: (abs(step[v] - middle), v))
           for c, members in chains.items()}
    target = {v: rep[chain_of[v]] for v in chain_of}
    dropped = {v for v, t in target.items() if v != t}
    # Saved tensors are drawn with the Node that saved them, and go where it goes.
    saved_by = {s: d for s, d in graph.tensor_edges if graph.nodes[s].kind == "saved"}
    dropped |= {s for s, d in saved_by.items() if d in dropped}
    keep = [n for n in graph.nodes if n.id not in dropped]
    new_id = {n.id: k for k, n in enumerate(keep)}
    for v, t in target.items():
        new_id[v] = new_id[t]

    edges: list[tuple[int, int]] = []
    carried: list[tuple[int, int]] = []
    seen: set[tuple[int, int, bool]] = set()
    for s, d in graph.edges:
        e = (new_id[s], new_id[d])
        if s not in step and d not in step:
            edges.append(e)  # outside the loop: as traced, duplicates included (x * x)
            continue
        # One edge per pair of drawn boxes (all steps' copies of an edge are one).
        cross = s in step and d in step and step[s] != step[d]
        if (*e, cross) in seen:
            continue
        seen.add((*e, cross))
        edges.append(e)
        if cross:
            carried.append(e)
    tensor_edges = [(new_id[s], new_id[d]) for s, d in graph.tensor_edges
                    if s not in dropped and d not in dropped]

    count = len(anchor)
    types = dict(graph.module_types)
    types[LOOP] = ""
    nodes: list[GraphNode] = []
    for n in keep:
        mod = n.module
        if n.id in chain_of or saved_by.get(n.id) in chain_of:
            mod = LOOP if not mod else f"{LOOP}.{mod}"
            if n.module:
                types.setdefault(mod, graph.module_types.get(n.module, ""))
        nodes.append(dataclasses.replace(n, id=new_id[n.id], module=mod))
    rolled = dict(graph.rolled)
    rolled[LOOP] = (f"loop step ×{count}", count)
    return dataclasses.replace(
        graph, nodes=nodes, edges=edges, tensor_edges=tensor_edges, module_types=types,
        rolled=rolled, carried=carried,
        traced_functions=graph.traced_functions or graph.num_functions,
    )


def _loop_edges(graph: Graph, chain_of: dict[int, int]) -> list[tuple[int, int]]:
    return [(s, d) for s, d in graph.edges if s in chain_of and d in chain_of]


def _by_creation(graph: Graph, adj: _Adjacency, chains: dict[int, list[int]],
                 chain_of: dict[int, int], count: int) -> dict[int, int] | None:
    """Step of each folded Node from autograd's creation order, or None without it.

    Each chain with a Node in every step (or all but one: the first step often
    differs) gives candidate boundaries: a step runs from one of its Nodes to the
    next. Fewest edges crossing a boundary comes first: there only the carried state
    passes. Boundaries that tie (an LSTM's hidden-state matmul can sit on either side
    of the cut) go by where the loop began: the first Node created next to the loop.
    """
    seq = {v: graph.nodes[v].seq for v in chain_of}
    if any(k is None for k in seq.values()):
        return None
    edges = _loop_edges(graph, chain_of)
    origin = _loop_start(graph, adj, chain_of, seq, chains)
    best: tuple[tuple[int, int], dict[int, int]] | None = None
    for members in chains.values():
        if len(members) < max(2, count - 1):
            continue
        bounds = sorted(seq[v] for v in members)
        step = {v: bisect.bisect_right(bounds, k) for v, k in seq.items()}
        # Edges across one boundary in the middle of the loop: the first and last
        # steps may have fewer Nodes, so boundaries next to them would count fewer.
        cut = len(bounds) // 2 + 1
        crossing = sum(1 for s, d in edges if (step[s] >= cut) != (step[d] >= cut))
        period = sorted(b - a for a, b in zip(bounds, bounds[1:]))[(len(bounds) - 1) // 2]
        key = (crossing, (bounds[0] - origin) % max(period, 1))
        if best is None or key < best[0]:
            best = (key, step)
    return None if best is None else best[1]


def _loop_start(graph: Graph, adj: _Adjacency, chain_of: dict[int, int],
                seq: dict[int, int], chains: dict[int, list[int]]) -> int:
    """Creation number of the loop's first Node, folded or not.

    The first step often has Nodes of its own (its initial state needs no grad, so
    its matmul has no input edge); they hang off the folded ones, so the walk goes
    from folded Nodes through unfolded ones, but not through hubs or leaves, and
    not further back than one step (the period) before the first folded Node.
    """
    first = min(seq.values())
    longest = max(chains.values(), key=len)
    gaps = sorted(seq[b] - seq[a] for a, b in zip(longest, longest[1:]))
    period = abs(gaps[len(gaps) // 2]) if gaps else 0
    start = first
    seen = set(chain_of)
    todo = list(chain_of)
    while todo:
        v = todo.pop()
        for w in [*adj.out.get(v, ()), *(x for x, _ in adj.users.get(v, ()))]:
            k = graph.nodes[w].seq
            if (w in seen or w in adj.leaf or adj.degree(w) > _HUB or k is None
                    or k < first - period):
                continue
            seen.add(w)
            todo.append(w)
            start = min(start, k)
    return start


def _by_potential(graph: Graph, chains: dict[int, list[int]], chain_of: dict[int, int],
                  pos: dict[int, int], start: int) -> dict[int, int]:
    """Step of each folded Node from the graph alone (records without creation order).

    Chain position plus an offset per chain, chosen so that the edges of a spanning
    forest of the folded graph stay inside one step; the edges left crossing steps
    are the carried state (where a step starts is then a convention).
    """
    links: dict[int, list[tuple[int, int]]] = {}
    for s, d in _loop_edges(graph, chain_of):
        cs, cd = chain_of[s], chain_of[d]
        links.setdefault(cs, []).append((cd, pos[d] - pos[s]))
        links.setdefault(cd, []).append((cs, pos[s] - pos[d]))
    offset: dict[int, int] = {}
    for first in [chain_of[start], *sorted(chains)]:
        if first in offset:
            continue
        offset[first] = 0
        queue = [first]
        for c in queue:
            for other, lag in links.get(c, ()):
                if other not in offset:
                    offset[other] = offset[c] - lag
                    queue.append(other)
    step = {v: pos[v] + offset[chain_of[v]] for v in chain_of}
    # Gradients flow from later steps into earlier ones: number the steps that way.
    if sum(step[s] - step[d] for s, d in _loop_edges(graph, chain_of)) < 0:
        step = {v: -k for v, k in step.items()}
    return step
