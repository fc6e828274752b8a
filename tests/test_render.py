"""Rendering: DOT without Graphviz, SVG/PNG/HTML with it, layout policy and fallbacks."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import torch
import torch.nn as nn

import autogradviz as av
from autogradviz.graphs import render

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` not installed")


def _mlp_graph():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    return av.trace(m(torch.randn(2, 3)).sum(), params=m)


def _lstm_graph(steps: int):
    torch.manual_seed(0)
    cell = nn.LSTMCell(2, 3)
    h = c = torch.zeros(1, 3)
    for _ in range(steps):
        h, c = cell(torch.randn(1, 2), (h, c))
    return av.trace(h.sum(), params=cell)


def test_no_dot_on_path_clear_error_and_dot_text_still_works(tmp_path, monkeypatch):
    g = _mlp_graph()
    monkeypatch.setenv("PATH", str(tmp_path))
    assert shutil.which("dot") is None
    with pytest.raises(av.GraphvizNotFound) as info:
        g.svg()
    msg = str(info.value)
    assert "apt-get install graphviz" in msg and "conda install -c conda-forge graphviz" in msg
    assert "to_dot()" in msg
    with pytest.raises(av.GraphvizNotFound):
        g.png()
    assert g.to_dot().startswith("digraph")


@needs_dot
def test_svg_is_clean_and_deterministic():
    g = _mlp_graph()
    first = g.svg()
    render._run_dot.cache_clear()
    second = _mlp_graph().svg()
    assert first == second
    assert first.startswith("<svg") and "<!--" not in first and "graphviz version" not in first.lower()
    # caption: node count and saved bytes
    assert f"{g.num_functions} autograd Nodes" in first and "saved tensors" in first
    assert g._repr_svg_() == first


def test_saved_bytes_count_each_storage_once():
    a = torch.randn(8, requires_grad=True)
    y = (a * a).sum()  # MulBackward0 saves `a` twice: one storage
    g = av.trace(y)
    assert g.saved_bytes == a.untyped_storage().nbytes()
    assert len([n for n in g.nodes if n.kind == "saved"]) == 2


@needs_dot
def test_png_html_and_save_by_suffix(tmp_path):
    g = _mlp_graph()
    assert g.png()[:8] == b"\x89PNG\r\n\x1a\n"
    page = g.html()
    # self-contained: no external request of any kind
    assert "<script" in page and "src=" not in page and "<link" not in page and "@import" not in page
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", page))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}
    # every node's details reach the page
    for n in g.nodes:
        assert f'"n{n.id}":' in page
    for suffix, check in [(".dot", lambda p: p.read_text().startswith("digraph")),
                          (".svg", lambda p: p.read_text().startswith("<svg")),
                          (".png", lambda p: p.read_bytes()[:4] == b"\x89PNG"),
                          (".html", lambda p: p.read_text().startswith("<!DOCTYPE html>"))]:
        path = tmp_path / f"g{suffix}"
        g.save(path)
        assert check(path), suffix
    with pytest.raises(ValueError, match=r"\.dot, \.svg, \.png or \.html"):
        g.save(tmp_path / "g.pdf")


def test_hub_leaves_drawn_once_per_consumer():
    g = _lstm_graph(12)
    indeg = {}
    for _, d in g.edges:
        indeg[d] = indeg.get(d, 0) + 1
    hubs = [n for n in g.function_nodes if n.name == "AccumulateGrad" and indeg.get(n.id, 0) > 4]
    assert hubs, "each LSTMCell parameter is used at every step"
    dot = g.to_dot()
    for h in hubs:
        copies = re.findall(rf"^  n{h.id}_\d+ \[", dot, flags=re.M)
        assert len(copies) == indeg[h.id]
        assert not re.search(rf"^  n{h.id} \[", dot, flags=re.M)
    # below the limit a shared leaf stays one box (weight sharing is visible)
    plain = g.to_dot(policy=av.LayoutPolicy(hub_copies=None))
    assert all(re.search(rf"^  n{h.id} \[", plain, flags=re.M) for h in hubs)


def test_policy_gets_cheaper_with_size():
    small, big = render.choose_policy(_lstm_graph(2)), render.choose_policy(_lstm_graph(40))
    assert small.saved and not small.cheap
    assert big.cheap and not big.saved and "nslimit" in big.graph_attrs()


def _graph_line(dot: str) -> dict[str, str]:
    line = next(ln for ln in dot.splitlines() if ln.startswith("  graph ["))
    pairs = re.findall(r'(\w+)=("[^"]*"|[^,\]]+)', line)
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"attribute given twice: {keys}"
    return dict(pairs)


@needs_dot
def test_huge_graph_settings_reach_dot():
    """Above 1,500 Nodes the capped simplex must be in the DOT once, and dot must obey it."""
    g = _lstm_graph(110)
    assert g.num_functions > 1500
    attrs = _graph_line(g.to_dot())
    assert attrs["newrank"] == "true" and attrs["nslimit"] == "0.05" and attrs["nslimit1"] == "0.05"
    assert attrs["splines"] == "false" and "ordering" not in attrs
    dot = g.to_dot()
    n_drawn = len(re.findall(r"^  n\d+(?:_\d+)? \[", dot, flags=re.M))
    proc = subprocess.run([shutil.which("dot"), "-v", "-Tsvg"], input=dot.encode(), capture_output=True,
                          timeout=60, check=True)
    iters = [int(m) for m in re.findall(r"network simplex: \d+ nodes \d+ edges (\d+) iter", proc.stderr.decode())]
    if not iters:
        pytest.skip("this Graphviz does not report network-simplex iterations with -v")
    # dot allows nslimit x (nodes of the graph) iterations; the uncapped run takes thousands
    assert max(iters) <= 0.05 * n_drawn + 1


@needs_dot
def test_layout_timeout_falls_back_to_summary():
    g = _lstm_graph(30)
    render._run_dot.cache_clear()
    svg = g.svg(timeout=1e-4)  # no layout can finish this fast
    assert "showing Node counts" in svg
    # the summary table lists each Node name with its count
    n_acc = sum(1 for n in g.function_nodes if n.name == "AccumulateGrad")
    assert re.search(rf">AccumulateGrad</text>.*?>{n_acc}</text>", svg, flags=re.S)


@needs_dot
def test_summary_names_the_fix_and_no_subprocess_error_escapes(monkeypatch):
    g = _lstm_graph(30)
    render._run_dot.cache_clear()
    svg = g.svg(timeout=1e-4)
    assert "rollup=True" in svg and "timeout=" in svg  # the summary says what to do
    # Even the one-table summary timing out (a stalled machine) is the package's error.
    def always_late(cmd, input, capture_output, timeout):
        raise subprocess.TimeoutExpired(cmd, timeout)

    render._run_dot.cache_clear()
    monkeypatch.setattr(render.subprocess, "run", always_late)
    for view in (g.svg, g.png, g.html):
        with pytest.raises(render.LayoutTimeout, match=r"rollup=True.*timeout=") as info:
            view(timeout=1.0)
        assert not isinstance(info.value, subprocess.TimeoutExpired)
    render._run_dot.cache_clear()


def _count_dot_runs(monkeypatch) -> list[str]:
    """Replace the `dot` subprocess: layouts time out, the summary table succeeds."""
    runs: list[str] = []

    def fake_run(cmd, input, capture_output, timeout):
        text = input.decode()
        runs.append("summary" if text.startswith("digraph summary") else "layout")
        if runs[-1] == "layout":
            raise subprocess.TimeoutExpired(cmd, timeout)
        return subprocess.CompletedProcess(cmd, 0, stdout=b"<svg width=\"1pt\" height=\"1pt\"/>",
                                           stderr=b"")

    render._run_dot.cache_clear()
    monkeypatch.setattr(render.subprocess, "run", fake_run)
    return runs


@needs_dot
@pytest.mark.parametrize("steps, layouts", [(30, 2), (110, 1)])
def test_timeout_tries_each_distinct_layout_once(monkeypatch, steps, layouts):
    """Up to 1,500 Nodes the retry is cheaper; above, the first layout already is the cheapest,
    so retrying would run the same layout again and wait the timeout twice."""
    g = _lstm_graph(steps)
    assert (g.num_functions > 1500) == (steps == 110)
    runs = _count_dot_runs(monkeypatch)
    g.svg(timeout=5.0)
    render._run_dot.cache_clear()
    assert runs == ["layout"] * layouts + ["summary"]


@needs_dot
def test_png_over_graphviz_limit_warns_and_draws_summary():
    # One box with a very long label: a layout wider than 32,767 px at 96 dpi.
    g = av.Graph(nodes=[av.GraphNode(0, "x" * 7000, "function")], edges=[])
    full = render._run_dot(render._dot_binary(), g.to_dot(), "png", 30.0)
    assert max(render.png_size(full)) >= render.PNG_MAX_PIXELS  # Graphviz shrank it
    with pytest.warns(UserWarning, match="32,767-pixel PNG limit"):
        png = g.png()
    assert png != full and max(render.png_size(png)) < render.PNG_MAX_PIXELS
    small = _mlp_graph().png()  # below the limit: no warning, the drawing itself
    assert max(render.png_size(small)) < render.PNG_MAX_PIXELS


def _plain_y(dot: str) -> dict[str, float]:
    """Node name -> y centre from Graphviz's plain output (y grows upwards)."""
    out = render._run_dot(render._dot_binary(), dot, "plain", 30.0).decode()
    return {p[1]: float(p[3]) for p in (ln.split() for ln in out.splitlines()) if p[0] == "node"}


