"""Mismatched collectives, caught by TORCH_DISTRIBUTED_DEBUG=DETAIL.

Run: ``TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --standalone --nproc_per_node=2
ch10_mismatch.py --case op`` (or ``autogradviz.torchrun`` from Chapter 10 with
``env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}`` and ``check=False``: the job is meant to fail).

With DETAIL, every collective is first checked against the other ranks' (its type, and
the shapes and dtypes of its tensors), so a mismatch raises an error naming both sides
instead of hanging or silently mixing data. ``--case op``: rank 0 all-reduces while rank 1
broadcasts. ``--case shape``: both all-reduce, with tensors of different lengths. Every rank
reports the error it got, then re-raises.
"""
from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist

from autogradviz import init_distributed
from ch10_common import publish


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", choices=("op", "shape"), default="op")
    case = parser.parse_args().case
    ctx = init_distributed(timeout_s=30)
    try:
        if case == "op":
            x = torch.ones(4, device=ctx.device)
            if ctx.rank == 0:
                dist.all_reduce(x)
            else:
                dist.broadcast(x, src=0)
        else:
            dist.all_reduce(torch.ones(4 + ctx.rank, device=ctx.device))
    except Exception as err:
        publish(ctx.rank, {"debug": os.environ.get("TORCH_DISTRIBUTED_DEBUG", "OFF"),
                           "error_type": type(err).__name__, "error": str(err)})
        raise


if __name__ == "__main__":
    main()
