"""live(): snapshots during forward, final frame, display handle, no effect on results."""
from __future__ import annotations

import importlib
import re
import shutil

import pytest
import torch
import torch.nn as nn

import autogradviz as av
from _oracle import reachable


# The package exports the function `live`, which shadows the module of the same name.
live_mod = importlib.import_module("autogradviz.graphs.live")


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
def test_display_messages_live_handle_then_final_frame(monkeypatch):
    """The handle starts and ends empty; frames only ever go to it as updates; the final
    frame is one fresh display without an id (what nbval and nbclient both keep)."""
    pytest.importorskip("IPython")
    import IPython.display

    calls = []  # (what, svg or None)

    def content(obj, raw):
        if raw:
            assert obj == {}
            return None
        return obj._repr_svg_()

    class Handle:
        def update(self, obj, raw=False):
            calls.append(("update", content(obj, raw)))

    def fake_display(obj, raw=False, display_id=None):
        calls.append(("display" if display_id is None else "handle", content(obj, raw)))
        return Handle() if display_id is True else None

    monkeypatch.setattr(live_mod, "_in_kernel", lambda: True)
    monkeypatch.setattr(IPython.display, "display", fake_display)
    m = _model()
    with av.live(m, every=1) as lg:
        m(torch.randn(2, 3)).sum()
    frames = [f.svg() for f in lg.frames]
    assert calls == ([("handle", None)] + [("update", f) for f in frames]
                     + [("update", None), ("display", lg.graph.svg())])
    assert frames[0] != frames[-1]
    strip = lg.strip(max_frames=3)
    assert strip.text.count("<svg") == 1 + 3
    # Frames are labelled by position (first, middle, last of the forward pass), not by a
    # Node count that each frame's own caption already gives.
    n = len(lg.frames)
    assert [f"frame {k} of {n}" in strip.text for k in (1, round((n - 1) / 2) + 1, n)] == [True] * 3


_NOTEBOOK_CELL = """\
import torch, autogradviz
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
x = torch.randn(2, 3)
with autogradviz.live(model) as lg:
    y = model(x).sum()
print(len(lg.frames))
"""


def _cell_in_this_process():
    ns: dict = {}
    exec(_NOTEBOOK_CELL.replace("print(", "_ = ("), ns)
    return ns["lg"]


@pytest.fixture(scope="module")
def executed_notebook(tmp_path_factory):
    """A one-cell notebook run by nbclient, the way scripts/execute_notebook.py stores chapters."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    if shutil.which("dot") is None:
        pytest.skip("Graphviz `dot` not installed")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(_NOTEBOOK_CELL)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    folder = tmp_path_factory.mktemp("live_nb")
    nbclient.NotebookClient(nb, kernel_name="python3", timeout=120,
                            resources={"metadata": {"path": str(folder)}}).execute()
    path = folder / "live.ipynb"
    nbformat.write(nb, path)
    return path, nb


@pytest.mark.slow
def test_nbclient_stores_the_final_frame(executed_notebook):
    _, nb = executed_notebook
    lg = _cell_in_this_process()
    outs = nb.cells[0].outputs
    shown = [o for o in outs if o.output_type == "display_data"]
    assert [dict(o.data) == {} for o in shown] == [True, False]  # blanked live handle, then final
    stored = shown[1].data["image/svg+xml"]
    assert len(lg.frames) > 1
    assert stored == lg.graph.svg() == lg.frames[-1].svg()
    assert stored != lg.frames[0].svg()
    assert outs[-1].output_type == "stream" and outs[-1].text == f"{len(lg.frames)}\n"


@pytest.mark.slow
def test_nbval_accepts_the_stored_output(executed_notebook):
    """nbval re-runs the cell in a fresh kernel and compares with what nbclient stored."""
    pytest.importorskip("nbval")
    import subprocess
    import sys

    path, _ = executed_notebook
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--nbval", "--nbval-current-env",
         "-p", "no:cacheprovider", str(path)],
        capture_output=True, text=True, timeout=180, cwd=path.parent)
    assert proc.returncode == 0, proc.stdout[-3000:]


@pytest.mark.parametrize(
    "kwargs, err, words",
    [
        ({"every": 0}, ValueError, "every"),
        ({"every": True}, ValueError, "every"),
        ({"model": "net"}, TypeError, "nn.Module"),
        ({"group_modules": True}, ValueError, "needs the model"),
    ],
)
def test_bad_arguments(kwargs, err, words):
    with pytest.raises(err, match=words):
        with av.live(**kwargs):
            pass


def test_no_grad_records_nothing():
    with av.live() as lg:
        torch.ones(2) * 2  # no grad: nothing to draw
    assert lg.frames == [] and lg.graph is None
    with pytest.raises(ValueError, match="no frames"):
        lg.strip()


def test_frames_read_only_new_nodes(monkeypatch):
    """every=1 on a chain: each Node is read once in all, not once per frame."""
    reads = []
    record = live_mod.GraphWalk._function_record
    monkeypatch.setattr(live_mod.GraphWalk, "_function_record",
                        lambda self, i, n: (reads.append(n), record(self, i, n))[1])
    x = torch.ones(3, requires_grad=True)
    with av.live(every=1) as lg:
        y = x
        for _ in range(200):
            y = y * 1.5
    nodes, edges = reachable(y)
    assert len(lg.frames) == lg.ops == 200
    assert [f.num_functions for f in lg.frames] == list(range(2, 202))  # + AccumulateGrad
    assert len(reads) == len(set(reads)) == len(nodes) == lg.visited
    assert len(lg.graph.edges) == sum(edges.values())
    # frames are snapshots: an early frame did not grow with the walk
    assert lg.frames[0].num_functions == 2 and len(lg.frames[0].edges) == 1


def test_module_attribution_reaches_frames():
    m = _model()
    with av.live(m, every=1) as lg:
        m(torch.randn(2, 3)).sum()
    # oracle: record_modules on the same forward, outside live()
    with av.record_modules(m) as rec:
        y = m(torch.randn(2, 3)).sum()
    expect = av.trace(y, params=m, modules=rec)
    got = sorted((n.name, n.module) for n in lg.graph.function_nodes)
    assert got == sorted((n.name, n.module) for n in expect.function_nodes)
    assert "cluster" in lg.graph.to_dot(group_modules=True)


def test_compiled_module_refused_and_compiled_code_not_traced_into():
    from torch._dynamo.utils import counters

    m = _model()
    compiled = torch.compile(m, backend="eager")
    with pytest.raises(TypeError, match="_orig_mod"):
        with av.live(compiled):
            pass
    torch._dynamo.reset()
    counters.clear()
    f = torch.compile(lambda t: m(t).tanh().sum(), backend="eager")
    x = torch.randn(4, 3)
    with av.live(m) as lg:
        out = f(x)
    # Dynamo traced none of live()'s hooks: no graph break, one frame compiled
    assert dict(counters["graph_break"]) == {}
    assert torch.equal(out, m(x).tanh().sum())
    assert lg.graph is not None


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` not installed")
def test_strip_two_frames_per_row():
    m = _model()
    with av.live(m, every=1) as lg:
        m(torch.randn(2, 3)).sum()
    text = lg.strip(max_frames=4).text
    ys = [float(y) for y in re.findall(r'<svg x="[0-9.]+" y="([0-9.]+)"', text)]
    xs = [float(x) for x in re.findall(r'<svg x="([0-9.]+)"', text)]
    assert len(xs) == 4 and xs[0] == xs[2] == 0.0 and xs[1] > 0 and xs[3] > 0
    assert min(ys[2:]) > max(ys[:2])
