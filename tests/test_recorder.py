"""The shared recorder: one entry per storage, frees when they happen, phases, labels."""
from __future__ import annotations

import contextlib
import threading

import torch
from torch import nn

import autogradviz as av
from autogradviz.memory.recorder import StorageLedger


def test_views_share_one_storage() -> None:
    with av.track_memory() as mem:
        base = torch.zeros(256)
        views = [base.view(16, 16), base[::2], base.unsqueeze(0)]
        assert mem.current_bytes == base.untyped_storage().nbytes() == 1024
        del base
        assert mem.current_bytes == 1024
        views.clear()
        assert mem.current_bytes == 0


def test_resize_changes_the_count() -> None:
    with av.track_memory() as mem:
        t = torch.empty(10)
        t.resize_(1000)
        assert mem.current_bytes == t.untyped_storage().nbytes() == 4000
        out = torch.empty(0)
        torch.add(torch.ones(50), 1, out=out)  # out= resizes a storage we already know
        assert mem.current_bytes == 4000 + out.untyped_storage().nbytes()
        del t, out
        assert mem.current_bytes == 0


def test_backward_ops_are_seen_as_backward() -> None:
    # The dispatch mode is thread-local; CPU backward runs on the calling thread,
    # so its allocations must reach the ledger and be labelled "backward".
    model = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 1))
    x = torch.randn(32, 8)
    with av.track_memory(model) as mem:
        model(x).sum().backward()
    backward = [s for s in mem.samples if s.phase == "backward"]
    ops = {s.op for s in backward}
    assert {"aten.mm", "aten.tanh_backward"} <= ops
    assert backward[-1].op == "backward end"
    # Every grad was made in backward and labelled gradient back to its birth.
    first_grad = next(s for s in mem.samples if s.bytes["gradient"] > 0)
    assert first_grad.phase == "backward" and first_grad.op.startswith("aten.")


def test_work_on_another_thread_is_not_seen() -> None:
    # The other side of thread-locality: a tensor made on another thread is invisible
    # until it reaches the watched code (here: it never does).
    with av.track_memory() as mem:
        box: list[torch.Tensor] = []
        th = threading.Thread(target=lambda: box.append(torch.empty(1000)))
        th.start()
        th.join()
        assert mem.current_bytes == 0
        torch.empty(10)
    assert mem.peak_bytes == 40


def test_labels_follow_precedence() -> None:
    model = nn.Linear(16, 16)
    x = torch.randn(4, 16)
    with av.track_memory(model) as mem:
        y = model(x)  # addmm saves x (input) and the weight (parameter): neither is an activation
        assert mem.current_by_category["activation"] == 0
        assert mem.current_by_category["input"] == x.nbytes
        z = y.exp()  # exp saves its result: an activation while the graph holds it
        assert mem.current_by_category["activation"] == z.nbytes
        z.sum().backward()
        assert mem.current_by_category["activation"] == 0  # graph freed, z still alive
        assert mem.current_by_category["temporary"] >= z.nbytes + y.nbytes


def test_optimizer_state_is_labelled_from_birth() -> None:
    model = nn.Linear(32, 32)
    opt = torch.optim.Adam(model.parameters(), foreach=False)
    with av.track_memory(model, opt) as mem:
        model(torch.randn(2, 32)).sum().backward()
        opt.step()
    births = [s for s in mem.samples if s.op == "aten.zeros_like"]
    assert births and all(s.phase == "optimizer" for s in births)
    # The samples right after zeros_like already count exp_avg as optimizer state.
    assert births[0].bytes["optimizer_state"] == model.weight.nbytes
    assert births[0].bytes["temporary"] <= mem.samples[births[0].index - 1].bytes["temporary"]


def test_ledger_samples_are_consistent() -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with av.track_memory(model, opt) as mem:
        for _ in range(3):
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
    tl = mem.samples
    assert [s.index for s in tl] == list(range(len(tl)))
    assert all(set(s.bytes) == set(av.CATEGORIES) and min(s.bytes.values()) >= 0 for s in tl)
    assert {s.phase for s in tl} == set(av.PHASES)
    assert all(s.cuda_allocated is None and s.cuda_reserved is None for s in tl)
    assert tl[-1].optimizer_steps == 3
    assert isinstance(mem.peak, av.MemorySample) and mem.peak.total == mem.peak_bytes


def test_stopped_ledger_ignores_late_frees() -> None:
    led = StorageLedger(torch.device("cpu"))
    led.start()
    try:
        t = torch.empty(100)
    finally:
        led.stop()
    before = list(led.cur)
    assert led.record.current == before == [0] * 5 + [400]
    del t
    assert led.cur == before and led.record.current == before


def _hook_state() -> tuple:
    """What tracking may change globally: saved_tensors_hooks' own methods (and any override
    in torch's subclasses), the active saved-tensor pair and the dispatch mode stack."""
    from torch.autograd.graph import save_on_cpu, saved_tensors_hooks
    from torch.utils import checkpoint as ckpt

    classes = (saved_tensors_hooks, save_on_cpu, ckpt._checkpoint_hook, ckpt._recomputation_hook)
    methods = tuple((c, name, c.__dict__.get(name)) for c in classes for name in ("__enter__", "__exit__"))
    return (methods, torch._C._autograd._top_saved_tensors_default_hooks(True),
            torch._C._len_torch_dispatch_stack())


def test_no_patch_outlives_the_tracker() -> None:
    from torch.utils.checkpoint import checkpoint

    before = _hook_state()
    assert before[1] is None and before[2] == 0
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 8))
    x = torch.randn(4, 8)

    def step() -> None:
        with torch.autograd.graph.save_on_cpu(device_type="cpu"):
            y = checkpoint(model, x, use_reentrant=False)
        y.sum().backward()

    with av.track_memory(model) as mem:
        step()
        assert _hook_state() != before  # composing while active
    assert mem.max_by_category["activation"] > 0
    assert _hook_state() == before

    # An error inside the block, and one inside a nested tracker, restore everything too.
    class Boom(Exception):
        pass

    for nested in (False, True):
        try:
            with av.track_memory(model):
                if nested:
                    with av.track_memory(device="meta"):
                        step()
                        raise Boom
                step()
                raise Boom
        except Boom:
            pass
        assert _hook_state() == before

    # Nested trackers that exit out of order still leave nothing behind: the outer one is
    # entered first and exited first (each stack exits what it entered, even if a line
    # in between fails).
    outer_stack, inner_stack = contextlib.ExitStack(), contextlib.ExitStack()
    with inner_stack, outer_stack:  # exits outer_stack first
        outer_stack.enter_context(av.track_memory(model))
        inner_stack.enter_context(av.track_memory(device="meta"))
        step()
    assert _hook_state() == before


def test_hook_pairs_on_another_thread_are_not_composed() -> None:
    # The composing patch is process-wide; the watching must stay on the tracked thread.
    a = torch.randn(300, requires_grad=True)
    box: list[torch.Tensor] = []

    def other() -> None:
        with torch.autograd.graph.save_on_cpu(device_type="cpu"):
            box.append(a.exp())

    with av.track_memory() as mem:
        th = threading.Thread(target=other)
        th.start()
        th.join()
        assert mem.current_bytes == 0
        with torch.autograd.graph.save_on_cpu(device_type="cpu"):
            b = a.exp()  # exp saves its result: seen here, on the tracked thread
        assert mem.current_by_category["activation"] == b.nbytes
    box[0].sum().backward()
    assert torch.equal(a.grad, b.detach())
