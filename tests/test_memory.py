"""Accuracy of the memory timeline, with torch and arithmetic as the oracle."""
from __future__ import annotations

import contextlib
import copy
import warnings

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import autogradviz as av


def mlp(d_in: int = 32, hidden: int = 64, d_out: int = 8, depth: int = 2) -> nn.Sequential:
    layers: list[nn.Module] = []
    d = d_in
    for _ in range(depth):
        layers += [nn.Linear(d, hidden), nn.ReLU()]
        d = hidden
    layers.append(nn.Linear(d, d_out))
    return nn.Sequential(*layers)


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def test_one_adam_step_is_exact() -> None:
    torch.manual_seed(0)
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(16, 32), torch.randn(16, 8)
    with av.track_memory(model, opt) as mem:
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    n = n_params(model)
    steps = sum(s["step"].untyped_storage().nbytes() for s in opt.state.values())
    assert steps > 0  # Adam's per-tensor step counters are real tensors
    cur = mem.current_by_category
    assert cur["parameter"] == 4 * n
    assert cur["gradient"] == 4 * n
    assert cur["optimizer_state"] == 8 * n + steps
    assert cur["input"] == x.nbytes  # y is only saved by mse_loss, not passed to the model
    assert cur["activation"] == 0  # the graph is freed after backward
    assert set(mem.peak_by_category) == set(av.CATEGORIES)
    assert sum(mem.peak_by_category.values()) == mem.peak_bytes
    assert mem.peak_bytes == max(s.total for s in mem.samples)
    for cat, top in mem.max_by_category.items():
        assert top == max(s.bytes[cat] for s in mem.samples)


def saved_storages(model: nn.Module, x: torch.Tensor) -> tuple[int, torch.Tensor]:
    """Independent oracle: bytes of the unique storages autograd saves in ``model(x)``, leaving
    out the parameters, the input and the output (those are live for other reasons)."""
    held: dict[int, torch.Tensor] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        held.setdefault(storage_key(t), t.detach())
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    skip = {storage_key(p) for p in model.parameters()} | {storage_key(x), storage_key(out)}
    return sum(t.untyped_storage().nbytes() for k, t in held.items() if k not in skip), out


def test_activation_bytes_are_what_autograd_saves() -> None:
    torch.manual_seed(0)
    model = mlp(depth=3)
    x = torch.randn(16, 32)
    with av.track_memory(model) as mem:
        with torch.no_grad():
            model(x)
    assert mem.max_by_category["activation"] == 0

    expected, _ = saved_storages(model, x)
    assert expected > 0
    with av.track_memory(model) as mem:
        out = model(x)
        saved_now = mem.current_by_category["activation"]
    assert saved_now == expected
    forward_end = [s for s in mem.samples if s.op == "forward end"][-1]
    assert forward_end.bytes["activation"] == expected
    del out


class Block(nn.Module):
    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.tanh(self.up(x)))


class Stack(nn.Module):
    def __init__(self, n: int, d: int, hidden: int, ckpt: bool) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(d, hidden) for _ in range(n))
        self.ckpt = ckpt

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False, preserve_rng_state=False) if self.ckpt else b(x)
        return x


