"""pipeline.py: the simulated timelines obey the dependencies, and the bubble and in-flight
counts measured from them agree with the published closed forms (Huang et al. 2019;
Narayanan et al. 2021; Korthikanti et al. 2022). Arithmetic only: no torch is needed."""
from __future__ import annotations

import itertools

import pytest

from autogradviz import PipelineOp, PipelineSchedule, compare_pipelines, simulate_pipeline

GRID = [(p, m) for p in (1, 2, 3, 4, 8) for m in (1, 2, 3, 4, 7, 8, 16)]


def _check_dependencies(s: PipelineSchedule) -> None:
    """An independent check of what any valid schedule must satisfy."""
    done = {(op.kind, op.virtual_stage, op.microbatch): op for op in s.ops}
    last = s.stages * s.chunks - 1
    # Every microbatch passes forward and backward through every virtual stage once.
    assert len(done) == len(s.ops) == 2 * s.microbatches * (last + 1)
    for op in s.ops:
        assert op.virtual_stage == op.chunk * s.stages + op.stage
        if op.kind == "F" and op.virtual_stage > 0:
            assert done[("F", op.virtual_stage - 1, op.microbatch)].end <= op.start
        if op.kind == "B":
            after = ("B", op.virtual_stage + 1, op.microbatch) if op.virtual_stage < last \
                else ("F", op.virtual_stage, op.microbatch)
            assert done[after].end <= op.start
            assert done[("F", op.virtual_stage, op.microbatch)].end <= op.start
    for stage in range(s.stages):  # a device runs one op at a time
        lane = sorted(s.ops_on(stage), key=lambda o: o.start)
        assert all(a.end <= b.start + 1e-12 for a, b in zip(lane, lane[1:]))


@pytest.mark.parametrize("p, m", GRID)
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_measured_bubble_is_p_minus_1_over_m_plus_p_minus_1(p, m, schedule):
    s = simulate_pipeline(p, m, schedule)
    _check_dependencies(s)
    assert s.bubble_fraction == pytest.approx((p - 1) / (m + p - 1), abs=1e-12)
    assert s.bubble_over_ideal == pytest.approx((p - 1) / m, abs=1e-12)  # Megatron's
    assert s.makespan == pytest.approx((m + p - 1) * 3.0)


@pytest.mark.parametrize("tf, tb", [(1.0, 1.0), (1.0, 3.0), (0.5, 2.5)])
def test_bubble_holds_for_other_backward_ratios(tf, tb):
    for schedule in ("gpipe", "1f1b"):
        s = simulate_pipeline(4, 6, schedule, t_forward=tf, t_backward=tb)
        assert s.bubble_fraction == pytest.approx(3 / 9)


@pytest.mark.parametrize("p, m", [(p, m) for p, m in GRID if m >= p])
def test_activations_in_flight_gpipe_m_1f1b_p(p, m):
    assert simulate_pipeline(p, m, "gpipe").peak_in_flight == m
    one = simulate_pipeline(p, m, "1f1b")
    assert one.peak_in_flight == p
    assert one.in_flight_by_stage == tuple(float(p - s) for s in range(p))


