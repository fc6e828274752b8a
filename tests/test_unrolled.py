"""Unrolled loops: decoders drawn in seconds, and their time steps folded by roll-up.

torch is the oracle: the loop count is the number of times the cell's forward ran
(a forward hook counts it), the carried state is what the cell returned (its
``grad_fn``), and the drawn edges are torch's own ``next_functions``.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import autogradviz as av
from autogradviz.graphs import render
from autogradviz.graphs.trace import function_name
from autogradviz.graphs.rollup import LOOP

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` not installed")

CELLS = {"gru": nn.GRUCell, "lstm": nn.LSTMCell, "rnn": nn.RNNCell}


class Decoder(nn.Module):
    """Teacher forcing: embed the previous token, one cell step, score the next token."""

    def __init__(self, cell: str, vocab: int = 11, emb: int = 6, hidden: int = 8) -> None:
        super().__init__()
        self.kind = cell
        self.emb = nn.Embedding(vocab, emb)
        self.cell = CELLS[cell](emb, hidden)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor, stack: bool = True) -> tuple[torch.Tensor, list]:
        h = torch.zeros(tokens.shape[0], self.cell.hidden_size)
        c = torch.zeros_like(h)
        logits, states, loss = [], [], 0
        for t in range(tokens.shape[1] - 1):
            x = self.emb(tokens[:, t])
            if self.kind == "lstm":
                h, c = self.cell(x, (h, c))
                states.append((h, c))
            else:
                h = self.cell(x, h)
                states.append((h,))
            if stack:
                logits.append(self.out(h))
            else:  # the loss summed step by step: a second carried value
                loss = loss + F.cross_entropy(self.out(h), tokens[:, t + 1])
        if not stack:
            return loss, states
        scores = torch.stack(logits, 1)
        loss = F.cross_entropy(scores.reshape(-1, scores.shape[-1]), tokens[:, 1:].reshape(-1))
        return loss, states


def decoder(cell: str, steps: int, *, modules: bool = False, stack: bool = True):
    """(graph, cell calls counted by torch, the cell's outputs of each step, loss)."""
    torch.manual_seed(0)
    model = Decoder(cell)
    calls = []
    handle = model.cell.register_forward_hook(lambda m, args, out: calls.append(1))
    tokens = torch.randint(0, 11, (3, steps + 1))
    try:
        if modules:
            with av.record_modules(model) as rec:
                loss, states = model(tokens, stack)
            g = av.trace(loss, params=model, modules=rec)
        else:
            loss, states = model(tokens, stack)
            g = av.trace(loss, params=model)
    finally:
        handle.remove()
    return g, len(calls), states, loss


@pytest.mark.parametrize("cell", sorted(CELLS))
@pytest.mark.parametrize("steps", [4, 9])
@pytest.mark.parametrize("modules", [False, True])
def test_rollup_counts_the_loop_steps(cell, steps, modules):
    g, calls, states, _ = decoder(cell, steps, modules=modules)
    assert calls == steps
    r = av.roll_up(g)
    assert r.rolled[LOOP][1] == calls
    assert f"loop step ×{calls}" in r.to_dot(rollup=False, group_modules=True)
    # One step is drawn whatever the length: the same boxes for 4 and 9 steps.
    other, _, _, _ = decoder(cell, 13 - steps, modules=modules)
    assert sorted(av.roll_up(other).names()) == sorted(r.names())
    # Every kind of Node of the traced graph is still drawn.
    assert set(r.names()) == set(g.names())
    assert r.traced_functions == g.num_functions


@pytest.mark.parametrize("cell", sorted(CELLS))
@pytest.mark.parametrize("stack", [True, False])
def test_carried_edges_end_at_the_state_the_cell_returned(cell, stack):
    g, calls, states, loss = decoder(cell, 6, stack=stack)
    r = av.roll_up(g)
    assert r.rolled[LOOP][1] == calls == 6
    # The dashed edges go into the Nodes that made the carried values: the cell's
    # outputs (h; h and c for an LSTM), plus the running loss when it is summed.
    expect = Counter(function_name(t.grad_fn) for t in states[2])
    if not stack:
        expect[function_name(loss.grad_fn)] += 1
    got = Counter(r.nodes[d].name for _, d in {(s, d): 1 for s, d in r.carried})
    assert set(got) == set(expect)
    assert all(e in r.edges for e in r.carried)
    dot = r.to_dot(rollup=False, group_modules=True)
    assert dot.count('label="previous step"') == len(r.carried)


def _mlp_graph(modules: bool):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4),
                      nn.ReLU(), nn.Linear(4, 1))
    x = torch.randn(2, 4)
    if modules:
        with av.record_modules(m) as rec:
            y = m(x).sum()
        return av.trace(y, params=m, modules=rec)
    return av.trace(m(x).sum(), params=m)


