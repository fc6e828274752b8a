"""trace_modules() and the module view, checked against torch's own hooks."""
from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from autogradviz.graphs.module_graph import trace_modules
from autogradviz.graphs.module_view import drawn_nodes, to_dot
from autogradviz.graphs.records import ModuleGraph


# --------------------------------------------------------------------------- oracle


@contextmanager
def torch_calls(model: nn.Module, depth: int | None = None) -> Iterator[list[dict[str, Any]]]:
    """Every forward call torch makes, in start order, with its real outputs (plain hooks)."""
    seen: list[dict[str, Any]] = []
    open_calls: list[dict[str, Any]] = []
    handles = []
    for name, mod in model.named_modules():
        if depth is not None and name and name.count(".") + 1 > depth:
            continue

        def pre(m: nn.Module, args: Any, name: str = name) -> None:
            seen.append({"name": name, "type": type(m).__name__})
            open_calls.append(seen[-1])

        def post(m: nn.Module, args: Any, out: Any) -> None:
            open_calls.pop()["out"] = [t for t in torch.utils._pytree.tree_leaves(out)
                                       if isinstance(t, torch.Tensor)]

        handles += [mod.register_forward_pre_hook(pre), mod.register_forward_hook(post)]
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()


def hook_count(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def check_against_torch(model: nn.Module, *args: Any, depth: int | None = None,
                        **kwargs: Any) -> ModuleGraph:
    """Trace, and compare calls, shapes and the output with a plain run watched by torch hooks."""
    with torch.no_grad(), torch_calls(model, depth) as expected:
        plain = model(*args, **kwargs)
    before = hook_count(model)
    captured: list[Any] = []
    h = model.register_forward_hook(lambda m, a, out: captured.append(out))
    try:
        g = trace_modules(model, *args, depth=depth, **kwargs)
    finally:
        h.remove()
    assert hook_count(model) == before
    assert [(c.name, c.type) for c in g.calls] == [(e["name"], e["type"]) for e in expected]
    for c, e in zip(g.calls, expected):
        assert [m.shape for m in c.outputs] == [tuple(t.shape) for t in e["out"]], c.name
        assert [m.dtype for m in c.outputs] == [str(t.dtype)[6:] for t in e["out"]], c.name
    got = torch.utils._pytree.tree_leaves(captured[0])
    want = torch.utils._pytree.tree_leaves(plain)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b)  # bit-identical: the recorder only reads
    return g


def key(g: ModuleGraph, name: str, nth: int = 0) -> str:
    return f"call:{[c.index for c in g.calls if c.name == name][nth]}"


def sources(g: ModuleGraph, dst: str) -> set[str]:
    return {e.src for e in g.edges if e.dst == dst}


# --------------------------------------------------------------------------- models


