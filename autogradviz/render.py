"""Views of a `Graph`: DOT text, SVG/PNG through Graphviz `dot`, self-contained HTML.

Everything here reads records only. DOT text never needs Graphviz; SVG and PNG
run the `dot` binary in a subprocess with a timeout, so a slow layout degrades
to a cheaper drawing instead of stalling a notebook.

Layout policy: `dot` is fast on chains and trees but slow on hubs, e.g. the
AccumulateGrad of a weight used at every step of an unrolled RNN (hundreds of
in-edges). Above `hub_copies` in-edges such a leaf is drawn once per consumer,
a small copy beside each use. Large graphs also get cheaper `dot` settings
(fewer network-simplex and crossing-minimisation passes, straight edges).

Where the time goes in a big graph: `dot` is nearly all spent in the network
simplex that places nodes horizontally (the 300-step LSTMCell graph: 4 s of 6 s,
about 6,000 iterations over a 20,000-node auxiliary graph). `nslimit` caps those
iterations at nslimit x nodes, so only a value well below 1 bites; with
`newrank=true` the ranking is done in one global pass, the tree the simplex
starts from is already close, and the capped run finishes in under a second
with a narrower drawing than the uncapped one.

Timeouts: a layout that exceeds `timeout` is retried with the cheapest policy
and then replaced by a summary table. Whether that happens depends on the
machine's speed and load, so a drawing that relies on the fallback is NOT
deterministic. Notebooks (whose stored outputs nbval compares) must only draw
graphs that lay out well inside the timeout: in practice a few hundred Nodes,
far below the graphs in benchmarks/graph_scale.py.
"""
from __future__ import annotations

import functools
import hashlib
import html as _html
import json
import os
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .graph import FUNCTION, LEAF, OUTPUT, PARAM, SAVED, Graph, GraphNode

__all__ = [
    "GraphvizNotFound",
    "LayoutPolicy",
    "choose_policy",
    "to_dot",
    "render_svg",
    "render_png",
    "render_html",
    "save",
    "SVG",
    "compose_strip",
    "human_bytes",
]

INSTALL_HINT = (
    "Graphviz's `dot` program is not on PATH, so the graph cannot be laid out. Install it with "
    "`apt-get install graphviz` (Debian/Ubuntu), `brew install graphviz` (macOS) or "
    "`conda install -c conda-forge graphviz`. Graph.to_dot() still works without it."
)


class GraphvizNotFound(RuntimeError):
    """Raised when rendering needs the `dot` binary and it is missing."""


def human_bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


@dataclass(frozen=True)
class LayoutPolicy:
    """How to draw: chosen from graph size and hub in-degree by `choose_policy`."""

    hub_copies: int | None = 4  # AccumulateGrad with more in-edges is drawn per consumer
    saved: bool = True  # draw saved tensors
    splines: str = "spline"
    cheap: bool = False  # fewer layout passes
    clusters: bool = True
    note: str = ""  # said in the caption when something was left out
    # Network-simplex iterations allowed per node (dot's nslimit/nslimit1); used when `cheap`.
    simplex_per_node: float = 2.0
    newrank: bool = False  # rank the whole graph in one pass (much faster start for the capped simplex)

    def graph_attrs(self) -> dict[str, str]:
        """Graph attributes for `dot`; they override the defaults in `to_dot`."""
        attrs = {"splines": self.splines}
        if self.cheap:
            limit = f"{self.simplex_per_node:g}"
            attrs.update(nslimit=limit, nslimit1=limit, mclimit="0.3", searchsize="20", remincross="false")
        if self.newrank:
            attrs["newrank"] = "true"
        return attrs


def choose_policy(graph: Graph) -> LayoutPolicy:
    """Drawing settings by Node count: full detail up to 300, cheaper passes up to 1,500, then capped."""
    n = graph.num_functions
    if n <= 300:
        return LayoutPolicy()
    if n <= 1500:
        return LayoutPolicy(hub_copies=2, saved=False, splines="line", cheap=True, note="saved tensors not drawn")
    # Above 1,500 Nodes the capped simplex: 0.05 x nodes iterations (see the module docstring).
    return LayoutPolicy(hub_copies=1, saved=False, splines="false", cheap=True, clusters=False,
                        simplex_per_node=0.05, newrank=True, note="saved tensors not drawn")


def _cheaper(policy: LayoutPolicy) -> LayoutPolicy:
    return replace(policy, hub_copies=1, saved=False, splines="false", cheap=True, clusters=False,
                   simplex_per_node=0.05, newrank=True, note="simplified layout; saved tensors not drawn")


