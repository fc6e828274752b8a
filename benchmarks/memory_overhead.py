"""Overhead of track_memory on a training step, next to torch's own memory tools.

    .venv/bin/python benchmarks/memory_overhead.py [--rounds 18] [--only mlp] [--threads N]
                                                   [--clock cpu]

Each workload (an MLP of 4 Linear(1024) layers at batch 256, and a small
transformer encoder) runs one Adam training step six ways: plain, under a
dispatch mode that does nothing (the floor for a ``TorchDispatchMode`` recorder),
under `autogradviz.track_memory`, under
``torch.profiler.profile(profile_memory=True)`` (alone, and with the
``record_shapes``/``with_stack`` its category timeline needs) and under
``torch.distributed._tools.mem_tracker.MemTracker``. Every timed step opens a
fresh tool, so setup and teardown are part of the cost.

Noise (other processes on a small machine) is handled three ways: the variants
are interleaved in one process, one round at a time; the order is rotated every
round so no variant always follows the profiler's teardown; and besides each
variant's median time the table gives the median of the per-round ratios to the
plain step of the same round, which cancels slow spells that hit a whole round.
On a machine shared with other jobs, ``--clock cpu --threads 1`` times each step by
this process's CPU time (``time.process_time``) on one intra-op thread: the work the
step costs, without the time other processes held the cores (wall clock is the default).
Target: track_memory <= 1.5x plain and no slower than the profiler (checked
against the cheapest profiler configuration, the one that cannot name categories).
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

# Before torch loads: keep the profiler's C++ warnings (blocks allocated before it
# started) out of the table. Errors still print.
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import autogradviz as av  # noqa: E402


def mlp() -> tuple[nn.Module, torch.Tensor]:
    layers: list[nn.Module] = []
    for _ in range(4):
        layers += [nn.Linear(1024, 1024), nn.ReLU()]
    return nn.Sequential(*layers), torch.randn(256, 1024)


def transformer() -> tuple[nn.Module, torch.Tensor]:
    layer = nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, batch_first=True,
                                       dropout=0.0)
    return nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False), torch.randn(16, 64, 256)


@contextmanager
def _stderr_silenced() -> Iterator[None]:
    """Point file descriptor 2 at /dev/null: the profiler's C++ side writes its
    start/stop log lines there directly, past Python's sys.stderr."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


class _QuietProfile:
    """``torch.profiler.profile(profile_memory=True)`` without its log lines
    (the silencing costs a few system calls, nothing next to a step)."""

    def __init__(self, categories: bool = False) -> None:
        from torch.profiler import ProfilerActivity, profile

        # categories=True: what the profiler needs before its memory timeline can sort bytes
        # into categories (export_memory_timeline / _memory_profile need shapes and stacks).
        self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                             record_shapes=categories, with_stack=categories)

    def __enter__(self) -> None:
        with _stderr_silenced():
            self._prof.__enter__()

    def __exit__(self, *exc: object) -> None:
        with _stderr_silenced():
            self._prof.__exit__(*exc)


class _EmptyMode(TorchDispatchMode):
    """A dispatch mode that only forwards each op: the floor for any recorder
    built on ``TorchDispatchMode``. Besides the Python round trip per op, while
    any such mode is active torch treats every tensor as subclass-like, so e.g.
    autograd sums incoming gradients out of place instead of in place."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        return func(*args, **(kwargs or {}))


def variants(model: nn.Module, opt: torch.optim.Optimizer) -> dict[str, Callable[[], AbstractContextManager]]:
    out: dict[str, Callable[[], AbstractContextManager]] = {
        "plain": nullcontext,
        "empty TorchDispatchMode": _EmptyMode,
        "track_memory": lambda: av.track_memory(model, opt),
        "profiler(profile_memory)": _QuietProfile,
        "profiler(+shapes,+stack)": lambda: _QuietProfile(categories=True),
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


def _quartiles(xs: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(xs, n=4)
    return q[0], q[2]


_CLOCK: Callable[[], float] = time.perf_counter


def bench(name: str, make: Callable[[], tuple[nn.Module, torch.Tensor]], rounds: int) -> dict[str, float]:
    """Print one table; return each variant's median per-round ratio to plain."""
    torch.manual_seed(0)
    model, x = make()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    def step() -> None:
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()

    runs = variants(model, opt)
    keys = list(runs)
    times: dict[str, list[float]] = {k: [] for k in keys}
    notes: dict[str, str] = {}

    def timed(key: str) -> float | None:
        if key in notes:
            return None
        gc.collect()  # garbage left by the previous variant is not this one's cost
        try:
            t0 = _CLOCK()
            with runs[key]():
                step()
            return _CLOCK() - t0
        except (NotImplementedError, RuntimeError) as err:  # report, keep benchmarking the rest
            notes[key] = f"{type(err).__name__}: {str(err).splitlines()[0][:60]}"
            return None

    for _ in range(2):  # warm-up: allocator, optimizer state, lazy inits
        step()
    for key in keys:  # each tool's first use pays one-off costs (profiler init, op caches)
        timed(key)
    ratios: dict[str, list[float]] = {k: [] for k in keys}
    for r in range(rounds):
        order = keys[r % len(keys):] + keys[:r % len(keys)]
        got = {key: timed(key) for key in order}
        for key, dt in got.items():
            if dt is not None:
                times[key].append(dt)
                if got["plain"] is not None:
                    ratios[key].append(dt / got["plain"])
    plain = statistics.median(times["plain"])
    print(f"\n{name}: {rounds} interleaved rounds (order rotated each round)")
    print(f"{'variant':<30}{'median ms':>11}{'x plain':>9}{'per-round x':>13}{'  (IQR)':<16}")
    summary: dict[str, float] = {}
    for key in keys:
        if key in notes or not times[key]:
            print(f"{key:<30}{'failed':>11}  {notes.get(key, '')}")
            continue
        med = statistics.median(times[key])
        per = statistics.median(ratios[key])
        q1, q3 = _quartiles(ratios[key])
        summary[key] = per
        print(f"{key:<30}{med * 1e3:>11.1f}{med / plain:>9.2f}{per:>13.3f}  ({q1:.2f}-{q3:.2f})")
    tm, prof = summary.get("track_memory"), summary.get("profiler(profile_memory)")
    if tm is not None and prof is not None:
        ok = tm <= 1.5 and tm <= prof
        print(f"target (per-round): track_memory {tm:.3f} <= 1.5 and <= profiler {prof:.3f}: "
              f"{'met' if ok else 'MISSED'}")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=18,
                        help="a multiple of 6 (the number of variants) gives every variant each position equally often")
    parser.add_argument("--only", choices=["mlp", "transformer"], default=None)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="wall: time.perf_counter; cpu: this process's CPU time")
    args = parser.parse_args()
    global _CLOCK
    _CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (quartiles need two points)")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{os.cpu_count()} CPUs, load average {load:.2f} at start, {args.clock} clock, "
          f"autogradviz from {os.path.dirname(os.path.dirname(av.__file__))}")
    t0 = time.perf_counter()
    if args.only in (None, "mlp"):
        bench("MLP 4x1024, batch 256", mlp, args.rounds)
    if args.only in (None, "transformer"):
        bench("Transformer encoder 4x256, batch 16x64", transformer, args.rounds)
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
