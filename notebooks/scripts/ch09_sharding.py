"""Q45 and Q46: sharding the training state, against DDP.

    torchrun --standalone --nproc_per_node=2 notebooks/scripts/ch09_sharding.py

(The notebook runs this file's ``run`` and ch09_ddp.py's in one job, ch09_jobs.py.)

zero_stage1 (Q45): two identical DDP replicas train on the same per-rank batches, one
with a full Adam on every rank, one with ZeroRedundancyOptimizer(Adam), which gives each
rank the Adam state of only some parameters (whole tensors, packed greedily, largest
first), steps those, and broadcasts the updated parameters to the other ranks.
Reports each rank's optimizer-state bytes, measured with autogradviz.track_memory, and
the weights after three steps.

fsdp2 (Q46): each Linear of the toy MLP is its own FSDP unit, and the root wraps them.
Reports how a parameter is sharded (DTensor, Shard(0), the local rows) and that
full_tensor() rebuilds it; every collective of one training step, in order, with its
dtype and the bytes FSDP holds gathered at that moment; the collectives of gradient
clipping and of Adam's step (CommDebugMode); the weights after three Adam steps next to
DDP's; each rank's bytes of parameters, gradients and optimizer state, measured with
autogradviz.track_memory and counted from the local shards; what reshard_after_forward,
a root with parameters of its own, a single unit for the whole model, gradient
accumulation over three micro-steps (sync in the last only, with and without keeping
the weights gathered), uneven rows, shard_placement_fn, a method other than forward
and a MixedPrecisionPolicy change; and a model built on the meta device,
sharded, then materialised with to_empty() and initialised two ways (a seeded
reset_parameters() on the shards, and the full init sliced with distribute_tensor);
and, given a folder as its argument, a distributed checkpoint of the trained model and
Adam state (dcp.save), which ch09_ring.py loads on 4 ranks.
"""
from __future__ import annotations

import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.fsdp import (MixedPrecisionPolicy, fully_shard,
                                    register_fsdp_forward_method)
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor, Shard, distribute_tensor
from torch.distributed.tensor.debug import CommDebugMode
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils._python_dispatch import TorchDispatchMode

import autogradviz as agv
from autogradviz import init_distributed, report
from ch09_common import batch, tiny_mlp

STEPS, LR = 3, 0.01
LAYERS = (0, 2, 4)  # the Linear modules of tiny_mlp
MEMORY = ("parameter", "gradient", "optimizer_state")  # track_memory's categories


