"""Views of a `Graph`: DOT text, SVG/PNG through Graphviz `dot`, self-contained HTML.

Everything here reads records only (no torch). DOT text never needs Graphviz; SVG
and PNG run the `dot` binary in a subprocess with a timeout, so a slow layout
degrades to a cheaper drawing instead of stalling a notebook.

Drawing choices are arguments of the drawing calls, never stored in the `Graph`:
`group_modules` and `depth` (clusters by nn.Module), `rollup`/`expand` (repeated
blocks drawn once, via the `roll_up` transform), `direction` ("backward": loss on
top, the default; "forward": inputs on top) and `show_attrs` (a Node's non-tensor
saved attributes in its box).

Layout policy: `dot` is fast on chains and trees but slow on hubs, e.g. the
AccumulateGrad of a weight used at every step of an unrolled RNN (hundreds of
in-edges). Above `hub_copies` in-edges such a leaf is drawn once per consumer,
a small copy beside each use. The mirror image is a Node with many next functions
far below it, e.g. the StackBackward0 of a decoder's per-step outputs: every rank
an edge crosses is one more node for `dot` to place, so above `fanout_copies`
next functions its long edges start from dashed copies of it beside each target.
Graphs above 300 Nodes also get cheaper `dot` settings (the capped simplex below,
fewer crossing-minimisation passes, straight edges).

Where the time goes in a big graph: `dot` is nearly all spent in the network
simplex that places nodes horizontally (the 300-step LSTMCell graph: 4 s of 6 s,
about 6,000 iterations over a 20,000-node auxiliary graph). `nslimit` caps those
iterations at nslimit x nodes, so only a value well below 1 bites; with
`newrank=true` the ranking is done in one global pass, the tree the simplex
starts from is already close, and the capped run finishes in under a second
with a narrower drawing than the uncapped one.

Timeouts: a layout that exceeds `timeout` is retried with the cheapest policy
(unless it already was the cheapest) and then replaced by a summary table that
says what to draw instead; `subprocess.TimeoutExpired` never reaches the caller
(`LayoutTimeout` does, naming the fix, where there is nothing smaller to draw).
Whether that happens depends on the machine's speed and load, so a drawing that
relies on the fallback is NOT deterministic. Notebooks (whose stored outputs
nbval compares) must only draw graphs that lay out well inside the timeout: in
practice a few hundred Nodes, far below the graphs in benchmarks/graph_scale.py.
The same summary stands in for a PNG larger than Graphviz's bitmap limit.
"""
from __future__ import annotations

import functools
import html as _html
import json
import os
import re
import shutil
import struct
import subprocess
import warnings
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..style import SMALL_PT
from .records import DIRECTIONS, Direction, Graph, GraphNode
from .rollup import LOOP, roll_up

__all__ = [
    "GraphvizNotFound",
    "LayoutTimeout",
    "LayoutPolicy",
    "choose_policy",
    "to_dot",
    "dot_to_svg",
    "clean_svg",
    "render_svg",
    "render_png",
    "render_html",
    "save",
    "SVG",
    "PNG_MAX_PIXELS",
]

INSTALL_HINT = (
    "Graphviz's `dot` program is not on PATH, so the graph cannot be laid out. Install it with "
    "`apt-get install graphviz` (Debian/Ubuntu), `brew install graphviz` (macOS) or "
    "`conda install -c conda-forge graphviz`. Graph.to_dot() still works without it."
)

#: Graphviz's largest PNG side in pixels; a bigger layout is silently shrunk to fit.
PNG_MAX_PIXELS = 32767


class GraphvizNotFound(RuntimeError):
    """Raised when rendering needs the `dot` binary and it is missing."""


class LayoutTimeout(RuntimeError):
    """Raised when Graphviz `dot` runs past its timeout; the message says what to draw instead.

    Replaces `subprocess.TimeoutExpired`, which names a command line and no way out.
    """