_STYLE = {
    FUNCTION: 'fillcolor="#e8e8e8"',
    PARAM: 'fillcolor="#add8e6"',
    LEAF: 'fillcolor="#d5e8f0"',
    OUTPUT: 'fillcolor="#b8e0a0"',
    SAVED: 'fillcolor="#ffd199", fontsize=8, height=0.2',
}


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _shape(shape: tuple[int, ...] | None) -> str:
    if shape is None:
        return ""
    return str(tuple(shape))


def _label(n: GraphNode) -> str:
    if n.kind == FUNCTION:
        return n.name if n.step is None else f"{n.step}. {n.name}"
    if n.kind == SAVED:
        state = "" if n.alive else ("\nfreed" if n.alive is False else "\npacked")
        return f"{n.name}\n{_shape(n.shape)}{state}".rstrip("\n")
    return f"{n.name}\n{_shape(n.shape)}".rstrip("\n")


def _node_line(name: str, n: GraphNode, prefix: str) -> str:
    style = _STYLE[n.kind]
    extra = ""
    if n.kind == FUNCTION and n.name == "AccumulateGrad":
        style = 'fillcolor="#c9e2ef"'
    if n.kind == SAVED and n.alive is False:
        extra = ', style="filled,dashed", fillcolor="#eeeeee", fontcolor="#777777"'
    return f"  {name} [id={_q(prefix + name)}, label={_q(_label(n))}, {style}{extra}];"


def _cluster_tree(graph: Graph, members: dict[str, list[str]]) -> list[str]:
    """Nested `subgraph cluster_k` blocks for module paths, sorted for determinism."""
    paths = sorted(members)
    all_paths: set[str] = set()
    for p in paths:
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
            label = f"{p} ({t})" if t else p
            color = "#f7f7f7"
        lines.append(f"  subgraph cluster_{cluster_ids[p]} {{")
        lines.append(f'  label={_q(label)}; style="rounded,filled"; fillcolor="{color}"; fontsize=10;')
        lines.extend(members.get(p, []))
        stack.append((p, True))
        stack.extend((c, False) for c in reversed(children.get(p, [])))
    return lines


def to_dot(graph: Graph, *, policy: LayoutPolicy | None = None, id_prefix: str = "",
           colors: dict[int, str] | None = None) -> str:
    """DOT text of `graph`. Deterministic: same records, same bytes.

    `colors` overrides fill colours by node id (used by the backward stepper).
    """
    policy = policy or choose_policy(graph)
    nodes = graph.nodes
    indeg = Counter(d for _, d in graph.edges)
    hubs = set()
    if policy.hub_copies is not None:
        hubs = {n.id for n in nodes if n.kind == FUNCTION and n.name == "AccumulateGrad"
                and indeg[n.id] > policy.hub_copies}
    hanging: dict[int, list[int]] = {}  # AccumulateGrad id -> its leaf tensor ids
    for s, d in graph.tensor_edges:
        if s in hubs:
            hanging.setdefault(s, []).append(d)
    hidden = {d for ds in hanging.values() for d in ds}
    if not policy.saved:
        hidden |= {n.id for n in nodes if n.kind == SAVED}

    members: dict[str, list[str]] = {}
    top: list[str] = []
    depth = graph.depth

    def place(n: GraphNode, line: str) -> None:
        mod = n.module
        if graph.group_modules and policy.clusters and mod:
            if depth is not None:
                mod = ".".join(mod.split(".")[:depth])
            members.setdefault(mod, []).append(line)
        else:
            top.append(line)

    def line(name: str, n: GraphNode) -> str:
        text = _node_line(name, n, id_prefix)
        if colors and n.id in colors:
            text = re.sub(r'fillcolor="#[0-9a-f]{6}"', f'fillcolor="{colors[n.id]}"', text, count=1)
        return text

    edge_lines: list[str] = []
    copy_count: Counter[int] = Counter()
    for n in nodes:
        if n.id in hubs or n.id in hidden:
            continue
        place(n, line(f"n{n.id}", n))
    for s, d in graph.edges:
        if d in hubs:
            k = copy_count[d]
            copy_count[d] += 1
            name = f"n{d}_{k}"
            place(nodes[d], line(name, nodes[d]))
            for t in hanging.get(d, []):
                place(nodes[t], line(f"n{t}_{k}", nodes[t]))
                edge_lines.append(f"  {name} -> n{t}_{k} [color=\"#7a9cc6\"];")
            edge_lines.append(f"  n{s} -> {name};")
        else:
            edge_lines.append(f"  n{s} -> n{d};")
    for s, d in graph.tensor_edges:
        if s in hidden or d in hidden or s in hubs:
            continue
        kind = nodes[s].kind
        if kind == SAVED:
            edge_lines.append(f'  n{s} -> n{d} [style=dashed, color="#d08a2c", arrowhead=none];')
        elif kind == OUTPUT:
            edge_lines.append(f'  n{s} -> n{d} [color="#5a9a3a"];')
        else:
            edge_lines.append(f'  n{s} -> n{d} [color="#7a9cc6"];')

    caption = graph.caption() + (f" ({policy.note})" if policy.note else "")
    if graph.title:
        caption = graph.title + "\n" + caption
    out = ["digraph autograd {"]
    attrs = {"rankdir": "TB", "label": _q(caption), "labelloc": "b", "fontname": "Helvetica", "fontsize": "11",
             "nodesep": "0.2", "ranksep": "0.3", "ordering": "out"} | {k: v for k, v in policy.graph_attrs().items()}
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
_GEOMETRY = re.compile(r'(points|d)="([^"]*)"')
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
    return m.group(1) + '="' + _DECIMALS.sub(r"\1", m.group(2)) + '"'


