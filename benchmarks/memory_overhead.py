"""Overhead of track_memory on a training step, next to torch's own memory tools.

    .venv/bin/python benchmarks/memory_overhead.py [--repeats 15]

Each workload (an MLP of 4 Linear(1024) layers at batch 256, and a small
transformer encoder) runs one Adam training step four ways: plain, under
`autogradviz.track_memory`, under ``torch.profiler.profile(profile_memory=True)``
and under ``torch.distributed._tools.mem_tracker.MemTracker``. The variants are
interleaved in one process (round-robin, after a warm-up) and the median of N
steps is reported with its ratio to plain. Target: track_memory <= 1.5x plain
and no slower than the profiler.
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
from torch import nn

import autogradviz as av


def mlp() -> tuple[nn.Module, torch.Tensor]:
    layers: list[nn.Module] = []
    for _ in range(4):
        layers += [nn.Linear(1024, 1024), nn.ReLU()]
    return nn.Sequential(*layers), torch.randn(256, 1024)


def transformer() -> tuple[nn.Module, torch.Tensor]:
    layer = nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, batch_first=True,
                                       dropout=0.0)
    return nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False), torch.randn(16, 64, 256)


def variants(model: nn.Module, opt: torch.optim.Optimizer) -> dict[str, Callable[[], AbstractContextManager]]:
    from torch.profiler import ProfilerActivity, profile

    out: dict[str, Callable[[], AbstractContextManager]] = {
        "plain": nullcontext,
        "track_memory": lambda: av.track_memory(model, opt),
        "profiler(profile_memory)": lambda: profile(activities=[ProfilerActivity.CPU], profile_memory=True),
    }
    try:
        from torch.distributed._tools.mem_tracker import MemTracker
    except ImportError:
        return out
    tracker = MemTracker()
    tracker.track_external(model, opt)

    class _Fresh:
        """MemTracker refuses a second iteration (NotImplementedError) unless its
        per-module stats are reset first, so every step resets them."""

        def __enter__(self) -> None:
            tracker.reset_mod_stats()
            tracker.__enter__()

        def __exit__(self, *exc: object) -> None:
            tracker.__exit__(*exc)

    out["MemTracker(reset each step)"] = _Fresh
    return out


def bench(name: str, make: Callable[[], tuple[nn.Module, torch.Tensor]], repeats: int) -> None:
    torch.manual_seed(0)
    model, x = make()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    def step() -> None:
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()

    runs = variants(model, opt)
    times: dict[str, list[float]] = {k: [] for k in runs}
    notes: dict[str, str] = {}
    for _ in range(2):  # warm-up: allocator, optimizer state, lazy inits
        step()
    for _ in range(repeats):
        for key, ctx in runs.items():
            if key in notes:
                continue
            try:
                t0 = time.perf_counter()
                with ctx():
                    step()
                times[key].append(time.perf_counter() - t0)
            except (NotImplementedError, RuntimeError) as err:  # report, keep benchmarking the rest
                notes[key] = f"{type(err).__name__}: {str(err).splitlines()[0][:60]}"
    plain = statistics.median(times["plain"])
    print(f"\n{name}: median of {repeats} steps, interleaved")
    print(f"{'variant':<30}{'median ms':>12}{'x plain':>10}")
    for key, ts in times.items():
        if key in notes:
            print(f"{key:<30}{'failed':>12}{'':>10}  {notes[key]}")
            continue
        med = statistics.median(ts)
        print(f"{key:<30}{med * 1e3:>12.1f}{med / plain:>10.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--only", choices=["mlp", "transformer"], default=None)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    if args.only in (None, "mlp"):
        bench("MLP 4x1024, batch 256", mlp, args.repeats)
    if args.only in (None, "transformer"):
        bench("Transformer encoder 4x256, batch 16x64", transformer, args.repeats)


if __name__ == "__main__":
    main()
