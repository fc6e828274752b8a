"""Chapter 10's debugging demos in one 2-process job: a job start costs seconds.

Run: ``TORCH_DISTRIBUTED_DEBUG=INFO torchrun --standalone --nproc_per_node=2
ch10_debugging.py --timeout 2`` (gloo on CPU, NCCL when each rank has a GPU), or
``autogradviz.torchrun`` from Chapter 10 with ``check=False``: the job is meant to fail.

1. ``ch10_unused``: DDP with a parameter that gets no gradient fails at the second
   iteration's forward; every rank reports it under "unused", then trains with
   ``find_unused_parameters=True``.
2. ``ch10_mismatch``: four mismatched or skipped collectives, with and without DETAIL's
   checks; every rank reports under "mismatch". Meanwhile (its timeouts leave the CPU
   idle) rank 0 builds DDP under DETAIL in a process of its own, and reports that
   process's exit code under "ddp_under_detail".
3. ``ch10_hang``: rank 1 skips an all-reduce; rank 0 times out, reports under "hang"
   and "monitored_barrier_error", and raises, which ends the job.
"""
from __future__ import annotations

import argparse

import ch10_hang
import ch10_mismatch
import ch10_unused
from autogradviz import init_distributed, report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--timeout", type=float, default=2.0, help="short timeout, s")
    timeout = parser.parse_args().timeout
    ctx = init_distributed(timeout_s=60)
    report({"unused": ch10_unused.run(ctx)})
    alone = ch10_unused.start_alone_under_detail() if ctx.rank == 0 else None
    report({"mismatch": ch10_mismatch.run(ctx, timeout)})
    if alone is not None:
        printed, _ = alone.communicate(timeout=120)
        report({"ddp_under_detail": {"returncode": alone.returncode,
                                     "printed": printed.strip()}})
    ch10_hang.run(ctx, timeout)


if __name__ == "__main__":
    main()