def block_of_each_sample(plain: av.MemoryRecord, ckpt: av.MemoryRecord,
                         n: int) -> tuple[list[int | None], list[int | None]]:
    """For every sample after the forward pass, the number of blocks whose backward has not
    started yet (n until the last block's backward starts, then n - 1, ...); None inside
    the forward pass and for the checkpoint's recompute samples.

    Blocks are told apart by the checkpoint's recomputation alone, never by byte counts:
    it reruns a block's forward ops in the backward phase right before that block's
    backward, and apart from those samples both runs allocate in the same order (asserted).
    """
    forward_ops = {s.op for s in plain.samples if s.phase == "forward"}
    plain_backward_ops = {s.op for s in plain.samples if s.phase == "backward"}
    recompute_ops = forward_ops - plain_backward_ops  # forward ops the plain backward never runs
    assert recompute_ops

    def is_recompute(s: av.MemorySample) -> bool:
        return s.phase == "backward" and s.op in recompute_ops

    kept = [s for s in ckpt.samples if not is_recompute(s)]
    assert [(s.phase, s.op) for s in kept] == [(s.phase, s.op) for s in plain.samples]
    end = next(i for i, s in enumerate(plain.samples) if s.op == "forward end")

    ckpt_blocks: list[int | None] = []
    plain_blocks: list[int | None] = []
    started, inside = 0, False
    for s in ckpt.samples:
        if is_recompute(s):
            started += not inside  # a run of recompute samples is one block's recomputation
            inside = True
            ckpt_blocks.append(None)
            continue
        inside = False
        k = n - started if len(plain_blocks) >= end else None
        ckpt_blocks.append(k)
        plain_blocks.append(k)
    return plain_blocks, ckpt_blocks


_GRID = [(n, shape, second) for n in (2, 4, 6)
         for shape in ((32, 256, 64), (64, 64, 128), (32, 256, 8)) for second in (False, True)]
# Four cases in the fast tier: both grad states, the fewest and the most blocks, all shapes.
_FAST = {(2, (32, 256, 64), False), (4, (64, 64, 128), True), (6, (32, 256, 8), False),
         (6, (32, 256, 64), True)}


@pytest.mark.parametrize("n, d, hidden, batch, second_backward", [
    pytest.param(n, *shape, second,
                 id=f"{n}-{'-'.join(map(str, shape))}-{'accumulating' if second else 'fresh-grads'}",
                 marks=() if (n, shape, second) in _FAST else pytest.mark.slow)
    for n, shape, second in _GRID
])
def test_checkpoint_saves_the_predicted_bytes(n: int, d: int, hidden: int, batch: int,
                                              second_backward: bool) -> None:
    torch.manual_seed(0)
    plain = Stack(n, d, hidden, ckpt=False)
    ckpt = copy.deepcopy(plain)
    ckpt.ckpt = True
    x = torch.randn(batch, d)

    # Independent oracle, block by block: the storages each block saves for backward other than
    # its input, output and parameters. A checkpointed block keeps its input (for the recompute),
    # its output is the next block's input, and it drops everything else it would have saved.
    saved = []
    h = x
    for b in plain.blocks:
        nbytes, out = saved_storages(b, h)
        saved.append(nbytes)
        h = out.detach()
    assert all(s > 0 for s in saved)

    ends, peaks, records = {}, {}, {}
    for name, model in (("plain", plain), ("ckpt", ckpt)):
        if second_backward:  # .grad already exists, so backward accumulates in place
            model(x).square().sum().backward()
        with av.track_memory(model) as mem:
            loss = model(x).square().sum()
            loss.backward()
        ends[name] = [s for s in mem.samples if s.op == "forward end"][0].total
        peaks[name] = mem.peak_bytes
        records[name] = mem
    # At the end of the forward pass every block has finished and none has been freed.
    assert ends["plain"] - ends["ckpt"] == sum(saved)

    # The peak. Matching the runs sample by sample, the only live storages that differ are the
    # saved tensors of blocks whose backward has not started: at a sample with k such blocks,
    #     live_plain = live_ckpt + sum(saved[:k])
    # (the block under way holds the same tensors in both: saved in one, recomputed in the
    # other; finished blocks hold none in either). Both peaks fall after the forward pass (the
    # backward holds all the forward held plus gradient buffers) and the checkpointed peak is no
    # recompute sample (asserted below), so if the plain run peaks at k_p blocks and the
    # checkpointed one at k_c:
    #     sum(saved[:k_c]) <= peak_plain - peak_ckpt <= sum(saved[:k_p]).
    # Where k_p == k_c the difference is exactly that sum. Where they differ it is not a function
    # of saved bytes at all: it also holds how much the checkpointed run grows between the two
    # places (gradients created, inputs and gradient buffers released), which only a full model
    # of the backward's allocations could predict, so the bound is the honest statement.
    plain_k, ckpt_k = block_of_each_sample(records["plain"], records["ckpt"], n)
    k_p = plain_k[records["plain"].peak_index]
    k_c = ckpt_k[records["ckpt"].peak_index]
    assert k_p is not None and k_c is not None  # neither peak is in the forward pass or a recompute
    diff = peaks["plain"] - peaks["ckpt"]
    assert sum(saved[:k_c]) <= diff <= sum(saved[:k_p])
    if second_backward:
        # With .grad already allocated nothing grows during backward, and each later block
        # holds fewer inputs, so both runs peak at the first place the backward reaches its
        # largest temporaries, where the most blocks are untouched: the same place.
        assert k_p == k_c
    if k_p == k_c:
        assert diff == sum(saved[:k_p])
    for a, b in zip(plain.parameters(), ckpt.parameters()):
        assert torch.allclose(a.grad, b.grad)


