"""How autogradviz scales, side by side with torchviz, on the same graphs in one process.

Run:  .venv/bin/python benchmarks/graph_scale.py [--timeout 60]

Cases (targets from the issue, measured on a 2-core CPU):
  gpt        nanoGPT-style GPT-2-small graph shape (12 blocks, ~720 Nodes), tiny widths   trace + SVG < 1 s
  lstm100    nn.LSTMCell unrolled 100 steps                                               SVG < 5 s
  lstm300    nn.LSTMCell unrolled 300 steps                                               no RecursionError, SVG < 20 s
  gru50      GRUCell decoder, 50 steps of teacher forcing (embedding, cell, output layer per
             step, outputs stacked into one loss; 961 Nodes)                              trace + SVG <= 3 s
  gru200     the same decoder over 200 steps (3,811 Nodes)                                 trace + SVG <= 15 s
  chain10k   10,000-Node chain                                                            trace + DOT < 2 s
  live1k     live(every=1) while a 1,000-op chain runs: one frame per op                  < 2 s

"gru50r"/"gru200r" are the same decoders drawn with svg(rollup=True): the steps folded into
one, shown "loop step ×50" (no torchviz counterpart).

"live1k" has no torchviz counterpart; its "capture" column is the whole block (1,000
frames, none displayed) and "layout" is the SVG of the final frame.

Each timed call starts after a full garbage collection (see `timed`).

"capture" is building the description (our trace(); torchviz's make_dot()); "layout" is
turning it into SVG with Graphviz `dot`. torchviz's layout runs `dot -Tsvg` on its DOT
source in a subprocess with a timeout, since its own .pipe() has none.
"""
from __future__ import annotations

import argparse
import gc
import math
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

import autogradviz as av


@dataclass
class GPTConfig:
    # GPT-2-small has 12 layers and 12 heads; the Node count depends on depth and
    # on which ops run, not on widths, so widths are tiny to keep forward cheap.
    n_layer: int = 12
    n_head: int = 4
    n_embd: int = 32
    vocab_size: int = 64
    block_size: int = 16


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        mask = torch.tril(torch.ones(cfg.block_size, cfg.block_size)).view(1, 1, cfg.block_size, cfg.block_size)
        self.register_buffer("mask", mask)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # (B, nh, T, T)
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying, as in GPT-2

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))  # (B, T, vocab)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def gpt_case() -> tuple[torch.Tensor, nn.Module]:
    torch.manual_seed(0)
    cfg = GPTConfig()
    model = GPT(cfg)
    idx = torch.randint(0, cfg.vocab_size, (2, cfg.block_size))
    return model(idx, torch.randint(0, cfg.vocab_size, (2, cfg.block_size))), model


def lstm_case(steps: int) -> Callable[[], tuple[torch.Tensor, nn.Module]]:
    def build() -> tuple[torch.Tensor, nn.Module]:
        torch.manual_seed(0)
        cell = nn.LSTMCell(8, 16)
        xs = torch.randn(steps, 4, 8)
        h = c = torch.zeros(4, 16)
        for t in range(steps):
            h, c = cell(xs[t], (h, c))
        return h.sum(), cell

    return build


class Decoder(nn.Module):
    """A GRUCell decoder with teacher forcing: each step embeds the previous token, runs
    the cell and scores the next token; the scores of all steps are stacked into one loss."""

    def __init__(self, vocab: int = 20, emb: int = 8, hidden: int = 16) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.cell = nn.GRUCell(emb, hidden)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = torch.zeros(tokens.shape[0], self.cell.hidden_size)
        logits = []
        for t in range(tokens.shape[1] - 1):
            h = self.cell(self.emb(tokens[:, t]), h)
            logits.append(self.out(h))
        scores = torch.stack(logits, 1)
        return F.cross_entropy(scores.reshape(-1, scores.shape[-1]), tokens[:, 1:].reshape(-1))


def gru_case(steps: int) -> Callable[[], tuple[torch.Tensor, nn.Module]]:
    def build() -> tuple[torch.Tensor, nn.Module]:
        torch.manual_seed(0)
        model = Decoder()
        return model(torch.randint(0, 20, (4, steps + 1))), model

    return build


def chain_case() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    x = torch.ones(4, requires_grad=True)
    y = x
    for _ in range(9_999):  # 9,999 MulBackward0 + 1 AccumulateGrad = 10,000 Nodes
        y = y * 1.0001
    return y, {"x": x}