def _chain_graph():
    x = torch.ones(3, requires_grad=True)
    y = x
    for _ in range(20):
        y = torch.tanh(y * 1.5)
    return av.trace(y.sum())


@pytest.mark.parametrize("build", [lambda: _mlp_graph(False), lambda: _mlp_graph(True),
                                   _chain_graph])
def test_non_repeating_graph_left_unchanged(build):
    """Same ops layer after layer but each layer its own weights (or no weights): no loop."""
    g = build()
    assert av.roll_up(g) is g
    assert g.to_dot(rollup=True, group_modules=bool(g.module_types)) == g.to_dot(
        group_modules=bool(g.module_types))


def test_expand_loop_leaves_it_unrolled():
    g, _, _, _ = decoder("rnn", 5)
    assert av.roll_up(g, expand=[LOOP]) is g


@needs_dot
@pytest.mark.parametrize("direction", ["backward", "forward"])
def test_rolled_loop_draws(direction):
    g, calls, _, _ = decoder("gru", 7)
    svg = g.svg(rollup=True, direction=direction)
    assert f"loop step ×{calls}" in svg and "previous step" in svg
    assert f"of {g.num_functions} autograd Nodes drawn" in svg
    page = g.html(rollup=True)
    assert f"loop step ×{calls}" in page


def _drawn_function_edges(graph, dot: str) -> Counter:
    """(src, dst) Node ids of the DOT's edges between function Nodes, copies mapped back."""
    fn = {n.id for n in graph.nodes if n.kind == "function"}
    pairs = Counter()
    for a, b in re.findall(r"^  n(\d+)(?:_\d+)? -> n(\d+)(?:_\d+)?\b", dot, flags=re.M):
        if int(a) in fn and int(b) in fn:
            pairs[(int(a), int(b))] += 1
    return pairs


@needs_dot
def test_fanout_copies_keep_every_edge_and_shrink_the_layout():
    """StackBackward0 of 50 steps' outputs: its edges run from copies beside each step."""
    g, _, _, _ = decoder("gru", 50)
    stack = next(n for n in g.nodes if n.name == "StackBackward0")
    assert sum(1 for s, _ in g.edges if s == stack.id) == 50
    dot = g.to_dot()
    assert _drawn_function_edges(g, dot) == Counter(g.edges)  # torch's next_functions, all
    copies = re.findall(rf'^  n{stack.id}_\d+ \[.*style="filled,dashed"', dot, flags=re.M)
    assert len(copies) > 40
    plain = g.to_dot(policy=render.replace(render.choose_policy(g), fanout_copies=None))
    assert _drawn_function_edges(g, plain) == Counter(g.edges)

    def positioned_nodes(text: str) -> int:
        """Nodes in dot's positioning problem (long edges add one per rank crossed)."""
        proc = subprocess.run([shutil.which("dot"), "-v", "-Tsvg"], input=text.encode(),
                              capture_output=True, timeout=120, check=True)
        sizes = [int(m) for m in re.findall(r"network simplex: (\d+) nodes",
                                            proc.stderr.decode())]
        if not sizes:
            pytest.skip("this Graphviz does not report network-simplex sizes with -v")
        return max(sizes)

    assert positioned_nodes(dot) * 4 < positioned_nodes(plain)


def _lstm_over_inputs(steps: int):
    torch.manual_seed(0)
    cell = nn.LSTMCell(3, 5)
    h = c = torch.zeros(2, 5)
    for x in torch.randn(steps, 2, 3):
        h, c = cell(x, (h, c))
    return av.trace(h.sum(), params=cell), h, c


def test_lstm_carries_h_and_c_and_two_steps_stay_unrolled():
    g, h, c = _lstm_over_inputs(5)
    r = av.roll_up(g)
    assert r.rolled[LOOP][1] == 5
    assert {r.nodes[d].name for _, d in r.carried} == {function_name(h.grad_fn),
                                                        function_name(c.grad_fn)}
    two, _, _ = _lstm_over_inputs(2)
    assert av.roll_up(two) is two


def test_records_without_creation_order_still_fold():
    """A Graph built by hand (no `seq`) folds the same steps; where a step starts is then
    a convention, but every carried edge still joins two steps."""
    import dataclasses

    g, calls, _, _ = decoder("gru", 7)
    plain = dataclasses.replace(g, nodes=[dataclasses.replace(n, seq=None) for n in g.nodes])
    r = av.roll_up(plain)
    assert r.rolled[LOOP][1] == calls
    assert sorted(r.names()) == sorted(av.roll_up(g).names())
    assert r.carried and all(e in r.edges for e in r.carried)