def test_zero_grad_set_to_none_drops_gradients() -> None:
    torch.manual_seed(0)
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 32)
    with av.track_memory(model, opt) as mem:
        model(x).sum().backward()
        assert mem.current_by_category["gradient"] == 4 * n_params(model)
        opt.zero_grad(set_to_none=False)
        assert mem.current_by_category["gradient"] == 4 * n_params(model)
        opt.zero_grad(set_to_none=True)
        assert mem.current_by_category["gradient"] == 0
    phases = {s.phase for s in mem.samples}
    assert {"forward", "backward", "zero_grad"} <= phases
    assert mem.samples[-2].phase == "zero_grad" and mem.samples[-2].bytes["gradient"] == 0


def test_deleting_a_tensor_is_a_free() -> None:
    with av.track_memory() as mem:
        t = torch.empty(1000, 3)
        v = t[::2]  # a view: same storage, no new bytes
        start = mem.current_bytes
        assert start == t.untyped_storage().nbytes() == 12000
        del t
        assert mem.current_bytes == start  # the view keeps the storage alive
        del v
        assert mem.current_bytes == start - 12000


@pytest.mark.parametrize("zero_between", [True, False])
def test_eight_micro_batches(zero_between: bool) -> None:
    torch.manual_seed(0)
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    n = n_params(model)
    xs = torch.randn(8, 4, 32)
    with av.track_memory(model, opt) as mem:
        for x in xs:
            model(x).sum().backward()
            assert mem.current_by_category["gradient"] == 4 * n
            assert mem.current_by_category["activation"] == 0
            if zero_between:
                opt.zero_grad()
                assert mem.current_by_category["gradient"] == 0
        opt.step()
    assert sum(s.op == "backward end" for s in mem.samples) == 8
    assert sum(s.op == "forward end" for s in mem.samples) == 8
    assert mem.max_by_category["gradient"] == 4 * n  # accumulation is in place: no growth
    assert mem.samples[-1].optimizer_steps == 1


def test_tracking_does_not_change_training() -> None:
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(16, 32), nn.Dropout(0.2), nn.ReLU(), nn.Linear(32, 4))
    runs = []
    for tracked in (False, True):
        torch.manual_seed(1)
        model = copy.deepcopy(base)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        data = torch.randn(20, 8, 16)
        with av.track_memory(model, opt) if tracked else contextlib.nullcontext():
            for x in data:
                opt.zero_grad()
                model(x).square().mean().backward()
                opt.step()
        runs.append(model)
    for a, b in zip(runs[0].parameters(), runs[1].parameters()):
        assert torch.equal(a, b)


def _transformer() -> nn.Module:
    layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