def state_tensors(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every tensor in an optimizer's per-parameter state."""
    return [t for s in opt.state.values() for t in s.values() if torch.is_tensor(t)]


def local_bytes(tensors) -> int:
    """Bytes this rank holds for ``tensors`` (a DTensor counts its local shard only)."""
    total = 0
    for t in tensors:
        if t is None:
            continue
        t = t.to_local() if isinstance(t, DTensor) else t
        total += t.numel() * t.element_size()
    return total


# --- Q45: ZeRO stage 1 ----------------------------------------------------------
class BroadcastBytes(TorchDispatchMode):
    """Bytes of every tensor a ``c10d.broadcast_`` sends or receives, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.nbytes: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "c10d" and func.__name__.startswith("broadcast_"):
            self.nbytes.append(sum(t.numel() * t.element_size() for t in args[0]))
        return func(*args, **(kwargs or {}))


def zero_stage1(ctx) -> dict:
    dev, rank = ctx.device, ctx.rank
    plain, sharded = DDP(tiny_mlp(0, dev)), DDP(tiny_mlp(0, dev))
    names = {p: n for n, p in sharded.module.named_parameters()}
    adam = torch.optim.Adam(plain.parameters(), lr=LR)
    zero = ZeroRedundancyOptimizer(sharded.parameters(),
                                   optimizer_class=torch.optim.Adam, lr=LR)
    mine = [p for group in zero.optim.param_groups for p in group["params"]]

    memory, full_grads, step_comm, broadcast = {}, None, {}, []
    for step in range(STEPS):
        x, y = batch(rank, step, device=dev)
        for label, model, opt in (("adam", plain, adam), ("zero", sharded, zero)):
            if step > 0:
                F.mse_loss(model(x), y).backward()
                with CommDebugMode() as comm, BroadcastBytes() as sent:
                    opt.step()  # the collectives of the step itself
                if step == 1:
                    step_comm[label] = {str(k): v for k, v in
                                        comm.get_comm_counts().items()}
                    broadcast += sent.nbytes
                opt.zero_grad()
                continue
            # ZeroRedundancyOptimizer keeps its state in the local optimizer it wraps
            # (`zero.optim`); its own `.state` stays empty, so that is what we watch.
            with agv.track_memory(model, zero.optim if opt is zero else opt) as mem:
                F.mse_loss(model(x), y).backward()
                opt.step()
            memory[label] = mem.max_by_category["optimizer_state"]
            if opt is zero:
                full_grads = all(p.grad is not None for p in model.parameters())
            opt.zero_grad()

    with torch.no_grad():
        diff = max(float((a - b).abs().max())
                   for a, b in zip(plain.parameters(), sharded.parameters()))
    return {
        "owned": [names[p] for p in mine],  # whose Adam state this rank keeps
        "owned_numel": sum(p.numel() for p in mine),
        "total_numel": sum(p.numel() for p in plain.parameters()),
        "tracked_state_bytes": memory,
        "counted_state_bytes": {"adam": local_bytes(state_tensors(adam)),
                                "zero": local_bytes(state_tensors(zero.optim))},
        "zero_own_state_entries": len(zero.state),
        "full_grads_on_every_rank": full_grads,
        "max_weight_diff": diff,
        "step_collectives": step_comm,  # CommDebugMode around opt.step(), step 1
        "broadcast_bytes": broadcast,  # each broadcast of those steps, in bytes
        "param_count": len(list(plain.parameters())),
    }


# --- Q46: FSDP2 -----------------------------------------------------------------
def shard(model: nn.Module, **kwargs) -> nn.Module:
    """One FSDP unit per Linear, then the root (which owns no parameter of its own)."""
    for i in LAYERS:
        fully_shard(model[i], **kwargs)
    return fully_shard(model, **kwargs)


def gathered_bytes(model: nn.Module) -> int:
    """Bytes of the full weights FSDP holds gathered right now, over the Linear units.

    FSDP2 all-gathers into buffers it keeps per parameter and frees them by resizing
    their storage to 0 bytes; this reads those buffers (private attributes of torch
    2.13's FSDP2: ``FSDPParam.all_gather_outputs``)."""
    total = 0
    for i in LAYERS:
        group = model[i]._get_fsdp_state()._fsdp_param_group
        total += sum(t.untyped_storage().nbytes() for p in group.fsdp_params
                     for t in p.all_gather_outputs)
    return total


class CollectiveLog(TorchDispatchMode):
    """Every collective FSDP2 itself issues (the ``c10d`` ops), in order: its name, the
    number of elements of the full (unsharded) tensor it moves, the phase we are in,
    its dtype and, with ``model``, the bytes gathered at that moment. DTensor's own
    collectives (``_c10d_functional`` ops, e.g. in ``full_tensor()``) are not logged:
    CommDebugMode counts those."""

    def __init__(self, model: nn.Module | None = None) -> None:
        super().__init__()
        self.calls, self.phase, self.model, self.held = [], "forward", model, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "c10d":
            # all-gather: (output = full, input = shard); reduce-scatter: (output =
            # shard, input = full); the full tensor is the larger of the two
            full = max(args[0].numel(), args[1].numel())
            self.calls.append((func.__name__.split(".")[0], full, self.phase,
                               str(args[0].dtype)))
            if self.model is not None:  # the all-gather's output is allocated by now
                self.held.append(gathered_bytes(self.model))
        return func(*args, **(kwargs or {}))


def gathered(model: nn.Module) -> list[bool]:
    """Per Linear: does the module hold the full (all-gathered) weight right now?"""
    return [not isinstance(model[i].weight, DTensor) for i in LAYERS]


def logged_forward_backward(model: nn.Module, x, y, held: bool = True) -> dict:
    """One forward and backward under `CollectiveLog`: the collectives; which Linear
    modules hold their gathered weight between the two; and (``held``) the bytes FSDP
    keeps gathered at each collective, after forward and after backward."""
    with CollectiveLog(model if held else None) as log:
        loss = F.mse_loss(model(x), y)
        out = {"collectives": log.calls, "gathered_after_forward": gathered(model)}
        if held:
            out["bytes_after_forward"] = gathered_bytes(model)
        log.phase = "backward"
        loss.backward()
    if held:
        out["bytes_at_collectives"] = log.held
        out["bytes_after_backward"] = gathered_bytes(model)
    return out


class Scorer(nn.Linear):
    """A Linear with a method other than forward that uses the weight."""

    def score(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias).sum(1)


def state_bytes(model: nn.Module, opt: torch.optim.Optimizer) -> dict:
    return {"parameters": local_bytes(model.parameters()),
            "gradients": local_bytes(p.grad for p in model.parameters()),
            "optimizer state": local_bytes(state_tensors(opt))}


def build_big() -> nn.Sequential:
    return nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024))


