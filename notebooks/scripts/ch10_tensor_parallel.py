"""Megatron tensor parallelism of a two-layer MLP, Y = GeLU(X A) B.

Run alone: ``torchrun --standalone --nproc_per_node=2 ch10_tensor_parallel.py`` (gloo on
CPU, NCCL when each rank has a GPU): all ranks form one tensor-parallel group. Chapter 10
runs ``run()`` from ``ch10_model_parallel.py`` instead, on the tensor-parallel pairs of a
4-rank mesh.

Rank r holds the r-th block of A's columns and of B's rows (Shoeybi et al. 2019,
https://arxiv.org/abs/1909.08053). Two conjugate operators carry the communication:
``f`` is the identity forward and an all-reduce of the input gradient in backward; ``g``
all-reduces the partial outputs forward and is the identity backward. The script counts
every all-reduce by phase, checks outputs and gradients against the unsharded MLP (which
rank 0 also computes), then repeats the layer with torch's own DTensor API
(``ColwiseParallel`` then ``RowwiseParallel``) and counts its collectives with
``CommDebugMode``.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (
    ColwiseParallel, RowwiseParallel, SequenceParallel, parallelize_module,
)

from autogradviz import init_distributed
from ch10_common import publish

HIDDEN, TOKENS = 8, 6  # h = 8, MLP width 4h = 32; 6 tokens
CALLS: list[str] = []  # one entry per all-reduce: the phase it ran in
PHASE = ["forward"]
GROUP: list = [None]  # the tensor-parallel process group


def all_reduce(t: torch.Tensor) -> torch.Tensor:
    CALLS.append(PHASE[0])
    dist.all_reduce(t, group=GROUP[0])
    return t


class CopyToTP(torch.autograd.Function):
    """Megatron's f: identity forward; all-reduce the input gradient in backward."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return all_reduce(grad.clone())


class ReduceFromTP(torch.autograd.Function):
    """Megatron's g: all-reduce the partial sums forward; identity in backward."""

    @staticmethod
    def forward(ctx, partial):
        return all_reduce(partial.clone())

    @staticmethod
    def backward(ctx, grad):
        return grad


def _counts(mode: CommDebugMode) -> dict[str, int]:
    """Collective name (all_reduce, all_gather_into_tensor, ...) -> calls seen."""
    return {str(op).split(".")[-1]: n for op, n in mode.get_comm_counts().items()}


def full_weights(device):
    """The unsharded MLP, the same on every rank (seeded on the CPU, then moved)."""
    gen = torch.Generator().manual_seed(0)
    A = torch.randn(HIDDEN, 4 * HIDDEN, generator=gen) / HIDDEN ** 0.5
    B = torch.randn(4 * HIDDEN, HIDDEN, generator=gen) / (4 * HIDDEN) ** 0.5
    X = torch.randn(TOKENS, HIDDEN, generator=gen)
    return A.to(device), B.to(device), X.to(device)


