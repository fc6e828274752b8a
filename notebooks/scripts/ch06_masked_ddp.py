"""Chapter 6, Q32: normalising a masked token loss under accumulation and DDP.

Two ranks, two micro-batches each, one optimizer step. Each micro-batch is one sequence
of SEQ_LEN tokens, and a different number of them are real (the rest are padding,
labelled -100). The model is a tiny linear head wrapped in DistributedDataParallel,
which averages gradients over ranks; the first micro-batch runs under no_sync(), so
gradients are all-reduced once, on the last backward of the step.

Three normalisations of the same loss, each compared with the single-process gradient
of the token mean over the whole global batch (every rank computes that reference):

  micro_mean   each micro-batch's mean over its valid tokens, divided by the number
               of micro-batches (what a plain accumulation loop does);
  rank_mean    each rank's tokens summed and divided by the rank's own count;
  global_sum   summed, divided by the global count of valid tokens (all-reduced
               before the first backward), times the world size to undo DDP's average;
               run with DDP's own default all-reduce hook;
  sum_hook     summed and divided by the global count, without the x world: a second
               DDP whose comm hook all-reduces with SUM and does not divide.

global_sum is then run a second time, traced with autogradviz.trace_grads (which
replaces DDP's hook by a recording copy of it), and the trace's events (backward,
all-reduce) are reported for the notebook to draw, with that pass's gradients.

Every tensor lives on the rank's device (ctx.device): the CPU with gloo,
cuda:<local rank> with NCCL when every rank has a GPU. The data is drawn on the CPU and then moved, so both backends see the same
numbers.

The notebook runs `run` inside scripts/ch06_jobs.py, together with Q31's job, so the
processes start once. On its own, from the notebooks/ folder:
    agv.torchrun("scripts/ch06_masked_ddp.py", nproc=2)
"""
from __future__ import annotations

import contextlib
import dataclasses

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from autogradviz import init_distributed, report, trace_grads
from autogradviz.distributed.launch import DistributedContext

SEQ_LEN, FEATURES, VOCAB = 9, 4, 7
VALID = ((3, 9), (5, 1))      # real tokens per micro-batch, for rank 0 and rank 1


def global_batch(world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Features and labels of every rank's micro-batches: (world, 2, SEQ_LEN, ...)."""
    torch.manual_seed(0)
    feats = torch.randn(world, 2, SEQ_LEN, FEATURES)
    labels = torch.randint(0, VOCAB, (world, 2, SEQ_LEN))
    for r in range(world):
        for k in range(2):
            labels[r, k, VALID[r % 2][k]:] = -100      # padding: ignored by the loss
    return feats, labels


def _sum_allreduce(state, bucket):  # noqa: ANN001, ANN201
    """A DDP comm hook that sums the bucket over ranks and does not divide."""
    fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


def run(ctx: DistributedContext) -> dict:
    """This rank's results: the token counts, the reference and each normalisation's
    gradients after DDP's all-reduce, and the traced global_sum step."""
    rank, world, dev = ctx.rank, ctx.world_size, ctx.device
    feats, labels = (t.to(dev) for t in global_batch(world))

    torch.manual_seed(1)
    reference = nn.Linear(FEATURES, VOCAB).to(dev)
    model = nn.Linear(FEATURES, VOCAB).to(dev)
    model.load_state_dict(reference.state_dict())
    ddp = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)   # lr 0: the weights stay put

    # The single-process reference: one token mean over the whole global batch.
    F.cross_entropy(reference(feats).reshape(-1, VOCAB), labels.reshape(-1)).backward()
    out = {"reference_grads": {n: p.grad for n, p in reference.named_parameters()}}

    x, y = feats[rank], labels[rank]                    # this rank's two micro-batches
    local_count = (y != -100).sum()
    global_count = local_count.clone()
    dist.all_reduce(global_count)                       # known before any backward
    out["counts"] = {"local": local_count, "global": global_count}

    def step(net, how: str, traced: bool = False) -> dict:
        net.zero_grad(set_to_none=True)
        recorder = trace_grads(net, optimizer=opt) if traced else None
        with recorder or contextlib.nullcontext() as rec:
            for k in range(2):
                # all-reduce only on the last micro-batch of the step
                with net.no_sync() if k == 0 else contextlib.nullcontext():
                    logits = net(x[k])
                    if how == "micro_mean":
                        loss = F.cross_entropy(logits, y[k]) / 2
                    elif how == "rank_mean":
                        loss = (F.cross_entropy(logits, y[k], reduction="sum")
                                / local_count)
                    elif how == "sum_hook":
                        loss = (F.cross_entropy(logits, y[k], reduction="sum")
                                / global_count)
                    else:
                        loss = (F.cross_entropy(logits, y[k], reduction="sum")
                                / global_count * world)
                    loss.backward()
            opt.step()
        if traced:
            out["trace"] = {"params": list(rec.params),
                            "events": [dataclasses.asdict(e) for e in rec.events]}
        return {n: p.grad.clone() for n, p in net.module.named_parameters()}

    # DDP's own default hook (an average) for these three: nothing of autogradviz's
    for how in ("micro_mean", "rank_mean", "global_sum"):
        out[how] = step(ddp, how)
    # the same step, summed instead of averaged, on a second DDP with a SUM hook
    twin = nn.Linear(FEATURES, VOCAB).to(dev)
    twin.load_state_dict(reference.state_dict())
    summing = DDP(twin)
    summing.register_comm_hook(None, _sum_allreduce)
    out["sum_hook"] = step(summing, "sum_hook")
    # global_sum again, traced for the figure (trace_grads replaces ddp's hook)
    out["global_sum_traced"] = step(ddp, "global_sum", traced=True)
    return out


if __name__ == "__main__":
    report(run(init_distributed()))
