"""Chapter 9: the two-rank proofs of Q42 and Q44-Q46 in one torchrun job.

Starting the processes is most of a small job's cost, so the notebook starts them once:
each rank runs DDP's part (ch09_ddp.run: Q42 and Q44) and then the sharding part
(ch09_sharding.run: Q45 and Q46) in the same process group, and reports both:

    {"basics": ..., "accumulation": ..., "zero": ..., "fsdp": ..., "sweep_s": ...,
     "ring_n2": ...}

"sweep_s" is Q43's timed all-reduce sweep, on these two ranks (one process per core),
and "ring_n2" the bytes Q43's hand-written ring sends on two ranks.

The parts share nothing but the process group; each seeds its own data and models.
Run it from the notebooks/ folder with
    agv.torchrun("scripts/ch09_jobs.py", nproc=2)
or from a shell with
    torchrun --standalone --nproc_per_node=2 scripts/ch09_jobs.py
Q43's four-rank ring has its own job, ch09_ring.py.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

import ch09_ddp  # the scripts folder is on sys.path: it holds the running script
import ch09_sharding

from autogradviz import init_distributed, report
from ch09_common import alpha_sweep
from ch09_ring import ring_all_reduce


def ring_on_two(ctx) -> dict:
    """Q43: the hand-written ring on these two ranks, with the bytes it sent."""
    x = torch.arange(1000, dtype=torch.float32, device=ctx.device) * (ctx.rank + 1)
    ring, sent, _, _ = ring_all_reduce(x, ctx.rank, ctx.world_size)
    reference = x.clone()
    dist.all_reduce(reference)
    return {"bytes_in": x.numel() * x.element_size(), "bytes_sent": sent,
            "equals_all_reduce": bool(torch.equal(ring, reference))}


def main() -> None:
    ctx = init_distributed()
    report({**ch09_ddp.run(ctx), **ch09_sharding.run(ctx),
            "sweep_s": alpha_sweep(ctx.device), "ring_n2": ring_on_two(ctx)})


if __name__ == "__main__":
    main()
