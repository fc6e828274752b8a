"""Q45 and Q46: sharding the training state, against DDP.

    torchrun --standalone --nproc_per_node=2 notebooks/scripts/ch09_sharding.py

zero_stage1 (Q45): two identical DDP replicas train on the same per-rank batches, one
with a full Adam on every rank, one with ZeroRedundancyOptimizer(Adam), which gives each
rank the Adam state of only some parameters (whole tensors, packed greedily, largest
first), steps those, and broadcasts the updated parameters to the other ranks.
Reports each rank's optimizer-state bytes, measured with autogradviz.track_memory, and
the weights after three steps.

fsdp2 (Q46): each Linear of the toy MLP is its own FSDP unit, and the root wraps them.
Reports how a parameter is sharded (DTensor, Shard(0), the local rows) and that
full_tensor() rebuilds it; every collective of one training step, in order; the weights
after three Adam steps next to DDP's; each rank's bytes of parameters, gradients and
optimizer state; what reshard_after_forward, a root with parameters of its own, uneven
rows and a MixedPrecisionPolicy change; and a model built on the meta device, sharded,
then materialised with to_empty().
"""
from __future__ import annotations

import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils._python_dispatch import TorchDispatchMode

import autogradviz as agv
from autogradviz import init_distributed
from ch09_common import batch, publish, tiny_mlp

STEPS, LR = 3, 0.01
LAYERS = (0, 2, 4)  # the Linear modules of tiny_mlp