@pytest.mark.parametrize("arch", ["mlp", "transformer"])
def test_peak_matches_the_profiler(arch: str) -> None:
    # The transformer has residual fan-in, where autograd sums incoming gradients (out of place
    # while any dispatch mode is active): the peak must still match the unwatched profiler run.
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._memory_profiler import Action

    torch.manual_seed(0)
    if arch == "mlp":
        model = mlp(64, 128, 10, depth=2)
        x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
        loss_fn = lambda: nn.functional.cross_entropy(model(x), y)  # noqa: E731
    else:
        model = _transformer()
        x, y = torch.randn(8, 16, 64), torch.randn(8, 16, 64)
        loss_fn = lambda: nn.functional.mse_loss(model(x), y)  # noqa: E731
    opt = torch.optim.Adam(model.parameters())

    def step() -> None:
        loss_fn().backward()
        opt.step()
        opt.zero_grad()

    step()  # optimizer state exists in both measured steps
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                     record_shapes=True, with_stack=True) as prof:
            step()
        timeline = prof._memory_profile().timeline
    live = prof_peak = 0
    for _, action, _, size in timeline:
        if action == Action.CREATE:
            live += size
        elif action == Action.DESTROY:
            live -= size
        prof_peak = max(prof_peak, live)

    with av.track_memory(model, opt) as mem:
        step()
    # x and y existed before tracking: the profiler calls them pre-existing, we count them
    # when first seen (as input, and when cross_entropy saves y).
    ours = mem.peak_bytes - mem.samples[0].total - x.nbytes - y.nbytes
    # The profiler also sees the 0-dim scalars C++ makes from Python numbers inside ops
    # (4-8 bytes each, never tensors the dispatcher hands out); a couple overlap the peak.
    assert 0 <= prof_peak - ours <= 16, (prof_peak, ours)


def _two_runs() -> dict[str, av.MemoryRecord]:
    torch.manual_seed(0)
    runs = {}
    for name, batch in (("small", 4), ("large", 64)):
        model = mlp()
        with av.track_memory(model) as mem:
            model(torch.randn(batch, 32)).sum().backward()
        runs[name] = mem
    return runs


def test_plot_and_compare() -> None:
    from matplotlib.figure import Figure

    runs = _two_runs()
    fig = runs["large"].plot(title="t")
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    # The axis unit and the peak note agree with the package's one byte formatter.
    peak_text = av.format_bytes(runs["large"].peak_bytes)
    assert ax.get_ylabel() == f"live memory ({peak_text.split()[1]})" and ax.get_title() == "t"
    assert any(f"peak {peak_text}" in t.get_text() for t in ax.texts)
    both = av.compare_memory(runs)
    assert len(both.axes) == 2 and both.axes[0].get_ylim() == both.axes[1].get_ylim()
    titled = av.compare_memory([runs["small"], runs["large"]], titles=["a", "b"])
    assert [a.get_title() for a in titled.axes] == ["a", "b"]


def test_compare_fits_the_page_and_takes_a_figsize() -> None:
    runs = _two_runs()
    three = [runs["small"], runs["large"], runs["small"]]
    for fig in (av.compare_memory(runs), av.compare_memory(three)):
        width_px = fig.get_size_inches()[0] * fig.get_dpi()
        assert fig.get_dpi() == 110 and width_px <= 730  # shown at full size on the page
        fig.draw_without_rendering()
        panels = [ax.get_window_extent() for ax in fig.axes]
        assert all(not a.overlaps(b) for i, a in enumerate(panels) for b in panels[i + 1:])
    assert len(av.compare_memory(three).axes) == 3  # one a row, stacked for a phone's width
    wide = av.compare_memory(runs, figsize=(10, 3))
    assert tuple(wide.get_size_inches()) == (10, 3)
    ax0, ax1 = wide.axes
    assert ax0.get_ylim() == ax1.get_ylim()  # one scale, so the panels compare by height
    x0, x1 = ax0.get_window_extent(), ax1.get_window_extent()
    assert x1.y1 < x0.y0 and abs(x1.x0 - x0.x0) < 1  # stacked, not side by side


