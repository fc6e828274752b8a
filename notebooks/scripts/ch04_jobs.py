"""Chapter 4: the two-rank proofs of Q18-Q20's At scale, in one torchrun job.

    torchrun --standalone --nproc_per_node=2 notebooks/scripts/ch04_jobs.py

Each rank feeds its own data (rank 1's is scaled up), so local and reduced gradients
differ.

order: DDP with a comm hook that logs and then all-reduces, a tensor hook on the bias
and a post-accumulate-grad hook on each parameter: the order of the events, and
whether the hook saw this rank's local gradient or the average that `.grad` holds
after backward.

step: three SGD steps three ways under DDP: the usual `step()`; one optimizer per
parameter stepped from its post-accumulate-grad hook; and DDP's
`_register_fused_optim`, which steps after the all-reduce. Whether each rank's weights
equal rank 0's and the usual loop's.

fsdp: FSDP2 (`fully_shard`) with a post-accumulate-grad hook on the sharded weight:
whether the hook saw the reduce-scattered shard or the local gradient, and how
often a tensor hook on the sharded weight fired.

buffers: a `FakeQuantize` observer under DDP with `broadcast_buffers` True and False:
whether the observer state each forward starts from is rank 0's.

double: a gradient penalty through an FSDP2 model: the gradient w.r.t. the input with
create_graph=True, then `(loss + penalty).backward()`, for reshard_after_forward True
(the default) and False, and with `set_reshard_after_backward(False)`: which pass ran
FSDP2's post-backward (it is wrapped to note it), whether the parameters were
resharded after `autograd.grad`, what the backward did and how many `.grad`s it left.

Run it from the notebooks/ folder with
    agv.torchrun("scripts/ch04_jobs.py", nproc=2)
"""
from __future__ import annotations

import copy

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.ao.quantization import FakeQuantize, MovingAverageMinMaxObserver
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.fsdp import fully_shard
from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup
from torch.nn.parallel import DistributedDataParallel as DDP

from autogradviz import init_distributed, report


def same_as_rank0(t: torch.Tensor) -> bool:
    theirs = t.detach().clone()
    dist.broadcast(theirs, 0)
    return torch.equal(t.detach(), theirs)


def average(t: torch.Tensor, world: int) -> torch.Tensor:
    total = t.detach().clone()
    dist.all_reduce(total)
    return total / world


def order_part(ctx) -> dict:
    torch.manual_seed(0)
    base = nn.Linear(4, 2)
    x = torch.randn(3, 4) * (1 + ctx.rank)
    ddp = DDP(copy.deepcopy(base))
    events, seen = [], {}

    def logged_allreduce(state, bucket):
        events.append("all-reduce")
        return default_hooks.allreduce_hook(state, bucket)

    ddp.register_comm_hook(dist.group.WORLD, logged_allreduce)
    ddp.module.bias.register_hook(lambda g: events.append("tensor hook bias"))
    for name, p in ddp.module.named_parameters():
        def post(p, name=name):
            events.append(f"post-accumulate {name}")
            seen[name] = p.grad.clone()
        p.register_post_accumulate_grad_hook(post)
    ddp(x).square().sum().backward()
    local = copy.deepcopy(base)
    local(x).square().sum().backward()           # this rank's own gradient, no DDP
    return {"events": events,
            "hook saw the local grad": torch.equal(seen["bias"], local.bias.grad),
            ".grad after backward is the average": torch.allclose(
                ddp.module.bias.grad, average(local.bias.grad, ctx.world_size))}


def step_part(ctx) -> dict:
    torch.manual_seed(0)
    base = nn.Linear(4, 2)
    batches = [torch.randn(3, 4) * (1 + ctx.rank) for _ in range(3)]
    usual = DDP(copy.deepcopy(base))
    opt = torch.optim.SGD(usual.parameters(), lr=0.1)
    for x in batches:
        opt.zero_grad()
        usual(x).square().sum().backward()
        opt.step()
    in_hook = DDP(copy.deepcopy(base))
    per_param = {p: torch.optim.SGD([p], lr=0.1) for p in in_hook.parameters()}

    def step_now(p):
        per_param[p].step()
        per_param[p].zero_grad()

    for p in in_hook.module.parameters():
        p.register_post_accumulate_grad_hook(step_now)
    for x in batches:
        in_hook(x).square().sum().backward()
    fused = DDP(copy.deepcopy(base))
    # steps after the all-reduce
    fused._register_fused_optim(torch.optim.SGD, lr=0.1)
    for x in batches:
        fused.zero_grad()
        fused(x).square().sum().backward()
    want = usual.module.weight.detach()
    return {name: {"same as rank 0": same_as_rank0(m.module.weight),
                   "same as step()": torch.equal(m.module.weight.detach(), want)}
            for name, m in (("step()", usual), ("hook step", in_hook),
                            ("_register_fused_optim", fused))}


