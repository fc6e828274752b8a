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
See `autogradviz.recorder` for the category precedence.
"""
from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from .recorder import (
    CATEGORIES, PHASES, StorageLedger, TrainingHooks, as_device, check_targets,
    iter_tensors, model_tensors, named_params, state_tensors,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "CATEGORIES", "PHASES", "MemorySample", "MemoryRecord", "MemoryTracker",
    "track_memory", "compare_memory", "estimate_memory",
]


@dataclass(frozen=True)
class MemorySample:
    """Live bytes right after one allocating op (or at a phase boundary).

    ``index`` is the position in the timeline, ``op`` the aten op that allocated
    (or a label such as "optimizer.step"), ``optimizer_steps`` how many steps had
    finished. ``cuda_allocated``/``cuda_reserved`` are
    ``torch.cuda.memory_allocated()``/``memory_reserved()`` at the same moment
    on a CUDA device, None elsewhere.
    """

    index: int
    phase: str
    op: str
    bytes: dict[str, int]
    optimizer_steps: int
    cuda_allocated: int | None = None
    cuda_reserved: int | None = None

    @property
    def total(self) -> int:
        return sum(self.bytes.values())


@dataclass(frozen=True)
class MemoryRecord:
    """A finished (or in-progress) timeline: what the views draw."""

    device: str
    samples: tuple[MemorySample, ...]
    peak_index: int

    @property
    def peak(self) -> MemorySample | None:
        return self.samples[self.peak_index] if self.peak_index >= 0 else None


class MemoryTracker:
    """Context manager that records a memory timeline; see `track_memory`."""

    def __init__(self, model: nn.Module | None = None,
                 optimizer: torch.optim.Optimizer | None = None, *,
                 device: torch.device | str | None = None, cuda_history: bool = False) -> None:
        check_targets(model, optimizer)
        self.model = model
        self.optimizer = optimizer
        tensors = [t for _, t in named_params(model, optimizer)]
        if model is not None:
            tensors += list(model.buffers())
        self.device = as_device(device, tensors)
        if cuda_history and self.device.type != "cuda":
            raise ValueError(f"cuda_history=True records the CUDA caching allocator, but the tracked "
                             f"device is {self.device}; drop cuda_history or track a CUDA model")
        self.cuda_history = cuda_history
        self._ledger = StorageLedger(self.device)
        self._hooks: TrainingHooks | None = None
        self._state = "new"
        self._final_current: list[int] | None = None
        self._snapshot: Any = None

    # --- context -------------------------------------------------------------------
    def __enter__(self) -> MemoryTracker:
        if self._state != "new":
            raise RuntimeError("a MemoryTracker records one with-block; create a new one with track_memory()")
        self._state = "active"
        if self.cuda_history:
            torch.cuda.memory._record_memory_history(max_entries=200_000)
        led = self._ledger
        led.start()
        try:
            if self.model is not None:
                led.mark(model_tensors(self.model), "parameter", None)
            named = named_params(self.model, self.optimizer)
            params = [p for _, p in named]
            led.mark(params, "parameter", None)
            led.mark([p.grad for p in params if p.grad is not None], "gradient", None)
            if self.optimizer is not None:
                led.mark(state_tensors(self.optimizer), "optimizer_state", None)
            led.sample("start")
            self._hooks = TrainingHooks(self, self.model, self.optimizer, named)
            self._hooks.install()
        except BaseException:
            self.__exit__(None, None, None)  # leave no hook, mode or patch behind
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        # Each undo runs even when an earlier one fails, so nothing stays installed.
        try:
            if self._hooks is not None:
                self._hooks.remove()
        finally:
            self._final_current = list(self._ledger.cur)
            try:
                self._ledger.stop()
            finally:
                self._state = "done"
                if self.cuda_history:
                    self._snapshot = torch.cuda.memory._snapshot()
                    torch.cuda.memory._record_memory_history(enabled=None)

    # --- listener methods (called by TrainingHooks) ------------------------------------
    def forward_start(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._ledger.phase = "forward"
        self._ledger.mark([*iter_tensors(args), *iter_tensors(kwargs)], "input", "forward input")

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
        assert self.optimizer is not None
        led.mark(state_tensors(self.optimizer), "optimizer_state", "optimizer state")
        led.steps += 1
        led.sample("optimizer.step")
        led.phase = "other"

    # --- results ---------------------------------------------------------------------
    def _by_category(self, row: Sequence[int]) -> dict[str, int]:
        return dict(zip(CATEGORIES, row))

    @property
    def peak_bytes(self) -> int:
        """Largest total of live bytes seen (sampled after every allocating op)."""
        return self._ledger.peak_total

    @property
    def peak_by_category(self) -> dict[str, int]:
        """The breakdown AT the moment of the overall peak (sums to `peak_bytes`)."""
        led = self._ledger
        if led.peak_index < 0:
            return self._by_category([0] * len(CATEGORIES))
        return self._by_category(led.s_bytes[led.peak_index])

    @property
    def max_by_category(self) -> dict[str, int]:
        """Each category's own maximum over the timeline (these need not coincide)."""
        rows = self._ledger.s_bytes
        return {c: max((r[i] for r in rows), default=0) for i, c in enumerate(CATEGORIES)}

    @property
    def current_by_category(self) -> dict[str, int]:
        """Live bytes now (while tracking) or at the end of the with-block."""
        row = self._final_current if self._final_current is not None else self._ledger.cur
        return self._by_category(row)

    @property
    def current_bytes(self) -> int:
        return sum(self.current_by_category.values())

    @property
    def timeline(self) -> list[MemorySample]:
        # Built on demand: the recorder keeps only compact rows while tracking.
        led = self._ledger
        return [MemorySample(i, phase, op, self._by_category(row), steps, *(cuda or (None, None)))
                for i, (row, (phase, op, steps, cuda)) in enumerate(zip(led.s_bytes, led.s_info))]

    def record(self) -> MemoryRecord:
        return MemoryRecord(str(self.device), tuple(self.timeline), self._ledger.peak_index)

    def plot(self, ax: Axes | None = None, title: str | None = None) -> Figure:
        """Stacked-area timeline by category, phases as bands, the peak annotated."""
        from .plots import plot_memory

        return plot_memory(self.record(), ax=ax, title=title)

    def save_snapshot(self, path: str | os.PathLike[str]) -> str:
        """Write the CUDA allocator snapshot (open it at pytorch.org/memory_viz).

        Needs ``track_memory(..., cuda_history=True)`` on a CUDA device.
        """
        if not self.cuda_history:
            raise RuntimeError("no allocator history was recorded: start tracking with "
                               "track_memory(model, opt, cuda_history=True) on a CUDA device")
        path = os.fspath(path)
        if self._state == "active":
            torch.cuda.memory._dump_snapshot(path)
        else:
            with open(path, "wb") as f:
                pickle.dump(self._snapshot, f)
        return path


