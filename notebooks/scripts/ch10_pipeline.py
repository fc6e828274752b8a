"""A real pipeline: torch.distributed.pipelining runs GPipe and 1F1B, a stage per rank.

Run alone: ``torchrun --standalone --nproc_per_node=4 ch10_pipeline.py`` (gloo on CPU,
NCCL when each rank has a GPU). Chapter 10 runs ``run()`` from
``ch10_model_parallel.py``.

An 8-layer MLP is cut into one stage per rank, and ``ScheduleGPipe`` and
``Schedule1F1B`` each train one step on 8 microbatches. Every stage records the order in
which the schedule ran its forward and backward chunks (wrapping
``PipelineStage.forward_one_chunk`` and ``backward_one_chunk``); the last stage reports
the loss, which must equal the unpipelined model's, and its gradients (with
``scale_grads=False``: the microbatches' sum, ``microbatches`` times as large).
"""
from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from autogradviz import init_distributed, report

WIDTH, BATCH, LAYERS = 16, 32, 8


def full_model() -> nn.Sequential:
    """The unsplit model, identical on every rank."""
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh())
                           for _ in range(LAYERS)])


def recorded(stage: PipelineStage, order: list) -> None:
    """Make ``stage`` log ("F" or "B", microbatch) each time the schedule runs a
    chunk."""
    forward, backward = stage.forward_one_chunk, stage.backward_one_chunk

    def forward_one_chunk(mb, *args, **kwargs):
        order.append(("F", mb))
        return forward(mb, *args, **kwargs)

    def backward_one_chunk(mb, *args, **kwargs):
        order.append(("B", mb))
        return backward(mb, *args, **kwargs)

    stage.forward_one_chunk = forward_one_chunk
    stage.backward_one_chunk = backward_one_chunk


def run(ctx, microbatches: int = 8) -> dict:
    """Run GPipe and 1F1B with one stage per rank; each one's order and loss."""
    p, s = ctx.world_size, ctx.rank
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, WIDTH, generator=gen).to(ctx.device)
    y = torch.randn(BATCH, WIDTH, generator=gen).to(ctx.device)
    per_stage = LAYERS // p
    unsplit = full_model().to(ctx.device)
    full_loss = nn.functional.mse_loss(unsplit(x), y)
    full_loss.backward()  # the reference gradients, whole batch at once
    reference = full_loss.item()
    mine = [w.grad for w in unsplit[s * per_stage:(s + 1) * per_stage].parameters()]
    out = {"stage": s, "reference_loss": reference}
    for name, schedule_class, scale in (("gpipe", ScheduleGPipe, True),
                                        ("1f1b", Schedule1F1B, True),
                                        ("1f1b_unscaled", Schedule1F1B, False)):
        part = full_model()[s * per_stage:(s + 1) * per_stage].to(ctx.device)
        stage = PipelineStage(part, s, p, ctx.device)
        order: list = []
        recorded(stage, order)
        schedule = schedule_class(stage, microbatches, scale_grads=scale,
                                  loss_fn=nn.functional.mse_loss)
        losses: list = []
        if s == 0:
            schedule.step(x)
        elif s == p - 1:
            schedule.step(target=y, losses=losses)
        else:
            schedule.step()
        grads = [w.grad for w in part.parameters()]
        out[name] = {"order": order,
                     "loss": torch.stack(losses).mean().item() if losses else None,
                     # gradients against the unsplit model's, and against m times them
                     "grads_match": all(torch.allclose(g, r, rtol=1e-4, atol=1e-6)
                                        for g, r in zip(grads, mine)),
                     "grads_match_m_times": all(
                         torch.allclose(g, microbatches * r, rtol=1e-4, atol=1e-6)
                         for g, r in zip(grads, mine))}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--microbatches", type=int, default=8)
    ctx = init_distributed(timeout_s=60)
    report(run(ctx, parser.parse_args().microbatches))


if __name__ == "__main__":
    main()
