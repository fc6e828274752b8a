"""Gradient-accumulation trace: what each backward, zero_grad, step and
all-reduce did to every parameter's ``.grad``.

``.grad`` is a running sum: the first backward after it is ``None`` creates it,
every later one adds into it, and only ``zero_grad`` (zeroing in place, or
setting it to ``None``) starts the sum again. `trace_grads` records exactly that,
per parameter and per backward, from the hooks in `autogradviz.memory.recorder`, into a
`GradTraceRecord` (`autogradviz.memory.records`).
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn

from .records import GRAD_ACTIONS, GRAD_EVENT_KINDS, GradAction, GradEvent, GradTraceRecord
from .recorder import TrainingHooks, check_targets, named_params

__all__ = ["GradEvent", "GradTraceRecord", "GRAD_EVENT_KINDS", "GRAD_ACTIONS", "trace_grads"]


def _measure(grad: torch.Tensor | None) -> tuple[float | None, int]:
    """(L2 norm, bytes) of a ``.grad``; (None, 0) when there is none."""
    if grad is None:
        return None, 0
    with torch.no_grad():
        norm = float(torch.linalg.vector_norm(grad.detach().to(torch.float64)))
    return norm, grad.nelement() * grad.element_size()


def _is_ddp(model: Any) -> bool:
    try:
        from torch.nn.parallel import DistributedDataParallel
    except ImportError:  # a build without distributed
        return False
    return isinstance(model, DistributedDataParallel)


class _CommState:
    """State of the comm hook we leave on a DDP model: DDP allows one hook per
    model for its whole life, so later traces re-point ``tracer`` instead."""

    def __init__(self, process_group: Any) -> None:
        self.process_group = process_group
        self.tracer: _GradTracer | None = None


def _recording_allreduce(state, bucket):  # noqa: ANN001, ANN201
    # No annotations: DDP checks them against dist.GradBucket/Future, and this module's
    # ``from __future__ import annotations`` would turn them into strings.
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    if state.tracer is not None:
        state.tracer._bucket(bucket)
    return allreduce_hook(state.process_group, bucket)


class _GradTracer:
    """What `trace_grads` returns: a one-use context manager that installs the hooks on
    entry, yields the `GradTraceRecord` it fills, and removes the hooks on exit."""

    def __init__(self, model: nn.Module | None, optimizer: torch.optim.Optimizer | None) -> None:
        check_targets(model, optimizer)
        if model is None and optimizer is None:
            raise ValueError("trace_grads needs a model, an optimizer or both, "
                             "e.g. trace_grads(model, optimizer=opt)")
        self.model = model
        self.optimizer = optimizer
        self._params = named_params(model, optimizer)
        self._order = {name: i for i, (name, _) in enumerate(self._params)}
        self._by_id = {id(p): name for name, p in self._params}
        self.record = GradTraceRecord(tuple(self._order))
        self._events = self.record.events
        self._micro = 0
        self._open = False
        self._was_none: dict[str, bool] = {}
        self._ready: list[tuple[str, nn.Parameter]] = []
        self._buckets: list[GradEvent] = []
        self._had_grad: dict[str, bool] = {}
        self._synced: bool | None = None
        self._hooks: TrainingHooks | None = None
        self._active = False
        self._used = False

    # --- context -----------------------------------------------------------------
    def __enter__(self) -> GradTraceRecord:
        if self._used:
            raise RuntimeError("a trace_grads(...) context records one with-block; "
                               "call trace_grads() again for a new one")
        self._used = True
        self._hooks = TrainingHooks(self, self.model, self.optimizer, self._params)
        self._hooks.install()
        try:
            if _is_ddp(self.model):
                self._attach_comm_hook()
        except BaseException:
            self._hooks.remove()
            raise
        self._active = True
        return self.record

    def __exit__(self, *exc: Any) -> None:
        self._active = False
        if self._hooks is not None:
            self._hooks.remove()
        state = getattr(self.model, "_autogradviz_comm_state", None)
        if state is not None and state.tracer is self:
            state.tracer = None

    def _attach_comm_hook(self) -> None:
        model: Any = self.model
        state = getattr(model, "_autogradviz_comm_state", None)
        if state is None:
            state = _CommState(model.process_group)
            try:
                model.register_comm_hook(state, _recording_allreduce)
            except RuntimeError as err:
                raise ValueError(
                    "this DDP model already has a communication hook, so trace_grads cannot add "
                    "its recording all-reduce; trace a DDP model without a comm hook") from err
            object.__setattr__(model, "_autogradviz_comm_state", state)
        state.tracer = self

    # --- listener methods (called by TrainingHooks) --------------------------------
    def grad_incoming(self, name: str, param: nn.Parameter) -> None:
        if not self._active:
            return
        if not self._open:
            self._open = True
            self._micro += 1
            model: Any = self.model
            self._synced = bool(model.require_backward_grad_sync) if _is_ddp(model) else None
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
        for name, p in sorted(self._ready, key=lambda item: self._order[item[0]]):
            action: GradAction = ("created" if self._was_none.get(name, True)
                                  else "accumulated")
            norm, nbytes = _measure(p.grad)
            self._events.append(GradEvent(self._micro, "backward", name, action, norm, nbytes,
                                          self._synced))
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
            if self._had_grad.get(name):
                norm, nbytes = _measure(p.grad)
                action: GradAction = "set_to_none" if p.grad is None else "zeroed"
                self._events.append(GradEvent(self._micro, "zero_grad", name, action, norm,
                                              nbytes))

    def step_end(self) -> None:
        if self._active:
            self._events.append(GradEvent(self._micro, "step", None, None, None, 0))


def trace_grads(model: nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None
                ) -> AbstractContextManager[GradTraceRecord]:
    """Record per-parameter gradient events over any number of steps while the block runs.

    >>> with trace_grads(model, optimizer=opt) as grads:   # a GradTraceRecord
    ...     for x, y in micro_batches:
    ...         (loss_fn(model(x), y) / k).backward()
    ...     opt.step(); opt.zero_grad()
    >>> grads.norms("0.weight"), grads.events, grads.plot()

    What it records: a `GradTraceRecord`, filled in as the block runs, with one
    `GradEvent` per parameter for each backward (``.grad`` "created" or "accumulated",
    its norm after), each ``zero_grad`` ("zeroed" or "set_to_none") and each optimizer
    step. Compare `autogradviz.trace`, which records the autograd graph itself, and
    `autogradviz.track_memory`, which records bytes.

    ``model`` and ``optimizer`` are both optional, but one is needed; parameters are named
    as in ``model.named_parameters()`` (optimizer-only ones as ``group<g>.<i>``).
    Arguments are checked here, before the block; a context records one block.

    On a ``DistributedDataParallel`` model it also registers a communication hook that
    performs the usual averaging all-reduce and records each bucket as an "allreduce"
    event; backward events say whether that backward all-reduced (``synced`` is False
    inside ``no_sync()``). The hook stays registered after the trace (DDP cannot remove
    it) but then only all-reduces.
    """
    return _GradTracer(model, optimizer)

