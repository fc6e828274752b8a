"""record_comm / CommTrace / plot_comm: DDP's all-reduces as records, against torch.

The oracles: the buckets DDP itself holds (``reducer._get_zeros_like_grad_buckets()``),
parameter sizes from torch, gradients of a model that keeps DDP's default hook, and
gradients averaged by hand with ``dist.all_reduce``. The fast tests run DDP in this
process on a one-rank gloo group; the slow one runs two ranks under torchrun.
"""
from __future__ import annotations

import contextlib
import copy
import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP

import autogradviz as agv
from autogradviz.distributed.records import BackwardPass, NodeSpan

SCRIPT = Path(__file__).resolve().parent / "dist_scripts" / "comm_steps.py"


@pytest.fixture
def group():
    """A one-rank gloo process group in this process, destroyed afterwards."""
    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                         nn.Linear(32, 4))


def torch_buckets(ddp: DDP) -> list[tuple[int, int]]:
    return [(b.index(), b.buffer().numel() * b.buffer().element_size())
            for b in ddp.reducer._get_zeros_like_grad_buckets()]


def test_one_rank_calls_match_ddp_buckets_and_grads(group):
    net = mlp()
    ddp, plain = DDP(copy.deepcopy(net), bucket_cap_mb=0.004), copy.deepcopy(net)
    grad_bytes = sum(p.numel() * p.element_size() for p in net.parameters())
    x = torch.randn(8, 16)
    seen = []
    with agv.record_comm(ddp) as comm:
        for synced in (True, False, True, True):
            with contextlib.nullcontext() if synced else ddp.no_sync():
                out = ddp(x)
                if synced:
                    seen.append(torch_buckets(ddp))
                out.sum().backward()
            plain(x).sum().backward()
    assert [b.synced for b in comm.backwards] == [True, False, True, True]
    synced_steps = [b.micro_step for b in comm.backwards if b.synced]
    assert comm.calls_of(2) == []  # no_sync: no all-reduce at all
    for m, buckets in zip(synced_steps, seen):
        calls = comm.calls_of(m)
        assert sorted((c.bucket, c.nbytes) for c in calls) == sorted(buckets)
        assert sum(c.nbytes for c in calls) == grad_bytes
        assert sorted(n for c in calls for n in c.params) == sorted(comm.params)
        assert all(c.dtype == "float32" and c.nbytes == 4 * c.numel for c in calls)
        assert all(c.start_s <= c.end_s for c in calls)
    assert len(seen[-1]) == 2  # after DDP rebuilt them, the 4 KB cap gives two buckets
    for p, q in zip(ddp.parameters(), plain.parameters()):  # one rank: average = local sum
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0)
    # Nodes: every backward timed its Nodes, AccumulateGrad named by parameter.
    for b in comm.backwards:
        spans = [n for n in comm.nodes if n.micro_step == b.micro_step]
        assert {n.param for n in spans if n.name == "AccumulateGrad"} == set(comm.params)
        assert all(b.start_s <= n.start_s <= n.end_s <= b.nodes_end_s <= b.end_s
                   for n in spans)


def test_record_comm_refuses_what_ddp_cannot_do(group):
    with pytest.raises(TypeError, match="DistributedDataParallel"):
        agv.record_comm(nn.Linear(2, 2))
    with pytest.raises(TypeError, match="optimizer"):
        agv.record_comm(DDP(nn.Linear(2, 2)), optimizer="sgd")
    trained = DDP(nn.Linear(2, 2))
    trained(torch.randn(3, 2)).sum().backward()
    with pytest.raises(ValueError, match="before the DDP model's first backward"):
        with agv.record_comm(trained):
            pass
    hooked = DDP(nn.Linear(2, 2))
    hooked.register_comm_hook(None, allreduce_hook)
    with pytest.raises(ValueError, match="already has a communication hook"):
        with agv.record_comm(hooked):
            pass
    fresh = DDP(nn.Linear(2, 2))
    rec = agv.record_comm(fresh)
    with rec:
        pass
    with pytest.raises(RuntimeError, match="records one with-block"):
        with rec:
            pass
    with agv.record_comm(fresh) as again:  # a new recording re-uses DDP's one hook
        fresh(torch.randn(3, 2)).sum().backward()
    assert len(again.calls) == 1 and again.calls[0].nbytes == 6 * 4


