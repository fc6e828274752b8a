"""A 2-D device mesh on 4 ranks: which ranks share each data- and tensor-parallel group.

Run alone: ``torchrun --standalone --nproc_per_node=4 ch10_mesh.py`` (gloo on CPU, NCCL
when each rank has a GPU). Chapter 10 runs ``run()`` from ``ch10_model_parallel.py``.

``init_device_mesh(device, (2, 2), mesh_dim_names=("dp", "tp"))`` lays the ranks out
row-major, tp innermost, so ranks 0 and 1 form a tensor-parallel pair as the GPUs of one
node would. Each rank reports its coordinates and the ranks of its groups, and proves
them by summing its rank over each group.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from autogradviz import init_distributed, report


def run(ctx, mesh) -> dict:
    """This rank's place in ``mesh`` and the members of its group along each
    dimension."""
    out = {"coordinate": mesh.get_coordinate(), "mesh": mesh.mesh.tolist()}
    for dim in mesh.mesh_dim_names:
        group = mesh.get_group(dim)
        total = torch.tensor([float(ctx.rank)], device=ctx.device)
        dist.all_reduce(total, group=group)  # sums the ranks of this group only
        out[dim] = {"ranks": dist.get_process_group_ranks(group),
                    "local_rank": mesh.get_local_rank(dim),
                    "sum_of_ranks": total.item()}
    return out


def start_2x2():
    """Join the 4-process job and build its (dp=2, tp=2) mesh: (context, mesh)."""
    ctx = init_distributed(timeout_s=60)
    if ctx.world_size != 4:
        raise SystemExit(f"run on 4 processes (--nproc_per_node=4), "
                         f"not {ctx.world_size}")
    return ctx, init_device_mesh(ctx.device.type, (2, 2), mesh_dim_names=("dp", "tp"))


def main() -> None:
    ctx, mesh = start_2x2()
    report(run(ctx, mesh))


if __name__ == "__main__":
    main()