def state_tensors(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every tensor in an optimizer's per-parameter state."""
    return [t for s in opt.state.values() for t in s.values() if torch.is_tensor(t)]


def local_bytes(tensors) -> int:
    """Bytes this rank holds for ``tensors`` (a DTensor counts its local shard only)."""
    total = 0
    for t in tensors:
        if t is None:
            continue
        t = t.to_local() if isinstance(t, DTensor) else t
        total += t.numel() * t.element_size()
    return total


# --- Q45: ZeRO stage 1 ----------------------------------------------------------
def zero_stage1(ctx) -> dict:
    dev, rank = ctx.device, ctx.rank
    plain, sharded = DDP(tiny_mlp(0, dev)), DDP(tiny_mlp(0, dev))
    names = {p: n for n, p in sharded.module.named_parameters()}
    adam = torch.optim.Adam(plain.parameters(), lr=LR)
    zero = ZeroRedundancyOptimizer(sharded.parameters(),
                                   optimizer_class=torch.optim.Adam, lr=LR)
    mine = [p for group in zero.optim.param_groups for p in group["params"]]

    memory, full_grads = {}, None
    for step in range(STEPS):
        x, y = batch(rank, step, device=dev)
        for label, model, opt in (("adam", plain, adam), ("zero", sharded, zero)):
            if step > 0:
                F.mse_loss(model(x), y).backward()
                opt.step()
                opt.zero_grad()
                continue
            # ZeroRedundancyOptimizer keeps its state in the local optimizer it wraps
            # (`zero.optim`); its own `.state` stays empty, so that is what we watch.
            with agv.track_memory(model, zero.optim if opt is zero else opt) as mem:
                F.mse_loss(model(x), y).backward()
                opt.step()
            memory[label] = mem.max_by_category["optimizer_state"]
            if opt is zero:
                full_grads = all(p.grad is not None for p in model.parameters())
            opt.zero_grad()

    with torch.no_grad():
        diff = max(float((a - b).abs().max())
                   for a, b in zip(plain.parameters(), sharded.parameters()))
    return {
        "owned": [names[p] for p in mine],  # whose Adam state this rank keeps
        "owned_numel": sum(p.numel() for p in mine),
        "total_numel": sum(p.numel() for p in plain.parameters()),
        "tracked_state_bytes": memory,
        "counted_state_bytes": {"adam": local_bytes(state_tensors(adam)),
                                "zero": local_bytes(state_tensors(zero.optim))},
        "zero_own_state_entries": len(zero.state),
        "full_grads_on_every_rank": full_grads,
        "max_weight_diff": diff,
    }


# --- Q46: FSDP2 -----------------------------------------------------------------
def shard(model: nn.Module, **kwargs) -> nn.Module:
    """One FSDP unit per Linear, then the root (which owns no parameter of its own)."""
    for i in LAYERS:
        fully_shard(model[i], **kwargs)
    return fully_shard(model, **kwargs)


class CollectiveLog(TorchDispatchMode):
    """Every c10d collective the block issues, in order: its name, the number of
    elements of the full (unsharded) tensor it moves, and the phase we are in."""

    def __init__(self) -> None:
        super().__init__()
        self.calls, self.phase = [], "forward"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "c10d":
            # all-gather: (output = full, input = shard); reduce-scatter: (output =
            # shard, input = full); the full tensor is the larger of the two
            full = max(args[0].numel(), args[1].numel())
            self.calls.append((func.__name__.split(".")[0], full, self.phase))
        return func(*args, **(kwargs or {}))


def gathered(model: nn.Module) -> list[bool]:
    """Per Linear: does the module hold the full (all-gathered) weight right now?"""
    return [not isinstance(model[i].weight, DTensor) for i in LAYERS]


def logged_forward_backward(model: nn.Module, x, y) -> tuple[list, list[bool]]:
    """One forward and backward under `CollectiveLog`; also which Linear modules still
    hold their gathered weight between the two."""
    with CollectiveLog() as log:
        loss = F.mse_loss(model(x), y)
        after_forward = gathered(model)
        log.phase = "backward"
        loss.backward()
    return log.calls, after_forward


def state_bytes(model: nn.Module, opt: torch.optim.Optimizer) -> dict:
    return {"parameters": local_bytes(model.parameters()),
            "gradients": local_bytes(p.grad for p in model.parameters()),
            "optimizer state": local_bytes(state_tensors(opt))}


def fsdp2(ctx) -> dict:
    dev, rank, world = ctx.device, ctx.rank, ctx.world_size
    out: dict = {}

    # how a parameter is sharded
    reference = tiny_mlp(0, dev)
    model = shard(tiny_mlp(0, dev))
    w, w_ref = model[0].weight, reference[0].weight
    rows = w_ref.shape[0] // world
    out["weight_type"] = type(w).__name__
    out["placements"] = str(w.placements)
    out["global_shape"] = list(w.shape)
    out["local_shape"] = list(w.to_local().shape)
    out["local_is_my_rows"] = bool(torch.equal(
        w.to_local(), w_ref[rank * rows:(rank + 1) * rows]))
    out["full_tensor_equal"] = all(torch.equal(p.full_tensor(), q) for p, q in
                                   zip(model.parameters(), reference.parameters()))

    # train next to DDP, logging the collectives of the first step
    ddp = DDP(reference)
    opt_f = torch.optim.Adam(model.parameters(), lr=LR)
    opt_d = torch.optim.Adam(ddp.parameters(), lr=LR)
    for step in range(STEPS):
        x, y = batch(rank, step, device=dev)
        if step == 0:
            out["collectives"], out["gathered_after_forward"] = (
                logged_forward_backward(model, x, y))
            g = model[0].weight.grad
            out["grad_type"] = f"{type(g).__name__} {g.placements}"
            out["grad_local_shape"] = list(g.to_local().shape)
            with CollectiveLog() as step_log:  # the optimizer works on shards alone
                opt_f.step()
            out["optimizer_step_collectives"] = len(step_log.calls)
        else:
            F.mse_loss(model(x), y).backward()
            opt_f.step()
        F.mse_loss(ddp(x), y).backward()
        opt_d.step()
        if step == 0:  # gradients still there, optimizer state just created
            out["bytes"] = {"fsdp2": state_bytes(model, opt_f),
                            "ddp": state_bytes(ddp, opt_d)}
        opt_f.zero_grad()
        opt_d.zero_grad()
    with torch.no_grad():
        out["max_diff_vs_ddp"] = max(
            float((p.full_tensor() - q).abs().max())
            for p, q in zip(model.parameters(), ddp.parameters()))

    # reshard_after_forward=False: keep the gathered weights until backward
    kept = shard(tiny_mlp(0, dev), reshard_after_forward=False)
    x, y = batch(rank, 0, device=dev)
    out["kept_collectives"], out["kept_gathered_after_forward"] = (
        logged_forward_backward(kept, x, y))

    # the root's own parameters stay gathered after forward (the default)
    rooted = tiny_mlp(0, dev)
    fully_shard(rooted[0])
    fully_shard(rooted)  # the root now owns layers 2 and 4 itself
    _, out["root_gathered_after_forward"] = logged_forward_backward(rooted, x, y)

    # uneven rows: dim 0 is split like torch.chunk
    odd = nn.Sequential(nn.Linear(8, 5), nn.Linear(5, 1)).to(dev)
    fully_shard(odd)
    out["uneven_local_rows"] = [odd[i].weight.to_local().shape[0] for i in (0, 1)]

    # mixed precision: bf16 compute, fp32 sharded parameters and gradients
    mp = shard(tiny_mlp(0, dev), mp_policy=MixedPrecisionPolicy(
        param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
    y_mp = mp(x)
    y_mp.float().sum().backward()
    out["mp_dtypes"] = {"output": str(y_mp.dtype),
                        "sharded param": str(mp[0].weight.dtype),
                        "gradient": str(mp[0].weight.grad.dtype)}

    # meta init: shapes without memory, then only this rank's shard is allocated
    with torch.device("meta"):
        big = nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 4096))
    for layer in (big[0], big[2]):
        fully_shard(layer)
    fully_shard(big)
    out["meta_device"] = str(big[0].weight.to_local().device)
    big.to_empty(device=dev)
    with warnings.catch_warnings():  # DTensor: CPU-mesh RNG support is partial
        warnings.simplefilter("ignore")
        for layer in (big[0], big[2]):
            layer.reset_parameters()
    out["materialised_local_shape"] = list(big[0].weight.to_local().shape)
    out["materialised_device"] = str(big[0].weight.to_local().device)
    out["materialised_bytes"] = local_bytes(big.parameters())
    out["full_bytes"] = sum(p.numel() * p.element_size() for p in big.parameters())

    # FSDP1 (FullyShardedDataParallel) on a machine without an accelerator
    if dev.type == "cpu":
        from torch.distributed.fsdp import FullyShardedDataParallel
        try:
            FullyShardedDataParallel(tiny_mlp(0, dev))
            out["fsdp1_error"] = None
        except RuntimeError as err:
            out["fsdp1_error"] = str(err)
    return out


def main() -> None:
    ctx = init_distributed()
    publish(ctx.rank, {"zero": zero_stage1(ctx), "fsdp": fsdp2(ctx)})


if __name__ == "__main__":
    main()