def live_chain(ops: int = 1_000) -> tuple[int, float, float, int]:
    """(Nodes, seconds for the block with one frame per op, final SVG seconds, Nodes read)."""
    x = torch.ones(4, requires_grad=True)
    t0 = time.perf_counter()
    with av.live(every=1, display=False) as lg:
        y = x
        for _ in range(ops):
            y = y * 1.0001
    block = time.perf_counter() - t0
    assert lg.graph is not None and len(lg.frames) == ops
    lay, _ = timed(lambda: lg.graph.svg(timeout=30.0))
    return lg.graph.num_functions, block, lay, lg.visited


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    # A full garbage collection first, so that neither tool pays for the other's garbage:
    # after `import torch` the first allocation-heavy call tends to trigger a full
    # collection of torch's heap (0.2-0.3 s here), whichever tool happens to make it.
    gc.collect()
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def ours(root: torch.Tensor, params, svg: bool, timeout: float) -> tuple[int, float, float | str]:
    cap, g = timed(lambda: av.trace(root, params=params))
    if svg:
        lay, _ = timed(lambda: g.svg(timeout=timeout))
    else:
        lay, _ = timed(lambda: g.to_dot())
        lay = f"dot text {lay:.3f}"
    return g.num_functions, cap, lay


def theirs(root: torch.Tensor, params, timeout: float) -> tuple[float | str, float | str]:
    try:
        from torchviz import make_dot
    except ImportError:
        return "not installed", "-"
    named = dict(params.named_parameters()) if isinstance(params, nn.Module) else params
    limit = sys.getrecursionlimit()
    try:
        cap, dot = timed(lambda: make_dot(root, params=named))
    except RecursionError:
        return "RecursionError", "-"
    finally:
        sys.setrecursionlimit(limit)
    try:
        t0 = time.perf_counter()
        subprocess.run([shutil.which("dot"), "-Tsvg"], input=dot.source.encode(), capture_output=True,
                       timeout=timeout, check=True)
        return cap, time.perf_counter() - t0
    except subprocess.TimeoutExpired:
        return cap, f"timeout > {timeout:g} s"


def fmt(v: float | str) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--timeout", type=float, default=60.0, help="per-case limit for torchviz's dot layout (s)")
    args = ap.parse_args()
    cases = [
        ("gpt", gpt_case, True, "trace+SVG < 1 s"),
        ("lstm100", lstm_case(100), True, "SVG < 5 s"),
        ("lstm300", lstm_case(300), True, "SVG < 20 s"),
        ("gru50", gru_case(50), True, "trace+SVG <= 3 s"),
        ("gru200", gru_case(200), True, "trace+SVG <= 15 s"),
        ("chain10k", chain_case, False, "trace+DOT < 2 s"),
    ]
    header = f"{'case':<9} {'nodes':>6} {'ours capture s':>15} {'ours layout s':>20} {'torchviz capture s':>19} " \
             f"{'torchviz layout s':>18} {'ratio':>7}  target"
    print(header)
    print("-" * len(header))
    for name, build, svg, target in cases:
        root, params = build()
        n, cap, lay = ours(root, params, svg, timeout=30.0)
        tv_cap, tv_lay = theirs(root, params, args.timeout)
        ours_total = cap + (lay if isinstance(lay, float) else float(lay.split()[-1]))
        if isinstance(tv_cap, float) and isinstance(tv_lay, float):
            ratio = f"{(tv_cap + tv_lay) / ours_total:.1f}x"
        else:
            ratio = "-"
        print(f"{name:<9} {n:>6} {fmt(cap):>15} {fmt(lay):>20} {fmt(tv_cap):>19} {fmt(tv_lay):>18} {ratio:>7}  "
              f"{target}")
        del root, params
    n, block, lay, read = live_chain()
    print(f"{'live1k':<9} {n:>6} {fmt(block):>15} {fmt(lay):>20} {'-':>19} {'-':>18} {'-':>7}  "
          f"< 2 s (1,000 frames; {read} Nodes read in all)")
    for steps in (50, 200):
        # The decoder's steps folded by roll-up (torchviz has no counterpart): one step drawn.
        root, params = gru_case(steps)()
        cap, g = timed(lambda: av.trace(root, params=params))
        lay, svg = timed(lambda: g.svg(rollup=True, timeout=30.0))
        boxes = svg.count('class="node"')
        print(f"{f'gru{steps}r':<9} {g.num_functions:>6} {fmt(cap):>15} {fmt(lay):>20} {'-':>19} {'-':>18} "
              f"{'-':>7}  svg(rollup=True): {boxes} boxes; \"loop step ×{steps}\" drawn: {f'loop step ×{steps}' in svg}")
    print("\nratio = torchviz (capture + layout) / ours (capture + layout); higher means we are faster.")
    print("Our SVG layouts use the automatic policy (hub leaves copied per consumer above the in-degree limit, "
          "long edges of fan-out Nodes drawn from copies beside their targets, above 300 Nodes newrank and a "
          "network simplex capped at 0.05 iterations per node); torchviz draws every graph in full.")


if __name__ == "__main__":
    main()
