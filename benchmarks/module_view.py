"""The module-level view at scale, side by side with torchview, on the same models in one process.

Run:  .venv/bin/python benchmarks/module_view.py [--timeout 60] [--repeat 3]

Cases (models from benchmarks/graph_scale.py):
  lstm100   nn.LSTMCell(8, 16) unrolled 100 steps inside a module
  lstm300   the same, 300 steps
  gpt       nanoGPT-style GPT-2-small shape (12 blocks, tied head), tiny widths

"capture" is recording the model (our trace_modules(); torchview's draw_graph(), which
also builds its Graphviz source); "layout" is turning that into SVG with Graphviz `dot`.
"nodes" counts the boxes, ellipses and tensor nodes each drawing has. Both tools roll up
repeated calls (torchview with roll=True) and draw every module down to depth 3, the
deepest in these models (torchview depth=3).
Times are the best of `--repeat` runs; our SVG cache is cleared between runs.
torchview is optional: `.venv/bin/python -m pip install torchview -c constraints.txt`.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from graph_scale import GPT, GPTConfig  # noqa: E402  (the one definition of the GPT case)

from autogradviz.graphs import render  # noqa: E402
from autogradviz.graphs.module_graph import trace_modules  # noqa: E402
from autogradviz.graphs.module_view import drawn_nodes, render_svg, to_dot  # noqa: E402


class Unrolled(nn.Module):
    """graph_scale's LSTM case as a module: one LSTMCell(8, 16) called `steps` times."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(8, 16)

    def forward(self, xs: torch.Tensor) -> torch.Tensor:  # xs: (steps, B, 8)
        h = c = torch.zeros(xs.shape[1], 16)
        for t in range(xs.shape[0]):
            h, c = self.cell(xs[t], (h, c))
        return h


def lstm(steps: int) -> Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]:
    def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        torch.manual_seed(0)
        return Unrolled(), (torch.randn(steps, 4, 8),)

    return build


def gpt() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    cfg = GPTConfig()
    idx = torch.randint(0, cfg.vocab_size, (2, cfg.block_size))
    return GPT(cfg), (idx, torch.randint(0, cfg.vocab_size, (2, cfg.block_size)))


def best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        render._run_dot.cache_clear()  # a cached layout would time nothing
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def ours(model: nn.Module, args: tuple[torch.Tensor, ...], repeat: int, timeout: float
         ) -> tuple[int, float, float]:
    cap, g = best(lambda: trace_modules(model, *args), repeat)
    lay, _ = best(lambda: render_svg(g, timeout=timeout), repeat)
    return drawn_nodes(to_dot(g)), cap, lay


def theirs(model: nn.Module, args: tuple[torch.Tensor, ...], repeat: int, timeout: float
           ) -> tuple[int | str, float | str, float | str]:
    try:
        from torchview import draw_graph
    except ImportError:
        return "-", "not installed", "-"
    try:
        cap, cg = best(lambda: draw_graph(model, input_data=list(args), roll=True, depth=3),
                       repeat)
    except Exception as e:  # report, do not stop the comparison
        return "-", f"{type(e).__name__}", "-"
    source = cg.visual_graph.source
    nodes = sum(1 for line in source.splitlines() if "[label=" in line and "->" not in line)

    def layout() -> None:
        subprocess.run([shutil.which("dot") or "dot", "-Tsvg"], input=source.encode(),
                       capture_output=True, timeout=timeout, check=True)

    try:
        lay, _ = best(layout, repeat)
    except subprocess.TimeoutExpired:
        return nodes, cap, f"timeout > {timeout:g} s"
    return nodes, cap, lay


def fmt(v: float | int | str) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--timeout", type=float, default=60.0, help="limit per dot layout (s)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement (best kept)")
    a = ap.parse_args()
    cases = [("lstm100", lstm(100)), ("lstm300", lstm(300)), ("gpt", gpt)]
    head = (f"{'case':<8} {'calls':>6} {'ours nodes':>10} {'capture s':>10} {'layout s':>9} "
            f"{'total s':>8} | {'torchview nodes':>15} {'capture s':>10} {'layout s':>9} "
            f"{'total s':>8}")
    print(head)
    print("-" * len(head))
    for name, build in cases:
        model, args = build()
        calls = len(trace_modules(model, *args).calls)
        n, cap, lay = ours(model, args, a.repeat, a.timeout)
        tn, tcap, tlay = theirs(model, args, a.repeat, a.timeout)
        ttot = tcap + tlay if isinstance(tcap, float) and isinstance(tlay, float) else "-"
        print(f"{name:<8} {calls:>6} {n:>10} {cap:>10.3f} {lay:>9.3f} {cap + lay:>8.3f} | "
              f"{fmt(tn):>15} {fmt(tcap):>10} {fmt(tlay):>9} {fmt(ttot):>8}")


if __name__ == "__main__":
    main()
