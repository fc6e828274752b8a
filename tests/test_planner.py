"""planner.py: model-state bytes against the ZeRO paper, activations against Korthikanti et
al. 2022's closed forms, and the layout checks. Arithmetic only: no torch is needed."""
from __future__ import annotations

import pytest

from autogradviz import (
    MemoryPlan, ModelStateBytes, activation_bytes_per_layer, model_state_bytes, plan_memory,
    ring_all_reduce_traffic,
)

GB = 1e9


@pytest.mark.parametrize("stage, expected_gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.875)])
def test_zero_paper_figure_1(stage, expected_gb):
    """Rajbhandari et al. 2019, Figure 1: 7.5B parameters, N_d = 64, K = 12."""
    got = model_state_bytes(7_500_000_000, dp=64, zero=stage)
    assert isinstance(got, ModelStateBytes)
    assert round(got.total / GB, 1 if stage in (1, 2) else 3) == expected_gb


def test_zero_formulas_per_stage():
    P, N = 1_000_000, 8
    assert model_state_bytes(P, dp=N, zero=0).total == 16 * P
    assert model_state_bytes(P, dp=N, zero=1).total == pytest.approx(4 * P + 12 * P / N)
    assert model_state_bytes(P, dp=N, zero=2).total == pytest.approx(2 * P + 14 * P / N)
    assert model_state_bytes(P, dp=N, zero=3).total == pytest.approx(16 * P / N)


def test_tp_pp_shard_before_zero_and_dp_alone_replicates():
    P = 12_000_000
    assert model_state_bytes(P, dp=4, zero=0) == model_state_bytes(P)  # DDP: replicas
    a = model_state_bytes(P, tp=2, pp=3, dp=4, zero=1)
    assert a.params == 2 * P / 6 and a.grads == 2 * P / 6
    assert a.optimizer == pytest.approx(12 * P / 6 / 4)


def test_bytes_per_element_are_configurable():
    fp32_adam = model_state_bytes(10, bytes_param=4, bytes_grad=4, bytes_optimizer=8)
    assert (fp32_adam.params, fp32_adam.grads, fp32_adam.optimizer) == (40, 40, 80)
    assert str(model_state_bytes(1e9)).endswith("= 16.00 GB")


@pytest.mark.parametrize("kwargs, message", [
    (dict(zero=4), "ZeRO stage"),
    (dict(zero=True), "ZeRO stage"),
    (dict(dp=0), "dp must be an int >= 1"),
    (dict(tp=1.5), "tp must be an int >= 1"),
    (dict(bytes_optimizer=-1), "bytes_optimizer"),
])
def test_model_state_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        model_state_bytes(1000, **kwargs)
    with pytest.raises(ValueError, match="positive parameter count"):
        model_state_bytes(0)


S, B, H, A = 2048, 1, 4096, 32  # a GPT-3-like layer
SBH = S * B * H


@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_activation_closed_forms(t):
    """Korthikanti et al. 2022, Eqs. 1-5 and Table 2."""
    none = activation_bytes_per_layer(S, B, H, A, tp=t)
    assert none == pytest.approx(SBH * (10 + 24 / t + 5 * A * S / (H * t)))
    if t > 1:
        sp = activation_bytes_per_layer(S, B, H, A, tp=t, sequence_parallel=True)
        assert sp == pytest.approx(SBH / t * (34 + 5 * A * S / H))
        sel = activation_bytes_per_layer(S, B, H, A, tp=t, sequence_parallel=True,
                                         recompute="selective")
        assert sel == pytest.approx(34 * SBH / t)
        full = activation_bytes_per_layer(S, B, H, A, tp=t, sequence_parallel=True,
                                          recompute="full")
        assert full == pytest.approx(2 * SBH / t)
    assert activation_bytes_per_layer(S, B, H, A, tp=t, recompute="selective") == \
        pytest.approx(SBH * (10 + 24 / t))


def test_no_parallelism_is_equation_one():
    assert activation_bytes_per_layer(S, B, H, A) == SBH * (34 + 5 * A * S / H)


def test_context_parallel_splits_the_sequence():
    one = activation_bytes_per_layer(S, B, H, A, tp=2, sequence_parallel=True,
                                     recompute="selective")
    four = activation_bytes_per_layer(S, B, H, A, tp=2, sequence_parallel=True,
                                      recompute="selective", cp=4)
    assert four == pytest.approx(one / 4)


@pytest.mark.parametrize("kwargs, message", [
    (dict(tp=3), "must divide heads"),
    (dict(recompute="some"), "recompute must be one of"),
    (dict(cp=2), "blockwise attention"),
    (dict(cp=3, recompute="selective"), "must divide seq_len"),
])
def test_activation_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        activation_bytes_per_layer(S, B, H, A, **kwargs)
    with pytest.raises(ValueError, match="must divide hidden"):
        activation_bytes_per_layer(S, B, 100, 7)


LLAMA_70B = dict(params=70e9, layers=80, hidden=8192, heads=64, seq_len=8192)


def test_plan_70b_on_1024_gpus():
    plan = plan_memory(**LLAMA_70B, world=1024, dp=32, tp=8, pp=4, zero=1, microbatches=16,
                       recompute="selective", sequence_parallel=True)
    assert isinstance(plan, MemoryPlan)
    assert plan.world == 1024 and plan.layers_per_stage == 20 and plan.in_flight == 4
    per_layer = 34 * 8192 * 8192 / 8
    assert plan.activations == pytest.approx(per_layer * 20 * 4)
    assert plan.states.params == pytest.approx(2 * 70e9 / 32)
    assert plan.states.optimizer == pytest.approx(12 * 70e9 / 32 / 32)
    assert plan.total == pytest.approx(plan.states.total + plan.activations)
    assert plan.fits and plan.usable_bytes == pytest.approx(72e9)
    assert plan.tokens_per_step == 32 * 16 * 8192
    assert plan.layout == "dp32 tp8 pp4 zero1"
    text = plan.table()
    assert "fits in 80 GB" in text and "activations" in text
    assert all(len(line) <= 88 for line in text.splitlines())
    assert [name for name, _ in plan.rows()][-1] == "total"


def test_plan_without_recompute_does_not_fit_and_gpipe_holds_all_microbatches():
    plan = plan_memory(**LLAMA_70B, dp=32, tp=8, pp=4, microbatches=16)
    assert not plan.fits and "does NOT fit" in plan.table()
    gpipe = plan_memory(**LLAMA_70B, dp=32, tp=8, pp=4, microbatches=16, schedule="gpipe",
                        recompute="selective", sequence_parallel=True)
    assert gpipe.in_flight == 16
    few = plan_memory(**LLAMA_70B, dp=32, tp=8, pp=4, microbatches=2)
    assert few.in_flight == 2


def test_full_recompute_keeps_layer_inputs_plus_one_layer():
    plan = plan_memory(**LLAMA_70B, dp=1024, zero=3, recompute="full")
    one_layer = activation_bytes_per_layer(8192, 1, 8192, 64)
    assert plan.recompute_bytes == pytest.approx(one_layer)
    assert plan.activations == pytest.approx(80 * 2 * 8192 * 8192 + one_layer)


def test_plan_zero_shards_over_dp_times_cp():
    plan = plan_memory(**LLAMA_70B, dp=16, cp=2, tp=8, pp=4, zero=1,
                       recompute="selective", sequence_parallel=True)
    assert plan.world == 1024 and "cp2" in plan.layout
    assert plan.states.optimizer == pytest.approx(12 * 70e9 / 32 / 32)


@pytest.mark.parametrize("kwargs, message", [
    (dict(world=1000, dp=32, tp=8, pp=4), r"dp \(32\) \* cp \(1\) \* tp \(8\) \* pp \(4\) = 1024"),
    (dict(tp=3), "must divide heads"),
    (dict(pp=3), "must divide layers"),
    (dict(schedule="zb"), "schedule must be one of"),
    (dict(sequence_parallel=True), "needs tp > 1"),
    (dict(margin=1.0), "margin"),
    (dict(microbatches=0), "microbatches must be an int >= 1"),
])
def test_plan_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        plan_memory(**LLAMA_70B, **kwargs)


def test_planner_needs_no_torch():
    import subprocess
    import sys

    # Loading the package imports torch (its recorders need it); load the two modules alone.
    code = (
        "import sys, pathlib, types\n"
        "root = pathlib.Path(sys.argv[1])\n"
        "pkg = types.ModuleType('autogradviz'); pkg.__path__ = [str(root)]\n"
        "sys.modules['autogradviz'] = pkg\n"
        "import autogradviz.distributed.planner as p\n"
        "assert round(p.model_state_bytes(7.5e9, dp=64, zero=3).total / 1e9, 3) == 1.875\n"
        "assert 'torch' not in sys.modules\n"
    )
    import autogradviz

    root = autogradviz.__path__[0]
    done = subprocess.run([sys.executable, "-c", code, root], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _simulated_ring(world: int, chunk_bytes: int) -> tuple[int, int]:
    """Bytes and messages of rank 0 in a ring all-reduce run step by step on sets of
    contributions: reduce-scatter until each chunk is complete somewhere, then
    all-gather until every rank holds every complete chunk."""
    have = [[{r} for _ in range(world)] for r in range(world)]  # have[rank][chunk]
    sent = messages = 0
    for step in range(2 * (world - 1)):
        gather = step - (world - 1)       # all-gather steps count from 0 again
        out = [(r - step) % world if gather < 0 else (r + 1 - gather) % world
               for r in range(world)]
        payload = [set(have[r][out[r]]) for r in range(world)]
        for r in range(world):
            dst, chunk = (r + 1) % world, out[r]
            have[dst][chunk] = have[dst][chunk] | payload[r]
        sent, messages = sent + chunk_bytes, messages + 1
    assert all(h == set(range(world)) for row in have for h in row)
    return sent, messages


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
def test_ring_all_reduce_traffic_matches_a_simulated_ring(world):
    sent, messages = _simulated_ring(world, chunk_bytes=10)
    assert ring_all_reduce_traffic(10 * world, world) == (sent, messages)


def test_ring_all_reduce_traffic_validates():
    assert ring_all_reduce_traffic(4000, 4) == (6000.0, 6)   # Q43's measured ring
    with pytest.raises(ValueError):
        ring_all_reduce_traffic(100, 0)
