"""No recorder changes what torch does: a differential suite with torch as the oracle.

Each program below is one small training step (or a step that torch rejects). It runs
once in plain torch, the oracle, and once inside each recorder. The outcome must be
the same: the same exception type and message start, or bit-identical gradients and
parameters after ``optimizer.step()``. Gradients already accumulated when an exception
stopped the step are compared too, so a recorder cannot raise at a different point.

``record_comm`` needs a DDP model on a real process group; it runs the same idea on
two ranks in one torchrun job (tests/dist_scripts/faithful_comm.py, marked slow).

Why this exists: saved-tensor hooks switch off autograd's in-place version check, so
a memory recorder built on them once returned wrong gradients where torch raises.
With the check removed from `autogradviz.memory.recorder._Saved`'s unpack, the in-place rows
of ``track_memory`` fail here.
"""
from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import autogradviz as agv

DIST_SCRIPT = Path(__file__).resolve().parent / "dist_scripts" / "faithful_comm.py"
#: How much of an exception's message must match (the rest may hold addresses).
MESSAGE_START = 200

Backward = Callable[..., None]


def _plain_backward(loss: torch.Tensor, **kwargs: Any) -> None:
    loss.backward(**kwargs)


def _ordered_backward(loss: torch.Tensor, **kwargs: Any) -> None:
    agv.backward_order(loss, **kwargs)


