"""trace_dispatch: the ATen ops and Python calls of a block, checked against torch itself.

Oracles: `make_fx` (which traces the same post-autograd ops through its own machinery),
a second, minimal TorchDispatchMode that keeps the real tensors, the autograd graph of
the output, and DispatchKeySet objects rebuilt from the recorded key names.
"""
from __future__ import annotations

import functools
import operator
import pickle

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from autogradviz.ops.dispatch import trace_dispatch
from autogradviz.ops.records import DISPATCH_PHASES, DispatchTrace


def _fx_ops(f, *args) -> list[str]:
    """The call_function targets of make_fx's graph of `f`, in order.

    The oracle passes an explicit (empty) table: since torch 2.14 make_fx's default one
    rewrites the detach autograd makes when it saves a tensor into `aten.alias`, while
    a dispatch mode still sees `aten.detach` (agv.version_fact("make_fx_saved_detach"))."""
    graph = make_fx(f, decomposition_table={})(*args).graph
    return [str(n.target) for n in graph.nodes if n.op == "call_function"]


class _Witness(TorchDispatchMode):
    """An independent recorder: op names, real input tensors' key sets, output shapes."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []
        self.keys: list[list[torch._C.DispatchKeySet]] = []
        self.in_shapes: list[list[tuple[int, ...]]] = []
        self.out_shapes: list[list[tuple[int, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = [t for t in tree_leaves((args, kwargs or {})) if isinstance(t, torch.Tensor)]
        self.ops.append(str(func))
        self.keys.append([torch._C._dispatch_keys(t) for t in tensors])
        self.in_shapes.append([tuple(t.shape) for t in tensors])
        self.out_shapes.append([tuple(t.shape) for t in tree_leaves(out)
                                if isinstance(t, torch.Tensor)])
        return out


def _linear_args(batch: tuple[int, ...] = (4,)):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*batch, 3, generator=g)
    w = torch.randn(2, 3, generator=g, requires_grad=True)
    b = torch.randn(2, generator=g, requires_grad=True)
    return x, w, b


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2))


def _stacks() -> tuple[int, int]:
    return torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()


CASES = {
    "linear": (F.linear, _linear_args),
    "linear_3d": (F.linear, lambda: _linear_args((2, 4))),
    "mm": (torch.mm, lambda: (torch.randn(4, 3, requires_grad=True), torch.randn(3, 2))),
    "mlp": (_mlp(), lambda: (torch.randn(4, 3),)),
}


@pytest.mark.parametrize("case", CASES)
def test_forward_ops_equal_make_fx(case):
    f, make_args = CASES[case]
    args = make_args()
    with trace_dispatch() as dt:
        f(*args)
    assert dt.ops("forward") == _fx_ops(f, *args)
    assert dt.ops("backward") == []


def test_make_fx_default_table_records_the_saved_detach_as_the_release_does():
    """The version fact the oracle above works around: with its default table, make_fx
    records the detach of the tensor ReLU saves as `aten.detach` on 2.13 and as
    `aten.alias` since 2.14; the dispatch trace sees `aten.detach` on both."""
    from autogradviz.versions import version_fact

    model, x = _mlp(), torch.randn(4, 3)
    default = [str(n.target) for n in make_fx(model)(x).graph.nodes if n.op == "call_function"]
    with trace_dispatch() as dt:
        model(x)
    assert dt.ops("forward")[3] == "aten.detach.default"
    assert default[:3] == dt.ops("forward")[:3] and default[4:] == dt.ops("forward")[4:]
    assert default[3] == version_fact("make_fx_saved_detach")


@pytest.mark.parametrize("case", ["linear", "linear_3d", "mlp"])
def test_autograd_grad_ops_equal_make_fx(case):
    f, make_args = CASES[case]
    args = make_args()
    wrt = [a for a in args if a.requires_grad] or list(f.parameters())

    def loss(*a):
        return f(*a).sum()

    def grads(*a):
        return torch.autograd.grad(loss(*a), wrt)

    with trace_dispatch() as dt:
        grads(*args)
    assert dt.ops() == _fx_ops(grads, *args)
    # The split: everything up to the loss is forward, the rest backward.
    assert dt.ops("forward") == _fx_ops(loss, *args)
    assert {e.call for e in dt.backward} == {"torch.autograd.grad"}


def test_backward_split_and_shapes_equal_an_independent_mode():
    """.backward() twice (the second accumulates with add_): the witness sees the same ops,
    shapes and key sets, and the ops it saw before backward() are exactly the forward."""
    model, x = _mlp(), torch.randn(4, 3)
    witness = _Witness()
    with trace_dispatch() as dt, witness:
        model(x).sum().backward()
        marker = len(witness.ops)
        loss = model(x).sum()
        forward_end = len(witness.ops)
        loss.backward()
    assert dt.ops() == witness.ops
    phases = [e.phase for e in dt.events]
    assert phases[marker:forward_end] == ["forward"] * (forward_end - marker)
    assert set(phases[forward_end:]) == {"backward"}
    assert "aten.add_.Tensor" in dt.ops("backward")  # gradient accumulation
    for e, keys, ins, outs in zip(dt.events, witness.keys, witness.in_shapes,
                                  witness.out_shapes, strict=True):
        assert [m.shape for m in e.inputs] == ins
        assert [m.shape for m in e.outputs] == outs
        rebuilt = [functools.reduce(operator.or_, (torch._C.DispatchKeySet(
            getattr(torch._C.DispatchKey, name)) for name in names)) for names in e.input_keys]
        assert rebuilt == keys


def test_output_shapes_are_the_real_outputs():
    x, w, b = _linear_args((2, 4))
    with trace_dispatch() as dt:
        y = F.linear(x, w, b)
        s = y.sum()
    assert dt.forward[-2].outputs[0].shape == tuple(y.shape)  # the last view of linear
    assert dt.forward[-1].outputs[0].shape == tuple(s.shape) == ()
    assert dt.forward[0].inputs[0].shape == tuple(x.shape)
    assert dt.forward[0].inputs[0].dtype == str(x.dtype).removeprefix("torch.")


def test_calls_and_nodes_nest_the_ops():
    x, w, b = _linear_args()
    with trace_dispatch() as dt:
        y = F.linear(x, w, b).sum()
        y.backward()
    linear_ops = [e.op for e in dt.under("torch.nn.functional.linear")]
    assert linear_ops == _fx_ops(F.linear, x, w, b)
    assert all(e.phase == "forward" for e in dt.under("Tensor.sum"))
    assert dt.under("Tensor.backward") == dt.backward
    # The Nodes that ran backward ops are the Nodes of y's autograd graph.
    graph, stack = set(), [y.grad_fn]
    while stack:
        node = stack.pop()
        graph.add(type(node).__name__)
        stack += [n for n, _ in node.next_functions if n is not None]
    assert {e.node for e in dt.backward} - {None} == graph
    assert all(e.node is None for e in dt.forward)
    names = [c.name for c in dt.calls]
    assert names[:3] == ["torch.nn.functional.linear", "Tensor.sum", "Tensor.backward"]


CALLS = {  # the function, and how to call it on a 3x3 leaf `a`
    "torch.mm": (torch.mm, lambda f, a: f(a, a)),
    "torch.relu": (torch.relu, lambda f, a: f(a)),
    "F.relu": (F.relu, lambda f, a: f(a)),
    "Tensor.sum": (torch.Tensor.sum, lambda f, a: f(a)),
    "autograd.grad": (torch.autograd.grad, lambda f, a: f((a * 2).sum(), a)),
}


@pytest.mark.parametrize("case", CALLS)
def test_call_names_resolve_to_the_called_function(case):
    func, call = CALLS[case]
    a = torch.randn(3, 3, requires_grad=True)
    with trace_dispatch() as dt:
        call(func, a)
    name = dt.calls[-1].name  # the call made last is the one under test
    root, *path = name.split(".")
    resolved = functools.reduce(getattr, path, {"torch": torch, "Tensor": torch.Tensor}[root])
    assert resolved is func, name


def test_tracing_changes_no_result():
    def run(traced: bool):
        model, x = _mlp(), torch.randn(8, 3, generator=torch.Generator().manual_seed(1))
        if traced:
            with trace_dispatch():
                out = model(x)
                out.pow(2).mean().backward()
        else:
            out = model(x)
            out.pow(2).mean().backward()
        return [out.detach()] + [p.grad for p in model.parameters()]

    plain, traced = run(False), run(True)
    assert all(torch.equal(a, b) for a, b in zip(plain, traced, strict=True))


def test_modes_are_removed_also_on_an_error():
    before = _stacks()
    with trace_dispatch() as dt:
        assert _stacks() == (before[0] + 1, before[1] + 1)
    assert _stacks() == before
    with pytest.raises(ZeroDivisionError), trace_dispatch() as failed:
        torch.ones(2).sum()
        1 / 0
    assert _stacks() == before
    n = len(failed)
    torch.ones(2).sum()
    assert len(failed) == n == 2 and len(dt) == 0  # ones, sum; nothing after the block


def test_bad_input_is_refused_clearly():
    tracer = trace_dispatch()
    with tracer:
        with pytest.raises(RuntimeError, match="entered twice"):
            with tracer:
                pass
    with pytest.raises(RuntimeError, match="entered twice"):
        with tracer:
            pass
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_events"):
            trace_dispatch(max_events=bad)
    with pytest.raises(ValueError, match="phase"):
        DispatchTrace().ops("sideways")
    with pytest.raises(ValueError, match="max_rows"):
        DispatchTrace().table(max_rows=0)


def test_max_events_counts_what_it_drops():
    with trace_dispatch(max_events=None) as full:
        F.linear(*_linear_args()).sum().backward()
    with trace_dispatch(max_events=3) as capped:
        F.linear(*_linear_args()).sum().backward()
    assert capped.ops() == full.ops()[:3]
    assert capped.dropped == len(full) - 3 and full.dropped == 0
    assert "not recorded" in capped.caption() and "not recorded" not in full.caption()


def test_tables_show_every_event_and_the_record_pickles():
    x, w, b = _linear_args()
    with trace_dispatch() as dt:
        F.linear(x, w, b).sum().backward()
    text = str(dt)
    assert text == dt.table()
    header = text.splitlines()[1].split()
    assert header[:2] == ["#", "phase"]
    rows = [ln for ln in text.splitlines()[3:] if ln.strip()[:1].isdigit()]
    assert len(rows) == len(dt)
    for row, e in zip(rows, dt.events):
        cells = row.split()
        assert cells[0] == str(e.index) and cells[1] == e.phase and e.op in cells
    assert "AutogradCPU" in text.splitlines()[-1]
    page = dt._repr_html_()
    assert page.count("<tr>") == len(dt) + 1  # header row + one per op
    assert "AddmmBackward0" in page and "max-width:730px" in page
    short = dt.table(max_rows=2)
    assert f"{len(dt) - 2} more rows" in short
    again = pickle.loads(pickle.dumps(dt))
    assert again.events == dt.events and again.table() == text
    assert set(DISPATCH_PHASES) == {e.phase for e in dt.events}


def test_compact_table_fits_a_page_and_keeps_every_op():
    from autogradviz.ops.dispatch_view import short_op

    x, w, b = _linear_args()
    with trace_dispatch() as dt:
        F.linear(x, w, b).sum().backward()
    text = dt.table(compact=True)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 88  # a notebook page's code width
    rows = [ln.split() for ln in lines[3:] if ln[:2] in ("fw", "bw")]
    assert len(rows) == len(dt)
    for cells, e in zip(rows, dt.events):
        assert cells[0] == ("fw" if e.phase == "forward" else "bw")
        assert short_op(e.op) in cells and "→" in cells
    assert short_op("aten.addmm.default") == "addmm"
    assert short_op("aten.sum.dim_IntList") == "sum.dim_IntList"
    page = dt.html(compact=True)
    assert page.count("<tr>") == len(dt) + 1 and "aten." not in page.split("<tbody>")[1]
    assert "F.linear" in page and "torch.nn.functional.linear" not in page
    assert "blue forward, orange backward" in page
