"""DTensors are measured by the shard a rank holds, not by their global size.

A DTensor (FSDP2's parameters, their gradients, Adam's moments of them) is a wrapper
whose own storage has the global size and no data; the bytes live in its local tensor
(``to_local()``), which torch is the oracle for. The fast tests build DTensors in one
process on torch's "fake" process group (world size 2, collectives do nothing); the
slow one runs a real 2-rank gloo job (tests/dist_scripts/fsdp_memory.py) through an
FSDP2 training step.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import autogradviz as agv
from autogradviz.graphs.module_graph import trace_modules
from autogradviz.ops.storage import held_storage

dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("this torch build has no torch.distributed", allow_module_level=True)
from torch.distributed.tensor import DTensor, Shard, init_device_mesh  # noqa: E402

SCRIPT = Path(__file__).resolve().parent / "dist_scripts" / "fsdp_memory.py"
KINDS = ("parameter", "gradient", "optimizer_state")


@pytest.fixture
def mesh():
    """A 1-D mesh of 2 ranks on the fake backend; this process is rank 0."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        yield init_device_mesh("cpu", (2,))
    finally:
        dist.destroy_process_group()


def shard_param(mesh, rows: int = 16, cols: int = 8) -> nn.Parameter:
    """A [rows, cols] float32 parameter of which this rank holds rows // 2 rows."""
    return nn.Parameter(DTensor.from_local(torch.randn(rows // 2, cols), mesh, [Shard(0)]))


def local_bytes(t: torch.Tensor) -> int:
    return (t.to_local() if isinstance(t, DTensor) else t).nbytes


def test_held_storage_of_a_dtensor_is_its_local_shards(mesh):
    w = shard_param(mesh)
    assert tuple(w.shape) == (16, 8) and tuple(w.to_local().shape) == (8, 8)
    # What the bug read: the wrapper's storage has the global size (and no data).
    assert w.untyped_storage().nbytes() == 512
    st = held_storage(w)
    assert st.nbytes() == 256
    assert st.data_ptr() == w.to_local().untyped_storage().data_ptr()


def test_held_storage_keeps_plain_tensors_and_wrappers_of_two():
    from torch.testing._internal.two_tensor import TwoTensor

    x = torch.randn(3, 4)
    assert held_storage(x.t()).data_ptr() == x.untyped_storage().data_ptr()
    both = TwoTensor(torch.randn(3), torch.randn(3))  # two inner tensors: no single owner
    assert held_storage(both).nbytes() == both.untyped_storage().nbytes()
    assert held_storage(torch.randn(2, 2).to_sparse()) is None


def test_track_memory_counts_the_local_shard(mesh):
    w = shard_param(mesh)
    opt = torch.optim.Adam([w], lr=0.1)
    with agv.track_memory(None, opt) as mem:
        (w * w).sum().backward()
        opt.step()
    assert isinstance(w.grad, DTensor)
    state = [t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    held = {"parameter": local_bytes(w), "gradient": local_bytes(w.grad),
            "optimizer_state": sum(local_bytes(t) for t in state)}
    assert held["parameter"] == 256 and held["optimizer_state"] == 2 * 256 + 4  # + step
    for kind in KINDS:
        assert mem.current_by_category[kind] == held[kind], (kind, mem.current_by_category)
        assert mem.max_by_category[kind] == held[kind], (kind, mem.max_by_category)


def test_graph_counts_a_saved_dtensor_once_by_its_shard(mesh):
    w = shard_param(mesh)
    g = agv.trace((w * w).sum())  # mul saves w twice: one storage, the local shard
    assert g.saved_bytes == 256


class _Two(nn.Module):
    def __init__(self, between) -> None:
        super().__init__()
        self.a, self.b, self.between = nn.Identity(), nn.Identity(), between

    def forward(self, x):
        return self.b(self.between(self.a(x)))


@pytest.mark.parametrize("between, kind", [(lambda t: t * 2, "ops"),
                                           (lambda t: t.view(-1), "view")])
def test_module_graph_tells_a_dtensor_view_from_a_new_tensor(mesh, between, kind):
    x = DTensor.from_local(torch.randn(2, 3), mesh, [Shard(0)])
    graph = trace_modules(_Two(between), x)
    edge = next(e for e in graph.edges if e.via)
    assert edge.kind == kind, graph.edges


@pytest.mark.slow
def test_fsdp2_step_counts_each_ranks_shard():
    run = agv.torchrun(SCRIPT, nproc=2, timeout=120)
    assert [r["all_dtensor"] for r in run.results] == [True, True]
    for rank, r in enumerate(run.results):
        held = r["held"]
        # Every first dimension is even: each rank holds exactly half the rows.
        assert 2 * held["parameter"] == r["full_param_bytes"], rank
        assert held["gradient"] == held["parameter"], rank
        for kind in KINDS:
            assert r["tracked_end"][kind] == held[kind], (rank, kind, r["tracked_end"], held)
            assert r["tracked_max"][kind] == held[kind], (rank, kind, r["tracked_max"], held)
