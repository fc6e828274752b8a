"""Chapter 5: the two-rank proofs of Q24, Q25 and Q26 in one torchrun job.

    torchrun --standalone --nproc_per_node=2 notebooks/scripts/ch05_jobs.py

clip (Q26): the same 3-layer MLP three ways on the same data: unsharded on one process
(the reference, on the two ranks' batches together), under DDP, and under FSDP2 with
`fully_shard` on every Linear and on the root. Each rank reports, for
`clip_grad_norm_`: under DDP its averaged, clipped gradients (to compare the ranks'
bits), the warnings the DDP constructor gave for `broadcast_buffers=True`, and the
all-gathered parameter checksums after one SGD step, before and after rank 1 nudges
one weight (the drift check of Q23's "Also asked"); under
FSDP2 the type of the returned norm, its placements, its local value, its
`full_tensor()`, the reference's norm, the largest gap between its clipped gradients
and the reference's, and the collectives `CommDebugMode` saw inside the call.

init (Q24): the MLP built on the meta device, sharded, materialised with `to_empty` and
re-initialised with `reset_parameters` under one seed; each rank reports its local
shard of the first weight and whether the gathered weights equal an unsharded model
initialised under the same seed (on CPU DTensor has no RNG tracker, so they do not);
whether DTensor's random ops support this mesh; and whether the recipe that works on CPU,
initialising the whole model under the seed and sharding it afterwards, gathers back
to the unsharded weights.

sp (Q25): a LayerNorm under tensor-parallel `SequenceParallel`, each rank normalising
its half of the tokens: the placements of its weight and of the weight's gradient, the
collectives `optimizer.step()` runs, and whether the stepped weight equals one process
stepping on all the tokens.

Run it from the notebooks/ folder with
    agv.torchrun("scripts/ch05_jobs.py", nproc=2)
"""
from __future__ import annotations

import copy
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._random import is_rng_supported_mesh
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import SequenceParallel, parallelize_module
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.nn.utils import clip_grad_norm_

from autogradviz import init_distributed, report

MAX_NORM = 1.0
LAYERS = (0, 2, 4)


def mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                         nn.Linear(16, 4))


def data(rank: int) -> tuple:
    gen = torch.Generator().manual_seed(500 + rank)
    return torch.randn(6, 8, generator=gen) * 10, torch.randn(6, 4, generator=gen)


def grads(model: nn.Module) -> list:
    return [p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
            for p in model.parameters()]