@pytest.mark.parametrize("p, v, m", [(p, v, m) for p, v, m in itertools.product(
    (2, 3, 4, 8), (2, 3, 4), (2, 3, 4, 6, 8, 10, 12, 16, 32))
    if m >= p and m % max(1, m // p) == 0])
def test_interleaved_is_smaller_and_matches_megatron(p, v, m):
    s = simulate_pipeline(p, m, "interleaved", chunks=v)
    _check_dependencies(s)
    plain = simulate_pipeline(p, m, "1f1b")
    assert s.bubble_fraction < plain.bubble_fraction
    assert s.bubble_fraction == pytest.approx((p - 1) / (v * m + p - 1))
    assert s.bubble_over_ideal == pytest.approx((p - 1) / (v * m))
    if m > p and m % p == 0:  # Korthikanti et al. 2022: p (1 + (p - 1) / (p v)) held
        assert s.peak_in_flight == pytest.approx(p * (1 + (p - 1) / (p * v)))


def test_one_f_one_b_order_on_the_first_stage():
    s = simulate_pipeline(4, 6, "1f1b")
    lane = [f"{op.kind}{op.microbatch}" for op in s.ops_on(0)]
    assert lane == ["F0", "F1", "F2", "F3", "B0", "F4", "B1", "F5", "B2", "B3", "B4", "B5"]
    last = [f"{op.kind}{op.microbatch}" for op in s.ops_on(3)]
    assert last[:4] == ["F0", "B0", "F1", "B1"]


def test_records_and_caption():
    s = simulate_pipeline(2, 4, "gpipe")
    assert all(isinstance(op, PipelineOp) for op in s.ops)
    assert s.ideal_time == 12.0 and s.busy_by_stage == (12.0, 12.0)
    assert "bubble 20.0% of time" in s.caption() and "gpipe" in repr(s)


@pytest.mark.parametrize("args, kwargs, message", [
    ((0, 4), {}, "stages must be an int >= 1"),
    ((4, 0), {}, "microbatches must be an int >= 1"),
    ((4, 4.0), {}, "microbatches must be an int >= 1"),
    ((4, 4), {"schedule": "zero-bubble"}, "schedule must be one of"),
    ((4, 4), {"schedule": "interleaved"}, "chunks >= 2"),
    ((4, 9), {"schedule": "interleaved", "chunks": 2}, "must be a multiple of 2"),
    ((4, 4), {"schedule": "1f1b", "chunks": 2}, "needs schedule='interleaved'"),
    ((4, 4), {"t_backward": 0}, "t_backward must be a finite number > 0"),
    ((4, 4), {"t_forward": float("inf")}, "t_forward must be a finite number > 0"),
])
def test_bad_input(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        simulate_pipeline(*args, **kwargs)


def test_plots_draw_every_op():
    pytest.importorskip("matplotlib")
    s = simulate_pipeline(4, 8, "interleaved", chunks=2)
    fig = s.plot()
    ax = fig.axes[0]
    # One idle background per lane plus one box per op.
    assert len(ax.patches) == 4 + len(s.ops)
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"stage {i}" for i in range(4)]
    fig = compare_pipelines([simulate_pipeline(4, 8, "gpipe"), s], titles=["a", "b"])
    assert len(fig.axes) == 2 and fig.axes[0].get_xlim() == fig.axes[1].get_xlim()
    with pytest.raises(ValueError, match="2 schedules"):
        compare_pipelines([s, s], titles=["only one"])


def test_plot_text_is_at_least_9_pt():
    pytest.importorskip("matplotlib")
    s = simulate_pipeline(4, 8, "interleaved", chunks=2)
    fig = compare_pipelines([simulate_pipeline(4, 8, "gpipe"), s])
    texts = [t for ax in fig.axes for t in ax.texts] + list(fig.legends[0].get_texts())
    assert texts and min(t.get_fontsize() for t in texts) >= 9
    # At the phone-readable default width (~510 px at 110 dpi) the wide backward boxes keep
    # their numbers and the narrow forward ones lose them, rather than shrinking the type.
    assert round(fig.get_figwidth() * fig.dpi) == 506 and len(fig.axes) == 2  # stacked rows
    gpipe = sum(1 for t in fig.axes[0].texts)
    assert gpipe == 4 * 8  # every backward box of GPipe, none of its forward boxes
    alone = s.plot()
    assert alone.get_figwidth() == fig.get_figwidth()
    labelled = sum(1 for t in alone.axes[0].texts)
    assert 0 < labelled < len(s.ops)
    assert min(t.get_fontsize() for t in alone.axes[0].texts) >= 9


@pytest.mark.parametrize("p, m, v", [(2, 4, 2), (4, 8, 2), (4, 16, 4), (4, 10, 3), (8, 8, 2)])
def test_interleaved_order_is_torchs(p, m, v):
    """The per-device order equals the one torch's ScheduleInterleaved1F1B executes
    (a private helper of torch.distributed.pipelining, read without a process group)."""
    from types import SimpleNamespace

    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    rounds = max(1, m // p)
    state = SimpleNamespace(n_local_stages=v, microbatches_per_round=m // rounds,
                            pp_group_size=p, _n_microbatches=m)
    ours = simulate_pipeline(p, m, "interleaved", chunks=v)
    for rank in range(p):
        actions = schedules.ScheduleInterleaved1F1B._calculate_single_rank_operations(
            state, rank)
        theirs = [("F" if a.computation_type == schedules.F else "B", a.stage_index,
                   a.microbatch_index) for a in actions if a is not None]
        assert theirs == [(op.kind, op.virtual_stage, op.microbatch)
                          for op in ours.ops_on(rank)]
