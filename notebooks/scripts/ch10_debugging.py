"""Chapter 10's debugging demos in one 2-process job: an unused parameter, then a hang.

Run: ``TORCH_DISTRIBUTED_DEBUG=INFO torchrun --standalone --nproc_per_node=2
ch10_debugging.py --timeout 3`` (gloo on CPU, NCCL when each rank has a GPU), or
``autogradviz.torchrun`` from Chapter 10 with ``check=False``: the job is meant to fail.

1. ``ch10_unused``: DDP with a parameter that gets no gradient fails at the second
   iteration's forward; every rank reports it under "unused", then trains with
   ``find_unused_parameters=True``.
2. ``ch10_hang``: rank 1 skips an all-reduce; rank 0 times out, reports under "hang" and
   "monitored_barrier_error", and raises.
"""
from __future__ import annotations

import argparse

import ch10_hang
import ch10_unused
from autogradviz import init_distributed
from ch10_common import publish


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--timeout", type=float, default=3.0, help="hang timeout, s")
    ctx = init_distributed(timeout_s=60)
    publish(ctx.rank, {"unused": ch10_unused.run(ctx)})
    ch10_hang.run(ctx, parser.parse_args().timeout)


if __name__ == "__main__":
    main()
