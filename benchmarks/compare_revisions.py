"""This checkout against another one, measured side by side in one run.

    .venv/bin/python benchmarks/compare_revisions.py --against /tmp/old [--rounds 5]

Make the other checkout with `git worktree add /tmp/old <commit>`. Both trees run with this
venv's torch; each measurement runs in a fresh interpreter that imports `autogradviz` from the
tree being measured and the benchmark models from this checkout (so both trees draw the same
models, including ones the other tree's benchmarks lack), and the two trees alternate round by
round, so that load from other jobs on a shared machine falls on both alike. Cases:

- trace + SVG of a GPT-2-small-style model, of an LSTMCell unrolled 100 and 300 steps, and of a
  GRUCell decoder over 50 and 200 steps (the models of `benchmarks/graph_scale.py`);
- trace alone of a 10,000-op chain (no layout);
- `track_memory` on one Adam step of the MLP and the transformer of
  `benchmarks/memory_overhead.py`, as a ratio to the same step untracked, measured in the
  same interpreter (so the ratio, not the absolute time, is what compares across trees).

Prints the median of the rounds for each tree and new / old (below 1 means this tree is
faster).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

# One measurement, run in a fresh interpreter with the measured tree first on sys.path.
_PROBE = r"""
import json, statistics, sys, time
tree, case, models = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path[:0] = [tree, models]
import torch
torch.set_num_threads(1)
import autogradviz as agv
assert agv.__file__.startswith(tree), agv.__file__

def seconds(fn):
    t0 = time.perf_counter(); fn(); return time.perf_counter() - t0

if case in ("gpt", "lstm100", "lstm300", "gru50", "gru200", "chain10k"):
    import gc
    import graph_scale as gs
    build = {"gpt": gs.gpt_case, "lstm100": gs.lstm_case(100), "lstm300": gs.lstm_case(300),
             "gru50": gs.gru_case(50), "gru200": gs.gru_case(200),
             "chain10k": gs.chain_case}[case]
    root, params = build()
    gc.collect()  # as graph_scale.py: no full collection of torch's heap inside the timing
    t0 = time.perf_counter()
    g = agv.trace(root, params=params)
    if case != "chain10k":
        g.svg(timeout=60.0)
    print(json.dumps({"value": time.perf_counter() - t0}))
else:
    import memory_overhead as mo
    model, x = {"mlp": mo.mlp, "transformer": mo.transformer}[case]()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    def step():
        opt.zero_grad()
        model(x).float().pow(2).mean().backward()
        opt.step()
    def tracked():
        with agv.track_memory(model, opt):
            step()
    for _ in range(2):              # warm up both paths (lazy imports, allocator)
        step(); tracked()
    plain, with_tracker = [], []
    for _ in range(5):
        plain.append(seconds(step)); with_tracker.append(seconds(tracked))
    ratio = statistics.median(with_tracker) / statistics.median(plain)
    print(json.dumps({"value": ratio}))
"""

CASES = {
    "gpt": "trace+SVG s",
    "lstm100": "trace+SVG s",
    "lstm300": "trace+SVG s",
    "gru50": "trace+SVG s",
    "gru200": "trace+SVG s",
    "chain10k": "trace s",
    "mlp": "track_memory x plain",
    "transformer": "track_memory x plain",
}


def measure(tree: Path, case: str) -> float:
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(tree), case,
                           str(HERE / "benchmarks")], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{case} in {tree} failed:\n{proc.stderr[-2000:]}")
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["value"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, required=True,
                        help="the other checkout, e.g. made with `git worktree add /tmp/old HEAD~5`")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    old = args.against.resolve()
    if not (old / "autogradviz" / "__init__.py").is_file():
        raise SystemExit(f"--against {old}: no autogradviz/ there; pass a checkout of this repository")
    print(f"new = {HERE}\nold = {old}\n{args.rounds} rounds, trees alternating, one interpreter per value\n")
    print(f"{'case':12} {'measure':22} {'old':>9} {'new':>9} {'new/old':>8}")
    for case, what in CASES.items():
        values: dict[str, list[float]] = {"old": [], "new": []}
        for r in range(args.rounds):
            order = (("old", old), ("new", HERE)) if r % 2 == 0 else (("new", HERE), ("old", old))
            for label, tree in order:
                values[label].append(measure(tree, case))
        o, n = statistics.median(values["old"]), statistics.median(values["new"])
        print(f"{case:12} {what:22} {o:9.3f} {n:9.3f} {n / o:8.2f}", flush=True)


if __name__ == "__main__":
    main()
