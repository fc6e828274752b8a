"""Q43: ring all-reduce written with point-to-point isend/irecv, checked against
dist.all_reduce, with the bytes every rank sends counted.

    torchrun --standalone --nproc_per_node=4 notebooks/scripts/ch09_ring.py

The tensor of S elements is cut into N chunks. Reduce-scatter: in N-1 steps every
rank sends one chunk to its right neighbour and adds the chunk arriving from its left,
so that afterwards rank r holds the full sum of chunk (r + 1) mod N. All-gather: N-1
more steps pass the finished chunks round the ring. Each step sends S/N elements, so
every rank sends 2(N-1)/N * S in total, whatever N is.

Given a folder as its argument, it also loads (Q46) the distributed checkpoint that
ch09_sharding.py saved there on 2 ranks into the same FSDP2 model on this job's ranks.
It also runs the naive all-reduce, a reduce to rank 0 and a broadcast back, counting
the bytes each rank sends and receives. It also (Q46) shards the toy model on a (replicate 2, shard 2) mesh, HSDP, and counts
the collectives of one forward and backward.
"""
from __future__ import annotations

import sys
import warnings

import torch
import torch.distributed as dist

import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.debug import CommDebugMode
from torch.nn import functional as F

from autogradviz import init_distributed, report
from ch09_common import batch, tiny_mlp

NUMEL = 1000  # elements per rank (divisible by 4, so every chunk has 250)


def ring_all_reduce(x: torch.Tensor, rank: int, world: int):
    """Sum of ``x`` over all ranks; returns (sum, bytes this rank sent, schedule,
    bytes sent per phase). ``schedule`` lists (phase, step, chunk sent, chunk
    received) for this rank."""
    chunks = [c.clone() for c in x.chunk(world)]
    right, left = (rank + 1) % world, (rank - 1) % world
    sent, schedule, by_phase = 0, [], {}
    for phase in ("reduce-scatter", "all-gather"):
        for step in range(world - 1):
            # reduce-scatter sends the chunk it just summed, all-gather the one it got
            offset = 0 if phase == "reduce-scatter" else 1
            out_i = (rank - step + offset) % world
            in_i = (rank - step - 1 + offset) % world
            incoming = torch.empty_like(chunks[in_i])
            requests = [dist.isend(chunks[out_i], dst=right),
                        dist.irecv(incoming, src=left)]
            for req in requests:
                req.wait()
            if phase == "reduce-scatter":
                chunks[in_i] += incoming
            else:
                chunks[in_i] = incoming
            nbytes = chunks[out_i].numel() * chunks[out_i].element_size()
            sent += nbytes
            by_phase[phase] = by_phase.get(phase, 0) + nbytes
            schedule.append((phase, step, out_i, in_i))
    return torch.cat(chunks), sent, schedule, by_phase


def reduce_then_broadcast(x: torch.Tensor, rank: int, world: int):
    """The naive all-reduce: every rank sends ``x`` to rank 0, which sums and sends
    the sum back to each. Returns (sum, bytes this rank sent, bytes it received),
    counted on each send and receive."""
    sent = received = 0
    if rank != 0:
        dist.send(x, dst=0)
        sent += x.numel() * x.element_size()
        total = torch.empty_like(x)
        dist.recv(total, src=0)
        received += total.numel() * total.element_size()
        return total, sent, received
    total = x.clone()
    for src in range(1, world):
        incoming = torch.empty_like(x)
        dist.recv(incoming, src=src)
        received += incoming.numel() * incoming.element_size()
        total += incoming
    for dst in range(1, world):
        dist.send(total, dst=dst)
        sent += total.numel() * total.element_size()
    return total, sent, received


def load_resharded(path: str, device: torch.device) -> dict:
    """Q46: load the checkpoint ch09_sharding.py saved on 2 ranks into the same FSDP2
    model on this job's ranks: DCP reads each rank's new rows from the saved shards."""
    model = tiny_mlp(1, device)  # another seed: the load must overwrite every weight
    for i in (0, 2, 4):
        fully_shard(model[i])
    fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model_sd, optim_sd = get_state_dict(model, opt)  # creates Adam's empty state
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, opt, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    return {"loaded_full_weights": [p.full_tensor().flatten().tolist()
                                    for p in model.parameters()],
            "loaded_local_shape": list(model[0].weight.to_local().shape),
            "loaded_exp_avg_local_shape": list(
                opt.state[model[0].weight]["exp_avg"].to_local().shape)}


