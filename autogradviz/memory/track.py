"""Memory timeline by category: parameters, gradients, optimizer state, inputs,
activations (saved for backward) and temporaries.

>>> with track_memory(model=model, optimizer=opt) as mem:
...     for x, y in batches:
...         loss_fn(model(x), y).backward(); opt.step(); opt.zero_grad()
>>> mem.peak_bytes, mem.peak_by_category, mem.plot()

Bytes are exact: every untyped storage on the watched device is counted once,
however many views share it, from the op that allocates it to the moment it is
freed. Tensors that existed before the ``with`` are counted when they are
parameters, buffers (as "parameter"), grads, optimizer state, model inputs or
saved for backward; other older tensors are not. Kernel-internal scratch space
that never becomes a tensor is invisible to the dispatcher and is not counted.
See `autogradviz.memory.recorder` for the category precedence.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from .records import CATEGORIES, PHASES, MemoryRecord, MemorySample
from .recorder import (
    StorageLedger, TrainingHooks, as_device, check_targets, named_params, state_tensors,
    tensors_in,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "CATEGORIES", "PHASES", "MemorySample", "MemoryRecord",
    "track_memory", "compare_memory", "estimate_memory",
]


class _MemoryTracker:
    """What `track_memory` returns: a one-use context manager that installs the ledger
    and the training hooks on entry, yields the ledger's `MemoryRecord`, and removes
    everything on exit. Not public: the record is what callers keep."""

    def __init__(self, model: nn.Module | None, optimizer: torch.optim.Optimizer | None,
                 device: torch.device | str | None, cuda_history: bool) -> None:
        check_targets(model, optimizer)
        self.model = model
        self.optimizer = optimizer
        # Walked once: the device guess, the starting labels and the hooks all use it.
        self._named = named_params(model, optimizer)
        tensors = [t for _, t in self._named]
        if model is not None:
            tensors += list(model.buffers())
        self.device = as_device(device, tensors)
        if cuda_history and self.device.type != "cuda":
            raise ValueError(f"cuda_history=True records the CUDA caching allocator, but the "
                             f"tracked device is {self.device}; drop cuda_history or track a "
                             "CUDA model")
        self.cuda_history = cuda_history
        self._ledger = StorageLedger(self.device)
        self._ledger.record.cuda_history = cuda_history
        self._hooks: TrainingHooks | None = None
        self._used = False

    # --- context -------------------------------------------------------------------
    def __enter__(self) -> MemoryRecord:
        if self._used:
            raise RuntimeError("a track_memory(...) context records one with-block; "
                               "call track_memory() again for a new one")
        self._used = True
        record = self._ledger.record
        if self.cuda_history:
            torch.cuda.memory._record_memory_history(max_entries=200_000)
            record.take_cuda_snapshot = torch.cuda.memory._snapshot
        led = self._ledger
        led.start()
        try:
            # `_named` already holds every model parameter (then optimizer-only ones), so
            # the model adds only its buffers: each tensor is looked up once.
            params = [p for _, p in self._named]
            buffers = list(self.model.buffers()) if self.model is not None else []
            led.mark([*params, *buffers], "parameter", None)
            led.mark([p.grad for p in params if p.grad is not None], "gradient", None)
            if self.optimizer is not None:
                led.mark(state_tensors(self.optimizer), "optimizer_state", None)
            led.sample("start")
            self._hooks = TrainingHooks(self, self.model, self.optimizer, self._named)
            self._hooks.install()
        except BaseException:
            self.__exit__(None, None, None)  # leave no hook, mode or patch behind
            raise
        return record

    def __exit__(self, *exc: Any) -> None:
        # Each undo runs even when an earlier one fails, so nothing stays installed.
        try:
            if self._hooks is not None:
                self._hooks.remove()
        finally:
            try:
                self._ledger.stop()
            finally:
                if self.cuda_history:
                    record = self._ledger.record
                    record.take_cuda_snapshot = None
                    record.cuda_snapshot = torch.cuda.memory._snapshot()
                    torch.cuda.memory._record_memory_history(enabled=None)

    # --- listener methods (called by TrainingHooks) ------------------------------------
    def forward_start(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._ledger.phase = "forward"
        self._ledger.mark(tensors_in((args, kwargs)), "input", "forward input")

    def forward_end(self) -> None:
        self._ledger.sample("forward end")
        self._ledger.phase = "other"

    def grad_ready(self, name: str, param: nn.Parameter) -> None:
        if param.grad is not None:
            self._ledger.mark([param.grad], "gradient", "grad ready")

    def zero_grad_start(self) -> None:
        self._ledger.phase = "zero_grad"

    def zero_grad_end(self) -> None:
        self._ledger.sample("zero_grad")
        self._ledger.phase = "other"

    def step_start(self) -> None:
        self._ledger.phase = "optimizer"

    def step_end(self) -> None:
        led = self._ledger
        assert self.optimizer is not None  # the step hooks exist only with an optimizer
        led.mark(state_tensors(self.optimizer), "optimizer_state", "optimizer state")
        led.steps += 1
        led.sample("optimizer.step")
        led.phase = "other"


def track_memory(model: nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None, *,
                 device: torch.device | str | None = None,
                 cuda_history: bool = False) -> AbstractContextManager[MemoryRecord]:
    """Record live memory by category while the ``with`` block runs.

    >>> with track_memory(model, opt) as mem:       # mem: a MemoryRecord, filled as it runs
    ...     loss_fn(model(x), y).backward(); opt.step(); opt.zero_grad()
    >>> mem.peak_bytes, mem.peak_by_category, mem.plot()

    What it records: a `MemoryRecord`, one `MemorySample` after every op that allocates
    on the watched device (and at phase boundaries), each with the live bytes per
    category (`CATEGORIES`). Compare `autogradviz.trace`, which records the autograd
    graph, and `autogradviz.trace_grads`, which records gradient events per parameter.

    ``model`` gives forward phases, parameters/buffers and inputs; ``optimizer``
    gives step phases and optimizer state; both are optional. ``device=None``
    watches the device the model/optimizer tensors live on (CPU if none).
    On CUDA every sample also reads ``memory_allocated``/``memory_reserved``;
    ``cuda_history=True`` additionally records the allocator history for
    `MemoryRecord.save_snapshot`. The watched code's results are unchanged.
    Arguments are checked here, before the block; a context records one block.

    Under autocast, "activation" is larger than the same model in float32 would
    suggest from its activations alone: ``torch.autocast`` casts each weight to the
    low-precision dtype once per op that uses it, and the op saves that copy for
    backward. Those copies are new storages held by autograd, so they count as
    activation (the float32 parameter itself stays "parameter"). Under bf16 autocast
    the peak activation can therefore go up, not down; that is what memory holds.

    Saved-tensor hook pairs entered inside or around the block
    (``torch.utils.checkpoint``, ``save_on_cpu``, your own
    ``saved_tensors_hooks``) keep working, composed with the tracker's own: a
    storage counts as "activation" while autograd keeps a packed value holding
    it (save_on_cpu's copy), and checkpoint's recomputed tensors count from
    their recomputation until the backward node that unpacked them is done.
    To compose, ``saved_tensors_hooks.__enter__`` is replaced while tracking
    and restored at exit (also after an error); the swap takes no lock, so start
    and stop trackers from one thread at a time. Not seen as activation: tensors
    kept for backward outside a packed value (a hook's own cache keyed by a
    handle, selective checkpointing's cache of op outputs; checkpoint's
    recompute frame is the one such holder known), and pairs pushed without
    that method (``torch._C._autograd._push_saved_tensors_default_hooks``
    called directly).
    A checkpointed forward run before the block and recomputed inside it has
    its recomputed tensors counted only until they are unpacked.
    """
    return _MemoryTracker(model, optimizer, device, cuda_history)


def _records(runs: Any, titles: Sequence[str] | None) -> tuple[list[MemoryRecord], list[str]]:
    if isinstance(runs, Mapping):
        names, items = [str(k) for k in runs], list(runs.values())
    elif isinstance(runs, Sequence) and not isinstance(runs, str):
        names, items = [f"run {i + 1}" for i in range(len(runs))], list(runs)
    else:
        raise TypeError("runs must be a mapping {title: MemoryRecord} or a sequence of "
                        f"MemoryRecords (from track_memory), got {type(runs).__name__}")
    if len(items) < 2:
        raise ValueError(f"compare_memory needs two or more runs, got {len(items)}; "
                         "use record.plot() for one")
    for item in items:
        if not isinstance(item, MemoryRecord):
            raise TypeError("each run must be a MemoryRecord (what `with track_memory(...) as "
                            f"mem` gives), got {type(item).__name__}")
    if titles is not None:
        if len(titles) != len(items):
            raise ValueError(f"got {len(titles)} titles for {len(items)} runs; "
                             "pass one title per run")
        names = [str(t) for t in titles]
    return items, names


def _figsize(figsize: Any) -> tuple[float, float] | None:
    if figsize is None:
        return None
    ok = (isinstance(figsize, Sequence) and not isinstance(figsize, str) and len(figsize) == 2
          and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                  for v in figsize))
    if not ok:
        raise ValueError(f"figsize must be (width, height) in inches, two positive numbers, "
                         f"got {figsize!r}; e.g. figsize=(6.6, 3.9) fits a 730 px page")
    return (float(figsize[0]), float(figsize[1]))


def compare_memory(runs: Mapping[str, MemoryRecord] | Sequence[MemoryRecord], *,
                   titles: Sequence[str] | None = None,
                   figsize: tuple[float, float] | None = None) -> Figure:
    """Two or more timelines, two panels a row, on a shared y axis (titles: the mapping's
    keys, ``titles``, or "run 1", "run 2", ...), one legend underneath.

    ``figsize`` is (width, height) in inches at 110 dpi; the default is 6.6 in wide
    (726 px, the width of the book's page) and 3 in a row of panels plus 0.9 in for
    the legend."""
    records, names = _records(runs, titles)
    size = _figsize(figsize)
    # The one import of the view from this module, lazy: recorders never load matplotlib
    # unless something is drawn, and plots imports no recorder, so there is no cycle.
    from .plots import plot_memory_compare

    return plot_memory_compare(records, names, figsize=size)


def _to_meta(obj: Any) -> tuple[torch.Tensor, ...]:
    items = obj if isinstance(obj, (tuple, list)) else (obj,)
    out = []
    for t in items:
        if not isinstance(t, torch.Tensor):
            raise TypeError("batch must hold tensors (real ones are copied to 'meta' by shape "
                            f"and dtype), got {type(t).__name__}")
        out.append(t if t.device.type == "meta" else torch.empty_like(t, device="meta"))
    return tuple(out)


def _default_loss(model: nn.Module, *inputs: torch.Tensor) -> torch.Tensor:
    out = model(*inputs)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"the model returned {type(out).__name__}, not a tensor; pass "
                        "step_fn=lambda model, *inputs: <scalar loss> to estimate_memory")
    return out.sum()


def estimate_memory(build_model: Callable[[], nn.Module],
                    batch: torch.Tensor | Sequence[torch.Tensor] | Callable[[], Any], *,
                    optimizer: Callable[[Any], torch.optim.Optimizer] | None = None,
                    step_fn: Callable[..., torch.Tensor] | None = None,
                    steps: int = 1) -> MemoryRecord:
    """What-if: the memory timeline of ``steps`` training steps without the memory.

    ``build_model()`` runs under ``torch.device("meta")``, so parameters have
    shapes and dtypes but no data; ``batch`` is a tensor, a sequence of tensors
    (real ones are replaced by meta tensors of the same shape and dtype) or a
    callable returning them (also run on meta). ``optimizer`` is a factory such
    as ``lambda params: torch.optim.AdamW(params, lr=1e-4)``. Each step is
    ``zero_grad(set_to_none=True)``, ``loss = step_fn(model, *batch)`` (default:
    ``model(*batch).sum()``), ``loss.backward()``, ``optimizer.step()``.
    Returns the finished `MemoryRecord` (device "meta"): ``peak_by_category``
    and ``plot()`` work as for a real run. Meta kernels allocate nothing, so a
    7B-parameter step takes seconds and no RAM; the byte counts are the sizes
    the same tensors would have on a real device.
    """
    if isinstance(build_model, nn.Module):
        # A module is callable too, so it would pass the check below and then fail deep in
        # its forward, called with no arguments.
        raise TypeError(
            f"build_model must be a factory such as lambda: {type(build_model).__name__}(...), "
            f"not a {type(build_model).__name__} instance: the model has to be built under "
            "torch.device('meta') so its parameters take no memory, and an instance already "
            "holds real ones")
    if not callable(build_model):
        raise TypeError("build_model must be a callable returning an nn.Module, "
                        "e.g. lambda: MyModel(cfg)")
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")
    if isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError("optimizer must be a factory, e.g. lambda params: "
                        "torch.optim.AdamW(params), so it can be built on the meta parameters; "
                        "got an optimizer instance")
    with torch.device("meta"):
        model = build_model()
        if not isinstance(model, nn.Module):
            raise TypeError(f"build_model() must return an nn.Module, got {type(model).__name__}")
        model = model.to("meta")
        inputs = _to_meta(batch() if callable(batch) else batch)
    opt = optimizer(model.parameters()) if optimizer is not None else None
    loss_fn = step_fn or _default_loss
    with track_memory(model, opt, device="meta") as mem:
        for _ in range(steps):
            (opt or model).zero_grad(set_to_none=True)
            loss = loss_fn(model, *inputs)
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise TypeError("step_fn must return a scalar loss tensor")
            loss.backward()
            del loss
            if opt is not None:
                opt.step()
    return mem

