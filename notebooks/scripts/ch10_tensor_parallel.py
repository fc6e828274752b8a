"""Megatron tensor parallelism of a two-layer MLP, Y = GeLU(X A) B, and of attention.

Run alone: ``torchrun --standalone --nproc_per_node=2 ch10_tensor_parallel.py`` (gloo
on CPU, NCCL when each rank has a GPU): all ranks form one tensor-parallel group.
Chapter 10 runs ``run()`` from ``ch10_model_parallel.py`` instead, on the
tensor-parallel pairs of a 4-rank mesh.

Rank r holds the r-th block of A's columns and of B's rows (Shoeybi et al. 2019,
https://arxiv.org/abs/1909.08053). Two conjugate operators carry the communication:
``f`` is the identity forward and an all-reduce of the input gradient in backward; ``g``
all-reduces the partial outputs forward and is the identity backward. The script counts
every all-reduce by phase and checks outputs and gradients against the unsharded MLP
(which every rank also computes). Then it repeats the layer with torch's DTensor API
(``ColwiseParallel`` then ``RowwiseParallel``), counting its collectives with
``CommDebugMode``; adds sequence parallelism in front of it, recording the shapes of
what each module saves for backward; and splits an attention block by heads, with
separate q, k and v projections.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (
    ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel,
    parallelize_module,
)

from autogradviz import init_distributed, report

HIDDEN, TOKENS, HEADS = 8, 6, 4  # h = 8, MLP width 4h = 32; 6 tokens; 4 heads of 2
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


def saved_shapes(model: nn.Module, step) -> dict[str, list]:
    """Run ``step()``; for each child module of ``model``, the local shapes of the
    tensors autograd saved for backward while it ran (a DTensor by its shard)."""
    where, seen = ["outside"], {}

    def enter(name):
        return lambda *_: where.__setitem__(0, name)

    hooks = [child.register_forward_pre_hook(enter(name))
             for name, child in model.named_children()]

    def pack(x):
        local = x.to_local() if isinstance(x, DTensor) else x
        seen.setdefault(where[0], []).append(list(local.shape))
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        step()
    for hook in hooks:
        hook.remove()
    return seen


class Attention(nn.Module):
    """Causal self-attention with separate q, k, v projections and an output one."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(HIDDEN, HIDDEN, bias=False)
                                          for _ in range(4))

    def forward(self, x):  # x: (tokens, h)
        tokens, head_dim = x.shape[0], HIDDEN // HEADS
        # Under ColwiseParallel each rank's projection outputs its own heads only: -1.
        q, k, v = (proj(x).view(tokens, -1, head_dim).transpose(0, 1)
                   for proj in (self.q, self.k, self.v))  # (heads here, tokens, d)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(out.transpose(0, 1).reshape(tokens, -1))


def full_weights(device):
    """The unsharded MLP, the same on every rank (seeded on the CPU, then moved)."""
    gen = torch.Generator().manual_seed(0)
    A = torch.randn(HIDDEN, 4 * HIDDEN, generator=gen) / HIDDEN ** 0.5
    B = torch.randn(4 * HIDDEN, HIDDEN, generator=gen) / (4 * HIDDEN) ** 0.5
    X = torch.randn(TOKENS, HIDDEN, generator=gen)
    return A.to(device), B.to(device), X.to(device)


def manual_mlp(ctx, r: int, t: int, ref: list) -> dict:
    """The MLP with hand-written f and g; every all-reduce counted."""
    A, B, X = full_weights(ctx.device)
    cols = A.shape[1] // t
    block = slice(r * cols, (r + 1) * cols)
    # Rank r's shards: a block of A's columns, the matching block of B's rows.
    A_r = A[:, block].clone().requires_grad_()
    B_r = B[block, :].clone().requires_grad_()
    x = X.clone().requires_grad_()  # replicated input, as if from an earlier layer
    PHASE[0] = "forward"
    y = ReduceFromTP.apply(F.gelu(CopyToTP.apply(x) @ A_r) @ B_r)
    PHASE[0] = "backward"
    y.pow(2).sum().backward()
    close = lambda a, b: torch.allclose(a, b, atol=1e-5)  # noqa: E731
    return {"shard_shapes": [list(A_r.shape), list(B_r.shape)],
            "full_shapes": [list(A.shape), list(B.shape)],
            "allreduce_forward": CALLS.count("forward"),
            "allreduce_backward": CALLS.count("backward"),
            "out_match": close(y, ref[3]),
            "gradA_match": close(A_r.grad, ref[0].grad[:, block]),
            "gradB_match": close(B_r.grad, ref[1].grad[block]),
            "gradX_match": close(x.grad, ref[2].grad)}


def mlp(device, layernorm: bool = False) -> nn.Sequential:
    """The unsharded MLP as modules (``nn.Linear`` stores the transposed weight), with
    a LayerNorm in front if asked: keys "0" (norm), "1", "3" or "0", "2"."""
    A, B, _ = full_weights(device)
    layers = [nn.Linear(HIDDEN, 4 * HIDDEN, bias=False), nn.GELU(),
              nn.Linear(4 * HIDDEN, HIDDEN, bias=False)]
    if layernorm:
        layers.insert(0, nn.LayerNorm(HIDDEN))
    model = nn.Sequential(*layers).to(device)
    with torch.no_grad():
        model[-3].weight.copy_(A.T)
        model[-1].weight.copy_(B.T)
    return model