def checksums(model: nn.Module, world: int) -> list:
    local = torch.stack([p.detach().double().sum() for p in model.parameters()]).sum()
    gathered = [torch.zeros(1, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(gathered, local.reshape(1))
    return [c.item() for c in gathered]


def clip(ctx) -> dict:
    torch.manual_seed(26)
    base = mlp()
    world = ctx.world_size
    # Reference: one process, the loss averaged over every rank's batch.
    reference = copy.deepcopy(base)
    sum(F.mse_loss(reference(x), y) for x, y in map(data, range(world))).div(
        world).backward()
    ref_norm = clip_grad_norm_(reference.parameters(), MAX_NORM)
    x, y = data(ctx.rank)
    out = {"reference_norm": ref_norm.item()}
    # DDP: gradients are averaged in backward, so every rank clips the same vector.
    # Passing `broadcast_buffers` (here its default value) is deprecated in 2.13.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ddp = DDP(copy.deepcopy(base), broadcast_buffers=True)
    F.mse_loss(ddp(x), y).backward()
    ddp_norm = clip_grad_norm_(ddp.parameters(), MAX_NORM)
    out["ddp"] = {"type": type(ddp_norm).__name__, "norm": ddp_norm.item(),
                  "grads": torch.cat([g.flatten() for g in grads(ddp.module)]).tolist(),
                  "grad_gap": max((g - r.grad).abs().max().item() for g, r in
                                  zip(grads(ddp.module), reference.parameters())),
                  "warnings": [f"{w.category.__name__}: {w.message}" for w in caught]}
    # Drift check: after a step, all-gather a float64 checksum of each rank's
    # parameters; a rank-local change (rank 1 nudges one weight by 1e-3) shows up.
    torch.optim.SGD(ddp.parameters(), lr=0.1).step()
    out["ddp"]["checksums"] = checksums(ddp.module, world)
    with torch.no_grad():
        if ctx.rank == 1:
            ddp.module[0].weight[0, 0] += 1e-3
    out["ddp"]["checksums_drifted"] = checksums(ddp.module, world)
    # FSDP2: one unit per Linear, then the root.
    sharded = copy.deepcopy(base)
    for i in LAYERS:
        fully_shard(sharded[i])
    fully_shard(sharded)
    F.mse_loss(sharded(x), y).backward()
    grad_types = sorted({type(p.grad).__name__ for p in sharded.parameters()})
    grad_placements = sorted({str(p.grad.placements) for p in sharded.parameters()})
    with CommDebugMode() as comm:
        norm = clip_grad_norm_(sharded.parameters(), MAX_NORM)
    out["fsdp"] = {
        "grad_types": grad_types, "grad_placements": grad_placements,
        "type": type(norm).__name__,
        "placements": [repr(p) for p in norm.placements],
        "local": norm.to_local().item(), "full": norm.full_tensor().item(),
        "collectives": {str(k): v for k, v in comm.get_comm_counts().items()},
        "grad_gap": max((g - r.grad).abs().max().item() for g, r in
                        zip(grads(sharded), reference.parameters())),
    }
    return out


def init(ctx) -> dict:
    torch.manual_seed(24)
    plain = mlp()
    with torch.device("meta"):
        lazy = mlp()
    for i in LAYERS:
        fully_shard(lazy[i])
    fully_shard(lazy)
    lazy.to_empty(device="cpu")
    torch.manual_seed(24)
    for i in LAYERS:
        lazy[i].reset_parameters()
    gathered = [p.full_tensor() for p in lazy.parameters()]
    local_rows = lazy[0].weight.to_local().shape[0]
    # The CPU recipe: initialise the whole model under the seed, then shard it.
    torch.manual_seed(24)
    eager = mlp()
    for i in LAYERS:
        fully_shard(eager[i])
    fully_shard(eager)
    with warnings.catch_warnings():  # it warns when it answers False
        warnings.simplefilter("ignore")
        rng_supported = is_rng_supported_mesh(lazy[0].weight.device_mesh)
    return {"first_weight_local": lazy[0].weight.to_local().tolist(),
            "equal_to_unsharded": all(torch.equal(g, p) for g, p in
                                      zip(gathered, plain.parameters())),
            "first_weight_local_rows": local_rows,
            "max_gap": max((g - p).abs().max().item() for g, p in
                           zip(gathered, plain.parameters())),
            "rng_supported_mesh": rng_supported,
            "init_then_shard_equal": all(torch.equal(p.full_tensor(), q) for p, q in
                                         zip(eager.parameters(), plain.parameters()))}


def sp(ctx) -> dict:
    torch.manual_seed(25)
    norm = nn.LayerNorm(8)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, 6, 8)                        # (N, T, C), the same on every rank
    reference = copy.deepcopy(norm)                 # one process, every token
    reference(x).pow(2).sum().backward()
    torch.optim.SGD(reference.parameters(), lr=0.1).step()
    mesh = init_device_mesh("cpu", (ctx.world_size,))
    sharded = parallelize_module(copy.deepcopy(norm), mesh, SequenceParallel())
    my_tokens = x.chunk(ctx.world_size, dim=1)[ctx.rank]
    sharded(my_tokens).to_local().pow(2).sum().backward()   # the loss of my tokens
    grad = sharded.weight.grad
    out = {"weight_placements": [repr(p) for p in sharded.weight.placements],
           "grad_placements": [repr(p) for p in grad.placements],
           "grad_local_is_full": torch.allclose(grad.to_local(), reference.weight.grad,
                                                atol=1e-5)}
    with CommDebugMode() as comm:
        torch.optim.SGD(sharded.parameters(), lr=0.1).step()
    out["step_collectives"] = {str(k): v for k, v in comm.get_comm_counts().items()}
    out["step_equals_reference"] = all(
        torch.allclose(p.to_local(), r, atol=1e-6)
        for p, r in zip(sharded.parameters(), reference.parameters()))
    return out


def main() -> None:
    ctx = init_distributed()
    report({"clip": clip(ctx), "init": init(ctx), "sp": sp(ctx)})
    dist.barrier()


if __name__ == "__main__":
    main()
