"""What the Chapter 9 rank scripts share: the toy model and each rank's batches.

Every script runs unchanged under ``torchrun --standalone --nproc_per_node=N`` (gloo
on CPU, NCCL when each rank has a GPU) and under ``autogradviz.torchrun`` from the
notebook; ``autogradviz.report`` hands the results to the notebook, or prints them on
one line per rank under a plain ``torchrun``. Data is drawn on the CPU from seeded
generators and then moved to the rank's device, so every backend sees the same numbers,
and rank 0 can rebuild any rank's batch to compute a single-process reference.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch import nn

IN, HIDDEN, OUT = 8, 16, 4  # a 3-layer MLP of 484 parameters (1,936 bytes in float32)


def tiny_mlp(seed: int, device: torch.device | str = "cpu") -> nn.Sequential:
    """Linear(8, 16) - ReLU - Linear(16, 16) - ReLU - Linear(16, 4), seeded."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN),
                          nn.ReLU(), nn.Linear(HIDDEN, OUT))
    return model.to(device)


def batch(rank: int, step: int, rows: int = 4,
          device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s inputs and regression targets for ``step``: different on every
    rank, reproducible anywhere (rank 0 rebuilds the others' batches)."""
    gen = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(rows, IN, generator=gen)
    y = torch.randn(rows, OUT, generator=gen)
    return x.to(device), y.to(device)


SWEEP = (1, 2**8, 2**12, 2**16, 2**20)  # message sizes (elements) for the timing sweep


def alpha_sweep(device: torch.device, sizes=SWEEP, rounds: int = 9) -> dict:
    """Fastest wall time (s) of dist.all_reduce on float32 messages of each size.

    The sizes are interleaved round by round, and the fastest round is kept: load on a
    busy machine only ever adds time, so the minimum is the estimate it disturbs least."""
    bufs = {n: torch.ones(n, device=device) for n in sizes}
    times: dict = {n: [] for n in sizes}
    for _ in range(rounds):
        for n in sizes:
            dist.barrier()
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            dist.all_reduce(bufs[n])
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[n].append(time.perf_counter() - start)
    return {str(n): min(t) for n, t in times.items()}