def shard_big(dev) -> nn.Sequential:
    """The big model built on meta, sharded (one unit per Linear), then allocated."""
    with torch.device("meta"):
        big = build_big()
    for layer in (big[0], big[2]):
        fully_shard(layer)
    fully_shard(big)
    meta_device = str(big[0].weight.to_local().device)
    big.to_empty(device=dev)  # allocates the local shards only, uninitialised
    return big, meta_device


def meta_init(dev, rank: int) -> dict:
    """Two ways to initialise a meta-built, sharded model, against the unsharded init.

    naive: every rank seeds alike and calls reset_parameters() on its DTensor shards.
    On a CPU mesh DTensor has no offset-based RNG tracker, so each rank draws the same
    numbers into its own rows. recipe: draw each layer's full tensors on the CPU with
    the seed every rank shares (one layer at a time), and keep this rank's rows with
    distribute_tensor, which slices the full tensor into the parameter's placements."""
    out: dict = {}
    torch.manual_seed(0)
    reference = build_big()  # the unsharded init, for comparison only
    big, out["meta_device"] = shard_big(dev)
    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for layer in (big[0], big[2]):
            layer.reset_parameters()
    out["naive_warnings"] = sorted({str(w.message) for w in caught})
    out["naive"] = compare_init(big, reference, rank)

    fixed, _ = shard_big(dev)
    torch.manual_seed(0)  # the same seed on every rank: the same full draws
    with torch.no_grad():
        for layer in (fixed[0], fixed[2]):
            full = nn.Linear(1024, 1024)  # one layer's full init, on the CPU
            for name, p in layer.named_parameters():
                local = distribute_tensor(getattr(full, name).to(dev), p.device_mesh,
                                          p.placements, src_data_rank=None)
                p.to_local().copy_(local.to_local())
    out["recipe"] = compare_init(fixed, reference, rank)
    out["materialised_local_shape"] = list(fixed[0].weight.to_local().shape)
    out["materialised_device"] = str(fixed[0].weight.to_local().device)
    out["materialised_bytes"] = local_bytes(fixed.parameters())
    out["full_bytes"] = sum(p.numel() * p.element_size() for p in fixed.parameters())
    return out


def compare_init(model: nn.Module, reference: nn.Module, rank: int) -> dict:
    """Are the ranks' shards of weight 0 equal, and is the whole model the reference?"""
    mine = model[0].weight.to_local()
    other = torch.empty_like(mine)
    peer = 1 - rank  # two ranks: exchange shards with the other one
    ops = [torch.distributed.P2POp(torch.distributed.isend, mine.contiguous(), peer),
           torch.distributed.P2POp(torch.distributed.irecv, other, peer)]
    for work in torch.distributed.batch_isend_irecv(ops):
        work.wait()
    with torch.no_grad():
        equal = all(torch.equal(p.full_tensor().cpu(), q)
                    for p, q in zip(model.parameters(), reference.parameters()))
    return {"rank_shards_identical": bool(torch.equal(mine, other)),
            "equals_unsharded_init": equal}


