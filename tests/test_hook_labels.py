"""label_hooks (Chapter 4, Q19): each hook's label lands on the Node torch ran it at.

The oracle is torch itself: every hook and every Node pre-hook writes to one log as
the engine runs them, so the log's order is the engine's, and the labels must agree
with which Node each hook belongs to (a parameter's hooks with its AccumulateGrad, a
module's hooks with the BackwardHookFunction torch inserted for it).
"""
from __future__ import annotations

import warnings
from collections import OrderedDict

import pytest
import torch
import torch.nn as nn

import autogradviz as agv
from autogradviz.graphs.hook_labels import HOOK_FILL, MODULE_HOOK_FILL, label_hooks
from autogradviz.graphs.trace import GraphWalk


def _logged_pass():
    torch.manual_seed(19)
    mlp = nn.Sequential(OrderedDict(fc1=nn.Linear(3, 4), act=nn.Tanh(), fc2=nn.Linear(4, 2)))
    events = []
    mlp.fc2.register_full_backward_pre_hook(
        lambda m, g: events.append(("module pre-hook", "fc2")))
    mlp.fc2.register_full_backward_hook(lambda m, gi, go: events.append(("module hook", "fc2")))
    mlp.fc1.register_full_backward_hook(lambda m, gi, go: events.append(("module hook", "fc1")))
    for name, p in mlp.named_parameters():
        p.register_hook(lambda g, name=name: events.append(("tensor hook", name)))
        p.register_post_accumulate_grad_hook(
            lambda p, name=name: events.append(("post-accumulate", name)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the input needs no grad: fc1's hook says so
        h = mlp.act(mlp.fc1(torch.randn(5, 3)))
        h.register_hook(lambda g: events.append(("tensor hook", "h")))
        loss = mlp.fc2(h).pow(2).sum()
        walk = GraphWalk()
        walk.extend([loss.grad_fn])
        for node in walk.order:
            node.register_prehook(lambda g, node=node: events.append(
                ("Node", node.name().replace("torch::autograd::", ""))))
        order = agv.backward_order(loss, params=mlp)
    return mlp, events, order


def _labels(graph, step):
    return graph.nodes[step.node_id].name.split("\n")[1:]


def test_labels_follow_the_engine():
    mlp, events, order = _logged_pass()
    params = dict(mlp.named_parameters())
    labelled, colors = label_hooks(order, events, param_names=params)
    assert [n.id for n in labelled.nodes] == [n.id for n in order.graph.nodes]
    # one label per hook call, none lost or doubled
    hooks = [e for e in events if e[0] != "Node"]
    assert sum(len(_labels(labelled, st)) for st in order.steps) == len(hooks)
    by_name = {}
    for st in order.steps:
        by_name.setdefault(st.name, []).append(_labels(labelled, st))
    # each parameter's AccumulateGrad: its tensor hook just before, post-accumulate after
    assert by_name["AccumulateGrad"] == [["before: tensor hook", "after: post-accumulate hook"]
                                         ] * len(params)
    # the activation's hook names its tensor and sits on the Node that consumes it
    tanh = next(st for st in order.steps if st.name == "TanhBackward0")
    assert _labels(labelled, tanh) == ["before: tensor hook on h"]
    # module hooks sit on torch's BackwardHookFunction Nodes, in a colour of their own
    module_boxes = {st.node_id for st in order.steps if st.name == "BackwardHookFunction"
                    and _labels(labelled, st)}
    module_labels = {label for st in order.steps if st.node_id in module_boxes
                     for label in _labels(labelled, st)}
    assert module_labels == {"fc2 module pre-hook", "fc2 module hook", "fc1 module hook"}
    assert {i for i, c in colors.items() if c == MODULE_HOOK_FILL} == module_boxes
    assert set(colors) - module_boxes and all(
        colors[i] == HOOK_FILL for i in set(colors) - module_boxes)
    # the record it was given is unchanged
    assert all("\n" not in n.name for n in order.graph.nodes)


def test_without_param_names_every_tensor_hook_names_its_tensor():
    _, events, order = _logged_pass()
    labelled, _ = label_hooks(order, events)
    acc = [st for st in order.steps if st.name == "AccumulateGrad"]
    assert all(_labels(labelled, st)[0].startswith("before: tensor hook on fc")
               for st in acc)


def test_log_that_does_not_match_the_order_is_refused():
    _, events, order = _logged_pass()
    with pytest.raises(ValueError, match="Node runs but the backward order has"):
        label_hooks(order, events + [("Node", "SumBackward0")])
    with pytest.raises(ValueError, match="before any Node ran"):
        label_hooks(order, [("module hook", "fc2")] + events)
    with pytest.raises(ValueError, match="after the last Node"):
        label_hooks(order, events + [("tensor hook", "h")])