def run(ctx, mesh) -> dict:
    """The demo on the 1-D tensor-parallel ``mesh`` this rank belongs to."""
    GROUP[0] = mesh.get_group()
    r, t = mesh.get_local_rank(), mesh.size()
    A, B, X = full_weights(ctx.device)
    cols = A.shape[1] // t

    # Single-process reference on the full weights.
    ref = [w.clone().requires_grad_() for w in (A, B, X)]
    y_ref = F.gelu(ref[2] @ ref[0]) @ ref[1]
    y_ref.pow(2).sum().backward()

    # Rank r's shards: a block of A's columns, the matching block of B's rows.
    A_r = A[:, r * cols:(r + 1) * cols].clone().requires_grad_()
    B_r = B[r * cols:(r + 1) * cols, :].clone().requires_grad_()
    x = X.clone().requires_grad_()  # replicated input, as if from an earlier layer
    y = ReduceFromTP.apply(F.gelu(CopyToTP.apply(x) @ A_r) @ B_r)
    PHASE[0] = "backward"
    y.pow(2).sum().backward()

    manual = {
        "shard_shapes": [list(A_r.shape), list(B_r.shape)],
        "full_shapes": [list(A.shape), list(B.shape)],
        "allreduce_forward": CALLS.count("forward"),
        "allreduce_backward": CALLS.count("backward"),
        "out_match": torch.allclose(y, y_ref, atol=1e-5),
        "gradA_match": torch.allclose(A_r.grad, ref[0].grad[:, r * cols:(r + 1) * cols],
                                      atol=1e-5),
        "gradB_match": torch.allclose(B_r.grad, ref[1].grad[r * cols:(r + 1) * cols],
                                      atol=1e-5),
        "gradX_match": torch.allclose(x.grad, ref[2].grad, atol=1e-5),
    }

    # The same layer with torch's DTensor tensor-parallel API.
    mlp = nn.Sequential(nn.Linear(HIDDEN, 4 * HIDDEN, bias=False), nn.GELU(),
                        nn.Linear(4 * HIDDEN, HIDDEN, bias=False)).to(ctx.device)
    with torch.no_grad():
        mlp[0].weight.copy_(A.T)  # nn.Linear stores (out, in)
        mlp[2].weight.copy_(B.T)
    parallelize_module(mlp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x2 = X.clone().requires_grad_()
    with CommDebugMode() as fwd:
        y2 = mlp(x2)
    with CommDebugMode() as bwd:
        y2.pow(2).sum().backward()
    w0 = mlp[0].weight
    dtensor = {
        "forward_comms": _counts(fwd),
        "backward_comms": _counts(bwd),
        "placement0": str(w0.placements[0]),
        "local0": list(w0.to_local().shape),
        "out_match": torch.allclose(y2, y_ref, atol=1e-5),
        "gradX_match": torch.allclose(x2.grad, ref[2].grad, atol=1e-5),
        "grad0_match": torch.allclose(w0.grad.full_tensor(), ref[0].grad.T, atol=1e-5),
    }
    # As a first layer, whose input needs no gradient, backward needs no all-reduce.
    y3 = mlp(X.clone())
    with CommDebugMode() as first_bwd:
        y3.pow(2).sum().backward()
    dtensor["backward_comms_input_without_grad"] = _counts(first_bwd)

    # Sequence parallelism (Korthikanti et al. 2022): outside the MLP each rank keeps only
    # its block of tokens (here for a LayerNorm), so the all-reduce becomes an all-gather
    # before the MLP and a reduce-scatter after it.
    sp = nn.Sequential(nn.LayerNorm(HIDDEN), nn.Linear(HIDDEN, 4 * HIDDEN, bias=False),
                       nn.GELU(), nn.Linear(4 * HIDDEN, HIDDEN, bias=False)).to(ctx.device)
    with torch.no_grad():
        sp[1].weight.copy_(A.T)
        sp[3].weight.copy_(B.T)
        sp_ref = sp(X)  # unsharded reference, before parallelize_module shards the weights
    parallelize_module(sp, mesh, {
        "0": SequenceParallel(sequence_dim=0),
        "1": ColwiseParallel(input_layouts=Shard(0)),
        "3": RowwiseParallel(output_layouts=Shard(0)),
    })
    rows = TOKENS // t
    my_tokens = X[r * rows:(r + 1) * rows]  # this rank's block of the sequence
    with CommDebugMode() as sp_fwd:
        out = sp(my_tokens)
    out = out.to_local() if hasattr(out, "to_local") else out
    sequence = {
        "forward_comms": _counts(sp_fwd),
        "local_rows": [my_tokens.shape[0], out.shape[0]],
        "out_match": torch.allclose(out, sp_ref[r * rows:(r + 1) * rows], atol=1e-5),
    }
    return {"tp_rank": r, "tp_size": t, "manual": manual, "dtensor": dtensor,
            "sequence": sequence}


def main() -> None:
    ctx = init_distributed(timeout_s=60)
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,), mesh_dim_names=("tp",))
    publish(ctx.rank, run(ctx, mesh))


if __name__ == "__main__":
    main()
