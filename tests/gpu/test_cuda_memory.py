"""GPU tier: the ledger against the CUDA caching allocator's own counters."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import autogradviz as av

pytestmark = pytest.mark.gpu


def _model() -> nn.Module:
    # Every tensor a multiple of 512 bytes, so the allocator's rounding adds nothing.
    return nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 1024)).cuda()


def _step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> None:
    model(x).square().mean().backward()
    opt.step()
    opt.zero_grad()


def test_samples_follow_memory_allocated() -> None:
    torch.manual_seed(0)
    model = _model()
    opt = torch.optim.Adam(model.parameters(), foreach=True)
    x = torch.randn(512, 1024, device="cuda")
    _step(model, opt, x)  # cuBLAS workspaces and optimizer state exist before we watch
    torch.cuda.synchronize()
    with av.track_memory(model, opt) as mem:
        for _ in range(3):
            _step(model, opt, x)
    assert mem.device.startswith("cuda")
    tl = mem.samples
    assert all(s.cuda_allocated is not None and s.cuda_reserved >= s.cuda_allocated for s in tl)
    # What the allocator holds beyond our tensors (workspaces, 0-dim scalars rounded up to
    # 512 bytes) stays nearly constant: every tensor the step makes is in the ledger.
    extra = [s.cuda_allocated - s.total for s in tl]
    assert max(extra) - min(extra) <= 64 * 1024, (min(extra), max(extra))
    assert min(extra) >= 0
    n = sum(p.numel() for p in model.parameters())
    assert mem.peak_by_category["parameter"] == 4 * n
    assert mem.current_by_category["optimizer_state"] == 8 * n  # step counters live on the CPU


def test_backward_on_the_device_thread_is_seen() -> None:
    # CUDA backward runs on the engine's device thread; the dispatch mode must follow it.
    model = _model()
    x = torch.randn(256, 1024, device="cuda")
    with av.track_memory(model) as mem:
        model(x).sum().backward()
    backward = [s for s in mem.samples if s.phase == "backward"]
    assert any(s.op == "aten.mm" for s in backward)
    assert mem.current_by_category["gradient"] == 4 * sum(p.numel() for p in model.parameters())


def test_peak_matches_max_memory_allocated(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(512, 1024, device="cuda")
    _step(model, opt, x)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    with av.track_memory(model, opt, cuda_history=True) as mem:
        _step(model, opt, x)
        torch.cuda.synchronize()
    start_extra = mem.samples[0].cuda_allocated - mem.samples[0].total
    gap = torch.cuda.max_memory_allocated() - (mem.peak_bytes + start_extra)
    assert 0 <= gap <= 64 * 1024, gap
    path = mem.save_snapshot(tmp_path / "snap.pickle")
    assert Path(path).stat().st_size > 0