def fsdp_part(ctx) -> dict:
    torch.manual_seed(0)
    base = nn.Linear(4, 4)
    x = torch.randn(3, 4) * (1 + ctx.rank)
    local = copy.deepcopy(base)
    local(x).square().sum().backward()
    rows = slice(2 * ctx.rank, 2 * ctx.rank + 2)  # this rank's shard of dim 0
    model = copy.deepcopy(base)
    fully_shard(model)
    seen, tensor_hook_calls = [], []
    model.weight.register_post_accumulate_grad_hook(
        lambda p: seen.append(p.grad.to_local().clone()))
    model.weight.register_hook(lambda g: tensor_hook_calls.append(1))
    model(x).square().sum().backward()
    return {"hook calls": len(seen), "tensor hook calls": len(tensor_hook_calls),
            "hook saw the reduced shard": torch.allclose(
                seen[0], average(local.weight.grad, ctx.world_size)[rows]),
            "hook saw the local grad": torch.allclose(seen[0],
                                                      local.weight.grad[rows])}


def buffers_part(ctx) -> dict:
    out = {}
    for broadcast in (True, False):
        torch.manual_seed(0)
        net = nn.Sequential(FakeQuantize(observer=MovingAverageMinMaxObserver),
                            nn.Linear(4, 2))
        ddp = DDP(net, broadcast_buffers=broadcast)
        starts = []                      # the observer's max when forward starts
        net[0].register_forward_pre_hook(
            lambda m, args: starts.append(m.activation_post_process.max_val.clone()))
        for _ in range(3):
            ddp(torch.randn(8, 4) * (1 + 9 * ctx.rank)).sum().backward()
        out[f"broadcast_buffers={broadcast}"] = {
            "starts from rank 0's state": same_as_rank0(torch.stack(starts[1:])),
            "scale same as rank 0": same_as_rank0(net[0].scale)}
    return out


def penalty_step(reshard_after_forward: bool, reshard_after_backward: bool) -> dict:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))
    fully_shard(model, reshard_after_forward=reshard_after_forward)
    model.set_reshard_after_backward(reshard_after_backward)
    group = model._get_fsdp_state()._fsdp_param_group
    phase, post_backward_runs = ["forward"], []
    plain_post_backward = FSDPParamGroup.post_backward

    def counted(self, *args):                     # notes which pass ran it
        post_backward_runs.append(phase[0])
        return plain_post_backward(self, *args)

    FSDPParamGroup.post_backward = counted
    try:
        x = torch.randn(4, 2, requires_grad=True)
        out = model(x)
        phase[0] = "autograd.grad"
        (g,) = torch.autograd.grad(out.sum(), x, create_graph=True)  # this step runs
        result = {"grad w.r.t. the input": "ok",
                  "resharded after autograd.grad": group.is_sharded}
        penalty = ((g.norm(dim=1) - 1) ** 2).mean()
        phase[0] = "backward"
        try:
            (out.mean() + penalty).backward()                     # the usual recipe
            result["penalty backward"] = "ok"
        except RuntimeError as err:
            result["penalty backward"] = f"RuntimeError: {str(err)[:300]}"
    finally:
        FSDPParamGroup.post_backward = plain_post_backward
    result["post_backward ran in"] = post_backward_runs
    result["params with a .grad"] = sum(p.grad is not None for p in model.parameters())
    return result


def double_part(ctx) -> dict:
    return {f"forward={fwd}, backward={bwd}": penalty_step(fwd, bwd)
            for fwd, bwd in ((True, True), (False, True), (True, False))}

if __name__ == "__main__":
    ctx = init_distributed(timeout_s=60)
    report({"order": order_part(ctx)})
    report({"step": step_part(ctx)})
    report({"fsdp": fsdp_part(ctx)})
    report({"buffers": buffers_part(ctx)})
    report({"double": double_part(ctx)})