def hsdp(device: torch.device, rank: int) -> dict:
    """Q46: FSDP2 on a (replicate 2, shard 2) mesh of the 4 ranks (HSDP): each weight
    is sharded within a pair of ranks and replicated across the pairs. Counts the
    collectives of one forward and backward."""
    mesh = init_device_mesh(device.type, (2, 2), mesh_dim_names=("replicate", "shard"))
    model = tiny_mlp(0, device)
    for i in (0, 2, 4):
        fully_shard(model[i], mesh=mesh)
    fully_shard(model, mesh=mesh)
    x, y = batch(rank, 0, device=device)
    with warnings.catch_warnings():  # the input needs no grad: a backward-hook note
        warnings.simplefilter("ignore", UserWarning)
        with CommDebugMode() as comm:
            F.mse_loss(model(x), y).backward()
    return {"hsdp_placements": str(model[0].weight.placements),
            "hsdp_local_shape": list(model[0].weight.to_local().shape),
            "hsdp_comm_counts": {str(k): v
                                 for k, v in comm.get_comm_counts().items()}}


def main() -> None:
    ctx = init_distributed()
    gen = torch.Generator().manual_seed(ctx.rank)
    # Integer values: float32 sums are then exact in any order, so ring == all_reduce
    # bit for bit, not only within rounding.
    x = torch.randint(-50, 50, (NUMEL,), generator=gen).float().to(ctx.device)
    ring, sent, schedule, by_phase = ring_all_reduce(x, ctx.rank, ctx.world_size)
    reference = x.clone()
    dist.all_reduce(reference)  # the library's all-reduce (SUM by default)

    # the same algorithm on float noise: equal within rounding, not bit for bit, since
    # the ring adds in another order than gloo's own algorithm
    noise = torch.randn(NUMEL, generator=gen).to(ctx.device)
    ring_noise, _, _, _ = ring_all_reduce(noise, ctx.rank, ctx.world_size)
    ref_noise = noise.clone()
    dist.all_reduce(ref_noise)

    # the naive alternative: reduce to rank 0, then broadcast from it
    naive, naive_sent, naive_received = reduce_then_broadcast(
        x, ctx.rank, ctx.world_size)

    # torch's own halves: reduce-scatter leaves rank r the sum of chunk r, all-gather
    # collects the chunks; together they are an all-reduce
    part = torch.empty(NUMEL // ctx.world_size, device=ctx.device)
    dist.reduce_scatter_single(part, x)
    rebuilt = torch.empty(NUMEL, device=ctx.device)
    dist.all_gather_single(rebuilt, part)

    # their older names still work, with a deprecation warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist.reduce_scatter_tensor(torch.empty_like(part), x)
        dist.all_gather_into_tensor(torch.empty_like(rebuilt), part)
    old_names = [f"{w.category.__name__}: {w.message}" for w in caught]

    loaded = load_resharded(sys.argv[1], ctx.device) if len(sys.argv) > 1 else {}
    report({
        **loaded,
        **hsdp(ctx.device, ctx.rank),
        "world": ctx.world_size,
        "bytes_in": x.numel() * x.element_size(),
        "bytes_sent": sent,
        "bytes_sent_by_phase": by_phase,
        "naive_equals_all_reduce": bool(torch.equal(naive, reference)),
        "naive_bytes_sent": naive_sent,
        "naive_bytes_received": naive_received,
        "ring_equals_all_reduce": bool(torch.equal(ring, reference)),
        "rs_ag_equals_all_reduce": bool(torch.equal(rebuilt, reference)),
        "my_reduced_chunk": bool(torch.equal(
            part, reference.chunk(ctx.world_size)[ctx.rank])),
        "old_name_warnings": old_names,
        "noise_max_diff": float((ring_noise - ref_noise).abs().max()),
        "first_values": ring[:4],
        "schedule": schedule,
    })


if __name__ == "__main__":
    main()
