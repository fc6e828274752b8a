"""One tensor-parallel rank's share of a GPT layer, as Megatron-LM splits it.

Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models") count a layer's saved activations per GPU under tensor parallelism ``t``,
sequence parallelism and selective recompute; `activation_bytes_per_layer` is their
formula. `MegatronLayerShard` is the module that formula describes, so Chapter 10 can
measure what torch really saves (on the ``meta`` device, with `estimate_memory`) and
compare byte for byte.

It runs in one process: the collectives of a real rank are stood in for by tensor ops
with the same shapes (an all-gather by a repeat, a reduce-scatter by a sum over the
rank's copies), so the saved tensors are the real rank's, though the values are not.
"""
from __future__ import annotations

import math
from typing import Literal, get_args

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

__all__ = ["GatherLinear", "MegatronLayerShard", "SEQUENCE_PARALLEL", "tp_mlp_partials"]

SequenceParallel = Literal["megatron", "torch"]
#: How sequence parallelism gathers a column-parallel linear's input: "megatron" saves
#: only this rank's s/t tokens and gathers again in backward (`GatherLinear`); "torch"
#: (``SequenceParallel`` of torch.distributed.tensor.parallel) saves the gathered input.
SEQUENCE_PARALLEL: tuple[SequenceParallel, ...] = get_args(SequenceParallel)


class GatherLinear(torch.autograd.Function):
    """Megatron's column-parallel linear under sequence parallelism: gather the tokens
    (a repeat stands in), save only this rank's block, gather it again in backward."""

    @staticmethod
    def forward(ctx, block, weight, bias, tp):  # block: (s/tp, b, h)
        ctx.save_for_backward(block, weight)
        ctx.tp = tp
        return F.linear(block.repeat(tp, 1, 1), weight, bias)  # (s, b, out)

    @staticmethod
    def backward(ctx, grad):
        block, weight = ctx.saved_tensors
        gathered = block.repeat(ctx.tp, 1, 1)                      # all-gather again
        grad_in = (grad @ weight).unflatten(0, (ctx.tp, -1)).sum(0)  # reduce-scatter
        grad_w = grad.flatten(0, 1).T @ gathered.flatten(0, 1)
        return grad_in, grad_w, grad.sum((0, 1)), None


class MegatronLayerShard(nn.Module):
    """One tensor-parallel rank's share of a GPT layer (Korthikanti et al. 2022):
    pre-LN, heads/tp heads, MLP width 4h/tp, dropout with 1-byte masks; with
    sp="megatron" or "torch", sequence parallel (it takes s/tp tokens).

    Input and output are (s, b, h), or (s/tp, b, h) with sequence parallelism.
    ``selective=True`` recomputes the attention core (scores, softmax, dropout) in
    backward instead of saving it.
    """

    def __init__(self, hidden: int, heads: int, tp: int = 1, selective: bool = False,
                 sp: SequenceParallel | None = None, p: float = 0.1) -> None:
        super().__init__()
        if hidden % heads or heads % tp:
            raise ValueError(
                f"hidden ({hidden}) must be a multiple of heads ({heads}), and heads a "
                f"multiple of tp ({tp}): each rank holds heads/tp whole heads")
        if sp is not None and sp not in SEQUENCE_PARALLEL:
            raise ValueError(f"sp={sp!r}: pass None (no sequence parallelism) or one of "
                             f"{SEQUENCE_PARALLEL}")
        self.heads, self.head_dim, self.p = heads // tp, hidden // heads, p
        self.tp, self.selective, self.sp = tp, selective, sp
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden // tp)         # column-parallel
        self.proj = nn.Linear(hidden // tp, hidden)            # row-parallel
        self.fc1 = nn.Linear(hidden, 4 * hidden // tp)         # column-parallel
        self.fc2 = nn.Linear(4 * hidden // tp, hidden)         # row-parallel

    def dropout(self, x: torch.Tensor) -> torch.Tensor:
        # native_dropout saves a bool mask (1 byte per element), as the paper counts;
        # F.dropout on a CPU saves a mask in the input's dtype.
        return torch.native_dropout(x, self.p, True)[0]

    def column(self, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        """Gather the tokens (sequence parallel), then the column-parallel linear."""
        if self.sp == "megatron":
            return GatherLinear.apply(x, layer.weight, layer.bias, self.tp)
        return layer(x.repeat(self.tp, 1, 1) if self.sp == "torch" else x)

    def row(self, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        """The row-parallel linear, then scatter the tokens (sequence parallel)."""
        y = layer(x)
        return y.unflatten(0, (self.tp, -1)).sum(0) if self.sp else y

    def attention_core(self, q: torch.Tensor, k: torch.Tensor,
                       v: torch.Tensor) -> torch.Tensor:  # (b*heads, s, d) each
        scores = q @ k.transpose(1, 2) / math.sqrt(self.head_dim)
        return self.dropout(scores.softmax(-1)) @ v

    def forward(self, x: torch.Tensor) -> torch.Tensor:       # x: (s or s/tp, b, h)
        qkv = self.column(self.qkv, self.ln1(x))
        s, b, _ = qkv.shape
        q, k, v = (part.reshape(s, b * self.heads, self.head_dim).transpose(0, 1)
                   for part in qkv.chunk(3, dim=-1))
        if self.selective:                                     # recompute in backward
            core = checkpoint(self.attention_core, q, k, v, use_reentrant=False)
        else:
            core = self.attention_core(q, k, v)
        core = core.transpose(0, 1).reshape(s, b, -1)
        x = x + self.dropout(self.row(self.proj, core))
        return x + self.dropout(self.row(self.fc2,
                                         F.gelu(self.column(self.fc1, self.ln2(x)))))


def tp_mlp_partials(x: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                    t: int) -> tuple[list[torch.Tensor], int]:
    """What ``t`` Megatron tensor-parallel ranks compute for ``gelu(x @ A) @ B``: each
    rank's partial output (rank 0's first) and how many all-reduces the forward needs.

    The reference that Chapter 10's tensor-parallel exercise is checked against, kept
    here so the check cell does not show the method."""
    if t < 1 or A.shape[1] % t or B.shape[0] != A.shape[1]:
        raise ValueError(f"t={t} must divide the hidden width {A.shape[1]} of A and B")
    partials = [F.gelu(x @ a) @ b
                for a, b in zip(A.tensor_split(t, dim=1), B.tensor_split(t, dim=0))]
    return partials, int(t > 1)
