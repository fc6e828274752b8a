"""trace_grads against what torch's .grad actually holds."""
from __future__ import annotations

import copy
import json
import math
import socket
import time
from pathlib import Path

import pytest
import torch
from torch import nn

import autogradviz as av


def model_and_data(seed: int = 0) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 1))
    return model, torch.randn(12, 6), torch.randn(12, 1)


def test_micro_batches_build_the_big_batch_grad() -> None:
    model, x, y = model_and_data()
    big = copy.deepcopy(model)
    nn.functional.mse_loss(big(x), y).backward()

    k = 4
    with av.trace_grads(model) as trace:
        for xb, yb in zip(x.chunk(k), y.chunk(k)):
            (nn.functional.mse_loss(model(xb), yb) / k).backward()
    for a, b in zip(model.parameters(), big.parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-6)

    names = [n for n, _ in model.named_parameters()]
    assert trace.params == tuple(names)
    backward = [e for e in trace.events if e.kind == "backward"]
    assert len(backward) == k * len(names)
    assert [e.action for e in backward if e.micro_step == 1] == ["created"] * len(names)
    assert all(e.action == "accumulated" for e in backward if e.micro_step > 1)
    for name, p in model.named_parameters():
        norms = trace.norms(name)
        assert len(norms) == k
        assert norms[-1] == pytest.approx(p.grad.norm().item(), rel=1e-6)
        assert all(e.nbytes == p.numel() * 4 for e in backward if e.param == name)


def test_forgotten_zero_grad_doubles_the_grad() -> None:
    model, x, y = model_and_data()
    with av.trace_grads(model) as trace:
        nn.functional.mse_loss(model(x), y).backward()
        first = [p.grad.clone() for p in model.parameters()]
        nn.functional.mse_loss(model(x), y).backward()  # no zero_grad in between
    for p, g in zip(model.parameters(), first):
        assert torch.equal(p.grad, 2 * g)
    for name, _ in model.named_parameters():
        n1, n2 = trace.norms(name)
        assert n2 == pytest.approx(2 * n1, rel=1e-9)


def test_zero_grad_and_step_events() -> None:
    model, x, y = model_and_data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with av.trace_grads(model, opt) as trace:
        model(x).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        model(x).sum().backward()
        opt.step()
        model.zero_grad()  # set_to_none=True is the default since torch 2.0
    n = len(trace.params)
    kinds = [e.kind for e in trace.events]
    assert kinds == ["backward"] * n + ["step"] + ["zero_grad"] * n + ["backward"] * n + ["step"] + ["zero_grad"] * n
    zeroed = [e for e in trace.events if e.kind == "zero_grad" and e.micro_step == 1]
    assert all(e.action == "zeroed" and e.norm == 0.0 and e.nbytes > 0 for e in zeroed)
    second = [e for e in trace.events if e.kind == "backward" and e.micro_step == 2]
    assert all(e.action == "accumulated" for e in second)  # into zeros, but still accumulated
    cleared = [e for e in trace.events if e.kind == "zero_grad" and e.micro_step == 2]
    assert all(e.action == "set_to_none" and e.norm is None and e.nbytes == 0 for e in cleared)
    assert all(p.grad is None for p in model.parameters())
    assert {e.kind for e in trace.events} <= set(av.GRAD_EVENT_KINDS)
    assert {e.action for e in trace.events} == {*av.GRAD_ACTIONS, None}
    # Hooks and wrappers are gone after the block.
    assert "zero_grad" not in vars(opt) and "zero_grad" not in vars(model)
    model(x).sum().backward()
    assert len(trace.events) == len(kinds)


def test_plot_marks_the_events() -> None:
    from matplotlib.figure import Figure

    model, x, y = model_and_data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with av.trace_grads(model, opt) as trace:
        for i in range(4):
            model(x).sum().backward()
            if i % 2:
                opt.step()
                opt.zero_grad()
    fig = trace.plot(params=["0.weight", "2.weight"])
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert {"0.weight", "2.weight", "step", "zero_grad", ".grad set to None"} <= set(lines)
    # The parameter's line: backward 1 and 2 accumulate; the step sits at 2.25 and
    # zero_grad at 2.5, where .grad becomes None: the line holds its value to 2.5, then
    # breaks (NaN: None has no norm) until backward 3. The y values are torch's own norms.
    line = lines["0.weight"]
    assert list(line.get_xdata()) == [1.0, 2.0, 2.5, 2.5, 3.0, 4.0, 4.5, 4.5]
    norms = trace.norms("0.weight")
    ys = list(line.get_ydata())
    assert ys[:3] == [norms[0], norms[1], norms[1]] and math.isnan(ys[3])
    assert ys[4:7] == [norms[2], norms[3], norms[3]] and math.isnan(ys[7])
    assert all(y > 0 for y in norms)  # None is never drawn as a zero norm
    # Vertical event lines (step dashed, zero_grad dotted), one per call, after backward 2, 4.
    verticals = sorted(float(ln.get_xdata()[0]) for ln in ax.get_lines()
                       if ln.get_linestyle() in ("--", ":"))
    assert verticals == [2.25, 2.5, 4.25, 4.5]
    # The legend sits outside the axes, so it hides no point.
    fig.canvas.draw()
    box, area = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert box.x0 >= area.x1 or box.y1 <= area.y0  # beside or under the axes
    with pytest.raises(ValueError, match="unknown parameters"):
        trace.plot(params=["nope"])
    with pytest.raises(ValueError, match="unknown parameter"):
        trace.norms("nope")


