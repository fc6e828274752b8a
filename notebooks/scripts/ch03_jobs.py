"""Chapter 3's two-process job (gloo on CPU, NCCL when each rank has a GPU), for Q16.

Run alone: ``torchrun --standalone --nproc_per_node=2 ch03_jobs.py``; the chapter runs
it through ``agv.torchrun``. One DDP step in which only rank 1's batch holds a NaN:
rank 0's own loss is finite, yet after backward, whose all-reduce averages the
gradients of both ranks, every rank holds NaN gradients.

It also runs one step with two losses on one forward, for Q12, with a different batch
on each rank, counting DDP's all-reduces and reporting the weight gradient. One
backward of the summed loss reduces once and leaves equal gradients on both ranks. Two
``backward()`` calls (the first with ``retain_graph=True``) also reduce once: DDP
reduces the first call's gradients and leaves the second call's unreduced, added
locally into ``.grad``, so the ranks' gradients differ and their weights drift apart.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from autogradviz import init_distributed, report


def nan_spreads(device: torch.device, rank: int) -> dict:
    """One step of DDP on a Linear; what this rank sees afterwards."""
    torch.manual_seed(0)                               # the same weights on every rank
    model = DDP(nn.Linear(4, 1).to(device))
    xb = torch.randn(8, 4, generator=torch.Generator().manual_seed(rank)).to(device)
    if rank == 1:
        xb[0, 0] = float("nan")                        # one bad value, on one rank
    local_loss = model(xb).pow(2).mean()
    local_loss.backward()
    return {"loss_finite": bool(torch.isfinite(local_loss)),
            "grad_nan": bool(model.module.weight.grad.isnan().any())}


def allreduces_per_step(device: torch.device, rank: int, how: str) -> dict:
    """All-reduce calls DDP makes for two losses on one forward, combined by ``how``,
    and this rank's weight gradient afterwards (equal on every rank if all reduced)."""
    torch.manual_seed(0)
    model = DDP(nn.Linear(4, 2).to(device))
    calls = []

    def counting_hook(state, bucket):
        calls.append(1)
        return default_hooks.allreduce_hook(state, bucket)

    model.register_comm_hook(None, counting_hook)
    gen = torch.Generator().manual_seed(rank)          # a different batch per rank
    out = model(torch.randn(8, 4, generator=gen).to(device))
    loss1, loss2 = out.pow(2).mean(), out.abs().mean()
    if how == "sum":
        (loss1 + loss2).backward()
    else:
        loss1.backward(retain_graph=True)
        loss2.backward()
    return {"calls": len(calls), "grad": model.module.weight.grad.tolist()}


class OneBranch(nn.Module):
    """Two Linears, of which forward uses only the first."""

    def __init__(self) -> None:
        super().__init__()
        self.used, self.unused = nn.Linear(4, 1), nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


def unused_parameter(device: torch.device) -> dict:
    """Two steps of DDP (find_unused_parameters=False) on a module with a parameter the
    loss never touches: the first passes, the second forward raises."""
    torch.manual_seed(0)
    model = DDP(OneBranch().to(device))
    xb = torch.randn(8, 4).to(device)
    model(xb).sum().backward()                         # no error here
    try:
        model(xb)
    except RuntimeError as exc:                        # raised at the next forward
        return {"second_forward_error": str(exc).split(". ")[0]}
    return {"second_forward_error": None}


def main() -> None:
    ctx = init_distributed()
    report(nan_spreads(ctx.device, ctx.rank))
    report({"allreduces": {how: allreduces_per_step(ctx.device, ctx.rank, how)
                           for how in ("two calls", "sum")}})
    report(unused_parameter(ctx.device))


if __name__ == "__main__":
    main()
