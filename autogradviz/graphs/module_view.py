"""The module-level view of a `ModuleGraph`: one box per module call, DOT and SVG.

Reads records only (no torch). What is drawn:

- A call with no recorded child calls is a box: relative name, class, input and
  output shapes, parameter count. A call with children is a cluster around them;
  the model itself is the canvas.
- Joining ops (`OpCall`, e.g. the residual ``x + attn(x)``) are small ellipses in
  the cluster of the module whose forward ran them.
- Edges follow the data. An edge whose tensor went through functional ops
  carries their names (``gelu``); ops on the way are otherwise not drawn.

Roll-up (``rollup=True``): a run of CONSECUTIVE calls of one module (same qualified
name, same parent call, nothing else drawn between them, the same structure
inside) becomes one box or cluster marked ``×N``. It shows the shapes of the first
call and says so when later calls had other shapes. Data passed from one call of
the run to the next is a dashed "next call" edge (a loop on a box). Calls of one
module that are NOT consecutive (a layer applied at two places) stay separate
boxes marked "call k of n": merging them would draw a cycle that the model does
not have. Modules that share a parameter (tied weights) say so in their label.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..records import TensorMeta
from ..style import SMALL_PT
from .records import ModuleCall, ModuleGraph, OpCall
from .render import LayoutTimeout, dot_to_svg

__all__ = ["to_dot", "render_svg", "drawn_nodes", "DIRECTIONS"]

#: Graphviz rank directions accepted by `to_dot`.
DIRECTIONS = ("TB", "LR", "BT", "RL")

_SHAPES_PER_LINE = 2
_MAX_SHAPES = 6
_FILL = {"box": "#e8eef7", "rolled": "#fff2cc", "op": "#eeeeee", "input": "#d9ead3",
         "output": "#b8e0a0", "anchor": "#f4f4f4"}


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _shape(m: TensorMeta) -> str:
    dims = str(tuple(m.shape))  # Python's spelling: (16,) and () for a scalar
    return dims if m.dtype == "float32" else f"{dims} {m.dtype}"


def _shapes(prefix: str, metas: Iterable[TensorMeta]) -> list[str]:
    """`prefix` and the shapes, two to a line, so no box grows wider than it must."""
    items = [_shape(m) for m in metas]
    if not items:
        return []
    more = len(items) - _MAX_SHAPES
    items = items[:_MAX_SHAPES] + ([f"+{more} more"] if more > 0 else [])
    return [(prefix if k == 0 else "") + ", ".join(items[k:k + _SHAPES_PER_LINE])
            for k in range(0, len(items), _SHAPES_PER_LINE)]


def _key(kind: str, index: int) -> str:
    return f"{kind}:{index}"


class _Layout:
    """Which calls are boxes or clusters once runs are rolled up, and where edges go."""

    def __init__(self, g: ModuleGraph, rollup: bool) -> None:
        self.g = g
        self.children: dict[int, list[str]] = {}
        items: list[tuple[int, str, int]] = [(c.order, _key("call", c.index), c.parent)
                                             for c in g.calls if c.parent is not None]
        items += [(o.order, _key("op", o.index), o.parent) for o in g.ops]
        for _, key, parent in sorted(items):
            self.children.setdefault(parent, []).append(key)
        self.has_calls = {i for i, keys in self.children.items()
                          if any(k.startswith("call:") for k in keys)}
        self.mapping: dict[str, str] = {}  # key in a later call of a run -> key in the first
        self.inst: dict[str, dict[str, int]] = {}  # key -> {run's first call: call number in it}
        self.runs: dict[int, int] = {}  # rep call -> calls in its run
        self.varies: set[int] = set()  # rep calls whose run had other shapes
        self._sigs: dict[str, Any] = {}
        if rollup and g.calls:
            self._roll(0)

    # -- roll-up ------------------------------------------------------------------------

    def _sig(self, key: str) -> Any:
        if key not in self._sigs:
            kind, i = key.split(":")
            if kind == "op":
                self._sigs[key] = ("op", self.g.ops[int(i)].name)
            else:
                c = self.g.calls[int(i)]
                self._sigs[key] = (c.name, c.type,
                                   tuple(self._sig(k) for k in self.children.get(c.index, [])))
        return self._sigs[key]

    def _preorder(self, key: str) -> list[str]:
        out, stack = [], [key]
        while stack:
            k = stack.pop()
            out.append(k)
            if k.startswith("call:"):
                stack.extend(reversed(self.children.get(int(k[5:]), [])))
        return out

    def _roll(self, call: int) -> None:
        stack = [call]
        while stack:
            keys = self.children.get(stack.pop(), [])
            i = 0
            while i < len(keys):
                j = i + 1
                if keys[i].startswith("call:"):
                    while j < len(keys) and self._sig(keys[j]) == self._sig(keys[i]):
                        j += 1
                if j - i >= 2:
                    rep = int(keys[i][5:])
                    self.runs[rep] = j - i
                    rep_keys = self._preorder(keys[i])
                    for k, inst in enumerate(keys[i:j]):
                        for a, b in zip(self._preorder(inst), rep_keys):
                            self.inst.setdefault(a, {})[keys[i]] = k
                            if k:
                                self.mapping[a] = b
                            if k and a.startswith("call:") and self._io(a) != self._io(b):
                                self.varies.add(int(b[5:]))
                if keys[i].startswith("call:"):
                    stack.append(int(keys[i][5:]))
                i = j

    def _io(self, key: str) -> tuple[Any, Any]:
        c = self.g.calls[int(key[5:])]
        return tuple(m.shape for m in c.inputs), tuple(m.shape for m in c.outputs)

    def resolve(self, key: str) -> tuple[str, dict[str, int]]:
        """The drawn representative of `key`, and its instance number in each run on the way."""
        seen: dict[str, int] = {}
        while True:
            for run, k in self.inst.get(key, {}).items():
                seen.setdefault(run, k)  # the outer run's number was found first
            if key not in self.mapping:
                return key, seen
            key = self.mapping[key]

    # -- boxes ------------------------------------------------------------------------

    def is_box(self, call: int) -> bool:
        return call not in self.has_calls

    def fold(self, key: str) -> str:
        """The drawn endpoint of `key`: ops inside a box fold into the box."""
        if key.startswith("op:"):
            parent = self.g.ops[int(key[3:])].parent
            if self.is_box(parent):
                return _key("call", parent)
        return key


def _edge_label(via: tuple[str, ...]) -> str:
    names = list(dict.fromkeys(via))  # order kept, repeats dropped
    return ", ".join(names[:2]) + (", …" if len(names) > 2 else "")


def to_dot(graph: ModuleGraph, *, rollup: bool = True, direction: str = "TB") -> str:
    """DOT text of the module view. Deterministic: the same record gives the same bytes."""
    if not isinstance(graph, ModuleGraph):
        raise TypeError(f"to_dot() takes a ModuleGraph, got {type(graph).__name__}; "
                        "make one with autogradviz.trace_modules(model, x)")
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    lay = _Layout(graph, rollup)
    calls, ops = graph.calls, graph.ops

    # Edges first: a cluster that is itself the producer of a tensor (it returned its
    # input, or a tensor made from constants) needs a small anchor node to start from.
    edges: list[tuple[str, str, str]] = []
    seen: set[tuple[str, str, str]] = set()
    anchors: set[int] = set()
    pending: list[tuple[str, str, str]] = []
    for e in graph.edges:
        src, s_runs = lay.resolve(e.src)
        dst, d_runs = lay.resolve(e.dst)
        s, d = lay.fold(src), lay.fold(dst)
        recurrent = any(run in d_runs and d_runs[run] != k for run, k in s_runs.items())
        if s == d and not recurrent:
            continue  # inside one box
        if recurrent:
            style = 'style=dashed, color="#c77c00", constraint=false, label="next call"'
        elif e.kind == "ops" and e.via:
            style = f'label={_q(_edge_label(e.via))}'
        else:
            style = ""
        if s.startswith("call:") and not lay.is_box(int(s[5:])):
            anchors.add(int(s[5:]))
        pending.append((s, d, style))
    for s, d, style in pending:
        if d.startswith("call:") and not lay.is_box(int(d[5:])) and int(d[5:]) not in anchors:
            continue  # a cluster's inputs are drawn as edges into the calls inside it
        if (s, d, style) not in seen:
            seen.add((s, d, style))
            edges.append((s, d, style))

    # Non-consecutive reuse: number the drawn calls of each module.
    drawn = [c for c in calls if _key("call", c.index) not in lay.mapping]
    per_name: dict[str, list[int]] = {}
    for c in drawn:
        if c.parent is not None:
            per_name.setdefault(c.name, []).append(c.index)

    def rel_name(c: ModuleCall) -> str:
        parent = calls[c.parent] if c.parent is not None else None
        if parent is not None and parent.name and c.name.startswith(parent.name + "."):
            return c.name[len(parent.name) + 1:]
        return c.name or c.type

    def title(c: ModuleCall) -> list[str]:
        head = f"{rel_name(c)}: {c.type}" if c.name else c.type
        n = lay.runs.get(c.index)
        lines = [head + (f" ×{n}" if n else "")]
        same = per_name.get(c.name, [])
        if len(same) > 1:
            lines.append(f"call {same.index(c.index) + 1} of {len(same)}")
        return lines

    def params(c: ModuleCall) -> list[str]:
        if not c.num_params:
            return []
        tied = f" · tied: {', '.join(c.tied_with)}" if c.tied_with else ""
        return [f"params {c.num_params:,}{tied}"]

    def io(c: ModuleCall) -> list[str]:
        lines = _shapes("in ", c.inputs) + _shapes("out ", c.outputs)
        if c.index in lay.varies:
            lines.append("(first call; shapes vary)")
        return lines

    def box_line(c: ModuleCall) -> str:
        label = "\n".join(title(c) + io(c) + params(c))
        fill = _FILL["rolled"] if c.index in lay.runs else _FILL["box"]
        return f'  c{c.index} [label={_q(label)}, fillcolor="{fill}"];'

    def op_line(o: OpCall) -> str:
        return (f'  f{o.index} [label={_q(o.name)}, shape=ellipse, fillcolor="{_FILL["op"]}", '
                f'fontsize={SMALL_PT}, height=0.2, width=0.3, margin="0.02,0.01"];')

    def node_name(key: str) -> str:
        kind, i = key.split(":")
        if kind == "call":
            return f"a{i}" if int(i) in anchors else f"c{i}"
        return {"op": "f", "input": "i", "output": "o"}[kind] + i

    # Tree of drawn calls: boxes are lines, clusters are nested subgraphs.
    out = ["digraph modules {"]
    caption = graph.caption() + (" · repeated calls rolled up" if lay.runs else "")
    out.append(f'  graph [rankdir={direction}, label={_q(caption)}, labelloc=b, '
               'fontname="Helvetica", fontsize=10, nodesep=0.25, ranksep=0.3];')
    out.append('  node [shape=box, style="filled", fontname="Helvetica", fontsize=9, '
               'height=0.3, margin="0.08,0.04", penwidth=0.7];')
    out.append('  edge [arrowsize=0.5, penwidth=0.7, color="#555555", fontname="Helvetica", '
               f'fontsize={SMALL_PT}, fontcolor="#666666"];')
    for k, m in enumerate(graph.inputs):
        label = f"input {m.path}\n{_shape(m)}"
        out.append(f'  i{k} [label={_q(label)}, style="rounded,filled", '
                   f'fillcolor="{_FILL["input"]}"];')

    root_is_box = bool(calls) and lay.is_box(0)
    cluster_no = 0
    # Iterative pre-order with explicit close markers (nesting can be deep).
    stack: list[tuple[str, bool]] = []
    if root_is_box:
        out.append(box_line(calls[0]))
    elif calls:
        stack = [(k, False) for k in reversed(lay.children.get(0, []))]
        if 0 in anchors:
            out.append(f'  a0 [label="{calls[0].type} output", shape=box, fontsize={SMALL_PT}, '
                       f'fillcolor="{_FILL["anchor"]}"];')
    while stack:
        key, closing = stack.pop()
        if closing:
            out.append("  }")
            continue
        if key in lay.mapping:
            continue  # a later call of a rolled run
        kind, i = key.split(":")
        if kind == "op":
            out.append(op_line(ops[int(i)]))
            continue
        c = calls[int(i)]
        if lay.is_box(c.index):
            out.append(box_line(c))
            continue
        fill = _FILL["rolled"] if c.index in lay.runs else "#f7f7f7"
        label = "\n".join(title(c) + params(c))
        out.append(f"  subgraph cluster_{cluster_no} {{")
        cluster_no += 1
        out.append(f'  label={_q(label)}; labeljust=l; labelloc=t; style="rounded,filled"; '
                   f'fillcolor="{fill}"; color="#999999"; fontsize=9;')
        if c.index in anchors:
            alabel = "\n".join([f"{c.type} output"] + _shapes("", c.outputs))
            out.append(f'  a{c.index} [label={_q(alabel)}, fontsize={SMALL_PT}, '
                       f'fillcolor="{_FILL["anchor"]}"];')
        stack.append((key, True))
        stack.extend((k, False) for k in reversed(lay.children.get(c.index, [])))

    for k, m in enumerate(graph.outputs):
        label = f"{m.path}\n{_shape(m)}"
        out.append(f'  o{k} [label={_q(label)}, style="rounded,filled", '
                   f'fillcolor="{_FILL["output"]}"];')
    for s, d, style in edges:
        attrs = f" [{style}]" if style else ""
        out.append(f"  {node_name(s)} -> {node_name(d)}{attrs};")
    out.append("}")
    return "\n".join(out) + "\n"


def drawn_nodes(dot: str) -> int:
    """Nodes in DOT text made by `to_dot` (the count a benchmark reports)."""
    return sum(1 for line in dot.splitlines()
               if line.startswith("  ") and " [label=" in line and "->" not in line)


def render_svg(graph: ModuleGraph, *, rollup: bool = True, direction: str = "TB",
               timeout: float = 30.0) -> str:
    """SVG text through Graphviz `dot` (the package's runner and SVG clean-up)."""
    dot = to_dot(graph, rollup=rollup, direction=direction)
    try:
        return dot_to_svg(dot, timeout=timeout)
    except LayoutTimeout as err:
        fix = ("record fewer calls with trace_modules(model, ..., depth=1)"
               + ("" if rollup else ", draw repeated calls once with .svg(rollup=True)")
               + ", or pass a larger .svg(timeout=...); .to_dot() gives the text without a layout")
        raise LayoutTimeout(f"{err}; {fix}") from None