def test_the_block_yields_the_record_it_fills() -> None:
    model, x, _ = model_and_data()
    ctx = av.trace_grads(model)
    with ctx as grads:
        assert isinstance(grads, av.GradTraceRecord) and grads.events == []
        model(x).sum().backward()
        assert len(grads.events) == len(grads.params)  # filled in as the block runs
    assert grads.norms("0.weight")[-1] == pytest.approx(model[0].weight.grad.norm().item())
    with pytest.raises(RuntimeError, match="one with-block"):
        with ctx:
            pass


@pytest.mark.parametrize("call, error, match", [
    pytest.param(lambda: av.trace_grads(), ValueError, "model, an optimizer", id="nothing"),
    pytest.param(lambda: av.trace_grads("model"), TypeError, "nn.Module", id="model"),
    pytest.param(lambda: av.trace_grads(nn.Linear(2, 2), optimizer="sgd"), TypeError, "Optimizer",
                 id="optimizer"),
])
def test_bad_input_is_explained(call, error: type[Exception], match: str) -> None:  # noqa: ANN001
    with pytest.raises(error, match=match):
        call()


# --- DDP: two gloo processes -------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddp_worker(rank: int, world: int, port: int, out_dir: str) -> None:
    """Runs in a spawned process: 2 micro-steps under no_sync, then one synced."""
    import datetime

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=30))
    try:
        torch.manual_seed(0)
        model = DDP(nn.Linear(4, 3))
        torch.manual_seed(100 + rank)
        xs = torch.randn(3, 5, 4)
        with av.trace_grads(model) as trace:
            with model.no_sync():
                model(xs[0]).sum().backward()
                model(xs[1]).sum().backward()
            local = [p.grad.clone() for p in model.parameters()]
            model(xs[2]).sum().backward()
        # Oracle: DDP's all-reduce averages the (accumulated) local grads across ranks.
        expected = []
        for g, p in zip(local, model.parameters()):
            mine = g + torch.autograd.grad(model.module(xs[2]).sum(), p)[0]
            dist.all_reduce(mine)
            expected.append(mine / world)
        result = {
            "events": [[e.micro_step, e.kind, e.param, e.action, e.norm, e.nbytes, e.synced, list(e.bucket)]
                       for e in trace.events],
            "avg_ok": all(torch.allclose(p.grad, e, atol=1e-6) for p, e in zip(model.parameters(), expected)),
            "norms": {n: trace.norms(n) for n in trace.params},
            "true_norms": {n: p.grad.norm().item() for n, p in model.module.named_parameters()},
        }
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # two spawned processes: several seconds
def test_ddp_no_sync_and_allreduce(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    port = _free_port()
    ctx = mp.start_processes(ddp_worker, args=(2, port, str(tmp_path)), nprocs=2, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + 180
    try:
        while not ctx.join(timeout=1):  # raises if a worker failed, after killing the others
            if time.monotonic() > deadline:
                raise TimeoutError("DDP workers did not finish in 180 s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
    for rank in range(2):
        res = json.loads((tmp_path / f"rank{rank}.json").read_text())
        events = res["events"]
        assert res["avg_ok"]
        reduce = [e for e in events if e[1] == "allreduce"]
        assert reduce and all(e[0] == 3 and e[6] is True for e in reduce)  # only the synced step
        assert sorted(n for e in reduce for n in e[7]) == ["bias", "weight"]
        assert sum(e[5] for e in reduce) == (4 * 3 + 3) * 4
        backward = [e for e in events if e[1] == "backward"]
        assert [e[6] for e in backward] == [False, False, False, False, True, True]
        assert [e[3] for e in backward] == ["created", "created"] + ["accumulated"] * 4
        # The norm recorded after the synced backward is that of the averaged grad.
        for name, true in res["true_norms"].items():
            assert res["norms"][name][-1] == pytest.approx(true, rel=1e-6)
    # Different data per rank: the local (no_sync) norms differ, the synced ones agree.
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text())["norms"] for r in range(2))
    assert r0["weight"][0] != pytest.approx(r1["weight"][0])
    assert r0["weight"][-1] == pytest.approx(r1["weight"][-1], rel=1e-6)