def synthetic() -> agv.CommTrace:
    """Backward 1: Nodes 0-10 ms, all-reduces 4-8 and 6-14 ms. Backward 2: no_sync."""
    t = agv.CommTrace(rank=0, world_size=2, backend="gloo", params=("w", "b"),
                      param_bytes={"w": 64, "b": 16})
    t.nodes += [NodeSpan(1, "MmBackward0", 0.0, 0.004),
                NodeSpan(1, "AccumulateGrad", 0.004, 0.010, "w"),
                NodeSpan(2, "MmBackward0", 0.020, 0.022)]
    t.calls += [agv.CommCall(0, 1, 0, 0, 16, 64, "float32", ("w",), 0.004, 0.008),
                agv.CommCall(1, 1, 0, 1, 4, 16, "float32", ("b",), 0.006, 0.014)]
    t.backwards += [BackwardPass(1, True, 0, 0.0, 0.010, 0.015),
                    BackwardPass(2, False, 1, 0.020, 0.022, 0.023)]
    t.steps.append(0.016)
    return t


def test_overlap_table_and_round_trip():
    t = synthetic()
    o = t.overlap(1)
    assert isinstance(o, agv.CommOverlap) and o.micro_step == 1
    assert o.overlapped_s == pytest.approx(0.006) and o.exposed_s == pytest.approx(0.004)
    assert o.overlapped_fraction == pytest.approx(0.6)
    assert t.overlap(2) == agv.CommOverlap(2, 0.0, 0.0)
    assert t.overlap(2).overlapped_fraction == 0.0
    with pytest.raises(ValueError, match="recorded micro-steps are"):
        t.overlap(3)
    assert t.calls_per_step() == {0: t.calls}
    assert t.table().splitlines()[1].split() == ["1", "0", "0", "16", "64", "B", "w"]
    back = agv.CommTrace.from_dict(json.loads(json.dumps(t.to_dict())))
    assert back.to_dict() == t.to_dict() and back.calls == t.calls and back.nodes == t.nodes
    assert repr(back) == ("CommTrace(rank 0/2 (gloo): 2 backward passes (1 synced), "
                          "2 all-reduces, 1 optimizer steps)")


def _check_readable(fig, panels: int) -> None:
    fig.canvas.draw()
    assert fig.dpi == 110 and round(fig.get_figwidth() * fig.dpi) == 506
    sizes = [t.get_fontsize() for t in fig.findobj(lambda a: hasattr(a, "get_fontsize"))
             if getattr(t, "get_text", lambda: "")()]
    assert min(sizes) >= 9, min(sizes)
    axes = [a for a in fig.findobj(lambda a: hasattr(a, "get_subplotspec"))
            if getattr(a, "get_subplotspec", lambda: None)() is not None]
    assert len(axes) == panels
    legends = fig.findobj(lambda a: type(a).__name__ == "Legend")
    assert len(legends) == 1
    box = legends[0].get_window_extent()
    assert not any(box.overlaps(ax.get_window_extent()) for ax in axes)
    # The title and the legend fit the narrow width.
    renderer = fig._get_renderer()
    title = fig.subfigs[0]._suptitle
    assert title is not None and title.get_text().startswith("DDP all-reduces")
    for artist in (legends[0], title, fig.subfigs[0]._supxlabel):
        extent = artist.get_window_extent(renderer)
        assert extent.x0 >= -1 and extent.x1 <= fig.bbox.width + 1, artist


def test_plot_is_readable_and_takes_dicts():
    t = synthetic()
    _check_readable(t.plot(), panels=2)
    _check_readable(agv.plot_comm([t.to_dict(), t]), panels=4)
    _check_readable(agv.plot_comm(t, micro_steps=[2]), panels=1)
    with pytest.raises(ValueError, match="no backward pass"):
        agv.plot_comm(t, micro_steps=[7])
    with pytest.raises(TypeError, match="one per rank"):
        agv.plot_comm([])