def test_plot_is_readable_and_the_legend_hides_no_data() -> None:
    # A late peak (the optimizer step) sits in the upper right, where the legend used to be.
    torch.manual_seed(0)
    model = mlp(32, 256, 8)
    opt = torch.optim.Adam(model.parameters())
    with av.track_memory(model, opt) as mem:
        model(torch.randn(16, 32)).sum().backward()
        opt.step()
    figs = [mem.plot(), av.compare_memory({"a": mem, "b": mem}),
            av.compare_memory([mem, mem, mem])]
    for fig in figs:
        assert fig.get_dpi() >= 110
        fig.draw_without_rendering()  # lay out (constrained layout runs at draw time)
        legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
        legends += fig.legends  # compare_memory's one legend sits under the panels
        assert len(legends) == 1
        box = legends[0].get_window_extent()
        for ax in fig.axes:
            assert not box.overlaps(ax.get_window_extent())  # the axes' data area
            assert fig.bbox.contains(box.x1 - 1, box.y0 + 1)  # and it is not cut off
        texts = [t for ax in fig.axes for t in (*ax.texts, ax.xaxis.label, ax.yaxis.label,
                                                 *ax.get_xticklabels(), *ax.get_yticklabels())]
        texts += legends[0].get_texts()
        assert min(t.get_fontsize() for t in texts) >= 9