def track_memory(model: nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None, *,
                 device: torch.device | str | None = None, cuda_history: bool = False) -> MemoryTracker:
    """Record live memory by category while the ``with`` block runs.

    ``model`` gives forward phases, parameters/buffers and inputs; ``optimizer``
    gives step phases and optimizer state; both are optional. ``device=None``
    watches the device the model/optimizer tensors live on (CPU if none).
    On CUDA every sample also reads ``memory_allocated``/``memory_reserved``;
    ``cuda_history=True`` additionally records the allocator history for
    `MemoryTracker.save_snapshot`. The watched code's results are unchanged.

    Saved-tensor hook pairs entered inside or around the block
    (``torch.utils.checkpoint``, ``save_on_cpu``, your own
    ``saved_tensors_hooks``) keep working, composed with the tracker's own: a
    storage counts as "activation" while autograd keeps a packed value holding
    it (save_on_cpu's copy), and checkpoint's recomputed tensors count from
    their recomputation until the backward node that unpacked them is done.
    To compose, ``saved_tensors_hooks.__enter__`` is replaced while tracking
    and restored at exit (also after an error). Not seen as activation: tensors
    kept for backward outside a packed value (a hook's own cache keyed by a
    handle, selective checkpointing's cache of op outputs; checkpoint's
    recompute frame is the one such holder known), and pairs pushed without
    that method (``torch._C._autograd._push_saved_tensors_default_hooks``
    called directly).
    A checkpointed forward run before the block and recomputed inside it has
    its recomputed tensors counted only until they are unpacked.
    """
    return MemoryTracker(model, optimizer, device=device, cuda_history=cuda_history)


