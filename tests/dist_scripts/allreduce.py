"""Each rank all-reduces a tensor that depends on its rank and reports what it holds.

Launched by tests/test_launch.py through autogradviz.torchrun. Options:
`--fail-rank R` makes rank R raise once every rank reported (the others then wait);
`--silent-rank R` makes rank R skip its report; `--sleep S` makes every rank sleep
S seconds before the collectives (the launcher's timeout must stop it);
`--fail-in-collective R` makes rank R raise while the others sit in ``dist.barrier()``
(they then fail too, having lost their peer).
"""
import argparse
import os
import time

import torch
import torch.distributed as dist

import autogradviz
from autogradviz import init_distributed, report

parser = argparse.ArgumentParser()
parser.add_argument("--fail-rank", type=int, default=None)
parser.add_argument("--silent-rank", type=int, default=None)
parser.add_argument("--sleep", type=float, default=0.0)
parser.add_argument("--fail-in-collective", type=int, default=None)
opts = parser.parse_args()

ctx = init_distributed(timeout_s=60)
time.sleep(opts.sleep)
t = (torch.arange(4.0) + 10 * ctx.rank).to(ctx.device)  # nccl needs CUDA tensors
summed = t.clone()
dist.all_reduce(summed)
gathered = [torch.zeros(4, device=ctx.device) for _ in range(ctx.world_size)]
dist.all_gather(gathered, t)
if opts.silent_rank != ctx.rank:
    report({"rank": ctx.rank, "world_size": ctx.world_size, "local_rank": ctx.local_rank,
            "backend": ctx.backend, "device": ctx.device, "input": t, "sum": summed})
    report({"gathered": torch.stack(gathered), "omp": os.environ.get("OMP_NUM_THREADS"),
            "pid": os.getpid(), "master_port": int(os.environ["MASTER_PORT"]),
            "package": autogradviz.__file__, "cwd": os.getcwd()})
dist.barrier()  # every report is written before any rank fails
if opts.fail_in_collective is not None:
    if opts.fail_in_collective == ctx.rank:
        raise ValueError(f"deliberate failure on rank {ctx.rank} while the others wait")
    dist.barrier()  # never completes: the failing rank never joins
if opts.fail_rank == ctx.rank:
    raise ValueError(f"deliberate failure on rank {ctx.rank}")
if opts.fail_rank is not None:
    time.sleep(30)  # the healthy ranks wait: the launcher must stop them
