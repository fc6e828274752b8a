"""Gradient accumulation under DDP, recorded with record_comm, next to two oracles.

Launched by tests/test_comm.py through autogradviz.torchrun (2 ranks, gloo). Three
optimizer steps of K micro-steps each: K - 1 backward passes inside ``no_sync()``, then
one synced. Each rank reports its CommTrace and, for every synced backward, what torch
says independently of the recording hook:

* the buckets DDP holds right then (``reducer._get_zeros_like_grad_buckets()``);
* the gradients of a twin DDP model that keeps DDP's default all-reduce;
* the gradients of a plain copy of the model, accumulated locally, then summed across
  ranks by hand with ``dist.all_reduce`` and divided by the world size.
"""
import contextlib
import copy

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP

import autogradviz as agv

K, STEPS, CAP_MB = 3, 3, 0.004  # a 4 KB bucket cap: the model's 7 KiB of grads -> 2 buckets

ctx = agv.init_distributed(timeout_s=60)
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                    nn.Linear(32, 4)).to(ctx.device)
ddp = DDP(copy.deepcopy(net), bucket_cap_mb=CAP_MB)
twin = DDP(copy.deepcopy(net), bucket_cap_mb=CAP_MB)  # DDP's default hook
plain = copy.deepcopy(net)  # no DDP at all
opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (ddp, twin, plain)]
names = {id(p): n for n, p in ddp.module.named_parameters()}
gen = torch.Generator().manual_seed(100 + ctx.rank)  # each rank its own data
batches = [[torch.randn(8, 16, generator=gen).to(ctx.device) for _ in range(K)]
           for _ in range(STEPS)]

buckets, twin_diff, manual_diff = [], [], []
with agv.record_comm(ddp, optimizer=opts[0]) as comm:
    for step in range(STEPS):
        for k, x in enumerate(batches[step]):
            synced = k == K - 1
            for model in (ddp, twin):
                with contextlib.nullcontext() if synced else model.no_sync():
                    out = model(x)
                    if synced and model is ddp:
                        buckets.append([[b.index(), b.buffer().numel() * b.buffer().element_size(),
                                         [names[id(p)] for p in b.parameters()]]
                                        for b in ddp.reducer._get_zeros_like_grad_buckets()])
                    (out.square().mean() / K).backward()
            (plain(x).square().mean() / K).backward()
        for p in plain.parameters():  # the averaging all-reduce, by hand
            dist.all_reduce(p.grad)
            p.grad /= ctx.world_size
        pairs = list(zip(ddp.parameters(), twin.parameters(), plain.parameters()))
        twin_diff.append(max((a.grad - b.grad).abs().max().item() for a, b, _ in pairs))
        manual_diff.append(max((a.grad - c.grad).abs().max().item() for a, _, c in pairs))
        for opt in opts:
            opt.step()
            opt.zero_grad()

# A second recording on the same model re-uses the hook DDP already holds.
with agv.record_comm(ddp) as again:
    ddp(batches[0][0]).sum().backward()

errors = {}
for label, model in (("trained", twin), ("foreign", DDP(copy.deepcopy(net)))):
    if label == "foreign":
        model.register_comm_hook(None, allreduce_hook)
    try:
        agv.record_comm(model).__enter__()
    except ValueError as err:
        errors[label] = str(err)

agv.report({"comm": comm.to_dict(), "again": again.to_dict(), "buckets": buckets,
            "twin_diff": twin_diff, "manual_diff": manual_diff, "errors": errors,
            "grad_bytes": sum(p.numel() * p.element_size() for p in net.parameters()),
            "overlap": [[o.overlapped_s, o.exposed_s] for o in
                        (comm.overlap(b.micro_step) for b in comm.backwards if b.synced)]})
