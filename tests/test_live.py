"""live(): snapshots during forward, final frame, display handle, no effect on results."""
from __future__ import annotations

import importlib
import shutil

import pytest
import torch
import torch.nn as nn

import autogradviz as av
from _oracle import reachable


# The package exports the function `live`, which shadows the module of the same name.
live_mod = importlib.import_module("autogradviz.live")


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2))


def test_records_frames_outside_ipython_and_final_graph_matches_torch():
    m = _model()
    x = torch.randn(4, 3)
    with av.live(m, every=2) as lg:
        out = m(x).pow(2).sum()
    nodes, edges = reachable(out)
    assert lg.graph is not None and lg.graph.num_functions == len(nodes)
    assert len(lg.graph.edges) == sum(edges.values())
    assert len(lg.frames) == lg.ops // 2 + (lg.ops % 2 != 0)
    sizes = [f.num_functions for f in lg.frames]
    assert sizes == sorted(sizes) and sizes[-1] == len(nodes)
    assert lg.frames[-1].to_dot() == lg.graph.to_dot()
    assert any(n.kind == "param" and n.name == "0.weight" for n in lg.graph.nodes)


def test_live_does_not_change_results():
    x = torch.randn(4, 3)
    m = _model()
    ref = m(x)
    ref.sum().backward()
    ref_grads = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    with av.live(m) as lg:
        out = m(x)
    out.sum().backward()
    assert torch.equal(out, ref)
    assert all(torch.equal(p.grad, g) for p, g in zip(m.parameters(), ref_grads))
    assert lg.ops > 0


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` not installed")
def test_display_ends_on_final_frame(monkeypatch):
    pytest.importorskip("IPython")
    import IPython.display

    shown = []

    class Handle:
        def update(self, obj):
            shown.append(obj._repr_svg_())

    def fake_display(obj, display_id=None):
        assert display_id is True
        shown.append(obj._repr_svg_())
        return Handle()

    monkeypatch.setattr(live_mod, "_in_kernel", lambda: True)
    monkeypatch.setattr(IPython.display, "display", fake_display)
    m = _model()
    with av.live(m, every=1) as lg:
        m(torch.randn(2, 3)).sum()
    assert len(shown) == len(lg.frames) + 1  # one draw per frame, then the final one
    assert shown[-1] == lg.graph.svg()
    strip = lg.strip(max_frames=3)
    assert strip.text.count("<svg") == 1 + 3


def test_bad_arguments():
    with pytest.raises(ValueError, match="every"):
        with av.live(every=0):
            pass
    with pytest.raises(TypeError, match="nn.Module"):
        with av.live(model="net"):
            pass
    with av.live() as lg:
        torch.ones(2) * 2  # no grad: nothing to draw
    assert lg.frames == [] and lg.graph is None
    with pytest.raises(ValueError, match="no frames"):
        lg.strip()