def _panels(fig):
    return [a for a in fig.findobj(lambda a: hasattr(a, "get_subplotspec"))
            if getattr(a, "get_subplotspec", lambda: None)() is not None]


def many_passes(n: int) -> agv.CommTrace:
    """``n`` synced backward passes, pass m lasting m ms, with two buckets whose sizes
    change after the first pass (as DDP's rebuilt buckets do)."""
    t = agv.CommTrace(rank=0, world_size=2, backend="gloo", params=("w", "b"),
                      param_bytes={"w": 4096, "b": 64})
    for m in range(1, n + 1):
        t0, dur = 0.1 * m, 1e-3 * m
        t.nodes.append(NodeSpan(m, "MmBackward0", t0, t0 + dur / 2))
        sizes = (4096, 64) if m == 1 else (2048, 2112)
        for b, nbytes in enumerate(sizes):
            t.calls.append(agv.CommCall(len(t.calls), m, m - 1, b, nbytes // 4, nbytes,
                                        "float32", ("w",), t0 + dur / 4, t0 + dur * 0.9))
        t.backwards.append(BackwardPass(m, True, m - 1, t0, t0 + dur / 2, t0 + dur))
    return t


def test_plot_each_panel_own_axis_and_bucket_bytes():
    t = many_passes(4)
    fig = agv.plot_comm(t)
    axes = _panels(fig)
    assert len(axes) == 4  # every backward pass
    limits = [ax.get_xlim()[1] for ax in axes]
    # Pass m lasts m ms: each panel is fitted to its own pass, not to the longest one.
    assert limits == pytest.approx([1.05 * m for m in range(1, 5)])
    for ax, m in zip(axes, range(1, 5)):
        labels = [x.get_text().strip() for x in ax.texts]
        assert sorted(labels) == sorted(agv.format_bytes(c.nbytes) for c in t.calls_of(m))
    assert "4.0 KiB" in [x.get_text().strip() for x in axes[0].texts]
    assert "2.1 KiB" in [x.get_text().strip() for x in axes[1].texts]
    # Two ranks: stacked rank by rank (the order of the former grid's rows), each pass's
    # time axis shared by the ranks.
    two = _panels(agv.plot_comm([t, t], micro_steps=[1, 3]))
    assert len(two) == 4 and two[0].get_xlim() == two[2].get_xlim() != two[1].get_xlim() == two[3].get_xlim()
    assert [ax.get_title().split("\n")[0] for ax in two] == ["backward 1", "backward 3"] * 2
    # One column: every panel spans the figure's width, none sits beside another.
    lefts = {round(ax.get_position().x0, 3) for ax in two}
    assert len(lefts) == 1
    _check_readable(fig, panels=4)
    with pytest.raises(TypeError, match="list of backward-pass numbers"):
        agv.plot_comm(t, micro_steps=3)


def test_plot_symlog_time_on_every_pass():
    """time_scale="symlog" applies to every pass's axis, not only the first panel's."""
    t = many_passes(4)
    two = _panels(agv.plot_comm([t, t], micro_steps=[1, 3], time_scale="symlog"))
    assert [ax.get_xscale() for ax in two] == ["symlog"] * 4
    # pass 1 spans 1.05 ms, pass 3 spans 3.15 ms: each its own ticks, shared by ranks
    assert [list(ax.get_xticks()) for ax in two] == [[0, 0.5, 1], [0, 0.5, 1]] * 2
    assert all(ax.get_xscale() == "linear" for ax in _panels(t.plot()))
    with pytest.raises(ValueError, match="time_scale"):
        agv.plot_comm(t, time_scale="log")