def test_a_record_is_drawn_without_torch(tmp_path) -> None:  # noqa: ANN001
    # The records and their matplotlib view need no torch: a pickled record draws in a
    # process where torch was never imported (the package __init__ is bypassed).
    import pickle
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "rec.pickle").write_bytes(pickle.dumps(_two_runs()["large"]))
    pkg = Path(av.__file__).parent
    code = f"""
import pickle, sys, types
pkg = types.ModuleType("autogradviz")
pkg.__path__ = [{str(pkg)!r}]
sys.modules["autogradviz"] = pkg
rec = pickle.loads(open({str(tmp_path / "rec.pickle")!r}, "rb").read())
fig = rec.plot()
assert "torch" not in sys.modules, sorted(m for m in sys.modules if m.startswith("torch"))
print(type(rec).__name__, rec.peak_bytes, len(fig.axes))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["MemoryRecord", str(_two_runs()["large"].peak_bytes), "1"]


def test_estimate_memory_on_meta() -> None:
    d, layers = 256, 4

    def build() -> nn.Module:
        return nn.Sequential(*[nn.Linear(d, d, bias=False) for _ in range(layers)])

    est = av.estimate_memory(build, torch.randn(8, d), optimizer=lambda ps: torch.optim.AdamW(ps), steps=2)
    n = layers * d * d
    assert isinstance(est, av.MemoryRecord) and est.device == "meta"
    assert est.peak_by_category["parameter"] == 4 * n
    assert est.max_by_category["gradient"] == 4 * n
    # AdamW's step counters are CPU tensors even for meta parameters; only meta bytes count.
    assert est.current_by_category["optimizer_state"] == 8 * n
    # Each Linear saves its input; the first one's is the model input, counted as "input".
    assert est.max_by_category["activation"] == 4 * 8 * d * (layers - 1)
    assert est.max_by_category["input"] == 4 * 8 * d
    assert est.samples[-1].optimizer_steps == 2

    real = build()
    opt = torch.optim.AdamW(real.parameters())
    x = torch.randn(8, d)
    with av.track_memory(real, opt) as mem:
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            real(x).sum().backward()
            opt.step()
    # Same byte counts as a real CPU run, apart from the CPU-side step counters.
    steps = sum(s["step"].nbytes for s in opt.state.values())
    assert est.peak_bytes == mem.peak_bytes - steps
    # The same ops allocate in the same order; the real run has one extra sample where the
    # step counters were first counted.
    assert [s.op for s in est.samples] == [s.op for s in mem.samples if s.op != "optimizer state"]


def _used_once() -> None:
    ctx = av.track_memory()
    with ctx:
        pass
    with ctx:
        pass


def _snapshot_without_history() -> None:
    with av.track_memory() as mem:
        pass
    mem.save_snapshot("x.pickle")


_LINEAR = nn.Linear(2, 2)


@pytest.mark.parametrize("call, error, match", [
    pytest.param(lambda: av.track_memory(model="model"), TypeError, "nn.Module", id="model"),
    pytest.param(lambda: av.track_memory(optimizer=[1]), TypeError, "Optimizer", id="optimizer"),
    pytest.param(lambda: av.track_memory(nn.Linear(2, 2), cuda_history=True), ValueError,
                 "cuda_history", id="cuda-history-off-cuda"),
    pytest.param(lambda: av.track_memory(device=3.5), TypeError, "device", id="device-type"),
    pytest.param(_snapshot_without_history, RuntimeError, "cuda_history=True", id="snapshot"),
    pytest.param(_used_once, RuntimeError, "one with-block", id="reused"),
    pytest.param(lambda: av.compare_memory([_two_runs()["small"]]), ValueError, "two or more",
                 id="compare-one"),
    pytest.param(lambda: av.compare_memory(_two_runs(), titles=["x"]), ValueError,
                 "one title per run", id="compare-titles"),
    pytest.param(lambda: av.compare_memory([_two_runs()["small"], 3]), TypeError,
                 "MemoryRecord", id="compare-item"),
    pytest.param(lambda: av.compare_memory(_two_runs(), figsize=(6.6, 0)), ValueError,
                 r"figsize must be \(width, height\)", id="compare-figsize"),
    pytest.param(lambda: av.compare_memory(_two_runs(), figsize=6.6), ValueError,
                 "two positive numbers", id="compare-figsize-number"),
    pytest.param(lambda: av.estimate_memory(lambda: _LINEAR, torch.randn(1, 2),
                                            optimizer=torch.optim.SGD(_LINEAR.parameters())),
                 TypeError, "factory", id="estimate-optimizer-instance"),
    pytest.param(lambda: av.estimate_memory(lambda: nn.LSTM(2, 2), torch.randn(1, 2, 2)),
                 TypeError, "step_fn", id="estimate-tuple-output"),
    pytest.param(lambda: av.estimate_memory(lambda: nn.Linear(2, 2), torch.randn(1, 2), steps=0),
                 ValueError, "steps", id="estimate-steps"),
    # A module is callable, so it used to pass as a factory and fail inside forward().
    pytest.param(lambda: av.estimate_memory(nn.Linear(3, 2), torch.randn(4, 3)), TypeError,
                 r"factory such as lambda: Linear\(\.\.\.\).*built under torch.device\('meta'\)",
                 id="estimate-module-instance"),
])
def test_bad_input_is_explained(call, error: type[Exception], match: str) -> None:  # noqa: ANN001
    with pytest.raises(error, match=match):
        call()


def test_cuda_device_without_cuda_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    # On a CPU-only build torch.cuda.current_device() fails with a bare AssertionError
    # ("Torch not compiled with CUDA enabled"); the check comes first and says what to pass.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for device in ("cuda", torch.device("cuda", 0)):
        with pytest.raises(ValueError, match=r"device='cuda(:0)?' asks to track CUDA memory.*"
                                             r"device='cpu'"):
            av.track_memory(nn.Linear(3, 2), device=device)


def test_bf16_autocast_saves_weight_copies_as_activation() -> None:
    # Autocast casts each weight to bf16 per op and the op saves that copy for backward:
    # new storages held by autograd, so activation goes UP next to float32.
    torch.manual_seed(0)
    model = mlp(64, 128, 8, depth=1)
    x = torch.randn(8, 64)
    weights = {p.shape for p in model.parameters() if p.dim() == 2}

    def saved_by_autograd(autocast: bool) -> tuple[int, int]:
        """Oracle: (bytes of the storages saved besides parameters and the input, bytes of
        the bf16 copies of the weights among them)."""
        held: dict[int, torch.Tensor] = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            held.setdefault(storage_key(t), t.detach())
            return t.detach()

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                model(x)
        skip = {storage_key(p) for p in model.parameters()} | {storage_key(x)}
        kept = [t for k, t in held.items() if k not in skip]
        copies = [t for t in kept if t.dtype == torch.bfloat16 and t.shape in weights]
        return sum(t.untyped_storage().nbytes() for t in kept), sum(t.nbytes for t in copies)

    act = {}
    for autocast in (False, True):
        with av.track_memory(model) as mem:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                out = model(x)
            act[autocast] = mem.current_by_category["activation"]
        del out
        expected, copies = saved_by_autograd(autocast)
        assert act[autocast] == expected
        assert (copies > 0) == autocast
    _, copies = saved_by_autograd(True)
    assert act[True] > act[False] and act[True] - copies < act[False]


# --- saved-tensor hook pairs inside (or around) the tracker ------------------------------------
# Autograd runs only the innermost saved-tensor hook pair, so checkpoint's own pairs and
# save_on_cpu would hide saved tensors from the tracker's pair unless it composes with them.

class _Probe(torch.autograd.Function):
    """Identity that saves nothing; its backward reads the tracker's activation bytes, in the
    middle of a block's backward (after the second Linear's, before tanh's)."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, readings: list, mem: list) -> torch.Tensor:  # noqa: ANN001
        ctx.readings, ctx.mem = readings, mem
        return a.view_as(a)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # noqa: ANN001, ANN205
        if ctx.mem:
            ctx.readings.append(ctx.mem[0].current_by_category["activation"])
        return grad, None, None