@dataclass(frozen=True)
class LayoutPolicy:
    """How to draw: chosen from graph size and hub in-degree by `choose_policy`."""

    hub_copies: int | None = 4  # AccumulateGrad with more in-edges is drawn per consumer
    # A Node with more next functions than this draws its long edges from a copy of
    # itself beside each far target (see `_far_edges`); None draws every edge in full.
    fanout_copies: int | None = None
    saved: bool = True  # draw saved tensors
    splines: str = "spline"
    cheap: bool = False  # fewer layout passes
    clusters: bool = True
    note: str = ""  # said in the caption when something was left out
    # Network-simplex iterations allowed per node (dot's nslimit/nslimit1); used when `cheap`.
    simplex_per_node: float = 2.0
    newrank: bool = False  # rank in one global pass (a much faster start for the capped simplex)

    def graph_attrs(self) -> dict[str, str]:
        """Graph attributes for `dot`; they override the defaults in `to_dot`."""
        attrs = {"splines": self.splines}
        if self.cheap:
            limit = f"{self.simplex_per_node:g}"
            attrs.update(nslimit=limit, nslimit1=limit, mclimit="0.3", searchsize="20",
                         remincross="false")
        if self.newrank:
            attrs["newrank"] = "true"
        return attrs


def choose_policy(graph: Graph) -> LayoutPolicy:
    """Drawing settings by Node count: full detail up to 300, then the capped simplex (with
    module clusters and straight edges up to 1,500 Nodes; above, no clusters, no edge routing)."""
    n = graph.num_functions
    if n <= 300:
        return LayoutPolicy()
    if n <= 1500:
        # The capped simplex with newrank: about half the layout time of the uncapped one
        # on a 759-Node GPT-2 graph, and a narrower drawing (525 pt wide against 1,906).
        return LayoutPolicy(hub_copies=2, fanout_copies=4, saved=False, splines="line",
                            cheap=True, simplex_per_node=0.05, newrank=True,
                            note="saved tensors not drawn")
    # Above 1,500 Nodes the capped simplex: 0.05 x nodes iterations (see the module docstring).
    return LayoutPolicy(hub_copies=1, fanout_copies=4, saved=False, splines="false", cheap=True,
                        clusters=False, simplex_per_node=0.05, newrank=True,
                        note="saved tensors not drawn")


def _cheaper(policy: LayoutPolicy) -> LayoutPolicy | None:
    """The cheapest policy to retry with after a timeout, or None if `policy` already is it.

    Only the layout settings are compared: a retry that differs in its caption note
    alone would miss the `_run_dot` cache and run the same layout a second time.
    """
    cheapest = replace(policy, hub_copies=1, fanout_copies=4, saved=False, splines="false",
                       cheap=True, clusters=False, simplex_per_node=0.05, newrank=True,
                       note="simplified layout; saved tensors not drawn")
    return None if replace(cheapest, note=policy.note) == policy else cheapest


_FILL = {
    "function": "#e8e8e8",
    "param": "#add8e6",
    "leaf": "#d5e8f0",
    "output": "#b8e0a0",
    "saved": "#ffd199",
}
_ACCUMULATE_FILL = "#c9e2ef"


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _shape(shape: tuple[int, ...] | None) -> str:
    return "" if shape is None else str(tuple(shape))


def _label(n: GraphNode, show_attrs: bool) -> str:
    if n.kind == "function":
        lines = [n.name if n.step is None else f"{n.step}. {n.name}"]
        if show_attrs:
            lines.extend(f"{k}={v}" for k, v in n.attrs)
    else:
        lines = [n.name, _shape(n.shape)]
        if n.kind == "saved" and n.saved_state != "alive":
            lines.append(n.saved_state or "")
    # Empty parts (no shape: a freed or packed tensor) leave no blank line.
    return "\n".join(line for line in lines if line)