def _dot_binary() -> str:
    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizNotFound(INSTALL_HINT)
    return exe


@functools.lru_cache(maxsize=64)
def _run_dot(exe: str, dot: str, fmt: str, timeout: float) -> bytes:
    proc = subprocess.run([exe, f"-T{fmt}"], input=dot.encode(), capture_output=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"dot failed ({proc.returncode}): {proc.stderr.decode(errors='replace')[:500]}")
    return proc.stdout


def summary_dot(graph: Graph, note: str) -> str:
    """A small stand-in drawing: Node counts by name, for graphs too big to lay out."""
    counts = Counter(n.name for n in graph.nodes if n.kind == FUNCTION)
    rows = "".join(f"<tr><td align='left'>{_html.escape(k)}</td><td align='right'>{v}</td></tr>"
                   for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:25])
    head = _html.escape(f"{graph.caption()}; {note}")
    return ("digraph summary {\n  node [shape=plaintext, fontname=\"Helvetica\", fontsize=10];\n"
            f"  s [label=<<table border='0' cellborder='1' cellspacing='0'><tr><td colspan='2'><b>{head}</b>"
            f"</td></tr>{rows}</table>>];\n}}\n")


def _layout(graph: Graph, fmt: str, timeout: float, policy: LayoutPolicy | None, **dot_options: Any) -> bytes:
    exe = _dot_binary()
    policy = policy or choose_policy(graph)
    attempts = [policy, _cheaper(policy)]
    for p in attempts:
        try:
            return _run_dot(exe, to_dot(graph, policy=p, **dot_options), fmt, timeout)
        except subprocess.TimeoutExpired:
            continue
    # The summary is a single table: it lays out in milliseconds, so it gets a fixed allowance.
    return _run_dot(exe, summary_dot(graph, f"layout took over {timeout:g} s, showing Node counts"), fmt, 30.0)


def render_svg(graph: Graph, *, timeout: float = 30.0, policy: LayoutPolicy | None = None,
               **dot_options: Any) -> str:
    """SVG text (cleaned, deterministic for a given Graphviz version).

    Deterministic only while the layout finishes inside `timeout` seconds; past it the
    drawing falls back to a cheaper one (see the module docstring), so notebooks draw
    only graphs that lay out well inside it.
    """
    return clean_svg(_layout(graph, "svg", timeout, policy, **dot_options).decode())


def render_png(graph: Graph, *, timeout: float = 30.0, policy: LayoutPolicy | None = None,
               **dot_options: Any) -> bytes:
    return _layout(graph, "png", timeout, policy, **dot_options)


