"""Each rank shards a small MLP with FSDP2 and tracks one Adam training step.

Launched by tests/test_memory_dtensor.py through autogradviz.torchrun (2 ranks, gloo).
After ``fully_shard`` the parameters, their gradients and Adam's moments are DTensors:
each rank holds only its rows (``to_local()``). Every rank reports what
``track_memory`` counted per category next to what torch says it holds: the bytes of
``to_local()`` of each DTensor (plain tensors, such as Adam's ``step``, as they are),
and the bytes of the unsharded tensors for comparison.
"""
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import autogradviz as agv
from autogradviz import init_distributed, report

ctx = init_distributed(timeout_s=60)
torch.manual_seed(0)
# Every first dimension (16, 16, 4, 4) is even, so Shard(0) over 2 ranks needs no padding.
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
full_param_bytes = sum(p.nbytes for p in model.parameters())
fully_shard(model[0])
fully_shard(model[2])
fully_shard(model)
opt = torch.optim.Adam(model.parameters(), lr=0.01)

gen = torch.Generator().manual_seed(100 + ctx.rank)
x, y = torch.randn(4, 8, generator=gen), torch.randn(4, 4, generator=gen)
with agv.track_memory(model, opt) as mem:
    F.mse_loss(model(x), y).backward()
    opt.step()


def held_bytes(tensors) -> int:
    """Bytes this rank holds: a DTensor's local shard, a plain tensor whole."""
    return sum((t.to_local() if isinstance(t, DTensor) else t).nbytes for t in tensors)


params = list(model.parameters())
state = [t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
report({
    "all_dtensor": all(isinstance(t, DTensor) for t in params + [p.grad for p in params]),
    "full_param_bytes": full_param_bytes,
    "held": {"parameter": held_bytes(params),
             "gradient": held_bytes(p.grad for p in params),
             "optimizer_state": held_bytes(state)},
    "tracked_end": mem.current_by_category,
    "tracked_max": mem.max_by_category,
})
