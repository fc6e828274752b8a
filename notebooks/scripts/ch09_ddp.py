"""Q42 and Q44: what DistributedDataParallel does, on real processes.

    torchrun --standalone --nproc_per_node=2 notebooks/scripts/ch09_ddp.py

(The notebook runs this file's ``run`` and ch09_sharding.py's in one job, ch09_jobs.py.)

ddp_basics (Q42): every rank builds the toy MLP from a *different* seed, wraps it in DDP
(which, with the default ``init_sync=True``, broadcasts rank 0's parameters), and trains
three steps on its own batches while autogradviz.record_comm records each bucket's
all-reduce and the backward Nodes. Rank 0 also computes the single-process reference:
rank 0's initial weights, the batches of all ranks concatenated. Extra models answer
follow-ups: ``init_sync=False``, the first backward's buckets under ``static_graph`` and
``find_unused_parameters``, uneven per-rank batch sizes, gradient_as_bucket_view,
BatchNorm buffers, the state dict's keys, and the default bucket sizes.

accumulation (Q44): each optimizer step uses K micro-batches of ROWS rows per rank, each
loss divided by K. Three DDP models run the same two optimizer steps while record_comm
counts their all-reduces: "no_sync" (the first K-1 forward+backward passes inside
``ddp.no_sync()``), "every" (no no_sync at all) and "backward_only" (forward outside
``no_sync()``, only backward inside: a common slip). Rank 0 also computes the
single-process gradient of the big batch (all K micro-batches of every rank at once).

unused_parameter_error / unused_parameter_fixed (Q42): a model whose forward skips a
Linear raises at the second iteration, and runs with find_unused_parameters=True or
static_graph=True.
"""
from __future__ import annotations

import contextlib
import warnings

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import autogradviz as agv
from autogradviz import init_distributed, report
from ch09_common import batch, tiny_mlp

STEPS, LR = 3, 0.1
BUCKET_CAP_BYTES = 600  # tiny on purpose: the 1,936-byte model needs several buckets
UNEVEN_ROWS = (2, 6)  # rows per rank for the uneven-batch follow-up (2 ranks)
K, ROWS, ACC_STEPS = 4, 2, 2  # accumulation: micro-batches per step, their rows, steps


# --- Q42: DDP's broadcast, buckets and gradients --------------------------------
def flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def gathered(t: torch.Tensor) -> list[torch.Tensor]:
    """``t`` from every rank, in rank order."""
    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t)
    return out


def reference_grads(seed: int, inputs, targets, device) -> torch.Tensor:
    """The flat gradient of one process on ``inputs``: no DDP, no communication."""
    model = tiny_mlp(seed, device)
    F.mse_loss(model(inputs), targets).backward()
    return flat(p.grad for p in model.parameters())