def _records(runs: Any, titles: Sequence[str] | None) -> tuple[list[MemoryRecord], list[str]]:
    if isinstance(runs, Mapping):
        names, items = [str(k) for k in runs], list(runs.values())
    elif isinstance(runs, Sequence) and not isinstance(runs, str):
        names, items = [f"run {i + 1}" for i in range(len(runs))], list(runs)
    else:
        raise TypeError("runs must be a mapping {title: MemoryTracker} or a sequence of MemoryTrackers, "
                        f"got {type(runs).__name__}")
    if len(items) < 2:
        raise ValueError(f"compare_memory needs two or more runs, got {len(items)}; use tracker.plot() for one")
    records = []
    for item in items:
        if isinstance(item, MemoryTracker):
            records.append(item.record())
        elif isinstance(item, MemoryRecord):
            records.append(item)
        else:
            raise TypeError(f"each run must be a MemoryTracker (from track_memory) or a MemoryRecord, "
                            f"got {type(item).__name__}")
    if titles is not None:
        if len(titles) != len(records):
            raise ValueError(f"got {len(titles)} titles for {len(records)} runs; pass one title per run")
        names = [str(t) for t in titles]
    return records, names


def compare_memory(runs: Mapping[str, MemoryTracker] | Sequence[MemoryTracker], *,
                   titles: Sequence[str] | None = None) -> Figure:
    """Two or more timelines side by side on a shared y axis."""
    from .plots import plot_memory_compare

    records, names = _records(runs, titles)
    return plot_memory_compare(records, names)


def _to_meta(obj: Any) -> tuple[torch.Tensor, ...]:
    items = obj if isinstance(obj, (tuple, list)) else (obj,)
    out = []
    for t in items:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"batch must hold tensors (real ones are copied to 'meta' by shape and dtype), "
                            f"got {type(t).__name__}")
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
                    steps: int = 1) -> MemoryTracker:
    """What-if: the memory timeline of ``steps`` training steps without the memory.

    ``build_model()`` runs under ``torch.device("meta")``, so parameters have
    shapes and dtypes but no data; ``batch`` is a tensor, a sequence of tensors
    (real ones are replaced by meta tensors of the same shape and dtype) or a
    callable returning them (also run on meta). ``optimizer`` is a factory such
    as ``lambda params: torch.optim.AdamW(params, lr=1e-4)``. Each step is
    ``zero_grad(set_to_none=True)``, ``loss = step_fn(model, *batch)`` (default:
    ``model(*batch).sum()``), ``loss.backward()``, ``optimizer.step()``.
    Returns the finished `MemoryTracker` (device "meta"): ``peak_by_category``
    and ``plot()`` work as for a real run. Meta kernels allocate nothing, so a
    7B-parameter step takes seconds and no RAM; the byte counts are the sizes
    the same tensors would have on a real device.
    """
    if not callable(build_model):
        raise TypeError("build_model must be a callable returning an nn.Module, e.g. lambda: MyModel(cfg)")
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")
    if isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError("optimizer must be a factory, e.g. lambda params: torch.optim.AdamW(params), "
                        "so it can be built on the meta parameters; got an optimizer instance")
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
