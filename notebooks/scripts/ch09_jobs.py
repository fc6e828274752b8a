"""Chapter 9: the two-rank proofs of Q42 and Q44-Q46 in one torchrun job.

Starting the processes is most of a small job's cost, so the notebook starts them once:
each rank runs DDP's part (ch09_ddp.run: Q42 and Q44) and then the sharding part
(ch09_sharding.run: Q45 and Q46) in the same process group, and reports both:

    {"basics": ..., "accumulation": ..., "zero": ..., "fsdp": ..., "sweep_s": ...}

"sweep_s" is Q43's timed all-reduce sweep, on these two ranks (one process per core).

The parts share nothing but the process group; each seeds its own data and models.
Run it from the notebooks/ folder with
    agv.torchrun("scripts/ch09_jobs.py", nproc=2)
or from a shell with
    torchrun --standalone --nproc_per_node=2 scripts/ch09_jobs.py
Q43's ring needs 4 ranks and has its own job, ch09_ring.py.
"""
from __future__ import annotations

import ch09_ddp  # the scripts folder is on sys.path: it holds the running script
import ch09_sharding

from autogradviz import init_distributed, report
from ch09_common import alpha_sweep


def main() -> None:
    ctx = init_distributed()
    report({**ch09_ddp.run(ctx), **ch09_sharding.run(ctx),
            "sweep_s": alpha_sweep(ctx.device)})


if __name__ == "__main__":
    main()
