"""Chapter 10's model-parallel demos in one 4-process job: a job start costs seconds.

Run: ``torchrun --standalone --nproc_per_node=4 ch10_model_parallel.py`` (gloo on CPU,
NCCL when each rank has a GPU), or ``autogradviz.torchrun`` from Chapter 10.

The four ranks form a (dp=2, tp=2) device mesh. Each rank reports, under its own key:

* "tp": tensor parallelism in its tensor-parallel pair (``ch10_tensor_parallel``);
* "pipeline": GPipe and 1F1B with one stage per rank (``ch10_pipeline``);
* "mesh": its coordinates and groups in the mesh (``ch10_mesh``).
"""
from __future__ import annotations

from torch.distributed.device_mesh import init_device_mesh

import ch10_mesh
import ch10_pipeline
import ch10_tensor_parallel
from autogradviz import init_distributed, report


def main() -> None:
    ctx = init_distributed(timeout_s=60)
    if ctx.world_size != 4:
        raise SystemExit(f"run on 4 processes (--nproc_per_node=4), "
                         f"not {ctx.world_size}")
    mesh = init_device_mesh(ctx.device.type, (2, 2), mesh_dim_names=("dp", "tp"))
    report({"tp": ch10_tensor_parallel.run(ctx, mesh["tp"]),
            "pipeline": ch10_pipeline.run(ctx),
            "mesh": ch10_mesh.run(ctx, mesh)})


if __name__ == "__main__":
    main()