def dtensor_mlp(ctx, mesh, ref: list) -> dict:
    """The same MLP with ColwiseParallel then RowwiseParallel; collectives counted."""
    _, _, X = full_weights(ctx.device)
    model = parallelize_module(mlp(ctx.device), mesh,
                               {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x = X.clone().requires_grad_()
    with CommDebugMode() as fwd:
        y = model(x)
    with CommDebugMode() as bwd:
        y.pow(2).sum().backward()
    w0 = model[0].weight
    out = {"forward_comms": _counts(fwd), "backward_comms": _counts(bwd),
           "placement0": str(w0.placements[0]), "local0": list(w0.to_local().shape),
           "out_match": torch.allclose(y, ref[3], atol=1e-5),
           "gradX_match": torch.allclose(x.grad, ref[2].grad, atol=1e-5),
           "grad0_match": torch.allclose(w0.grad.full_tensor(), ref[0].grad.T,
                                         atol=1e-5)}
    # An input that needs no gradient (no trainable layer before it): no all-reduce.
    y = model(X.clone())
    with CommDebugMode() as no_grad_input:
        y.pow(2).sum().backward()
    out["backward_comms_input_without_grad"] = _counts(no_grad_input)
    return out


def sequence_parallel(ctx, mesh, r: int, t: int) -> dict:
    """SequenceParallel LayerNorm, then the MLP (Korthikanti et al. 2022): each rank
    keeps its block of tokens outside the MLP; what is communicated and saved."""
    _, _, X = full_weights(ctx.device)
    model = mlp(ctx.device, layernorm=True)
    with torch.no_grad():
        reference = model(X)  # unsharded, before parallelize_module shards the weights
    parallelize_module(model, mesh, {
        "0": SequenceParallel(sequence_dim=0),
        "1": ColwiseParallel(input_layouts=Shard(0)),
        "3": RowwiseParallel(output_layouts=Shard(0)),
    })
    rows = TOKENS // t
    mine = X[r * rows:(r + 1) * rows].clone().requires_grad_()  # my block of tokens
    outputs = []
    with CommDebugMode() as fwd:
        saved = saved_shapes(model, lambda: outputs.append(model(mine)))
    out = outputs[0]
    with CommDebugMode() as bwd:
        out.pow(2).sum().backward()
    local = out.to_local() if isinstance(out, DTensor) else out
    return {"forward_comms": _counts(fwd), "backward_comms": _counts(bwd),
            "local_rows": [mine.shape[0], local.shape[0]],
            "out_match": torch.allclose(local, reference[r * rows:(r + 1) * rows],
                                        atol=1e-5),
            "saved": saved}


def attention(ctx, mesh) -> dict:
    """Attention split by heads: q, k, v column-parallel, o row-parallel. Backward
    all-reduces per input gradient, with and without one prepared DTensor input."""
    gen = torch.Generator().manual_seed(2)
    x_full = torch.randn(TOKENS, HIDDEN, generator=gen).to(ctx.device)
    torch.manual_seed(0)
    reference = Attention().to(ctx.device)
    x_ref = x_full.clone().requires_grad_()
    y_ref = reference(x_ref)
    y_ref.pow(2).sum().backward()
    plans = {
        "separate": {},
        # The block's input becomes one DTensor, which q, k and v share.
        "prepared": {"": PrepareModuleInput(input_layouts=(Replicate(),),
                                            desired_input_layouts=(Replicate(),),
                                            use_local_output=False)},
    }
    out = {}
    for name, extra in plans.items():
        model = Attention().to(ctx.device)
        model.load_state_dict(reference.state_dict())
        parallelize_module(model, mesh, {**extra, "q": ColwiseParallel(),
                                         "k": ColwiseParallel(), "v": ColwiseParallel(),
                                         "o": RowwiseParallel()})
        x = x_full.clone().requires_grad_()
        with CommDebugMode() as fwd:
            y = model(x)
        with CommDebugMode() as bwd:
            y.pow(2).sum().backward()
        out[name] = {"forward_comms": _counts(fwd), "backward_comms": _counts(bwd),
                     "out_match": torch.allclose(y, y_ref, atol=1e-5),
                     "gradX_match": torch.allclose(x.grad, x_ref.grad, atol=1e-5)}
    return out


def run(ctx, mesh) -> dict:
    """The demos on the 1-D tensor-parallel ``mesh`` this rank belongs to."""
    GROUP[0] = mesh.get_group()
    r, t = mesh.get_local_rank(), mesh.size()
    A, B, X = full_weights(ctx.device)
    # Single-process reference on the full weights: A, B, X (with grads) and Y.
    ref = [w.clone().requires_grad_() for w in (A, B, X)]
    y_ref = F.gelu(ref[2] @ ref[0]) @ ref[1]
    y_ref.pow(2).sum().backward()
    ref.append(y_ref.detach())
    return {"tp_rank": r, "tp_size": t, "manual": manual_mlp(ctx, r, t, ref),
            "dtensor": dtensor_mlp(ctx, mesh, ref),
            "sequence": sequence_parallel(ctx, mesh, r, t),
            "attention": attention(ctx, mesh)}


def main() -> None:
    ctx = init_distributed(timeout_s=60)
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,), mesh_dim_names=("tp",))
    report(run(ctx, mesh))


if __name__ == "__main__":
    main()