@needs_dot
def test_direction_forward_puts_inputs_on_top():
    g = _mlp_graph()
    out = next(n.id for n in g.nodes if n.kind == "output")
    param = next(n.id for n in g.nodes if n.kind == "param")
    back, fwd = _plain_y(g.to_dot()), _plain_y(g.to_dot(direction="forward"))
    assert back[f"n{out}"] > back[f"n{param}"]  # default: loss on top
    assert fwd[f"n{out}"] < fwd[f"n{param}"]  # forward: inputs on top
    # same function edges, each drawn the other way round
    for s, d in g.edges:
        assert f"  n{s} -> n{d};" in g.to_dot() and f"  n{d} -> n{s};" in g.to_dot(direction="forward")


def test_freed_and_packed_labels_have_no_blank_line():
    from torch.utils.checkpoint import checkpoint

    a = torch.randn(4, requires_grad=True)
    packed = av.trace(checkpoint(lambda t: t.sin(), a, use_reentrant=False).sum())
    y = (a.exp() * a).sum()
    y.backward()
    freed = av.trace(y)
    for g, state in ((packed, "packed"), (freed, "freed")):
        labels = [ln for ln in g.to_dot().splitlines() if f"\\n{state}" in ln]
        assert labels and all("\\n\\n" not in ln for ln in labels)


def test_colors_override_fill_once():
    g = _mlp_graph()
    acc = next(n for n in g.function_nodes if n.name == "AccumulateGrad")
    line = next(ln for ln in g.to_dot(colors={acc.id: "#123456"}).splitlines()
                if ln.startswith(f"  n{acc.id} ["))
    assert line.count("fillcolor") == 1 and 'fillcolor="#123456"' in line


@pytest.mark.parametrize("n, text", [(0, "0 B"), (64, "64 B"), (1536, "1.5 KiB"),
                                     (3 * 2**20, "3.0 MiB"), (5 * 2**30, "5.0 GiB")])
def test_format_bytes_binary_units(n, text):
    assert av.format_bytes(n) == text


def test_html_template_has_no_unfilled_placeholders():
    assert "{prefix}" not in render._HTML and "prefix" not in render._HTML