def fsdp2(ctx) -> dict:
    dev, rank, world = ctx.device, ctx.rank, ctx.world_size
    out: dict = {}

    # how a parameter is sharded
    reference = tiny_mlp(0, dev)
    model = shard(tiny_mlp(0, dev))
    w, w_ref = model[0].weight, reference[0].weight
    rows = w_ref.shape[0] // world
    out["weight_type"] = type(w).__name__
    out["placements"] = str(w.placements)
    out["global_shape"] = list(w.shape)
    out["local_shape"] = list(w.to_local().shape)
    out["local_is_my_rows"] = bool(torch.equal(
        w.to_local(), w_ref[rank * rows:(rank + 1) * rows]))
    out["full_tensor_equal"] = all(torch.equal(p.full_tensor(), q) for p, q in
                                   zip(model.parameters(), reference.parameters()))

    # train next to DDP; in the first step, log the collectives and track memory
    ddp = DDP(reference)
    opt_f = torch.optim.Adam(model.parameters(), lr=LR)
    opt_d = torch.optim.Adam(ddp.parameters(), lr=LR)
    no_clip = float("inf")  # clip_grad_norm_ then only measures: the factor is 1
    for step in range(STEPS):
        x, y = batch(rank, step, device=dev)
        if step > 0:
            for net, opt in ((model, opt_f), (ddp, opt_d)):
                F.mse_loss(net(x), y).backward()
                opt.step()
                opt.zero_grad()
            continue
        with agv.track_memory(model, opt_f) as mem_f:
            with CommDebugMode() as step_comm_fb:  # FSDP's c10d collectives, counted
                out.update(logged_forward_backward(model, x, y))
            out["fb_comm_counts"] = {str(k): v for k, v in
                                     step_comm_fb.get_comm_counts().items()}
            g = model[0].weight.grad
            out["grad_type"] = f"{type(g).__name__} {g.placements}"
            out["grad_local_shape"] = list(g.to_local().shape)
            with CommDebugMode() as clip_comm:  # the norm needs every rank's shards
                norm_f = torch.nn.utils.clip_grad_norm_(model.parameters(), no_clip)
            with CommDebugMode() as step_comm:  # the optimizer works on shards alone
                opt_f.step()
        with agv.track_memory(ddp, opt_d) as mem_d:
            F.mse_loss(ddp(x), y).backward()
            norm_d = torch.nn.utils.clip_grad_norm_(ddp.parameters(), no_clip)
            opt_d.step()
        out["clip_collectives"] = {str(k): v for k, v in
                                   clip_comm.get_comm_counts().items()}
        out["optimizer_step_collectives"] = step_comm.get_total_counts()
        out["clip_norm_type"] = type(norm_f).__name__
        out["clip_norm_equals_ddp"] = bool(torch.allclose(
            norm_f.full_tensor(), norm_d, rtol=1e-6, atol=0))
        # gradients still there, optimizer state just created
        out["bytes"] = {"fsdp2": state_bytes(model, opt_f),
                        "ddp": state_bytes(ddp, opt_d)}
        out["tracked"] = {
            "fsdp2": {k: mem_f.current_by_category[k] for k in MEMORY},
            "ddp": {k: mem_d.current_by_category[k] for k in MEMORY}}
        opt_f.zero_grad()
        opt_d.zero_grad()
    with torch.no_grad():
        out["max_diff_vs_ddp"] = max(
            float((p.full_tensor() - q).abs().max())
            for p, q in zip(model.parameters(), ddp.parameters()))

    # distributed checkpoint: each rank writes its own shards (loaded on 4 ranks by
    # ch09_ring.py); the optimizer state is keyed by parameter name
    if len(sys.argv) > 1:
        model_sd, optim_sd = get_state_dict(model, opt_f)
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=sys.argv[1])
        out["saved_full_weights"] = [p.full_tensor().flatten().tolist()
                                     for p in model.parameters()]
        out["saved_optim_keys"] = sorted(optim_sd["state"])
        out["saved_exp_avg_local_shape"] = list(
            optim_sd["state"]["0.weight"]["exp_avg"].to_local().shape)

    # reshard_after_forward=False: keep the gathered weights until backward
    kept = shard(tiny_mlp(0, dev), reshard_after_forward=False)
    x, y = batch(rank, 0, device=dev)
    out["kept"] = logged_forward_backward(kept, x, y)

    # the root's own parameters stay gathered after forward (the default)
    rooted = tiny_mlp(0, dev)
    fully_shard(rooted[0])
    fully_shard(rooted)  # the root now owns layers 2 and 4 itself
    out["root_gathered_after_forward"] = logged_forward_backward(
        rooted, x, y, held=False)["gathered_after_forward"]

    # one unit for the whole model: gathered from forward to the end of backward, and
    # a single reduce-scatter of every gradient element, issued at the very end
    one = tiny_mlp(0, dev)
    fully_shard(one)
    one_log = logged_forward_backward(one, x, y, held=False)
    out["one_unit"] = {"gathered_after_forward": one_log["gathered_after_forward"],
                       "collectives": [(name, n, phase) for name, n, phase, _
                                       in one_log["collectives"]]}

    # accumulation over 3 micro-steps, syncing only in the last: the reduce-scatter is
    # skipped, the all-gathers are not, unless the weights are kept unsharded
    out["accumulation"] = {}
    for mode in ("default", "kept unsharded"):
        acc = shard(tiny_mlp(0, dev))
        if mode != "default":
            acc.set_reshard_after_forward(False)
        counts = []
        for micro in range(3):
            last = micro == 2
            acc.set_requires_gradient_sync(last)
            if mode != "default":
                acc.set_reshard_after_backward(last)
            with CollectiveLog() as acc_log:
                F.mse_loss(acc(x), y).backward()
            counts.append([sum(op in name for name, *_ in acc_log.calls)
                           for op in ("allgather", "reduce_scatter")])
        out["accumulation"][mode] = counts

    # uneven rows: dim 0 is split like torch.chunk
    odd = nn.Sequential(nn.Linear(8, 5), nn.Linear(5, 1)).to(dev)
    fully_shard(odd)
    out["uneven_local_rows"] = [odd[i].weight.to_local().shape[0] for i in (0, 1)]
    with CollectiveLog() as odd_log:  # the all-gather moves padded shards
        odd(x)
    out["uneven_allgather_numel"] = [n for name, n, _, _ in odd_log.calls
                                     if "allgather" in name]
    out["uneven_numel"] = sum(p.numel() for p in odd.parameters())

    # shard_placement_fn: shard a parameter on another dim (here dim 1 of a weight)
    cols = nn.Linear(8, 16).to(dev)
    fully_shard(cols, shard_placement_fn=lambda p: Shard(p.dim() - 1))
    out["dim1_placements"] = str(cols.weight.placements)
    out["dim1_local_shape"] = list(cols.weight.to_local().shape)

    # a method other than forward runs no FSDP hook: its weight is still a shard
    scorer = Scorer(8, 4).to(dev)
    expected = Scorer(8, 4).to(dev)
    expected.load_state_dict(scorer.state_dict())
    fully_shard(scorer)
    try:
        scorer.score(x)
        out["other_method_error"] = None
    except (RuntimeError, ValueError, NotImplementedError) as err:
        out["other_method_error"] = f"{type(err).__name__}: {err}".splitlines()[0]
    register_fsdp_forward_method(scorer, "score")
    out["registered_method_matches"] = bool(torch.allclose(
        scorer.score(x), expected.score(x), atol=1e-6))

    # a weight tied across two units: FSDP2 refuses it at the first forward
    torch.manual_seed(0)
    tied = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4)).to(dev)
    tied[2].weight = tied[0].weight
    for unit in (tied[0], tied[2], tied):
        fully_shard(unit)
    try:
        tied(torch.ones(2, 4, device=dev))
        out["tied_error"] = None
    except ValueError as err:
        out["tied_error"] = str(err)

    # mixed precision: bf16 all-gather and compute, fp32 sharded parameters and
    # gradients; the reduce-scatter in reduce_dtype (None: in param_dtype)
    out["mp"] = {}
    for reduce_dtype in (torch.float32, None):
        mp = shard(tiny_mlp(0, dev), mp_policy=MixedPrecisionPolicy(
            param_dtype=torch.bfloat16, reduce_dtype=reduce_dtype))
        with CollectiveLog() as mp_log:
            y_mp = mp(x)
            y_mp.float().sum().backward()
        out["mp"][str(reduce_dtype)] = {
            "output": str(y_mp.dtype),
            "sharded param": str(mp[0].weight.dtype),
            "gradient": str(mp[0].weight.grad.dtype),
            "all-gather": sorted({d for n, _, _, d in mp_log.calls
                                  if "allgather" in n}),
            "reduce-scatter": sorted({d for n, _, _, d in mp_log.calls
                                      if "reduce_scatter" in n}),
            "bytes": {op: sum(n * getattr(torch, d.split(".")[1]).itemsize
                              for name, n, _, d in mp_log.calls if op in name)
                      for op in ("allgather", "reduce_scatter")}}

    # meta init: shapes without memory, then only this rank's shard is allocated
    out.update(meta_init(dev, rank))

    # FSDP1 (FullyShardedDataParallel) on a machine without an accelerator
    out["fsdp1_error"] = None  # on GPUs it builds; None then
    if dev.type == "cpu":
        from torch.distributed.fsdp import FullyShardedDataParallel
        try:
            FullyShardedDataParallel(tiny_mlp(0, dev))
        except RuntimeError as err:
            out["fsdp1_error"] = str(err)
    return out


def run(ctx) -> dict:
    """Both parts, for ch09_jobs.py or this file's own main."""
    return {"zero": zero_stage1(ctx), "fsdp": fsdp2(ctx)}


def main() -> None:
    report(run(init_distributed()))


if __name__ == "__main__":
    main()
