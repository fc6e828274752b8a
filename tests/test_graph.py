"""trace(): Node and edge counts against an independent walk, naming, saved tensors, modules."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

import autogradviz as av
from _oracle import display_name, name_counts, reachable

ROOT = Path(__file__).resolve().parents[1]


class MyFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 2 + x * 0


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 6)
        self.body = nn.Linear(6, 6)
        self.head = nn.Linear(6, 10, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, idx):
        return self.head(torch.tanh(self.body(self.emb(idx))))


def _graphs():
    """name -> (roots, params): the shapes of graph the issue lists."""
    torch.manual_seed(0)
    out = {}
    m = Tied()
    out["weight tying"] = (m(torch.tensor([1, 2, 3])).sum(), m)

    a = torch.randn(4, requires_grad=True)
    b = torch.randn(4, requires_grad=True)
    h = a * b
    out["multiple roots"] = ([h.sin().sum(), h.cos().mean(), b.exp()], {"a": a, "b": b})

    out["custom Function"] = ((MyFn.apply(a) * b).sum(), {"a": a, "b": b})

    c = a * 1.0
    v = c[1:3]
    v.mul_(2)  # in-place on a view: CopySlices
    c.t_() if c.dim() == 2 else c.add_(1)
    out["in-place and views"] = ((c.view(2, 2) @ c.view(2, 2)).sum(), {"a": a})

    y = (a**3 * b).sum()
    (ga,) = torch.autograd.grad(y, a, create_graph=True)
    out["double backward"] = (ga.pow(2).sum(), {"a": a, "b": b})

    lin = nn.Linear(4, 4)
    seg = checkpoint(lambda t: torch.relu(lin(t)).sin(), a.view(1, 4), use_reentrant=False)
    out["checkpoint"] = (seg.sum(), lin)
    return out


CASES = _graphs()


@pytest.mark.parametrize("case", list(CASES))
def test_counts_match_independent_walk(case):
    roots, params = CASES[case]
    g = av.trace(roots, params=params)
    nodes, edges = reachable(roots)
    fn = g.function_nodes
    assert len(fn) == len(nodes)
    assert all(n.kind == "function" for n in fn)
    assert Counter(n.name for n in fn) == name_counts(nodes)
    assert len(g.edges) == sum(edges.values())
    assert Counter((g.nodes[s].name, g.nodes[d].name) for s, d in g.edges) == edges
    # ids are sequential positions
    assert [n.id for n in g.nodes] == list(range(len(g.nodes)))


def test_custom_function_named_after_class():
    roots, params = CASES["custom Function"]
    names = av.trace(roots).names()
    assert "MyFn" in names and not any(n.startswith("MyFnBackward") for n in names)
    assert "AccumulateGrad" in names


def test_tied_weight_has_one_accumulate_grad_with_both_names():
    roots, model = CASES["weight tying"]
    g = av.trace(roots, params=model)
    params = [n for n in g.nodes if n.kind == "param"]
    tied = [p for p in params if "emb.weight" in p.param_names]
    assert len(tied) == 1 and tied[0].param_names == ("emb.weight", "head.weight")
    assert len(params) == len({id(p) for p in model.parameters()})
    # the tied AccumulateGrad has two consumers: Embedding and the head's matmul path
    (acc_src,) = [s for s, d in g.tensor_edges if d == tied[0].id]
    assert sum(1 for _, d in g.edges if d == acc_src) == 2
    # with module attribution the tied Node goes with the first name's module
    with av.record_modules(model) as rec:
        out = model(torch.tensor([1, 2, 3])).sum()
    g = av.trace(out, params=model, modules=rec)
    acc = [n for n in g.function_nodes if n.name == "AccumulateGrad"]
    assert "emb" in {n.module for n in acc}


def test_multiple_roots_each_drawn_as_output():
    roots, params = CASES["multiple roots"]
    g = av.trace(roots, params=params)
    outs = [n for n in g.nodes if n.kind == "output"]
    assert [o.name for o in outs] == ["output 0", "output 1", "output 2"]
    assert [o.shape for o in outs] == [tuple(r.shape) for r in roots]


def test_leaf_root_requiring_grad():
    x = torch.randn(3, requires_grad=True)
    g = av.trace(x, params={"x": x})
    assert g.names() == ["AccumulateGrad"] and g.edges == []


def test_deep_unrolled_lstm_does_not_recurse():
    torch.manual_seed(0)
    cell = nn.LSTMCell(3, 4)
    h = c = torch.zeros(1, 4)
    for _ in range(300):
        h, c = cell(torch.randn(1, 3), (h, c))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)  # a recursive walk over 4,500 Nodes would fail here
    try:
        g = av.trace(h.sum(), params=cell, saved=False)
    finally:
        sys.setrecursionlimit(limit)
    nodes, edges = reachable(h.sum())
    assert g.num_functions == len(nodes) and len(g.edges) == sum(edges.values())


@pytest.mark.parametrize(
    "bad, err, words",
    [
        (3.0, TypeError, "tensor"),
        ([], ValueError, "empty"),
        (torch.ones(2), ValueError, "requires_grad=True"),
        ([torch.ones(2, requires_grad=True), "x"], TypeError, "root 1"),
        ("loss", TypeError, "tensor"),
    ],
)
def test_bad_roots(bad, err, words):
    with pytest.raises(err, match=words):
        av.trace(bad)


def _small():
    x = torch.randn(2, requires_grad=True)
    return x * 2, x


@pytest.mark.parametrize(
    "call, err, words",
    [
        (lambda y, x: av.trace(y, params=[x]), TypeError, "nn.Module or a Mapping"),
        (lambda y, x: av.trace(y, params={"x": 3}), TypeError, "not a tensor"),
        (lambda y, x: av.trace(y, modules={}), TypeError, "ModuleRecord"),
        (lambda y, x: av.trace(y, group_modules=True), TypeError, "drawing choice"),
        (lambda y, x: av.trace(y, colour=True), TypeError, "unexpected keyword"),
        (lambda y, x: av.trace(y).to_dot(group_modules=True), ValueError, "record_modules"),
        (lambda y, x: av.trace(y).to_dot(depth=2), ValueError, "record_modules"),
        (lambda y, x: av.trace(y).to_dot(depth=0), ValueError, "depth"),
        (lambda y, x: av.trace(y).to_dot(direction="up"), ValueError, "direction"),
    ],
)
def test_bad_arguments(call, err, words):
    y, x = _small()
    with pytest.raises(err, match=words):
        call(y, x)


def test_saved_tensors_recorded_with_shape_dtype_bytes():
    a = torch.randn(3, 5, requires_grad=True)
    b = torch.randn(5, 2, requires_grad=True)
    y = (a @ b).sin().sum()
    g = av.trace(y, params={"a": a, "b": b})
    saved = [n for n in g.nodes if n.kind == "saved"]
    # oracle: every tensor slot torch exposes as _saved_* on the reachable Nodes
    expect = []
    for node in reachable(y)[0]:
        for attr in dir(node):
            if attr.startswith("_saved_"):
                val = getattr(node, attr)
                if isinstance(val, torch.Tensor):
                    expect.append((display_name(node), tuple(val.shape), val.numel() * val.element_size()))
    got = []
    for s in saved:
        (consumer,) = [d for src, d in g.tensor_edges if src == s.id]
        got.append((g.nodes[consumer].name, s.shape, s.nbytes))
    assert sorted(got) == sorted(expect)
    assert all(s.alive is True and s.dtype == "float32" for s in saved)
    # the matmul saved the leaves themselves: named after params
    assert any("(a)" in s.name for s in saved) and any("(b)" in s.name for s in saved)


def test_traced_after_backward_marks_freed():
    a = torch.randn(4, requires_grad=True)
    y = (a.exp() * a).sum()
    before = av.trace(y)
    y.backward()
    after = av.trace(y)
    saved_before = [n for n in before.nodes if n.kind == "saved"]
    saved_after = [n for n in after.nodes if n.kind == "saved"]
    assert saved_before and all(n.alive for n in saved_before)
    assert len(saved_after) == len(saved_before) and all(n.alive is False for n in saved_after)
    assert after.saved_bytes == 0 < before.saved_bytes
    assert "freed" in after.to_dot()
    # torch agrees the buffers are gone
    with pytest.raises(RuntimeError):
        y.grad_fn.next_functions[0][0]._saved_self


def test_checkpoint_saved_tensors_not_unpacked():
    calls = []
    a = torch.randn(4, requires_grad=True)

    def seg(t):
        calls.append(1)
        return t.sin().exp()

    y = checkpoint(seg, a, use_reentrant=False).sum()
    g = av.trace(y)
    assert len(calls) == 1  # tracing did not trigger a recomputation
    assert any(n.kind == "saved" and n.alive is None and "packed" in dict(n.details).get("state", "")
               for n in g.nodes)


def test_views_and_hooks_in_details():
    a = torch.randn(4, requires_grad=True)
    a.register_hook(lambda g: g)
    out = (a * 2)[1:]
    out.retain_grad()
    g = av.trace(out, params={"a": a})
    d_out = dict(next(n for n in g.nodes if n.kind == "output").details)
    assert d_out["view of"] == "base (4,)" and d_out["retains grad"] == "yes"
    d_a = dict(next(n for n in g.nodes if n.kind == "param").details)
    assert d_a["tensor hooks"] == "1"


@pytest.mark.slow
def test_dot_identical_in_two_traces_and_two_processes():
    roots, params = CASES["weight tying"]
    assert av.trace(roots, params=params).to_dot() == av.trace(roots, params=params).to_dot()
    script = (
        "import torch, autogradviz as av, torch.nn as nn\n"
        "torch.manual_seed(0)\n"
        "m = nn.Sequential(nn.Linear(3, 4), nn.GELU(), nn.LayerNorm(4), nn.Linear(4, 2))\n"
        "a = torch.randn(5, 3, requires_grad=True)\n"
        "y = m(a)\n"
        "print(av.trace([y.logsumexp(1).sum(), y.sum()], params=m).to_dot(), end='')\n"
    )
    runs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        runs.append(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                                   cwd=ROOT, check=True).stdout)
    assert runs[0] == runs[1] and runs[0].startswith("digraph")
    assert "0x" not in runs[0]


def test_record_modules_does_not_change_results():
    def run(record: bool):
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 8), nn.Tanh()), nn.Linear(8, 2))
        x = torch.randn(6, 4)
        if record:
            with av.record_modules(m) as rec:
                y = m(x)
        else:
            rec, y = None, m(x)
        y.pow(2).sum().backward()
        return y.detach(), [p.grad.clone() for p in m.parameters()], rec, m, y

    y0, g0, _, _, _ = run(False)
    y1, g1, rec, m, y = run(True)
    assert torch.equal(y0, y1) and all(torch.equal(a, b) for a, b in zip(g0, g1))
    # hooks are gone after the block
    assert all(not mod._forward_hooks and not mod._forward_pre_hooks for mod in m.modules())
    # each Node went to the innermost module whose forward made it, per torch's own class of op
    g = av.trace(y, params=m, modules=rec)
    by_module = {}
    for n in g.function_nodes:
        by_module.setdefault(n.module, []).append(n.name)
    assert by_module["1"] == ["ReluBackward0"] and by_module["2.1"] == ["TanhBackward0"]
    assert sorted(by_module["2.0"]) == ["AccumulateGrad", "AccumulateGrad", "AddmmBackward0", "TBackward0"]
    assert "cluster" not in g.to_dot()  # clusters are a drawing choice, off by default
    dot = g.to_dot(group_modules=True)
    assert 'label="2 (Sequential)"' in dot and 'label="2.0 (Linear)"' in dot
    shallow = g.to_dot(group_modules=True, depth=1)
    assert "2.0 (Linear)" not in shallow and "2 (Sequential)" in shallow


def test_rollup_repeated_blocks():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return x + torch.tanh(self.fc(x))

    class Net(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.h = nn.ModuleList(Block() for _ in range(n))
            self.out = nn.Linear(4, 1)

        def forward(self, x):
            for b in self.h:
                x = b(x)
            return self.out(x).sum()

    torch.manual_seed(0)
    net = Net(5)
    with av.record_modules(net) as rec:
        loss = net(torch.randn(2, 4))
    full = av.trace(loss, params=net, modules=rec)
    rolled = av.roll_up(full)
    # the block's own ops (add, tanh between/around the child Linear) belong to the block itself
    own = sorted(n.name for n in full.function_nodes if n.module == "h.2")
    assert own == ["AddBackward0", "TanhBackward0"]
    assert sorted(n.name for n in full.function_nodes if n.module == "h.2.fc") == [
        "AccumulateGrad", "AccumulateGrad", "AddmmBackward0", "TBackward0"]
    per_block = sum(1 for n in full.function_nodes if n.module and n.module.startswith("h.1"))
    assert per_block > 0
    # h.0 differs (its input needs no grad, so its matmul saves less); h.1..h.4 are identical
    assert rolled.num_functions == full.num_functions - 3 * per_block
    assert rolled.rolled == {"h.1": ("h.1–4: Block ×4", 4)}
    assert "×4" in full.to_dot(rollup=True) and "×4" not in full.to_dot(group_modules=True)
    assert full.to_dot(rollup=True) == rolled.to_dot(group_modules=True)
    expanded = av.roll_up(full, expand=["h"])
    assert expanded.num_functions == full.num_functions and not expanded.rolled
    # the caption says both counts; the saved bytes cover the whole traced graph
    caption = rolled.caption()
    assert f"{rolled.num_functions} of {full.num_functions} autograd Nodes" in caption
    assert rolled.saved_bytes == full.saved_bytes and av.format_bytes(full.saved_bytes) in caption
    assert f"{full.num_functions} autograd Nodes" in full.caption()


def test_saved_tensors_seen_through_track_memory():
    """The memory tracker packs saved tensors with its own hooks; the walk sees through them."""
    def run(tracked: bool):
        torch.manual_seed(0)
        m = nn.Linear(4, 4)
        x = torch.randn(2, 4)
        if tracked:
            with av.track_memory(m):
                loss = m(x).tanh().sum()
                inside = av.trace(loss)
        else:
            loss, inside = m(x).tanh().sum(), None
        return loss, inside

    plain_loss, _ = run(False)
    loss, inside = run(True)
    after = av.trace(loss)
    expect = av.trace(plain_loss)
    assert expect.saved_bytes > 0
    for g in (inside, after):
        saved = [n for n in g.nodes if n.kind == "saved"]
        assert saved and all(n.saved_state == "alive" and n.shape is not None for n in saved)
        assert g.saved_bytes == expect.saved_bytes
        assert [(n.name, n.shape) for n in saved] == [
            (n.name, n.shape) for n in expect.nodes if n.kind == "saved"]
    # oracle: torch's own unpacking of the tanh result gives the same shape
    assert tuple(loss.grad_fn.next_functions[0][0]._saved_result.shape) == (2, 4)


def test_non_tensor_attributes_recorded_and_drawn_on_request():
    a = torch.randn(3, 5, requires_grad=True)
    y = a.sum(dim=1, keepdim=True).sum()
    g = av.trace(y)
    node = y.grad_fn.next_functions[0][0]  # SumBackward1
    (rec,) = [n for n in g.function_nodes if n.name == node.name()]
    attrs = dict(rec.attrs)
    # oracle: torch's own saved attributes
    assert attrs["dim"] == repr(node._saved_dim) and attrs["keepdim"] == repr(node._saved_keepdim)
    assert f"dim={node._saved_dim!r}" not in g.to_dot()
    assert f"dim={node._saved_dim!r}" in g.to_dot(show_attrs=True)
    assert av.trace(y, saved=False).function_nodes[0].attrs == ()


def test_one_walk_behind_trace_and_backward_order():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    loss = m(torch.randn(2, 3)).sum()
    g = av.trace(loss, params=m)
    bo = av.backward_order(loss, params=m)
    assert [dataclasses.replace(n, step=None) for n in bo.graph.nodes] == g.nodes
    assert bo.graph.edges == g.edges and bo.graph.tensor_edges == g.tensor_edges
