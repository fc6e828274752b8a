"""Chapter 6, Q31: a CLIP/InfoNCE loss whose negatives come from every rank.

Each of the W ranks holds n image-text pairs of one global batch of N = W * n pairs.
A two-tower model (one linear encoder per modality and a learnable temperature) is
wrapped in DistributedDataParallel, which averages parameter gradients over ranks.
Every rank computes its loss over its LOCAL rows only: its n images against all N
texts and its n texts against all N images. The N embeddings come from a gather, done
in one of these modes:

  plain      dist.all_gather, then the rank's own slot swapped for its local tensor
             (the gathered copies of the other ranks carry no autograd history);
  nn_gather  torch.distributed.nn.functional.all_gather (differentiable; deprecated
             in favour of the next one, with a FutureWarning that we record);
  functional torch.distributed._functional_collectives.all_gather_single
             (differentiable: its backward sums each slot's gradient over ranks);
  custom     GatherWithGrad below: the same idea written as an autograd.Function;
  full_nxn   the plain gather, but every rank computes the whole N x N loss;
  full_nxn_grad  all_gather_single (differentiable), and the whole N x N loss.

Each rank also builds the same global batch and computes the single-process,
full-batch gradient as the reference, and reports everything with autogradviz.report.
Every tensor lives on the rank's device (ctx.device): the CPU with gloo, cuda:<local
rank> with NCCL when every rank has a GPU. The data is drawn on the CPU and then moved,
so both backends see the same numbers.

The notebook runs `run` inside scripts/ch06_jobs.py, together with Q32's step, so the
processes start once. On its own, from the notebooks/ folder:
    agv.torchrun("scripts/ch06_infonce.py", nproc=2)
or from a shell:
    torchrun --standalone --nproc_per_node=2 scripts/ch06_infonce.py
"""
from __future__ import annotations

import math
import warnings

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.distributed.nn.functional as dist_nn
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from autogradviz import init_distributed, report
from autogradviz.distributed.launch import DistributedContext

PAIRS_PER_RANK, IMG_DIM, TXT_DIM, EMB_DIM = 4, 6, 5, 3


class TwoTower(nn.Module):
    """Image and text encoders and CLIP's learnable temperature (init 1/0.07)."""

    def __init__(self) -> None:
        super().__init__()
        self.img = nn.Linear(IMG_DIM, EMB_DIM)
        self.txt = nn.Linear(TXT_DIM, EMB_DIM)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def forward(self, images, texts):
        img = F.normalize(self.img(images), dim=-1)       # (n, EMB_DIM), unit rows
        txt = F.normalize(self.txt(texts), dim=-1)
        # CLIP keeps exp(logit_scale) <= 100 by clamping the parameter after each
        # optimizer step; a clamp here would zero its gradient above 100. No step is
        # taken in this script.
        return img, txt, self.logit_scale.exp()


def local_rows_loss(img, txt, all_img, all_txt, scale, first_row):
    """The symmetric InfoNCE loss of this rank's rows against all N columns."""
    labels = torch.arange(first_row, first_row + img.shape[0],    # positives' columns
                          device=img.device)
    img_to_txt = F.cross_entropy(scale * img @ all_txt.T, labels)   # (n, N) logits
    txt_to_img = F.cross_entropy(scale * txt @ all_img.T, labels)
    return (img_to_txt + txt_to_img) / 2


def full_loss(img, txt, scale):
    """The same loss over all N rows: the single-process reference."""
    labels = torch.arange(img.shape[0], device=img.device)
    logits = scale * img @ txt.T                                    # (N, N)
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


class GatherWithGrad(torch.autograd.Function):
    """All-gather in forward; in backward, sum the gradient over ranks (all-reduce)
    and keep this rank's slot."""

    @staticmethod
    def forward(ctx, t: torch.Tensor) -> torch.Tensor:
        ctx.rank, ctx.rows = dist.get_rank(), t.shape[0]
        copies = [torch.empty_like(t) for _ in range(dist.get_world_size())]
        dist.all_gather(copies, t.contiguous())
        return torch.cat(copies)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        summed = grad.clone(memory_format=torch.contiguous_format)  # not in place
        dist.all_reduce(summed)             # sum over ranks of dL_r / d(every slot)
        return summed[ctx.rank * ctx.rows:(ctx.rank + 1) * ctx.rows]


def gather(t: torch.Tensor, how: str, rank: int, world: int):
    """(all ranks' rows concatenated, whether another rank's copy has a grad_fn)."""
    other = (rank + 1) % world
    if how == "functional":
        both = funcol.all_gather_single(t, 0, dist.group.WORLD)    # (world * n, d)
        return both, both.grad_fn is not None
    if how == "custom":
        both = GatherWithGrad.apply(t)
        return both, both.grad_fn is not None
    if how == "nn_gather":
        copies = dist_nn.all_gather(t)
        return torch.cat(copies), copies[other].grad_fn is not None
    copies = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(copies, t)            # a plain collective: no autograd history
    copies[rank] = t                      # our own slot keeps its history
    return torch.cat(copies), copies[other].grad_fn is not None


def grads(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad for name, p in model.named_parameters()}


def run(ctx: DistributedContext) -> dict:
    """This rank's results: the reference, and each gather's loss and gradients."""
    rank, world, dev = ctx.rank, ctx.world_size, ctx.device
    n = PAIRS_PER_RANK
    torch.manual_seed(0)                  # the same global batch and weights everywhere
    images = torch.randn(world * n, IMG_DIM).to(dev)
    texts = torch.randn(world * n, TXT_DIM).to(dev)
    model = TwoTower().to(dev)
    reference = TwoTower().to(dev)
    reference.load_state_dict(model.state_dict())
    ddp = DDP(model)

    img, txt, scale = reference(images, texts)
    ref_loss = full_loss(img, txt, scale)
    ref_loss.backward()
    out = {"rank": rank, "world": world, "backend": ctx.backend,
           "reference_loss": ref_loss.item(), "reference_grads": grads(reference)}

    rows = slice(rank * n, (rank + 1) * n)
    full_nxn_gather = {"full_nxn": "plain", "full_nxn_grad": "functional"}
    for how in ("plain", "nn_gather", "functional", "custom", *full_nxn_gather):
        ddp.zero_grad(set_to_none=True)
        img, txt, scale = ddp(images[rows], texts[rows])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            collective = full_nxn_gather.get(how, how)
            all_img, others_tracked = gather(img, collective, rank, world)
            all_txt, _ = gather(txt, collective, rank, world)
        if how in full_nxn_gather:
            loss = full_loss(all_img, all_txt, scale)
        else:
            loss = local_rows_loss(img, txt, all_img, all_txt, scale, rank * n)
        loss.backward()                   # DDP averages the parameter grads over ranks
        out[how] = {
            "loss": loss.item(),
            "grads": grads(model),                      # after DDP's all-reduce
            "other_rank_copy_has_grad_fn": others_tracked,
            "warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
        }
    return out


if __name__ == "__main__":
    report(run(init_distributed()))