def _node_line(name: str, n: GraphNode, prefix: str, fill: str | None, show_attrs: bool) -> str:
    if fill is None:
        is_acc = n.kind == "function" and n.name == "AccumulateGrad"
        fill = _ACCUMULATE_FILL if is_acc else _FILL[n.kind]
    style = f'fillcolor="{fill}"'
    if n.kind == "saved":
        style += f", fontsize={SMALL_PT}, height=0.2"
        if n.saved_state == "freed":
            style += ', style="filled,dashed", fillcolor="#eeeeee", fontcolor="#777777"'
    return f"  {name} [id={_q(prefix + name)}, label={_q(_label(n, show_attrs))}, {style}];"


def _cluster_tree(graph: Graph, members: dict[str, list[str]]) -> list[str]:
    """Nested `subgraph cluster_k` blocks for module paths, sorted for determinism."""
    all_paths: set[str] = set()
    for p in members:
        parts = p.split(".")
        for k in range(1, len(parts) + 1):
            all_paths.add(".".join(parts[:k]))
    children: dict[str, list[str]] = {}
    for p in sorted(all_paths):
        parent = p.rpartition(".")[0] if "." in p else ""
        children.setdefault(parent, []).append(p)
    cluster_ids = {p: i for i, p in enumerate(sorted(all_paths))}
    lines: list[str] = []
    # Iterative pre-order with explicit close markers.
    stack: list[tuple[str, bool]] = [(p, False) for p in reversed(children.get("", []))]
    while stack:
        p, closing = stack.pop()
        if closing:
            lines.append("  }")
            continue
        if p in graph.rolled:
            label = graph.rolled[p][0]
            color = "#fff2cc"
        else:
            t = graph.module_types.get(p)
            shown = p.removeprefix(LOOP + ".")  # a module inside the folded loop step
            label = f"{shown} ({t})" if t else shown
            color = "#f7f7f7"
        lines.append(f"  subgraph cluster_{cluster_ids[p]} {{")
        lines.append(f'  label={_q(label)}; style="rounded,filled"; fillcolor="{color}"; '
                     "fontsize=10;")
        lines.extend(members.get(p, []))
        stack.append((p, True))
        stack.extend((c, False) for c in reversed(children.get(p, [])))
    return lines


# Rank span (in Nodes along the longest path below) past which an edge of a fan-out
# Node is drawn from a copy: each rank an edge crosses is one more node for `dot`.
_FAR_SPAN = 8


def _far_edges(graph: Graph, limit: int | None) -> set[int]:
    """Indices into `graph.edges` of the long edges of Nodes with more than `limit` of them.

    The shape this is for: `torch.stack` of an unrolled decoder's per-step outputs. Its
    StackBackward0 has one next function per step, and the edge to step 1 crosses every
    rank of the unrolled chain; 50 such edges made `dot` lay out ~28,000 virtual nodes
    (8 s for a 50-step GRUCell decoder). Ranks are estimated by each Node's height (the
    longest path below it), which is what places a Node in a chain.
    """
    if limit is None:
        return set()
    out: dict[int, list[int]] = {}
    for k, (s, _) in enumerate(graph.edges):
        out.setdefault(s, []).append(k)
    wide = {s: ks for s, ks in out.items() if len(ks) > limit}
    if not wide:
        return set()
    height = _heights(graph, out)
    return {k for s, ks in wide.items() for k in ks
            if height[s] - height[graph.edges[k][1]] > _FAR_SPAN}


def _heights(graph: Graph, out: dict[int, list[int]]) -> dict[int, int]:
    """Longest path (in edges) from each function Node down to a Node with no next function."""
    height: dict[int, int] = {}
    for root in out:
        if root in height:
            continue
        stack: list[tuple[int, bool]] = [(root, False)]  # iterative post-order: chains are deep
        while stack:
            v, done = stack.pop()
            if done:
                height[v] = max((height[graph.edges[k][1]] + 1 for k in out.get(v, ())),
                                default=0)
                continue
            if v in height:
                continue
            stack.append((v, True))
            stack.extend((graph.edges[k][1], False) for k in out.get(v, ())
                         if graph.edges[k][1] not in height)
    return height