def dot_to_svg(dot: str, timeout: float = 30.0) -> str:
    return clean_svg(_run_dot(_dot_binary(), dot, "svg", timeout).decode())


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
var view=document.getElementById('avz-view'),svg=view.querySelector('svg'),tip=document.getElementById('avz-tip');
var vb=svg.viewBox.baseVal,drag=null;
svg.removeAttribute('width');svg.removeAttribute('height');
view.addEventListener('wheel',function(e){{e.preventDefault();var r=svg.getBoundingClientRect();
var f=e.deltaY>0?1.15:1/1.15,mx=vb.x+(e.clientX-r.left)/r.width*vb.width,my=vb.y+(e.clientY-r.top)/r.height*vb.height;
vb.x=mx-(mx-vb.x)*f;vb.y=my-(my-vb.y)*f;vb.width*=f;vb.height*=f;}},{{passive:false}});
view.addEventListener('mousedown',function(e){{drag={{x:e.clientX,y:e.clientY}};view.style.cursor='grabbing';}});
window.addEventListener('mouseup',function(){{drag=null;view.style.cursor='grab';}});
window.addEventListener('mousemove',function(e){{if(!drag)return;var r=svg.getBoundingClientRect();
vb.x-=(e.clientX-drag.x)/r.width*vb.width;vb.y-=(e.clientY-drag.y)/r.height*vb.height;drag={{x:e.clientX,y:e.clientY}};}});
svg.querySelectorAll('g.node').forEach(function(g){{
var key=g.id.replace(/^{prefix}/,'').replace(/_\\d+$/,''),d=details[key];if(!d)return;
g.addEventListener('mousemove',function(e){{tip.textContent=d.map(function(kv){{return kv[0]+': '+kv[1];}}).join('\\n');
tip.style.display='block';tip.style.left=(e.clientX+12)+'px';tip.style.top=(e.clientY+12)+'px';}});
g.addEventListener('mouseleave',function(){{tip.style.display='none';}});}});
}})();
</script></body></html>
"""


def render_html(graph: Graph, *, timeout: float = 30.0, policy: LayoutPolicy | None = None) -> str:
    """A self-contained page: inline SVG plus inline JS/CSS. It makes no requests."""
    svg = render_svg(graph, timeout=timeout, policy=policy)
    details = {f"n{n.id}": [list(kv) for kv in n.details] for n in graph.nodes}
    payload = json.dumps(details, separators=(",", ":"), sort_keys=True).replace("</", "<\\/")
    return _HTML.format(title=_html.escape(graph.title or "autograd graph"), caption=_html.escape(graph.caption()),
                        svg=svg, details=payload, prefix="")


def save(graph: Graph, path: str | os.PathLike[str], **options: Any) -> None:
    """Write `.dot`, `.svg`, `.png` or `.html`, chosen by the suffix of `path`."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix == ".dot" or suffix == ".gv":
        p.write_text(to_dot(graph, **options))
    elif suffix == ".svg":
        p.write_text(render_svg(graph, **options))
    elif suffix == ".png":
        p.write_bytes(render_png(graph, **options))
    elif suffix in (".html", ".htm"):
        p.write_text(render_html(graph, **options))
    else:
        raise ValueError(f"cannot tell the format from {p.name!r}; use a path ending in .dot, .svg, .png or .html")


# ---------------------------------------------------------------- frame strips


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


_ROOT = re.compile(r"<svg\b[^>]*>")
_NUM = r"([0-9.]+)(?:pt|px)?"


def _size(svg: str) -> tuple[float, float, str]:
    root = _ROOT.search(svg)
    if root is None:
        raise ValueError("not an SVG document")
    tag = root.group(0)
    w = re.search(r'width="' + _NUM + '"', tag)
    h = re.search(r'height="' + _NUM + '"', tag)
    vb = re.search(r'viewBox="([^"]+)"', tag)
    width, height = float(w.group(1)), float(h.group(1))
    return width, height, vb.group(1) if vb else f"0 0 {width} {height}"


def compose_strip(svgs: list[str], labels: list[str], *, height: float = 260.0, gap: float = 14.0) -> str:
    """Lay several SVGs side by side in one SVG, each scaled to `height`, with a label below."""
    if not svgs:
        raise ValueError("compose_strip() needs at least one SVG")
    parts: list[str] = []
    x = 0.0
    for svg, label in zip(svgs, labels):
        w, h, vb = _size(svg)
        scale = height / h if h > height else 1.0
        fw, fh = w * scale, h * scale
        inner = _ROOT.sub(f'<svg x="{x:.1f}" y="{height - fh:.1f}" width="{fw:.1f}" height="{fh:.1f}" '
                          f'viewBox="{vb}" preserveAspectRatio="xMidYMax meet">', svg, count=1)
        parts.append(inner)
        parts.append(f'<text x="{x + fw / 2:.1f}" y="{height + 16:.1f}" text-anchor="middle" '
                     f'font-family="Helvetica,Arial,sans-serif" font-size="12">{_html.escape(label)}</text>')
        x += fw + gap
    total_w = x - gap
    return (f'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
            f'width="{total_w:.1f}pt" height="{height + 24:.1f}pt" viewBox="0 0 {total_w:.1f} {height + 24:.1f}">'
            + "".join(parts) + "</svg>")


def content_prefix(text: str) -> str:
    """A short id prefix derived from content, so several drawings on one page never share element ids."""
    return "a" + hashlib.sha1(text.encode()).hexdigest()[:8] + "-"
