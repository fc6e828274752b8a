"""DDP with a parameter that gets no gradient: the error comes on the SECOND iteration.

Run alone: ``TORCH_DISTRIBUTED_DEBUG=INFO torchrun --standalone --nproc_per_node=2
ch10_unused.py`` (gloo on CPU, NCCL when each rank has a GPU). Chapter 10 runs ``run()``
from ``ch10_debugging.py``.

The model has a branch that forward never calls, so its weight and bias (parameter
indices 2 and 3) never receive a gradient. With ``find_unused_parameters=False`` (the
default) the Reducer waits for their buckets forever; it notices only when the next
forward begins and the previous reduction never finished. Every rank records the
iteration and the error, then trains the same model again with
``find_unused_parameters=True``, which marks the unused parameters ready after each
forward.

Do not set TORCH_DISTRIBUTED_DEBUG=DETAIL here: in torch 2.13, building DDP on a gloo
group under DETAIL crashes the process. ``python ch10_unused.py --alone`` shows it in a
process of its own (a 1-rank group, no torchrun); ``start_alone_under_detail`` starts
that process with DETAIL set, so the crash does not take a job down.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from autogradviz import init_distributed, report


class TwoHeads(nn.Module):
    """``used`` is parameters 0 and 1; ``unused`` (2 and 3) is never called."""

    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Linear(4, 2)
        self.unused = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


def batch(rank: int, step: int, device: torch.device) -> torch.Tensor:
    """Rank ``rank``'s inputs for ``step``: different on every rank, reproducible."""
    gen = torch.Generator().manual_seed(100 * rank + step)
    return torch.randn(8, 4, generator=gen).to(device)


def run(ctx) -> dict:
    """Train until DDP raises, then with ``find_unused_parameters=True``; report
    what happened."""
    torch.manual_seed(0)
    model = TwoHeads().to(ctx.device)
    ddp = DDP(model)  # find_unused_parameters=False, the default
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    where, error, first = None, None, {}
    for step in range(1, 4):
        try:
            where = (step, "forward")
            loss = ddp(batch(ctx.rank, step, ctx.device)).pow(2).mean()
            where = (step, "backward")
            loss.backward()
            if step == 1:  # the bucket never became ready: was anything averaged?
                local = TwoHeads().to(ctx.device)
                local.load_state_dict(model.state_dict())
                local(batch(ctx.rank, step, ctx.device)).pow(2).mean().backward()
                first["used_grad_is_local"] = torch.equal(model.used.weight.grad,
                                                          local.used.weight.grad)
            where = (step, "step")
            opt.step()
            if step == 1:  # each replica stepped with its own gradient
                weights = [torch.empty_like(model.used.weight)
                           for _ in range(ctx.world_size)]
                dist.all_gather(weights, model.used.weight.detach())
                first["replicas_equal_after_step"] = all(
                    torch.equal(w, weights[0]) for w in weights)
            opt.zero_grad()
        except RuntimeError as err:
            error = str(err)
            break
    # The fix: DDP marks the parameters forward did not use as ready after each forward.
    fixed = DDP(TwoHeads().to(ctx.device), find_unused_parameters=True)
    opt = torch.optim.SGD(fixed.parameters(), lr=0.1)
    for step in range(1, 4):
        opt.zero_grad()
        fixed(batch(ctx.rank, step, ctx.device)).pow(2).mean().backward()
        opt.step()
    return {"debug": os.environ.get("TORCH_DISTRIBUTED_DEBUG", "OFF"),
            "failed_at": list(where) if error else None, "error": error,
            "fixed_steps": step, "first_iteration": first,
            "fixed_unused_grad_is_none": fixed.module.unused.weight.grad is None}


def build_alone() -> None:
    """Build DDP on a 1-rank gloo group in this process, and say so if it survives."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    DDP(TwoHeads())
    print("built DDP", flush=True)
    dist.destroy_process_group()


def start_alone_under_detail() -> subprocess.Popen:
    """``python ch10_unused.py --alone`` under TORCH_DISTRIBUTED_DEBUG=DETAIL, started
    now; its ``wait()`` gives the exit code (-11: killed by SIGSEGV)."""
    env = {**os.environ, "TORCH_DISTRIBUTED_DEBUG": "DETAIL"}
    return subprocess.Popen([sys.executable, __file__, "--alone"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--alone", action="store_true",
                        help="build DDP in this process only (no torchrun)")
    if parser.parse_args().alone:
        build_alone()
        return
    ctx = init_distributed(timeout_s=60)
    report({"unused": run(ctx)})


if __name__ == "__main__":
    main()