def _drawn(graph: Graph, *, group_modules: bool, depth: int | None, rollup: bool,
           expand: Iterable[str]) -> Graph:
    """Check the module options and apply roll-up: the graph the drawing shows."""
    if not isinstance(graph, Graph):
        raise TypeError(f"expected a Graph from autogradviz.trace(), got {type(graph).__name__}")
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 1):
        raise ValueError(f"depth must be a positive int or None, got {depth!r}")
    # rollup alone works without modules: it still folds the steps of a loop.
    if (group_modules or depth is not None) and not graph.module_types:
        raise ValueError(
            "group_modules/depth need to know which module produced each Node; record "
            "the forward with `with autogradviz.record_modules(model) as rec: out = model(x)`, "
            "trace with trace(out, params=model, modules=rec), then draw with "
            "g.svg(group_modules=True)"
        )
    return roll_up(graph, expand=expand) if rollup else graph


def to_dot(graph: Graph, *, policy: LayoutPolicy | None = None, id_prefix: str = "",
           colors: dict[int, str] | None = None, group_modules: bool = False,
           depth: int | None = None, rollup: bool = False, expand: Iterable[str] = (),
           direction: Direction = "backward", show_attrs: bool = False) -> str:
    """DOT text of `graph`. Deterministic: same records and options, same bytes.

    Args:
        policy: layout settings; by default chosen from the graph's size.
        id_prefix: prefix of every element id (several drawings on one page).
        colors: fill colour by node id, overriding the kind's colour (backward stepper).
        group_modules: cluster Nodes by the nn.Module that produced them (the graph
            must be traced with ``modules=``).
        depth: deepest module nesting drawn as clusters (None: all).
        rollup: draw runs of identical blocks once (implies `group_modules`).
        expand: module paths whose repeated blocks stay expanded under `rollup`.
        direction: "backward" (loss on top, arrows as gradients flow) or "forward"
            (inputs on top, arrows in forward order, as torchviz draws).
        show_attrs: write each Node's non-tensor saved attributes (dim, stride, ...)
            in its box.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    graph = _drawn(graph, group_modules=group_modules, depth=depth, rollup=rollup,
                   expand=expand)
    group_modules = group_modules or rollup
    policy = policy or choose_policy(graph)
    nodes = graph.nodes
    colors = colors or {}
    indeg = Counter(d for _, d in graph.edges)
    hubs = set()
    if policy.hub_copies is not None:
        hubs = {n.id for n in nodes if n.kind == "function" and n.name == "AccumulateGrad"
                and indeg[n.id] > policy.hub_copies}
    hanging: dict[int, list[int]] = {}  # AccumulateGrad id -> its leaf tensor ids
    for s, d in graph.tensor_edges:
        if s in hubs:
            hanging.setdefault(s, []).append(d)
    hidden = {d for ds in hanging.values() for d in ds}
    if not policy.saved:
        hidden |= {n.id for n in nodes if n.kind == "saved"}

    members: dict[str, list[str]] = {}
    top: list[str] = []

    def place(n: GraphNode, name: str, copy: bool = False) -> None:
        line = _node_line(name, n, id_prefix, colors.get(n.id), show_attrs)
        if copy:  # a second box of a Node drawn elsewhere: dashed
            line = line[:-2] + ', style="filled,dashed"];'

        mod = n.module
        if group_modules and policy.clusters and mod:
            if depth is not None:
                mod = ".".join(mod.split(".")[:depth])
            members.setdefault(mod, []).append(line)
        else:
            top.append(line)

    forward = direction == "forward"
    edge_lines: list[str] = []

    def edge(a: str, b: str, attrs: str = "") -> None:
        """An edge in gradient direction a -> b, flipped when drawing forward."""
        if forward:
            a, b = b, a
        edge_lines.append(f"  {a} -> {b}{attrs};")

    copy_count: Counter[int] = Counter()
    for n in nodes:
        if n.id in hubs or n.id in hidden:
            continue
        place(n, f"n{n.id}")
    far = _far_edges(graph, policy.fanout_copies)
    carried = set(graph.carried)
    for k, (s, d) in enumerate(graph.edges):
        if (s, d) in carried:
            # Into the step before (a folded loop): dashed, and left out of the ranking,
            # so the one drawn step reads top to bottom.
            edge(f"n{s}", f"n{d}", ' [style=dashed, color="#b04a2f", constraint=false, '
                 f'label="previous step", fontname="Helvetica", fontsize={SMALL_PT}, fontcolor="#b04a2f"]')
        elif k in far and d not in hubs:
            # The edge leaves a dashed copy of `s` placed beside `d` (names n<s>_<k>, as
            # hub copies: the HTML tooltips and tests map a copy back to its Node).
            name = f"n{s}_{copy_count[s]}"
            copy_count[s] += 1
            place(nodes[s], name, copy=True)
            edge(name, f"n{d}")
        elif d in hubs:
            k = copy_count[d]
            copy_count[d] += 1
            name = f"n{d}_{k}"
            place(nodes[d], name)
            for t in hanging.get(d, []):
                place(nodes[t], f"n{t}_{k}")
                edge(name, f"n{t}_{k}", ' [color="#7a9cc6"]')
            edge(f"n{s}", name)
        else:
            edge(f"n{s}", f"n{d}")
    for s, d in graph.tensor_edges:
        if s in hidden or d in hidden or s in hubs:
            continue
        kind = nodes[s].kind
        if kind == "saved":  # undirected: the same in both directions
            edge_lines.append(f'  n{s} -> n{d} [style=dashed, color="#d08a2c", arrowhead=none];')
        elif kind == "output":
            edge(f"n{s}", f"n{d}", ' [color="#5a9a3a"]')
        else:
            edge(f"n{s}", f"n{d}", ' [color="#7a9cc6"]')

    caption = graph.caption() + (f" ({policy.note})" if policy.note else "")
    if graph.title:
        caption = graph.title + "\n" + caption
    out = ["digraph autograd {"]
    attrs = {"rankdir": "TB", "label": _q(caption), "labelloc": "b", "fontname": "Helvetica",
             "fontsize": "11", "nodesep": "0.2", "ranksep": "0.3", "ordering": "out",
             **policy.graph_attrs()}
    if policy.cheap:
        attrs.pop("ordering")
    out.append("  graph [" + ", ".join(f"{k}={v}" for k, v in attrs.items()) + "];")
    # Plain boxes: a rounded box is a long path in SVG, a plain one four points.
    out.append('  node [shape=box, style=filled, fontname="Helvetica", fontsize=9, height=0.25, '
               'margin="0.06,0.03", penwidth=0.7];')
    out.append('  edge [arrowsize=0.5, penwidth=0.7, color="#555555"];')
    out.extend(top)
    if members:
        out.extend(_cluster_tree(graph, members))
    out.extend(edge_lines)
    out.append("}")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- running dot

_COMMENT = re.compile(r"<!--.*?-->\s*", re.S)
_TITLE = re.compile(r"<title>[^<]*</title>\s*")
_PROLOG = re.compile(r"^.*?(?=<svg)", re.S)


_DEFAULT_TEXT = ' font-family="Helvetica,sans-Serif" font-size="9.00"'
_FAMILY = ' font-family="Helvetica,sans-Serif"'
_STROKE = ' stroke-width="0.7"'
# The leading space keeps `id="..."` out and lets the scan skip to candidates fast.
_GEOMETRY = re.compile(r' (points|d)="([^"]*)"')
_DECIMALS = re.compile(r"(\d\.\d)\d+")


def clean_svg(svg: str) -> str:
    """Drop the XML prolog, Graphviz's version comment and per-element titles; compact the rest.

    The version comment would make stored notebook outputs differ between
    machines; titles only repeat internal node names. Font and stroke
    attributes repeated on every element move to the root group (they
    inherit), and coordinates keep one decimal: notebooks must stay small.
    """
    svg = _PROLOG.sub("", svg, count=1)
    svg = _COMMENT.sub("", svg)
    svg = _TITLE.sub("", svg)
    svg = svg.replace(_DEFAULT_TEXT, "").replace(_FAMILY, "").replace(_STROKE, "")
    svg = svg.replace('class="graph"', 'class="graph"' + _DEFAULT_TEXT + _STROKE, 1)
    return _GEOMETRY.sub(_round_geometry, svg)


def _round_geometry(m: re.Match[str]) -> str:
    # A function replacement is about twice as fast as the template r"\1" here.
    return " " + m.group(1) + '="' + _DECIMALS.sub(_first_group, m.group(2)) + '"'


def _first_group(m: re.Match[str]) -> str:
    return m.group(1)


def _dot_binary() -> str:
    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizNotFound(INSTALL_HINT)
    return exe


# Cached because one layout is asked for several times: `Graph._repr_svg_` and an
# explicit `.svg()` of the same graph, a strip redrawing frames it already drew, a
# test comparing two renders. The key is the full DOT text, so equal text is the
# only thing that can hit; a timeout raises and is not cached.
@functools.lru_cache(maxsize=64)
def _run_dot(exe: str, dot: str, fmt: str, timeout: float) -> bytes:
    try:
        proc = subprocess.run([exe, f"-T{fmt}"], input=dot.encode(), capture_output=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        nodes = dot.count(" [id=") or dot.count(" [label=")
        raise LayoutTimeout(
            f"Graphviz `dot` did not lay out this drawing ({nodes:,} boxes) within "
            f"{timeout:g} s"
        ) from None
    if proc.returncode != 0:
        raise RuntimeError(
            f"dot failed ({proc.returncode}): {proc.stderr.decode(errors='replace')[:500]}"
        )
    return proc.stdout


def dot_to_svg(dot: str, *, timeout: float = 30.0) -> str:
    """Lay out DOT text with Graphviz `dot` and return the cleaned SVG (`clean_svg`).

    The one way a view of this package turns its own DOT text into SVG: the same
    cached runner as `render_svg`, so a repeated drawing is laid out once. Raises
    `GraphvizNotFound` without `dot` and `LayoutTimeout` past `timeout` seconds.
    """
    return clean_svg(_run_dot(_dot_binary(), dot, "svg", timeout).decode())


def _short(name: str, limit: int = 60) -> str:
    return name if len(name) <= limit else name[: limit - 3] + "..."


def summary_dot(graph: Graph, note: str) -> str:
    """A small stand-in drawing: Node counts by name, for graphs too big to lay out."""
    counts = Counter(n.name for n in graph.nodes if n.kind == "function")
    rows = "".join(
        f"<tr><td align='left'>{_html.escape(_short(k))}</td><td align='right'>{v}</td></tr>"
        for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:25]
    )
    head = _html.escape(f"{graph.caption()}; {note}")
    return ("digraph summary {\n  node [shape=plaintext, fontname=\"Helvetica\", fontsize=10];\n"
            "  s [label=<<table border='0' cellborder='1' cellspacing='0'><tr><td colspan='2'>"
            f"<b>{head}</b></td></tr>{rows}</table>>];\n}}\n")


# What to do when a `Graph` layout times out (said in the summary table and in errors).
GRAPH_FIX = ("draw fewer boxes with .svg(rollup=True) (repeated blocks and loop steps once), "
             "fewer module clusters with depth=1, or pass a larger timeout=; "
             ".to_dot() gives the text without a layout")

# The summary is a single table: it lays out in milliseconds, so it gets a fixed allowance.
_SUMMARY_TIMEOUT = 30.0


def _layout(graph: Graph, fmt: str, timeout: float, policy: LayoutPolicy | None,
            **options: Any) -> bytes:
    exe = _dot_binary()
    drawn = _drawn(graph, group_modules=options.get("group_modules", False),
                   depth=options.get("depth"), rollup=options.get("rollup", False),
                   expand=options.get("expand", ()))
    policy = policy or choose_policy(drawn)
    attempts = [policy]
    cheaper = _cheaper(policy)
    if cheaper is not None:
        attempts.append(cheaper)
    for p in attempts:
        try:
            return _run_dot(exe, to_dot(graph, policy=p, **options), fmt, timeout)
        except LayoutTimeout:
            continue
    note = f"layout took over {timeout:g} s, showing Node counts; {GRAPH_FIX}"
    try:
        return _run_dot(exe, summary_dot(drawn, note), fmt, _SUMMARY_TIMEOUT)
    except LayoutTimeout as err:  # a machine too busy for even a one-box layout
        raise LayoutTimeout(f"{err}; {GRAPH_FIX}") from None


def render_svg(graph: Graph, *, timeout: float = 30.0, policy: LayoutPolicy | None = None,
               **options: Any) -> str:
    """SVG text (cleaned, deterministic for a given Graphviz version).

    `options` are the drawing options of `to_dot`. Deterministic only while the
    layout finishes inside `timeout` seconds; past it the drawing falls back to a
    cheaper one (see the module docstring), so notebooks draw only graphs that lay
    out well inside it.
    """
    return clean_svg(_layout(graph, "svg", timeout, policy, **options).decode())


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) in pixels from a PNG's header."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG image")
    width, height = struct.unpack(">II", png[16:24])
    return width, height


def render_png(graph: Graph, *, timeout: float = 30.0, policy: LayoutPolicy | None = None,
               **options: Any) -> bytes:
    """PNG bytes. A layout past Graphviz's 32,767-pixel limit becomes the summary table.

    Graphviz shrinks such a layout to fit without a word (a 20,000-Node chain came
    out 17 x 32,767 px, unreadable); here it warns and draws the Node-count summary,
    as after a timeout. `.svg()` and `.html()` have no such limit.
    """
    png = _layout(graph, "png", timeout, policy, **options)
    width, height = png_size(png)
    if max(width, height) < PNG_MAX_PIXELS:
        return png
    warnings.warn(
        f"the layout is larger than Graphviz's {PNG_MAX_PIXELS:,}-pixel PNG limit and would be "
        f"shrunk to {width} x {height} px; drawing the Node-count summary instead. Use "
        "g.svg() or g.html() (no size limit) or g.save('graph.svg') for the full drawing",
        UserWarning, stacklevel=2,
    )
    drawn = _drawn(graph, group_modules=options.get("group_modules", False),
                   depth=options.get("depth"), rollup=options.get("rollup", False),
                   expand=options.get("expand", ()))
    note = f"over the {PNG_MAX_PIXELS:,} px PNG limit, showing Node counts; use SVG or HTML"
    return _run_dot(_dot_binary(), summary_dot(drawn, note), "png", _SUMMARY_TIMEOUT)


# ---------------------------------------------------------------- HTML

_HTML = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body{{margin:0;font-family:Helvetica,Arial,sans-serif}}
#avz-bar{{padding:4px 8px;font-size:13px;background:#f4f4f4;border-bottom:1px solid #ddd}}
#avz-view{{width:100vw;height:calc(100vh - 30px);overflow:hidden;cursor:grab}}
#avz-view svg{{width:100%;height:100%}}
#avz-tip{{position:fixed;display:none;background:#fffff0;border:1px solid #999;padding:4px 6px;
font-size:12px;pointer-events:none;max-width:420px;white-space:pre}}
g.node:hover polygon,g.node:hover path{{stroke:#d33;stroke-width:2}}
</style></head><body>
<div id="avz-bar">{caption} &mdash; drag to pan, wheel to zoom, hover a box for details</div>
<div id="avz-view">{svg}</div><div id="avz-tip"></div>
<script>
(function(){{
var details={details};
var view=document.getElementById('avz-view'),svg=view.querySelector('svg');
var tip=document.getElementById('avz-tip');
var vb=svg.viewBox.baseVal,drag=null;
svg.removeAttribute('width');svg.removeAttribute('height');
view.addEventListener('wheel',function(e){{e.preventDefault();var r=svg.getBoundingClientRect();
var f=e.deltaY>0?1.15:1/1.15,mx=vb.x+(e.clientX-r.left)/r.width*vb.width,
my=vb.y+(e.clientY-r.top)/r.height*vb.height;
vb.x=mx-(mx-vb.x)*f;vb.y=my-(my-vb.y)*f;vb.width*=f;vb.height*=f;}},{{passive:false}});
view.addEventListener('mousedown',function(e){{drag={{x:e.clientX,y:e.clientY}};
view.style.cursor='grabbing';}});
window.addEventListener('mouseup',function(){{drag=null;view.style.cursor='grab';}});
window.addEventListener('mousemove',function(e){{if(!drag)return;var r=svg.getBoundingClientRect();
vb.x-=(e.clientX-drag.x)/r.width*vb.width;vb.y-=(e.clientY-drag.y)/r.height*vb.height;
drag={{x:e.clientX,y:e.clientY}};}});
svg.querySelectorAll('g.node').forEach(function(g){{
var key=g.id.replace(/_\\d+$/,''),d=details[key];if(!d)return;
g.addEventListener('mousemove',function(e){{
tip.textContent=d.map(function(kv){{return kv[0]+': '+kv[1];}}).join('\\n');
tip.style.display='block';tip.style.left=(e.clientX+12)+'px';
tip.style.top=(e.clientY+12)+'px';}});
g.addEventListener('mouseleave',function(){{tip.style.display='none';}});}});
}})();
</script></body></html>
"""