def test_plot_says_which_passes_it_leaves_out():
    from autogradviz.distributed.comm_view import MAX_PANELS

    t = many_passes(MAX_PANELS + 3)
    fig = agv.plot_comm(t)
    axes = _panels(fig)
    assert len(axes) == MAX_PANELS
    assert axes[0].get_title().startswith("backward 4\n")  # the last MAX_PANELS
    notes = [x.get_text() for x in fig.findobj(lambda a: type(a).__name__ == "Text")
             if "not drawn" in x.get_text()]
    assert notes == [f"not drawn: backward passes 1-3 of {MAX_PANELS + 3} "
                     "(pass micro_steps=[...] to choose)"]
    _check_readable(fig, panels=MAX_PANELS)
    # Chosen passes are what the caller asked for: no note.
    chosen = agv.plot_comm(t, micro_steps=[1, 2])
    assert not [x for x in chosen.findobj(lambda a: type(a).__name__ == "Text")
                if "not drawn" in x.get_text()]


@pytest.mark.slow
def test_two_ranks_no_sync_accumulation():
    run = agv.torchrun(SCRIPT, nproc=2)
    traces = [agv.CommTrace.from_dict(r["comm"]) for r in run.results]
    for res, comm in zip(run.results, traces):
        assert comm.world_size == 2 and comm.backend == "gloo"
        k, steps = 3, 3
        assert [b.synced for b in comm.backwards] == ([False] * (k - 1) + [True]) * steps
        synced = [b.micro_step for b in comm.backwards if b.synced]
        assert all(comm.calls_of(b.micro_step) == [] for b in comm.backwards if not b.synced)
        for m, buckets in zip(synced, res["buckets"]):
            calls = comm.calls_of(m)
            # One hook call per DDP bucket, same index, bytes and parameters as torch's.
            assert sorted([c.bucket, c.nbytes, list(c.params)] for c in calls) == sorted(buckets)
            assert sum(c.nbytes for c in calls) == res["grad_bytes"]
        # k micro-steps per optimizer step: exactly one all-reduce per bucket per step.
        per_step = comm.calls_per_step()
        assert sorted(per_step) == [0, 1, 2]
        for s, calls in per_step.items():
            assert sorted(c.bucket for c in calls) == list(range(len(res["buckets"][s])))
        assert comm.steps and len(comm.steps) == steps
        # The recording hook averages exactly as DDP's default and as a manual all-reduce.
        assert res["twin_diff"] == [0.0] * steps and res["manual_diff"] == [0.0] * steps
        again = agv.CommTrace.from_dict(res["again"])
        assert len(again.calls) == len(res["buckets"][-1])
        assert "first backward" in res["errors"]["trained"]
        assert "already has a communication hook" in res["errors"]["foreign"]
    _check_readable(agv.plot_comm(traces), panels=2 * 6)


def test_plot_label_near_right_edge_ends_at_launch():
    """A bucket launched near the end of its panel gets its bytes label on the left of
    the launch, inside the panel, instead of one the panel's edge would clip."""
    t = agv.CommTrace(rank=0, world_size=2, backend="gloo", params=("w", "b"),
                      param_bytes={"w": 4096, "b": 64})
    t.nodes.append(NodeSpan(1, "MmBackward0", 0.0, 5e-4))
    for b, (start, end) in enumerate(((1e-4, 6e-4), (9.6e-4, 1e-3))):
        t.calls.append(agv.CommCall(b, 1, 0, b, 16, 64, "float32", ("w",), start, end))
    t.backwards.append(BackwardPass(1, True, 0, 0.0, 5e-4, 1e-3))
    for scale in ("linear", "symlog"):
        fig = agv.plot_comm(t, time_scale=scale)
        ax = _panels(fig)[0]
        aligns = [x.get_horizontalalignment() for x in ax.texts]
        assert aligns == ["left", "right"], (scale, aligns)
        renderer = fig._get_renderer()
        box = ax.get_window_extent(renderer)
        for text in ax.texts:  # both labels lie inside the panel
            extent = text.get_window_extent(renderer)
            assert box.x0 - 1 <= extent.x0 and extent.x1 <= box.x1 + 1, (scale, text)