class Attention(nn.Module):
    def __init__(self, c: int, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.heads, -1).transpose(1, 2)  # (B, nh, T, hs)
                   for t in self.qkv(x).split(C, dim=2))
        att = F.softmax(q @ k.transpose(-2, -1) / math.sqrt(k.size(-1)), dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(c), Attention(c)
        self.ln_2 = nn.LayerNorm(c)
        self.mlp = nn.Sequential(nn.Linear(c, 4 * c), nn.GELU(), nn.Linear(4 * c, c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Unrolled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(8, 16)

    def forward(self, xs: torch.Tensor) -> torch.Tensor:
        h = c = torch.zeros(xs.shape[1], 16)
        for t in range(xs.shape[0]):
            h, c = self.cell(xs[t], (h, c))
        return h


class Tied(nn.Module):
    """A layer applied at two places, and an embedding tied to the output head."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 6)
        self.lin = nn.Linear(6, 6)
        self.act = nn.Tanh()
        self.head = nn.Linear(6, 10, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.lin(self.act(self.lin(self.emb(idx)))))


class Split(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return x[:, :2], {"rest": x[:, 2:].exp(), "all": x}


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.split = Split()
        self.a = nn.Linear(2, 3)
        self.b = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor, *, scale: float = 1.0) -> dict[str, torch.Tensor]:
        first, rest = self.split(x)
        return {"a": self.a(first) * scale, "b": self.b(rest["rest"])}


# --------------------------------------------------------------------------- tests


def test_mlp_calls_shapes_edges() -> None:
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
    g = check_against_torch(model, torch.randn(5, 4))
    # A chain: the input goes to 0, each layer feeds the next, the last one is the output.
    assert sources(g, key(g, "0")) == {"input:0"}
    assert sources(g, key(g, "1")) == {key(g, "0")}
    assert sources(g, key(g, "2")) == {key(g, "1")}
    assert sources(g, "output:0") == {key(g, "2")}
    assert all(e.kind == "same" for e in g.edges)
    assert g.calls[0].num_params == sum(p.numel() for p in model.parameters())
    assert g.calls[1].num_params == sum(p.numel() for p in model[0].parameters())


def test_transformer_block_residual_adds() -> None:
    torch.manual_seed(0)
    model = Block()
    g = check_against_torch(model, torch.randn(2, 5, 8))
    adds = [o for o in g.ops if o.name == "add"]
    assert len(adds) == 2  # the two residual connections; every other op has one producer
    first, second = (f"op:{o.index}" for o in adds)
    assert sources(g, first) == {"input:0", key(g, "attn.proj")}
    assert sources(g, second) == {first, key(g, "mlp.2")}
    assert sources(g, "output:0") == {second}
    # Functional code between two modules marks the edge with what it ran.
    qkv, proj = key(g, "attn.qkv"), key(g, "attn.proj")
    qkv_to_proj = [e for e in g.edges if e.src == qkv and e.dst == proj]
    assert qkv_to_proj and qkv_to_proj[0].kind == "ops" and "split" in qkv_to_proj[0].via
    dot = to_dot(g)
    assert dot.count(f"f{adds[0].index} [") == 1 and "cluster" in dot


def test_lstm_cell_100_steps_rolls_up() -> None:
    torch.manual_seed(0)
    model = Unrolled()
    g = check_against_torch(model, torch.randn(100, 4, 8))
    assert sum(c.name == "cell" for c in g.calls) == 100
    cells = [c.index for c in g.calls if c.name == "cell"]
    # Step t+1 reads step t's (h, c): two edges per step, the very tensors.
    steps = [(s, d) for s, d in g.call_edges() if s in cells]
    assert len(steps) == 2 * 99 and all(d == s + 1 for s, d in steps)
    rolled, unrolled = to_dot(g), to_dot(g, rollup=False)
    assert drawn_nodes(rolled) <= 5 and "×100" in rolled and "next call" in rolled
    assert drawn_nodes(unrolled) == 100 + 2


def test_layer_used_twice_and_tied_weights() -> None:
    model = Tied()
    g = check_against_torch(model, torch.tensor([[1, 2, 3]]))
    lin1, lin2 = key(g, "lin", 0), key(g, "lin", 1)
    assert sources(g, key(g, "act")) == {lin1} and sources(g, lin2) == {key(g, "act")}
    dot = to_dot(g)
    # Not consecutive: two boxes, each says which call it is; no cycle lin -> act -> lin.
    assert "call 1 of 2" in dot and "call 2 of 2" in dot and "×2" not in dot
    assert g.calls[0].num_params == sum(p.numel() for p in model.parameters())
    emb = next(c for c in g.calls if c.name == "emb")
    head = next(c for c in g.calls if c.name == "head")
    assert emb.tied_with == ("head",) and head.tied_with == ("emb",)
    assert "tied: emb" in dot


def test_consecutive_calls_with_other_shapes_say_so() -> None:
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(self.lin(x)).sum() + self.lin(x[:1]).sum()

    g = check_against_torch(Twice(), torch.randn(3, 4))
    dot = to_dot(g)
    assert "×3" in dot and "shapes vary" in dot


def test_tuple_and_dict_outputs_and_kwargs() -> None:
    model = TwoHeads()
    x = torch.randn(3, 5)
    g = check_against_torch(model, x, scale=2.0)
    split = next(c for c in g.calls if c.name == "split")
    assert [m.path for m in split.outputs] == ["[0]", "[1]['rest']", "[1]['all']"]
    assert [m.path for m in g.outputs] == ["output['a']", "output['b']"]
    assert sources(g, key(g, "a")) == {key(g, "split")}
    b_in = [e for e in g.edges if e.dst == key(g, "b")]
    assert [e.kind for e in b_in] == ["same"]  # the dict entry itself, not a copy
    assert [e.kind for e in g.edges if e.dst == "output:0"] == ["ops"]  # `* scale`
    g2 = trace_modules(model, x=x)
    assert g2.inputs[0].path == "kwargs['x']" and sources(g2, key(g2, "split")) == {"input:0"}


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_depth_limits_boxes(depth: int) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(Block(), Block())
    g = check_against_torch(model, torch.randn(2, 3, 8), depth=depth)
    assert max(c.depth for c in g.calls) == depth
    boxes = drawn_nodes(to_dot(g)) - len(g.inputs) - len(g.outputs)
    parents = {c.parent for c in g.calls}
    leaves = [c for c in g.calls if c.index not in parents]
    assert boxes == len(leaves) + sum(o.parent in parents for o in g.ops)
    if depth == 1:
        assert sources(g, key(g, "1")) == {key(g, "0")}  # the adds inside are folded away


def test_dot_is_deterministic() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(Block(), Block())
    x = torch.randn(2, 3, 8)
    g = trace_modules(model, x)
    assert to_dot(g) == to_dot(g) == trace_modules(model, x).to_dot()
    assert g.to_dot(direction="LR").count("rankdir=LR") == 1


def test_grad_mode_is_a_choice() -> None:
    model = nn.Sequential(nn.Linear(3, 3))
    seen: list[bool] = []
    model.register_forward_hook(lambda m, a, out: seen.append(out.requires_grad))
    trace_modules(model, torch.randn(2, 3))
    trace_modules(model, torch.randn(2, 3), grad=True)
    assert seen == [False, True]


def test_hooks_and_mode_removed_after_an_error() -> None:
    class Broken(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x) @ torch.ones(4, 4)

    model = Broken()
    before = hook_count(model)
    with pytest.raises(RuntimeError) as info:
        trace_modules(model, torch.randn(2, 3))
    assert hook_count(model) == before
    assert torch._C._len_torch_function_stack() == 0
    assert any("trace_modules" in n for n in getattr(info.value, "__notes__", []))
    model.lin.weight.data.zero_()  # the model still runs as before
    assert hook_count(model) == before


def test_bad_input_says_what_to_pass() -> None:
    with pytest.raises(TypeError, match="nn.Module"):
        trace_modules(torch.randn(3), nn.Linear(3, 3))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no tensor"):
        trace_modules(nn.Linear(3, 3), [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="depth"):
        trace_modules(nn.Linear(3, 3), torch.randn(3), depth=-1)
    g = trace_modules(nn.Linear(3, 3), torch.randn(3))
    with pytest.raises(ValueError, match="direction"):
        g.to_dot(direction="down")


def test_leaf_model_is_one_box() -> None:
    g = check_against_torch(nn.LSTMCell(4, 5), torch.randn(2, 4))
    assert len(g.calls) == 1 and drawn_nodes(to_dot(g)) == 1 + 1 + 2


@pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz dot")
def test_svg() -> None:
    g = trace_modules(Unrolled(), torch.randn(100, 4, 8))
    svg = g.svg()
    assert svg.startswith("<svg") and "×100" in svg and g._repr_svg_() == svg


def test_block_applied_repeatedly_rolls_into_one_cluster() -> None:
    class Repeat(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = Block()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for _ in range(4):
                x = self.block(x)
            return x

    torch.manual_seed(0)
    g = check_against_torch(Repeat(), torch.randn(2, 3, 8))
    assert sum(c.name == "block" for c in g.calls) == 4
    rolled, unrolled = to_dot(g), to_dot(g, rollup=False)
    assert "block: Block ×4" in rolled and "next call" in rolled
    # The four calls' boxes and joining ops are drawn once instead of four times.
    per_call = (drawn_nodes(unrolled) - 2) // 4
    assert drawn_nodes(rolled) == per_call + 2


@pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz dot")
def test_layout_timeout_is_a_package_error_naming_the_fix() -> None:
    import subprocess

    from autogradviz.graphs import render

    g = trace_modules(Unrolled(), torch.randn(5, 4, 8))
    render._run_dot.cache_clear()  # a cached layout would not time out
    for rollup in (True, False):
        with pytest.raises(render.LayoutTimeout) as info:
            g.svg(rollup=rollup, timeout=1e-4)  # no layout finishes this fast
        assert not isinstance(info.value, subprocess.TimeoutExpired)
        assert info.value.__cause__ is None and info.value.__suppress_context__
        msg = str(info.value)
        assert "depth=1" in msg and "timeout=" in msg and "within 0.0001 s" in msg
        assert ("rollup=True" in msg) == (not rollup)