def render_html(graph: Graph, *, timeout: float = 30.0, policy: LayoutPolicy | None = None,
                **options: Any) -> str:
    """A self-contained page: inline SVG plus inline JS/CSS. It makes no requests.

    `options` are the drawing options of `to_dot`.
    """
    drawn = _drawn(graph, group_modules=options.get("group_modules", False),
                   depth=options.get("depth"), rollup=options.get("rollup", False),
                   expand=options.get("expand", ()))
    if options.pop("rollup", False) and drawn.module_types:
        options["group_modules"] = True
    options.pop("expand", None)
    svg = render_svg(drawn, timeout=timeout, policy=policy, **options)
    details = {f"n{n.id}": [list(kv) for kv in n.details] for n in drawn.nodes}
    payload = json.dumps(details, separators=(",", ":"), sort_keys=True).replace("</", "<\\/")
    return _HTML.format(title=_html.escape(drawn.title or "autograd graph"),
                        caption=_html.escape(drawn.caption()), svg=svg, details=payload)


def save(graph: Graph, path: str | os.PathLike[str], **options: Any) -> None:
    """Write `.dot`, `.svg`, `.png` or `.html`, chosen by the suffix of `path`.

    `options` go to the view: drawing options of `to_dot`, and `timeout` for the
    formats that run Graphviz.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in (".dot", ".gv"):
        options.pop("timeout", None)
        p.write_text(to_dot(graph, **options))
    elif suffix == ".svg":
        p.write_text(render_svg(graph, **options))
    elif suffix == ".png":
        p.write_bytes(render_png(graph, **options))
    elif suffix in (".html", ".htm"):
        p.write_text(render_html(graph, **options))
    else:
        raise ValueError(f"cannot tell the format from {p.name!r}; use a path ending in .dot, "
                         ".svg, .png or .html")


class SVG:
    """An SVG string that Jupyter displays as an image (and stores as image/svg+xml)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def _repr_svg_(self) -> str:
        return self.text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"SVG({len(self.text)} characters)"
