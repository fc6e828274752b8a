"""backward_order(): the engine's real order, checked against the graph's constraints."""
from __future__ import annotations

import re
import shutil

import pytest
import torch
import torch.nn as nn

import autogradviz as av
import autogradviz.graphs.backward_order as stepper
from _oracle import reachable, start_nodes


def _check_order(bo):
    """Every Node runs after all Nodes that feed it gradient (its consumers in forward)."""
    step = {s.node_id: s.index for s in bo.steps}
    for s, d in bo.graph.edges:
        if s in step and d in step:
            assert step[s] < step[d], (bo.graph.nodes[s].name, bo.graph.nodes[d].name)
    assert [s.index for s in bo.steps] == list(range(1, len(bo.steps) + 1))
    assert all(bo.graph.nodes[s.node_id].step == s.index for s in bo.steps)


def _mlp_loss():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 4), nn.GELU(), nn.Linear(4, 2))
    x = torch.randn(5, 3)
    return (m(x).softmax(-1) * m(x)).sum(), m


def test_order_is_topological_and_every_node_runs():
    loss, m = _mlp_loss()
    nodes, _ = reachable(loss)
    bo = av.backward_order(loss, params=m)
    _check_order(bo)
    assert len(bo) == len(nodes) == bo.graph.num_functions
    assert bo.names[0] == loss.grad_fn.name()
    assert all(p.grad is not None for p in m.parameters())


def test_inputs_restricts_to_nodes_on_a_path():
    loss, m = _mlp_loss()
    target = m[2].weight
    bo = av.backward_order(loss, inputs=[target])
    _check_order(bo)
    # oracle: Nodes from which target's AccumulateGrad is reachable
    acc = start_nodes(target)[0]
    nodes, _ = reachable(loss)
    on_path = {n for n in nodes if acc in reachable_from(n)}
    assert len(bo) == len(on_path) < len(nodes)
    assert m[0].weight.grad is None and target.grad is not None


def reachable_from(node):
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(f for f, _ in n.next_functions if f is not None)
    return seen


def test_retain_graph_and_hooks_removed(monkeypatch):
    fired: list[object] = []
    make_hook = stepper._make_hook

    def counting_hook(log, node):
        inner = make_hook(log, node)

        def hook(grad_outputs):
            fired.append(node)
            return inner(grad_outputs)

        return hook

    monkeypatch.setattr(stepper, "_make_hook", counting_hook)
    loss, m = _mlp_loss()
    bo = av.backward_order(loss, retain_graph=True)
    assert len(fired) == len(bo)
    loss.backward(retain_graph=True)  # would fire again if any hook were left behind
    assert len(fired) == len(bo)
    again = av.backward_order(loss)  # graph retained: it can run a second time
    assert again.names == bo.names


@pytest.mark.filterwarnings(r"ignore:Using backward\(\) with create_graph=True")
def test_double_backward_with_create_graph():
    a = torch.randn(4, requires_grad=True)
    y = (a.sin() * a).sum()
    (g,) = torch.autograd.grad(y, a, create_graph=True)
    z = g.pow(2).sum()
    nodes, _ = reachable(z)
    bo = av.backward_order(z, create_graph=True, inputs=[a])
    _check_order(bo)
    assert len(bo) == len(nodes)
    assert a.grad is not None and a.grad.grad_fn is not None  # create_graph kept a graph
    expected = torch.autograd.grad(torch.autograd.grad((a.sin() * a).sum(), a, create_graph=True)[0]
                                   .pow(2).sum(), a)[0]
    assert torch.allclose(a.grad, expected)


