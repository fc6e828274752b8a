#!/usr/bin/env bash
# GPU tier for the memory timeline. Run from the repository root on a CUDA machine:
#   bash scripts/gpu_check.sh        (OUT=<dir> also saves the allocator snapshot there)
# Needs torch with CUDA and pytest; the package is used in place (PYTHONPATH=.).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
PY=${PYTHON:-python3}
status=0

echo "== pytest tests/gpu"
timeout 150 "$PY" -m pytest -q -p no:cacheprovider tests/gpu || status=$?

echo "== CUDA memory demo"
timeout 60 "$PY" - <<'PYEOF' || status=$?
import os
import torch
from torch import nn
import autogradviz as av

assert torch.cuda.is_available(), "no CUDA device"
print(torch.__version__, torch.cuda.get_device_name())
torch.manual_seed(0)
model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(4096, 4096), nn.GELU())]).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(2048, 4096, device="cuda")
torch.cuda.synchronize()
torch.cuda.reset_peak_memory_stats()
with av.track_memory(model, opt, cuda_history=True) as mem:
    for _ in range(2):
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
    torch.cuda.synchronize()
MiB = 2 ** 20
print(f"{'category':<18}{'at peak MiB':>12}{'own max MiB':>12}")
for cat in av.CATEGORIES:
    print(f"{cat:<18}{mem.peak_by_category[cat] / MiB:>12.1f}{mem.max_by_category[cat] / MiB:>12.1f}")
print(f"{'ledger peak':<18}{mem.peak_bytes / MiB:>12.1f}")
start = mem.samples[0]
print(f"{'max_allocated':<18}{torch.cuda.max_memory_allocated() / MiB:>12.1f}"
      f"  (ledger peak + allocator extra at start {(start.cuda_allocated - start.total) / MiB:.1f})")
print("samples (index, phase, op, ledger MiB, memory_allocated MiB, memory_reserved MiB):")
tl = mem.samples
for s in [*tl[:: max(1, len(tl) // 12)], tl[mem.peak_index]]:
    print(f"  {s.index:>4} {s.phase:<9} {s.op:<28} {s.total / MiB:>9.1f} {s.cuda_allocated / MiB:>9.1f} "
          f"{s.cuda_reserved / MiB:>9.1f}")
extra = [s.cuda_allocated - s.total for s in tl]
print(f"allocator bytes beyond the ledger: min {min(extra)} max {max(extra)}")
out = os.environ.get("OUT")
if out:
    print("snapshot:", mem.save_snapshot(os.path.join(out, "snapshot.pickle")))
    mem.plot().savefig(os.path.join(out, "cuda_timeline.png"), dpi=80)
PYEOF
echo "== done (status $status)"
exit $status