def ddp_basics(ctx) -> dict:
    dev, rank, world = ctx.device, ctx.rank, ctx.world_size
    out: dict = {"backend": ctx.backend}

    model = tiny_mlp(seed=rank, device=dev)  # a different init on every rank
    before = gathered(flat(model.parameters()))
    ddp = DDP(model, bucket_cap_mb=BUCKET_CAP_BYTES / 2**20)
    after = gathered(flat(model.parameters()))
    out["init_differed"] = not torch.equal(before[0], before[1])
    out["after_ddp_equal_rank0_init"] = all(torch.equal(a, before[0]) for a in after)

    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    losses, grads = [], []
    with agv.record_comm(ddp, optimizer=opt) as comm:
        for step in range(STEPS):
            x, y = batch(rank, step, device=dev)
            loss = F.mse_loss(ddp(x), y)
            loss.backward()
            losses.append(loss.item())
            grads.append(flat(p.grad for p in ddp.parameters()))
            opt.step()
            opt.zero_grad()
    out["comm"] = comm.to_dict()
    out["losses"] = losses
    out["grads_step0"] = grads[0]
    out["grads_equal_across_ranks"] = all(
        torch.equal(g, gathered(g)[0]) for g in grads)
    out["params_equal_across_ranks"] = torch.equal(
        flat(ddp.parameters()), gathered(flat(ddp.parameters()))[0])

    if rank == 0:  # single-process references for step 0, from rank 0's initial weights
        xs, ys = zip(*(batch(r, 0, device=dev) for r in range(world)))
        out["ref_concatenated"] = reference_grads(0, torch.cat(xs), torch.cat(ys), dev)
        out["ref_rank0_alone"] = reference_grads(0, xs[0], ys[0], dev)

    # Follow-up: init_sync=False skips the broadcast; each rank keeps its own weights.
    unsynced = DDP(tiny_mlp(seed=rank, device=dev), init_sync=False)
    mine = flat(unsynced.parameters())
    out["init_sync_false_equal_across_ranks"] = all(
        torch.equal(t, mine) for t in gathered(mine))
    out["state_dict_keys"] = list(unsynced.state_dict())[:2]

    # The buckets of three backwards under each option: when (and whether) the
    # Reducer rebuilds them (reducer.hpp, should_rebuild_buckets).
    layouts = {}
    for option in ("default", "static_graph", "find_unused_parameters"):
        kwargs = {} if option == "default" else {option: True}
        probe = DDP(tiny_mlp(0, dev), bucket_cap_mb=BUCKET_CAP_BYTES / 2**20, **kwargs)
        with agv.record_comm(probe) as probe_comm:
            for step in range(3):
                x, y = batch(rank, step, device=dev)
                F.mse_loss(probe(x), y).backward()
        layouts[option] = [[list(c.params) for c in probe_comm.calls_of(m)]
                           for m in (1, 2, 3)]
    out["bucket_layouts"] = layouts

    # Follow-up: uneven batches. DDP averages per-rank gradients with equal weights.
    uneven = DDP(tiny_mlp(0, dev))
    rows = UNEVEN_ROWS[rank % len(UNEVEN_ROWS)]
    x, y = batch(rank, 0, rows=rows, device=dev)
    F.mse_loss(uneven(x), y).backward()
    out["uneven_grads"] = flat(p.grad for p in uneven.parameters())
    # the fix: sum the loss, divide by the global count, multiply by the world size
    fixed = DDP(tiny_mlp(0, dev))
    global_count = sum(UNEVEN_ROWS[r % len(UNEVEN_ROWS)] for r in range(world))
    out_features = y.shape[1]
    loss = F.mse_loss(fixed(x), y, reduction="sum") / (global_count * out_features)
    (loss * world).backward()
    out["uneven_fixed_grads"] = flat(p.grad for p in fixed.parameters())
    if rank == 0:
        xs, ys = zip(*(batch(r, 0, rows=UNEVEN_ROWS[r % len(UNEVEN_ROWS)], device=dev)
                       for r in range(world)))
        out["uneven_ref_global_mean"] = reference_grads(
            0, torch.cat(xs), torch.cat(ys), dev)
        out["uneven_ref_mean_of_means"] = sum(
            reference_grads(0, xi, yi, dev) for xi, yi in zip(xs, ys)) / world

    # Follow-up: gradient_as_bucket_view=True makes each .grad a view into its bucket.
    for as_view in (False, True):
        m = DDP(tiny_mlp(0, dev), gradient_as_bucket_view=as_view)
        x, y = batch(rank, 0, device=dev)
        for _ in range(2):  # the second backward runs with the rebuilt buckets
            F.mse_loss(m(x), y).backward()
        storages = {p.grad.untyped_storage().data_ptr() for p in m.parameters()}
        out[f"grad_storages_as_view_{as_view}"] = len(storages)

    # Follow-up: buffers. BatchNorm's running statistics come from each rank's own
    # batch; DDP syncs buffers (from rank 0) at construction and before each forward.
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16))
    net[1].running_mean.fill_(float(rank))  # a different buffer on every rank
    bn = DDP(net.to(dev))
    built = gathered(bn.module[1].running_mean.detach().clone())
    out["bn_buffers_equal_after_construction"] = all(
        torch.equal(b, built[0]) for b in built)
    out["bn_buffer_after_construction"] = float(built[rank][0])  # this rank's
    bn(batch(rank, 0, device=dev)[0])
    running = gathered(bn.module[1].running_mean.detach().clone())
    out["bn_running_means_differ"] = not torch.equal(running[0], running[1])
    out["forward_sync_buffers_default"] = bn.forward_sync_buffers
    # ... and before each forward: rank 1 overwrites its buffer, and a pre-hook on the
    # BatchNorm reads what the forward sees (DDP syncs before calling the module)
    seen = []
    hook = bn.module[1].register_forward_pre_hook(
        lambda mod, args: seen.append(float(mod.running_mean[0])))
    rank0_before = []
    for step in range(2):
        rank0_before.append(float(gathered(
            bn.module[1].running_mean.detach().clone())[0][0]))
        if rank == 1:
            bn.module[1].running_mean.fill_(99.0)
        bn(batch(rank, step, device=dev)[0])
    hook.remove()
    out["bn_forward_seen"] = seen
    out["bn_rank0_before_forward"] = rank0_before
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        DDP(tiny_mlp(0, dev), broadcast_buffers=True)
    out["broadcast_buffers_warnings"] = [
        f"{w.category.__name__}: {w.message}" for w in caught
        if "broadcast_buffers" in str(w.message)]

    # Defaults: a DDP built without bucket_cap_mb, on eight 256 x 256 layers (2.1 MB of
    # gradients), so that the 1 MiB first bucket shows up when the buckets are rebuilt.
    wide = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)]).to(dev)
    default = DDP(wide)
    out["default_bucket_bytes"] = default._bucket_config.bucket_bytes_cap
    out["default_first_bucket_bytes"] = dist._DEFAULT_FIRST_BUCKET_BYTES
    with agv.record_comm(default) as wide_comm:
        for _ in range(2):
            default(torch.ones(2, 256, device=dev)).sum().backward()
    out["default_buckets"] = [[c.nbytes for c in wide_comm.calls_of(m)] for m in (1, 2)]
    return out