class ProbedBlock(Block):
    def __init__(self, d: int, hidden: int) -> None:
        super().__init__(d, hidden)
        self.readings: list[int] = []
        self.mem: list[av.MemoryRecord] = []  # the record to read, once there is one

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(_Probe.apply(torch.tanh(self.up(x)), self.readings, self.mem))


@pytest.mark.parametrize("n", [1, 3])
def test_recomputed_tensors_are_activations(n: int) -> None:
    d, hidden, batch = 16, 96, 24
    runs = {}
    for ckpt in (False, True):
        torch.manual_seed(0)
        model = Stack(n, d, hidden, ckpt=ckpt)
        model.blocks = nn.ModuleList(ProbedBlock(d, hidden) for _ in range(n))
        runs[ckpt] = model
    x = torch.randn(batch, d)

    # Independent oracle per block (plain saved_tensors_hooks, no tracker): the bytes of the
    # storages it saves besides its input, output and parameters, and its input's bytes.
    saved, in_bytes = [], []
    h = x
    for b in runs[False].blocks:
        in_bytes.append(h.untyped_storage().nbytes())
        nbytes, out = saved_storages(b, h)
        saved.append(nbytes)
        h = out.detach()
    assert all(s > 0 for s in saved)

    readings = {}
    for ckpt, model in runs.items():
        with av.track_memory(model) as mem:
            for b in model.blocks:
                b.mem.append(mem)
            model(x).square().sum().backward()
            end = mem.current_by_category["activation"]
        # Read once per block, last block first; nothing stays labelled once backward is done.
        readings[ckpt] = [r for b in reversed(model.blocks) for r in b.readings]
        assert len(readings[ckpt]) == n and end == 0
        assert mem.samples[-2].op == "backward end" and mem.samples[-2].bytes["activation"] == 0

    # At block k's reading its recomputed tensors are held for backward (by the checkpoint frame
    # until unpacked, then by the node), so a checkpointed run holds them plus the inputs the
    # frames of blocks 1..k keep (block 0's input is the model input: "input", not "activation").
    ks = list(reversed(range(n)))
    assert readings[True] == [sum(in_bytes[1:k + 1]) + saved[k] for k in ks]
    # The plain run also holds, in the same place, everything blocks 0..k-1 saved.
    assert [p - c for p, c in zip(readings[False], readings[True])] == [sum(saved[:k]) for k in ks]
    for a, b in zip(runs[False].parameters(), runs[True].parameters()):
        assert torch.allclose(a.grad, b.grad)


