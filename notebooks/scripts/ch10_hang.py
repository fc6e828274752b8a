"""A deliberate hang: rank 1 skips an all-reduce that rank 0 enters.

Run alone: ``torchrun --standalone --nproc_per_node=2 ch10_hang.py --timeout 2``;
the job is meant to fail. Chapter 10 runs ``run()`` from ``ch10_debugging.py``.

The all-reduce runs on a gloo group of CPU tensors made with ``new_group(timeout=...)``,
which bounds how long its collectives may wait, whatever the job's default backend (with
NCCL, a timed-out collective aborts the process from a watchdog thread instead). Rank 0
reports how long it waited and the error it got, asks a ``monitored_barrier`` which rank
is missing, and re-raises, so the job fails. Rank 1 stays alive (exiting would fail rank
0 at once, with a closed connection) until torchrun stops it.
"""
from __future__ import annotations

import argparse
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from autogradviz import init_distributed, report


def last_entries(group) -> list:
    """This rank's flight-recorder entries for ``group``: (op, sequence id, state)."""
    from torch._C._distributed_c10d import _dump_fr_trace
    import pickle

    name = dist.distributed_c10d._get_process_group_name(group)
    return [(e["profiling_name"], e["collective_seq_id"], e["state"])
            for e in pickle.loads(_dump_fr_trace())["entries"]
            if e["process_group"][0] == name]


def run(ctx, timeout: float) -> None:
    """Hang on purpose; rank 0 reports and raises after ``timeout`` seconds."""
    spare = dist.new_group(backend="gloo")  # for the diagnosis, after `short` failed
    dist.barrier(group=spare)  # both ranks are here: the short timeout starts now
    short = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout))
    dist.all_reduce(torch.ones(4), group=short)  # one collective both ranks issue
    if ctx.rank == 1:
        report({"flight_recorder": last_entries(short)})
        time.sleep(timeout + 60)  # skips the all-reduce; stopped when rank 0 fails
        return
    start = time.perf_counter()
    try:
        dist.all_reduce(torch.ones(4), group=short)
    except RuntimeError as err:
        waited = time.perf_counter() - start
        report({"flight_recorder": last_entries(short),
                "hang": {"waited_s": waited, "timeout_s": timeout,
                         "error_type": type(err).__name__, "error": str(err)}})
        # Which rank is missing? A monitored barrier names the ranks that do not arrive.
        # It runs on the spare group: the timeout closed the first group's connections.
        start = time.perf_counter()
        try:
            dist.monitored_barrier(spare, timeout=timedelta(seconds=1),
                                   wait_all_ranks=True)
        except RuntimeError as barrier_err:
            report({"monitored_barrier_error": str(barrier_err),
                    "monitored_barrier_s": time.perf_counter() - start})
        raise


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--timeout", type=float, default=2.0,
                        help="collective timeout, s")
    ctx = init_distributed(timeout_s=60)
    run(ctx, parser.parse_args().timeout)


if __name__ == "__main__":
    main()