# --- Q44: accumulation ---------------------------------------------------------
def micro_batches(rank: int, step: int, device) -> list:
    """Rank ``rank``'s K (inputs, targets) micro-batches of optimizer step ``step``."""
    return [batch(rank, K * step + i, rows=ROWS, device=device) for i in range(K)]


def train_accumulating(mode: str, rank: int, device) -> dict:
    ddp = DDP(tiny_mlp(0, device), bucket_cap_mb=BUCKET_CAP_BYTES / 2**20)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    grads = []
    with agv.record_comm(ddp, optimizer=opt) as comm:
        for step in range(ACC_STEPS):
            for i, (x, y) in enumerate(micro_batches(rank, step, device)):
                sync = i == K - 1 or mode == "every"
                context = contextlib.nullcontext() if sync else ddp.no_sync()
                if mode == "backward_only":
                    loss = F.mse_loss(ddp(x), y) / K  # the slip: forward outside
                    with context:
                        loss.backward()
                else:
                    with context:
                        (F.mse_loss(ddp(x), y) / K).backward()
            grads.append(flat(p.grad for p in ddp.parameters()))
            opt.step()
            opt.zero_grad()
    return {"comm": comm.to_dict(), "grads": grads}


def accumulation(ctx) -> dict:
    dev, rank, world = ctx.device, ctx.rank, ctx.world_size
    out: dict = {}
    for mode in ("no_sync", "every", "backward_only"):
        out[mode] = train_accumulating(mode, rank, dev)
    first = out["no_sync"]["grads"][0]
    other = [torch.empty_like(first) for _ in range(world)]
    dist.all_gather(other, first)
    out["no_sync_equal_across_ranks"] = all(torch.equal(o, first) for o in other)
    if rank == 0:  # one process, one big batch: every micro-batch of every rank
        pairs = [p for r in range(world) for p in micro_batches(r, 0, dev)]
        model = tiny_mlp(0, dev)
        x = torch.cat([x for x, _ in pairs])
        y = torch.cat([y for _, y in pairs])
        F.mse_loss(model(x), y).backward()
        out["big_batch_grads"] = flat(p.grad for p in model.parameters())
        out["big_batch_rows"] = x.shape[0]
    return out


class SkipsALayer(torch.nn.Module):
    """The toy MLP plus a Linear that forward never uses."""

    def __init__(self, device) -> None:
        super().__init__()
        self.used = tiny_mlp(0, device)
        self.skipped = torch.nn.Linear(2, 2).to(device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


def unused_parameter_error(ctx) -> str:
    """Q42: a parameter the forward skips never gets a gradient, so its bucket never
    completes; DDP raises at the next forward (on every rank alike, so no hang)."""
    ddp = DDP(SkipsALayer(ctx.device))
    x, y = batch(ctx.rank, 0, device=ctx.device)
    try:
        for _ in range(2):
            F.mse_loss(ddp(x), y).backward()
    except RuntimeError as err:
        return str(err).splitlines()[0]
    return "no error"


def unused_parameter_fixed(ctx) -> dict:
    """Q42: the same two iterations with either option that handles unused
    parameters: "no error", or the error's first line."""
    results = {}
    for option in ("find_unused_parameters", "static_graph"):
        ddp = DDP(SkipsALayer(ctx.device), **{option: True})
        x, y = batch(ctx.rank, 0, device=ctx.device)
        try:
            for _ in range(2):
                F.mse_loss(ddp(x), y).backward()
            results[option] = "no error"
        except RuntimeError as err:
            results[option] = str(err).splitlines()[0]
    return results


def run(ctx) -> dict:
    """Both parts, for ch09_jobs.py or this file's own main."""
    return {"basics": ddp_basics(ctx), "accumulation": accumulation(ctx),
            "unused_error": unused_parameter_error(ctx),
            "unused_fixed": unused_parameter_fixed(ctx)}


def main() -> None:
    report(run(init_distributed()))


if __name__ == "__main__":
    main()
