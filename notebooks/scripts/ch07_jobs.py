"""Chapter 7: the two-rank proofs of Q35's At scale in one torchrun job.

    torchrun --standalone --nproc_per_node=2 notebooks/scripts/ch07_jobs.py

scaler: one Linear trained with loss scaling, with an inf written into rank 0's
gradient only. Three set-ups: FSDP1 (`FullyShardedDataParallel` on the CPU: each rank
holds one local flat shard) with a plain `torch.amp.GradScaler`, the same with FSDP1's
`ShardedGradScaler`, and FSDP2 (`fully_shard`, DTensor gradients) with a plain
`torch.amp.GradScaler`. Each rank reports whether its weights moved and the scale
after `update()`.

mixed: FSDP2 with `MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)`.
Each rank reports the dtype of its sharded parameter, of the parameter its forward
sees, of its sharded gradient, and the dtypes of the tensors handed to the all-gather
and the reduce-scatter.

ddp: DDP with its forward under `torch.autocast("cpu", dtype=torch.bfloat16)`, with
the default all-reduce and with `bf16_compress_hook`: the dtype of the bucket DDP
hands a hook and of the gradients, and whether the compressed result equals the
bf16-rounded average computed by hand.

Run it from the notebooks/ folder with
    agv.torchrun("scripts/ch07_jobs.py", nproc=2)
"""
from __future__ import annotations

import copy

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP1
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils._python_dispatch import TorchDispatchMode

from autogradviz import init_distributed, report


def scaled_step(params, scaler, rank: int) -> dict:
    """One SGD step under `scaler`; rank 0's first gradient gets an inf."""
    opt = torch.optim.SGD(params, lr=0.1)
    before = [p.detach().clone() for p in params]
    if rank == 0:
        grad = params[0].grad
        local = grad.to_local() if hasattr(grad, "to_local") else grad
        local.view(-1)[0] = float("inf")
    scaler.step(opt)
    scaler.update()
    moved = any(not torch.equal(b, p.detach()) for b, p in zip(before, params))
    return {"stepped": moved, "scale": scaler.get_scale()}


def scaler_part(ctx) -> dict:
    out = {}
    torch.manual_seed(0)
    full = nn.Linear(4, 4)
    x = torch.randn(2, 4)
    for name, make in (("FSDP1, GradScaler", lambda: torch.amp.GradScaler("cpu")),
                       ("FSDP1, ShardedGradScaler", lambda: ShardedGradScaler("cpu"))):
        # FSDP1 flattens the Linear's weight and bias and keeps one flat shard per rank.
        fsdp1 = FSDP1(copy.deepcopy(full), device_id=torch.device("cpu"))
        flat = list(fsdp1.parameters())
        out["FSDP1 flat shard"] = [tuple(p.shape) for p in flat]
        scaler = make()
        scaler.scale(fsdp1(x).sum()).backward()
        out[name] = scaled_step(flat, scaler, ctx.rank)
    model = copy.deepcopy(full)
    fully_shard(model)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(model(x).sum()).backward()
    out["FSDP2, GradScaler"] = scaled_step([model.weight], scaler, ctx.rank)
    return out


class CollectiveDtypes(TorchDispatchMode):
    """Records the dtype of the first tensor each c10d collective is handed."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__
        if func.namespace == "c10d" and ("allgather" in name or "reduce_scatter" in name):
            first = next(a for a in args if isinstance(a, torch.Tensor)
                         or (isinstance(a, list) and a))
            first = first if isinstance(first, torch.Tensor) else first[0]
            self.seen.append((name.split(".")[0], str(first.dtype).replace("torch.", "")))
        return func(*args, **(kwargs or {}))


def mixed_part(ctx) -> dict:
    torch.manual_seed(0)
    model = nn.Linear(8, 8)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    fully_shard(model, mp_policy=policy)
    seen_in_forward = []
    model.register_forward_pre_hook(
        lambda mod, args: seen_in_forward.append(str(mod.weight.dtype)))
    with CollectiveDtypes() as mode:
        model(torch.randn(4, 8)).float().sum().backward()
    return {"sharded param": str(model.weight.dtype),
            "param in forward": seen_in_forward[0],
            "sharded grad": str(model.weight.grad.dtype),
            "local shard rows": model.weight.to_local().shape[0],
            "collectives": sorted(set(mode.seen))}


def ddp_part(ctx) -> dict:
    torch.manual_seed(0)
    base = nn.Linear(16, 16)
    x = torch.randn(4, 16) * (1 + ctx.rank)
    plain = DDP(copy.deepcopy(base))
    buckets = {}

    def hook(state, bucket):
        buckets.setdefault(state, str(bucket.buffer().dtype))
        hooks = {"plain": default_hooks.allreduce_hook,
                 "bf16": default_hooks.bf16_compress_hook}
        return hooks[state](dist.group.WORLD, bucket)

    plain.register_comm_hook("plain", hook)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = plain(x)                                  # bf16: the Linear ran in bf16
    y.float().square().sum().backward()
    local = copy.deepcopy(base)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y_local = local(x)
    y_local.float().square().sum().backward()        # this rank's own gradient, no DDP
    compressed = DDP(copy.deepcopy(base))
    compressed.register_comm_hook("bf16", hook)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y_hook = compressed(x)
    y_hook.float().square().sum().backward()
    # By hand: each rank's gradient in bf16, divided by the world size, summed in bf16.
    g = local.weight.grad.to(torch.bfloat16).div_(ctx.world_size)
    dist.all_reduce(g)
    by_hand = g.float()
    return {"forward output dtype": str(y.dtype),
            "bucket dtype": buckets["plain"],
            "bucket dtype, bf16 hook": buckets["bf16"],
            "grad dtype": str(plain.module.weight.grad.dtype),
            "grad dtype, bf16 hook": str(compressed.module.weight.grad.dtype),
            "equals bf16 by hand": torch.equal(compressed.module.weight.grad, by_hand),
            "equals fp32 all-reduce": torch.equal(compressed.module.weight.grad,
                                                  plain.module.weight.grad),
            "within 1% of fp32 all-reduce": bool(
                (compressed.module.weight.grad - plain.module.weight.grad).abs().max()
                < 1e-2 * plain.module.weight.grad.abs().max())}


if __name__ == "__main__":
    ctx = init_distributed(timeout_s=60)
    report({"scaler": scaler_part(ctx)})
    report({"mixed": mixed_part(ctx)})
    report({"ddp": ddp_part(ctx)})