def test_grad_argument_for_non_scalar_root():
    a = torch.randn(3, requires_grad=True)
    out = a * 3
    bo = av.backward_order(out, grad=torch.ones(3))
    assert bo.names == ["MulBackward0", "AccumulateGrad"]
    assert torch.equal(a.grad, torch.full((3,), 3.0))


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` not installed")
def test_animation_and_strip_are_offline_svg():
    loss, m = _mlp_loss()
    bo = av.backward_order(loss, params=m)
    anim = bo.animation()._repr_svg_()
    assert anim.startswith("<svg") and "<script" not in anim
    assert anim.count("@keyframes") == len(bo)
    loss2, m2 = _mlp_loss()
    assert anim == av.backward_order(loss2, params=m2).animation()._repr_svg_()  # same program, same bytes
    strip = bo.strip(max_frames=4)._repr_svg_()
    assert strip.count("<svg") == 1 + 4 and "after step" in strip
    with pytest.raises(ValueError):
        bo.strip(max_frames=1)


def _grid_cells(strip: str) -> list[tuple[float, float, float]]:
    """(x, top, bottom) of each frame nested in a composed strip (the outer <svg> excluded)."""
    return [(float(x), float(y), float(y) + float(h)) for x, y, h in
            re.findall(r'<svg x="([0-9.]+)" y="([0-9.]+)" width="[0-9.]+" height="([0-9.]+)"',
                       strip)]


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` not installed")
@pytest.mark.parametrize("per_row", [2, 3])
def test_strip_is_a_grid(per_row):
    loss, m = _mlp_loss()
    bo = av.backward_order(loss, params=m)
    kwargs = {} if per_row == 2 else {"per_row": per_row}  # 2 is the default
    cells = _grid_cells(bo.strip(max_frames=4, **kwargs).text)
    assert len(cells) == 4
    rows = [cells[k:k + per_row] for k in range(0, 4, per_row)]
    assert len(rows) == -(-4 // per_row)
    for row in rows:  # left to right from the left edge
        xs = [x for x, _, _ in row]
        assert xs[0] == 0.0 and xs == sorted(xs) and len(set(xs)) == len(xs)
    for above, below in zip(rows, rows[1:]):  # each row wholly below the one before
        assert min(top for _, top, _ in below) >= max(bottom for _, _, bottom in above)
    with pytest.raises(ValueError, match="per_row"):
        bo.strip(per_row=0)


def test_strip_frames_keep_their_natural_size_unless_capped():
    from autogradviz.graphs.strips import compose_strip

    tall = '<svg width="100pt" height="600pt" viewBox="0 0 100 600"></svg>'
    short = '<svg width="80pt" height="50pt" viewBox="0 0 80 50"></svg>'
    cells = re.findall(r'<svg x="[0-9.]+" y="([0-9.]+)" width="([0-9.]+)" height="([0-9.]+)"',
                       compose_strip([tall, short], ["a", "b"]))
    # Natural size: a tall graph is not shrunk to a common height (its labels would shrink).
    assert [(float(w), float(h)) for _, w, h in cells] == [(100.0, 600.0), (80.0, 50.0)]
    # Both sit on one baseline: the short one starts lower by the height difference.
    assert float(cells[1][0]) - float(cells[0][0]) == 550.0
    # Each label sits above its drawing (a label below reads as the next frame's title).
    label_ys = [float(y) for y in re.findall(r'<text x="[0-9.]+" y="([0-9.]+)"',
                                            compose_strip([tall, short], ["a", "b"]))]
    assert all(y < float(cells[0][0]) for y in label_ys)
    capped = re.findall(r'<svg x="[0-9.]+" y="[0-9.]+" width="([0-9.]+)" height="([0-9.]+)"',
                        compose_strip([tall, short], ["a", "b"], height=300))
    assert [(float(w), float(h)) for w, h in capped] == [(50.0, 300.0), (80.0, 50.0)]
    with pytest.raises(ValueError, match="height"):
        compose_strip([tall], ["a"], height=0)


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` not installed")
def test_animation_colors_paint_the_still_image():
    """colors= every Node DONE: outside the keyframes no Node is drawn running or idle."""
    from autogradviz.graphs.strips import BASE, CURRENT, DONE

    loss, m = _mlp_loss()
    bo = av.backward_order(loss, params=m)
    finished = {s.node_id: DONE for s in bo.steps}
    still = bo.animation(policy=av.LayoutPolicy(saved=False), colors=finished).text.split("</style>")[1]
    assert CURRENT not in still and BASE not in still
    assert still.count(f'fill="{DONE}"') == len(bo.steps)