class _CloningHooks(torch.autograd.graph.saved_tensors_hooks):
    """Keeps a private copy of every saved tensor (what save_on_cpu does with pinned memory or
    across devices, which a CPU-only run cannot show)."""

    def __init__(self) -> None:
        super().__init__(lambda t: t.detach().clone(), lambda t: t)


@pytest.mark.parametrize("where", ["inside", "outside"])
@pytest.mark.parametrize("pair", ["save_on_cpu", "cloning"])
def test_inner_hook_pairs_keep_their_tensors_labelled(pair: str, where: str) -> None:
    torch.manual_seed(0)
    model = mlp(depth=3)
    x = torch.randn(16, 32)

    def hooks() -> torch.autograd.graph.saved_tensors_hooks:
        if pair == "save_on_cpu":
            return torch.autograd.graph.save_on_cpu(device_type="cpu")
        return _CloningHooks()

    # Oracle, from a plain pair that sees what the model saves. save_on_cpu keeps a CPU
    # tensor as it is (the same storages autograd would save); the cloning pair keeps one
    # fresh copy per save, parameters and input included.
    if pair == "save_on_cpu":
        expected, _ = saved_storages(model, x)
    else:
        sizes: list[int] = []
        with torch.autograd.graph.saved_tensors_hooks(
                lambda t: sizes.append(t.nelement() * t.element_size()) or t.detach(), lambda t: t):
            model(x)
        expected = sum(sizes)
    assert expected > 0

    def run(mem_out: list) -> None:
        if where == "inside":
            with av.track_memory(model) as mem:
                with hooks():
                    out = model(x)
                mem_out.append((mem.current_by_category["activation"], mem))
                out.sum().backward()
        else:
            with hooks():
                with av.track_memory(model) as mem:
                    out = model(x)
                    mem_out.append((mem.current_by_category["activation"], mem))
                    out.sum().backward()

    got: list = []
    run(got)
    activation, mem = got[0]
    assert activation == expected
    assert mem.current_by_category["activation"] == 0  # released with the graph
    assert torch._C._autograd._top_saved_tensors_default_hooks(True) is None


def test_checkpoint_and_offload_leave_results_bit_identical() -> None:
    torch.manual_seed(0)
    base = Stack(3, 16, 64, ckpt=True)
    base.blocks[1].up = nn.Sequential(nn.Linear(16, 64), nn.Dropout(0.3))  # RNG replayed by the recompute
    x = torch.randn(12, 16)
    grads = []
    for tracked in (False, True):
        model = copy.deepcopy(base)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        with av.track_memory(model, opt) if tracked else contextlib.nullcontext() as mem:
            torch.manual_seed(3)
            for i in range(3):
                opt.zero_grad()
                offload = i == 1
                with (torch.autograd.graph.save_on_cpu(device_type="cpu") if offload
                      else contextlib.nullcontext()):
                    loss = model(x).square().mean()
                loss.backward()
                grads.append([p.grad.clone() for p in model.parameters()])
                opt.step()
        if tracked:
            assert mem.max_by_category["activation"] > 0
    n = len(grads) // 2
    for g_plain, g_tracked in zip(grads[:n], grads[n:]):
        assert all(torch.equal(a, b) for a, b in zip(g_plain, g_tracked))
