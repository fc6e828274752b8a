"""Chapter 10's model-parallel demos in one 4-process job: a job start costs seconds.

Run: ``torchrun --standalone --nproc_per_node=4 ch10_model_parallel.py`` (gloo on CPU,
NCCL when each rank has a GPU), or ``autogradviz.torchrun`` from Chapter 10.

The four ranks form a (dp=2, tp=2) device mesh. Each rank reports, under its own key:

* "tp": tensor parallelism in its tensor-parallel pair (``ch10_tensor_parallel``);
* "pipeline": GPipe and 1F1B with one stage per rank (``ch10_pipeline``);
* "mesh": its coordinates and groups in the mesh (``ch10_mesh``).
"""
from __future__ import annotations


import ch10_mesh
import ch10_pipeline
import ch10_tensor_parallel
from autogradviz import report


def main() -> None:
    ctx, mesh = ch10_mesh.start_2x2()
    report({"tp": ch10_tensor_parallel.run(ctx, mesh["tp"]),
            "pipeline": ch10_pipeline.run(ctx),
            "mesh": ch10_mesh.run(ctx, mesh)})


if __name__ == "__main__":
    main()
