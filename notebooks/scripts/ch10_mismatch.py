"""Mismatched and skipped collectives, with and without TORCH_DISTRIBUTED_DEBUG=DETAIL.

Run alone: ``torchrun --standalone --nproc_per_node=2 ch10_mismatch.py --timeout 2``.
Chapter 10 runs ``run()`` from ``ch10_debugging.py``.

Each case runs on a fresh gloo group of CPU tensors, whatever the job's default backend:
gloo raises a timed-out collective in the calling thread, while NCCL aborts the process
from its watchdog. A group is wrapped by DETAIL's checks when it is created while the
debug level is DETAIL; ``dist.set_debug_level`` sets that level, as the environment
variable does at import, so one job can show a bug with and without the checks.

* "pair" (no checks): rank 1 skips an all-reduce and calls its next collective, a
  barrier, on the same group. Collectives pair up by order, so the barrier meets the
  all-reduce; each rank waits out the group's timeout and raises its own timeout error.
* "op" (DETAIL): rank 0 all-reduces while rank 1 broadcasts. The ranks compare the
  calls first (op type, shapes, dtypes, devices) and both raise at once.
* "shape" (DETAIL): both ranks all-reduce, tensors of 4 and 5 elements.
* "skip" (DETAIL): rank 1 calls nothing on the group; rank 0's check waits in a
  monitored barrier and names rank 1 after the timeout.

Every rank reports, per case, whether it raised, how long it waited and the message.
"""
from __future__ import annotations

import argparse
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from autogradviz import init_distributed, report

LONG_S = 60.0  # for groups whose call should fail at once: waiting this long is a bug


def gloo_group(timeout_s: float, level: dist.DebugLevel):
    """A new gloo group with ``timeout_s``, wrapped by DETAIL's checks when ``level`` is
    DETAIL. Every rank must create the same groups in the same order."""
    before = dist.get_debug_level()
    dist.set_debug_level(level)
    try:
        return dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))
    finally:
        dist.set_debug_level(before)


def attempt(call) -> dict:
    """Run ``call``; whether it raised, after how long, and its message."""
    start = time.perf_counter()
    try:
        call()
    except RuntimeError as err:
        return {"raised": True, "waited_s": time.perf_counter() - start,
                "error": str(err)}
    return {"raised": False, "waited_s": time.perf_counter() - start, "error": None}


def run(ctx, timeout: float) -> dict:
    """The four cases on this rank; rank 1's "skip" is ``None`` (it calls nothing)."""
    off, detail = dist.DebugLevel.OFF, dist.DebugLevel.DETAIL
    control = gloo_group(LONG_S, off)  # lines the ranks up between the cases
    dist.barrier(group=control)  # creating a group waits at most its timeout
    groups = {"pair": gloo_group(timeout, off), "op": gloo_group(LONG_S, detail),
              "shape": gloo_group(LONG_S, detail), "skip": gloo_group(timeout, detail)}
    x = torch.ones(4)
    cases = {
        # rank 1 skipped the all-reduce; its next collective is a barrier
        "pair": lambda g: (dist.all_reduce(x, group=g) if ctx.rank == 0
                           else dist.barrier(group=g)),
        "op": lambda g: (dist.all_reduce(x, group=g) if ctx.rank == 0
                         else dist.broadcast(x, src=0, group=g)),
        "shape": lambda g: dist.all_reduce(torch.ones(4 + ctx.rank), group=g),
        "skip": lambda g: dist.all_reduce(x, group=g) if ctx.rank == 0 else None,
    }
    out = {}
    for name, call in cases.items():
        dist.barrier(group=control)
        if name == "skip" and ctx.rank == 1:
            out[name] = None  # busy elsewhere: rank 0 finds it missing
        else:
            out[name] = attempt(lambda: call(groups[name]))
    dist.barrier(group=control)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--timeout", type=float, default=2.0, help="short timeout, s")
    ctx = init_distributed(timeout_s=LONG_S)
    report({"mismatch": run(ctx, parser.parse_args().timeout)})


if __name__ == "__main__":
    main()
