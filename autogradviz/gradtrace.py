"""Gradient-accumulation trace: what each backward, zero_grad, step and
all-reduce did to every parameter's ``.grad``.

``.grad`` is a running sum: the first backward after it is ``None`` creates it,
every later one adds into it, and only ``zero_grad`` (zeroing in place, or
setting it to ``None``) starts the sum again. `GradTrace` records exactly that,
per parameter and per backward, from the hooks in `autogradviz.recorder`.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from .recorder import TrainingHooks, check_targets, named_params

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.axes import Axes

__all__ = ["GradEvent", "GradTraceRecord", "GradTrace", "EVENT_KINDS", "ACTIONS"]

EVENT_KINDS: tuple[str, ...] = ("backward", "zero_grad", "step", "allreduce")
ACTIONS: tuple[str, ...] = ("created", "accumulated", "zeroed", "set_to_none")


@dataclass(frozen=True)
class GradEvent:
    """One thing that happened to gradients.

    ``micro_step`` counts the backward calls seen so far (a backward event of
    the 3rd backward has micro_step 3; a zero_grad right after it also has 3).
    ``norm`` is the L2 norm of ``.grad`` after the event (None when there is no
    grad). ``synced`` is, under DDP, whether that backward all-reduced (False
    inside ``no_sync()``); None without DDP. An "allreduce" event is one DDP
    bucket; ``bucket`` names its parameters and ``nbytes`` is its buffer size.
    """

    micro_step: int
    kind: str
    param: str | None
    action: str | None
    norm: float | None
    nbytes: int
    synced: bool | None = None
    bucket: tuple[str, ...] = ()


@dataclass(frozen=True)
class GradTraceRecord:
    """Everything a view needs: the parameter names in model order and the events."""

    params: tuple[str, ...]
    events: tuple[GradEvent, ...]

    def norms(self, name: str) -> list[float]:
        """Grad norm of ``name`` after each backward that reached it, in order."""
        if name not in self.params:
            raise ValueError(f"unknown parameter {name!r}; traced parameters are {list(self.params)}")
        return [e.norm for e in self.events
                if e.kind == "backward" and e.param == name and e.norm is not None]


def _norm(t: torch.Tensor) -> float:
    with torch.no_grad():
        return float(torch.linalg.vector_norm(t.detach().to(torch.float64)))


def _is_ddp(model: Any) -> bool:
    try:
        from torch.nn.parallel import DistributedDataParallel
    except ImportError:  # a build without distributed
        return False
    return isinstance(model, DistributedDataParallel)


class _CommState:
    """State of the comm hook we leave on a DDP model: DDP allows one hook per
    model for its whole life, so later traces re-point ``trace`` instead."""

    def __init__(self, process_group: Any) -> None:
        self.process_group = process_group
        self.trace: GradTrace | None = None


def _recording_allreduce(state, bucket):  # noqa: ANN001, ANN201
    # No annotations: DDP checks them against dist.GradBucket/Future, and this module's
    # ``from __future__ import annotations`` would turn them into strings.
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    if state.trace is not None:
        state.trace._bucket(bucket)
    return allreduce_hook(state.process_group, bucket)


class GradTrace:
    """Trace ``.grad`` across any number of backward calls.

    >>> with GradTrace(model, optimizer) as trace:
    ...     for x, y in micro_batches:
    ...         (loss_fn(model(x), y) / k).backward()
    ...     optimizer.step(); optimizer.zero_grad()
    >>> trace.norms("0.weight"), trace.plot()

    On a ``DistributedDataParallel`` model it also registers a communication
    hook that performs the usual averaging all-reduce and records each bucket;
    it stays registered after the trace (DDP cannot remove it) but then only
    all-reduces.
    """

    def __init__(self, model: nn.Module | None = None,
                 optimizer: torch.optim.Optimizer | None = None) -> None:
        check_targets(model, optimizer)
        if model is None and optimizer is None:
            raise ValueError("GradTrace needs a model, an optimizer or both, e.g. GradTrace(model, opt)")
        self.model = model
        self.optimizer = optimizer
        self._params = named_params(model, optimizer)
        self._by_id = {id(p): name for name, p in self._params}
        self._events: list[GradEvent] = []
        self._micro = 0
        self._open = False
        self._was_none: dict[str, bool] = {}
        self._ready: list[tuple[str, nn.Parameter]] = []
        self._buckets: list[GradEvent] = []
        self._had_grad: dict[str, bool] = {}
        self._synced: bool | None = None
        self._hooks: TrainingHooks | None = None
        self._active = False

    # --- context -----------------------------------------------------------------
    def __enter__(self) -> GradTrace:
        if self._active:
            raise RuntimeError("this GradTrace is already active; use a new one per with-block")
        self._hooks = TrainingHooks(self, self.model, self.optimizer)
        self._hooks.install()
        if _is_ddp(self.model):
            self._attach_comm_hook()
        self._active = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self._active = False
        if self._hooks is not None:
            self._hooks.remove()
        state = getattr(self.model, "_autogradviz_comm_state", None)
        if state is not None and state.trace is self:
            state.trace = None

    def _attach_comm_hook(self) -> None:
        model: Any = self.model
        state = getattr(model, "_autogradviz_comm_state", None)
        if state is None:
            state = _CommState(model.process_group)
            try:
                model.register_comm_hook(state, _recording_allreduce)
            except RuntimeError as err:
                raise ValueError(
                    "this DDP model already has a communication hook, so GradTrace cannot add its "
                    "recording all-reduce; trace a DDP model without a comm hook") from err
            object.__setattr__(model, "_autogradviz_comm_state", state)
        state.trace = self

    # --- listener methods (called by TrainingHooks) --------------------------------
    def grad_incoming(self, name: str, param: nn.Parameter) -> None:
        if not self._active:
            return
        if not self._open:
            self._open = True
            self._micro += 1
            self._synced = bool(self.model.require_backward_grad_sync) if _is_ddp(self.model) else None
            # Queued from inside a callback, the close runs after every callback queued
            # during backward, including DDP's, which writes the averaged grads back.
            engine = torch.autograd.Variable._execution_engine
            engine.queue_callback(lambda: engine.queue_callback(self._close_backward))
        self._was_none[name] = param.grad is None

    def grad_ready(self, name: str, param: nn.Parameter) -> None:
        if self._active:
            self._ready.append((name, param))

    def _bucket(self, bucket: Any) -> None:
        if not self._active:
            return
        names = tuple(self._by_id.get(id(p), "?") for p in bucket.parameters())
        self._buckets.append(GradEvent(self._micro, "allreduce", None, None, None,
                                       bucket.buffer().nbytes, self._synced, names))

    def _close_backward(self) -> None:
        self._open = False
        order = {name: i for i, (name, _) in enumerate(self._params)}
        for name, p in sorted(self._ready, key=lambda item: order[item[0]]):
            grad = p.grad
            action = "created" if self._was_none.get(name, True) else "accumulated"
            self._events.append(GradEvent(
                self._micro, "backward", name, action,
                None if grad is None else _norm(grad),
                0 if grad is None else grad.nelement() * grad.element_size(), self._synced))
        self._events.extend(self._buckets)
        self._ready.clear()
        self._buckets.clear()
        self._was_none.clear()

    def zero_grad_start(self) -> None:
        self._had_grad = {name: p.grad is not None for name, p in self._params}

    def zero_grad_end(self) -> None:
        if not self._active:
            return
        for name, p in self._params:
            if not self._had_grad.get(name):
                continue
            g = p.grad
            if g is None:
                self._events.append(GradEvent(self._micro, "zero_grad", name, "set_to_none", None, 0))
            else:
                self._events.append(GradEvent(self._micro, "zero_grad", name, "zeroed", _norm(g),
                                              g.nelement() * g.element_size()))

    def step_end(self) -> None:
        if self._active:
            self._events.append(GradEvent(self._micro, "step", None, None, None, 0))

    # --- results -----------------------------------------------------------------
    @property
    def params(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self._params)

    @property
    def events(self) -> list[GradEvent]:
        return list(self._events)

    def record(self) -> GradTraceRecord:
        return GradTraceRecord(self.params, tuple(self._events))

    def norms(self, name: str) -> list[float]:
        """Grad norm of ``name`` after each backward that reached it."""
        return self.record().norms(name)

    def plot(self, ax: Axes | None = None, title: str | None = None,
             params: Sequence[str] | None = None) -> Figure:
        """Grad norm per parameter across micro-steps, with zero_grad, step and
        all-reduce marked. ``params`` picks which parameters to draw."""
        from .plots import plot_gradtrace

        return plot_gradtrace(self.record(), ax=ax, title=title, params=params)
