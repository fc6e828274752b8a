"""Chapter 6: the multi-process proofs of Q31 and Q32 in one torchrun job.

Starting the processes is most of a small job's cost, so the notebook starts them once:
each rank runs Q31's gathers (ch06_infonce.run) and then Q32's accumulation step
(ch06_masked_ddp.run) in the same process group, and reports both:

    {"infonce": <ch06_infonce's results>, "masked": <ch06_masked_ddp's results>}

The two parts share nothing but the process group; each seeds its own data and model.
Run it from the notebooks/ folder with
    agv.torchrun("scripts/ch06_jobs.py", nproc=2)
or from a shell with
    torchrun --standalone --nproc_per_node=2 scripts/ch06_jobs.py
"""
from __future__ import annotations

import ch06_infonce  # the scripts folder is on sys.path: it holds the running script
import ch06_masked_ddp

from autogradviz import init_distributed, report


def main() -> None:
    ctx = init_distributed()
    report({"infonce": ch06_infonce.run(ctx), "masked": ch06_masked_ddp.run(ctx)})


if __name__ == "__main__":
    main()
