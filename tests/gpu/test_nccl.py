"""GPU tier: the launcher on nccl, one rank per GPU (skipped without two CUDA devices).

Run with `bash scripts/gpu_check.sh` on a machine with at least two GPUs. The same rank
script as the CPU tier, where init_distributed picks nccl and cuda:<local_rank>.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import autogradviz as agv

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices for nccl"),
]

SCRIPTS = Path(__file__).resolve().parents[1] / "dist_scripts"


def test_nccl_all_reduce_one_rank_per_gpu():
    run = agv.torchrun(SCRIPTS / "allreduce.py", nproc=2, timeout=180)
    assert run.backend == "nccl"
    inputs = [torch.arange(4.0) + 10 * r for r in range(2)]
    for r, res in enumerate(run.results):
        assert res["backend"] == "nccl" and res["device"] == f"cuda:{r}"
        assert torch.equal(torch.tensor(res["sum"]), inputs[0] + inputs[1])
        assert torch.equal(torch.tensor(res["gathered"]), torch.stack(inputs))


def test_nccl_failure_is_named():
    with pytest.raises(agv.DistributedJobError, match="rank 1 failed") as info:
        agv.torchrun(SCRIPTS / "allreduce.py", nproc=2, args=["--fail-rank", "1"], timeout=180)
    assert "deliberate failure on rank 1" in str(info.value)


def test_nccl_comm_trace():
    run = agv.torchrun(SCRIPTS / "comm_steps.py", nproc=2, timeout=180)
    for res in run.results:
        comm = agv.CommTrace.from_dict(res["comm"])
        assert comm.backend == "nccl"
        for s, calls in comm.calls_per_step().items():
            assert sorted(c.bucket for c in calls) == list(range(len(res["buckets"][s])))