# --- the programs ------------------------------------------------------------------------
class Net(nn.Module):
    """Two linear layers; ``mid`` is what each program does between them."""

    def __init__(self, mid: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 inplace_relu: bool = False) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.act = nn.ReLU(inplace=inplace_relu)
        self.fc2 = nn.Linear(16, 4)
        self.mid = mid

    def block(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc1(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.block(x)
        if self.mid is not None:
            h = self.mid(h)
        return self.fc2(h)


class ScaleExp(torch.autograd.Function):
    """exp(x) * 2, saving both its input and its output."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        y = x.exp()
        ctx.save_for_backward(x, y)
        return y * 2

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        x, y = ctx.saved_tensors
        return g * y * 2 + 0 * x


def _batch() -> torch.Tensor:
    return torch.randn(6, 8)


def p_plain(m: Net, opt: Any, bw: Backward) -> None:
    bw(m(_batch()).square().mean())
    opt.step()


def p_inplace_saved_output(m: Net, opt: Any, bw: Backward) -> None:
    h = torch.sigmoid(m.fc1(_batch()))  # sigmoid saves its output
    h += 1
    bw(m.fc2(h).sum())
    opt.step()


def p_inplace_saved_input(m: Net, opt: Any, bw: Backward) -> None:
    h = m.fc1(_batch())
    y = h.sin()  # sin saves its input
    h.mul_(2)
    bw(m.fc2(y).sum())
    opt.step()


def p_inplace_saved_leaf(m: Net, opt: Any, bw: Backward) -> None:
    loss = m(_batch()).sum()
    with torch.no_grad():  # the weight fc2 saved for its input's gradient
        m.fc2.weight.mul_(0.5)
    bw(loss)
    opt.step()


def p_inplace_through_view(m: Net, opt: Any, bw: Backward) -> None:
    h = m.fc1(_batch())
    y = h[:, :4].exp()  # exp saves its output, which the view below shares
    y[0].zero_()
    bw(y.sum() + m.fc2(h).sum())
    opt.step()


def p_view_of_saved(m: Net, opt: Any, bw: Backward) -> None:
    h = m.fc1(_batch())
    v = h.t()[2:10]  # a view of a saved-for-backward tensor, itself saved by tanh
    bw((v.tanh() * v).sum() + m.fc2(h).sum())
    opt.step()


def p_relu_inplace(m: Net, opt: Any, bw: Backward) -> None:
    bw(m(_batch()).square().mean())  # Net(inplace_relu=True): relu_ saves its output
    opt.step()


def p_relu_inplace_on_saved(m: Net, opt: Any, bw: Backward) -> None:
    h = torch.sigmoid(m.fc1(_batch()))
    nn.ReLU(inplace=True)(h)  # overwrites what sigmoid saved
    bw(m.fc2(h).sum())
    opt.step()


def p_checkpoint(m: Net, opt: Any, bw: Backward) -> None:
    h = checkpoint(m.block, _batch(), use_reentrant=False)
    bw(m.fc2(h).square().mean())
    opt.step()


def p_checkpoint_reentrant(m: Net, opt: Any, bw: Backward) -> None:
    x = _batch().requires_grad_()  # the reentrant variant needs an input that requires grad
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        h = checkpoint(m.block, x, use_reentrant=True)
    bw(m.fc2(h).square().mean())
    opt.step()


def p_double_backward(m: Net, opt: Any, bw: Backward) -> None:
    loss = m(_batch()).square().mean()
    grads = torch.autograd.grad(loss, list(m.parameters()), create_graph=True)
    bw(loss + sum(g.square().sum() for g in grads))  # a gradient penalty
    opt.step()


def p_custom_function(m: Net, opt: Any, bw: Backward) -> None:
    bw(m.fc2(ScaleExp.apply(m.fc1(_batch()) * 0.1)).sum())
    opt.step()


def p_custom_function_inplace(m: Net, opt: Any, bw: Backward) -> None:
    h = m.fc1(_batch()) * 0.1
    y = ScaleExp.apply(h)
    h.add_(1)  # ScaleExp saved h
    bw(m.fc2(y).sum())
    opt.step()


def p_retain_graph(m: Net, opt: Any, bw: Backward) -> None:
    loss = m(_batch()).square().mean()
    bw(loss, retain_graph=True)
    bw(loss * 3)
    opt.step()


def p_backward_twice(m: Net, opt: Any, bw: Backward) -> None:
    loss = m(_batch()).square().mean()
    bw(loss)
    bw(loss)  # the saved tensors are gone
    opt.step()


def p_amp_bf16(m: Net, opt: Any, bw: Backward) -> None:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = m(_batch()).float().square().mean()
    bw(loss)
    opt.step()


def p_accumulate(m: Net, opt: Any, bw: Backward) -> None:
    for _ in range(3):
        bw(m(_batch()).square().mean() / 3)
    opt.step()
    opt.zero_grad(set_to_none=False)
    bw(m(_batch()).sum())
    opt.step()


def p_exception_caught(m: Net, opt: Any, bw: Backward) -> None:
    def boom(h: torch.Tensor) -> torch.Tensor:
        raise ValueError("bad batch")

    m.mid = boom
    with contextlib.suppress(ValueError):
        m(_batch())
    m.mid = None
    bw(m(_batch()).square().mean())  # the next step runs as if nothing had happened
    opt.step()


def p_exception_escapes(m: Net, opt: Any, bw: Backward) -> None:
    bw(m(_batch()).sum())
    opt.step()
    h = m.fc1(_batch())
    raise ValueError(f"stopped mid-step with a {tuple(h.shape)} activation alive")


PROGRAMS: dict[str, tuple[Callable[..., None], dict[str, Any]]] = {
    "plain_step": (p_plain, {}),
    "inplace_saved_output": (p_inplace_saved_output, {}),
    "inplace_saved_input": (p_inplace_saved_input, {}),
    "inplace_saved_leaf": (p_inplace_saved_leaf, {}),
    "inplace_through_view": (p_inplace_through_view, {}),
    "view_of_saved": (p_view_of_saved, {}),
    "relu_inplace": (p_relu_inplace, {"inplace_relu": True}),
    "relu_inplace_on_saved": (p_relu_inplace_on_saved, {}),
    "checkpoint": (p_checkpoint, {}),
    "checkpoint_reentrant": (p_checkpoint_reentrant, {}),
    "double_backward": (p_double_backward, {}),
    "custom_function": (p_custom_function, {}),
    "custom_function_inplace": (p_custom_function_inplace, {}),
    "retain_graph": (p_retain_graph, {}),
    "backward_twice": (p_backward_twice, {}),
    "amp_bf16_cpu": (p_amp_bf16, {}),
    "accumulate": (p_accumulate, {}),
    "exception_caught": (p_exception_caught, {}),
    "exception_escapes": (p_exception_escapes, {}),
}

# --- the recorders -----------------------------------------------------------------------
RECORDERS: dict[str, Callable[[Net, Any], contextlib.AbstractContextManager[Any]]] = {
    "track_memory": lambda m, opt: agv.track_memory(m, opt),
    "trace_grads": lambda m, opt: agv.trace_grads(m, opt),
    "record_modules": lambda m, opt: agv.record_modules(m),
    "live": lambda m, opt: agv.live(m, display=False),
    "trace_dispatch": lambda m, opt: agv.trace_dispatch(),
    # backward_order replaces each backward call (see `outcome`), not a block.
    "backward_order": lambda m, opt: contextlib.nullcontext(),
}


@dataclass
class Outcome:
    error: tuple[str, str] | None  # (type name, message start)
    grads: dict[str, torch.Tensor | None]
    params: dict[str, torch.Tensor]


def outcome(program: str, recorder: str | None) -> Outcome:
    """Run ``program`` in plain torch (``recorder=None``) or inside ``recorder``."""
    fn, kwargs = PROGRAMS[program]
    torch.manual_seed(0)
    model = Net(**kwargs)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    bw = _ordered_backward if recorder == "backward_order" else _plain_backward
    ctx = contextlib.nullcontext() if recorder is None else RECORDERS[recorder](model, opt)
    error = None
    try:
        with ctx:
            fn(model, opt, bw)
    except Exception as err:  # noqa: BLE001 - the exception is the outcome
        error = (type(err).__name__, str(err)[:MESSAGE_START])
    grads = {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    return Outcome(error, grads, params)


@functools.cache
def oracle(program: str) -> Outcome:
    return outcome(program, None)


def assert_same(got: Outcome, want: Outcome) -> None:
    assert got.error == want.error
    for name, g in want.grads.items():
        h = got.grads[name]
        assert (g is None) == (h is None), name
        if g is not None:  # bit-identical, dtype included
            assert h.dtype == g.dtype and torch.equal(h, g), f"grad of {name} differs"
    for name, p in want.params.items():
        assert torch.equal(got.params[name], p), f"{name} differs after step()"


def test_grid_has_both_kinds_of_outcome():
    """The oracle side of the grid: several programs raise, several train."""
    raised = {name for name in PROGRAMS if oracle(name).error is not None}
    assert {"inplace_saved_output", "inplace_saved_input", "inplace_saved_leaf",
            "inplace_through_view", "relu_inplace_on_saved", "custom_function_inplace",
            "backward_twice", "exception_escapes"} == raised
    msg = oracle("inplace_saved_output").error
    assert msg is not None and msg[0] == "RuntimeError" and "inplace operation" in msg[1]


@pytest.mark.parametrize("program", list(PROGRAMS))
@pytest.mark.parametrize("recorder", list(RECORDERS))
def test_recorder_matches_torch(recorder: str, program: str) -> None:
    assert_same(outcome(program, recorder), oracle(program))


def test_issue_example_raises_torchs_error():
    """The report's own example: relu's saved output changed in place."""
    def run() -> None:
        torch.manual_seed(0)
        w = torch.randn(3, requires_grad=True)
        y = torch.relu(w * 1.0)
        y += 1
        y.sum().backward()

    with pytest.raises(RuntimeError) as plain:
        run()
    with pytest.raises(RuntimeError) as tracked, agv.track_memory():
        run()
    assert str(tracked.value) == str(plain.value)


def test_anomaly_mode_hint_matches():
    def run() -> None:
        w = torch.randn(3, requires_grad=True)
        x = w * 2
        y = x.sin()
        x.add_(1)
        y.sum().backward()

    messages = []
    for tracked in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # anomaly mode's traceback warning
            with torch.autograd.set_detect_anomaly(True), pytest.raises(RuntimeError) as err:
                with agv.track_memory() if tracked else contextlib.nullcontext():
                    run()
        messages.append(str(err.value))
    assert messages[0] == messages[1] and "Good luck" in messages[0]


@pytest.mark.slow
def test_record_comm_two_ranks_matches_ddp():
    run = agv.torchrun(DIST_SCRIPT, nproc=2, timeout=240)
    for rank, res in enumerate(run.results):
        assert len(res["programs"]) >= 5, res
        for name, row in res["programs"].items():
            assert row["plain"] == row["recorded"], (rank, name)
        raised = [name for name, row in res["programs"].items() if row["plain"]["error"]]
        assert "inplace_saved_output" in raised and "plain_step" not in raised
