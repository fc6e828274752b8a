"""record_comm changes nothing DDP does: each program runs twice on a fresh DDP model,
once plain and once inside record_comm, and each rank reports both outcomes.

Launched by tests/test_faithful.py through autogradviz.torchrun (2 ranks, gloo). An
outcome is the exception (type, message start) or the gradients and parameters after
``optimizer.step()``, compared bit for bit by the test (as lists of floats, which JSON
carries exactly). Every program raises or succeeds the same way on both ranks, so no
rank is left waiting in a collective.
"""
import contextlib

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint

import autogradviz as agv

ctx = agv.init_distributed(timeout_s=60)


def build() -> tuple[DDP, torch.optim.Optimizer]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.Sigmoid(), nn.Linear(16, 4))
    ddp = DDP(net, bucket_cap_mb=0.0005)  # ~500 bytes: several buckets
    return ddp, torch.optim.Adam(ddp.parameters(), lr=0.01)


def batch(i: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(10 * ctx.rank + i)
    return torch.randn(6, 8, generator=gen)


def plain_step(m, opt):
    m(batch()).square().mean().backward()
    opt.step()


def no_sync_accumulate(m, opt):
    with m.no_sync():
        m(batch(1)).square().mean().backward()
    m(batch(2)).square().mean().backward()
    opt.step()


def inplace_saved_output(m, opt):
    net = m.module
    h = net[1](net[0](batch()))  # sigmoid saves its output
    h.mul_(2)
    # Through DDP's forward so its reducer expects this backward.
    m(batch()).sum().add(net[2](h).sum()).backward()
    opt.step()


def checkpointed(m, opt):
    net = m.module
    out = m(batch())
    h = checkpoint(net[0], batch(3), use_reentrant=False)
    (out.sum() + 0 * h.sum()).backward()
    opt.step()


def amp_bf16(m, opt):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = m(batch()).float().square().mean()
    loss.backward()
    opt.step()


def exception_caught(m, opt):
    with contextlib.suppress(ValueError):
        m(batch()).sum()
        raise ValueError("bad batch")
    m(batch()).square().mean().backward()
    opt.step()


PROGRAMS = [plain_step, no_sync_accumulate, inplace_saved_output, checkpointed, amp_bf16,
            exception_caught]


def outcome(program, recorded: bool) -> dict:
    m, opt = build()
    error = None
    try:
        with agv.record_comm(m, opt) if recorded else contextlib.nullcontext():
            program(m, opt)
    except Exception as err:  # noqa: BLE001 - the exception is the outcome
        error = [type(err).__name__, str(err)[:200]]
    return {"error": error,
            "grads": {n: None if p.grad is None else p.grad.flatten().tolist()
                      for n, p in m.module.named_parameters()},
            "params": {n: p.detach().flatten().tolist() for n, p in m.module.named_parameters()}}


rows = {}
for program in PROGRAMS:
    rows[program.__name__] = {"plain": outcome(program, False),
                              "recorded": outcome(program, True)}
agv.report({"programs": rows})
