"""A dispatcher trace: the Python calls and the ATen ops one block of code ran.

>>> with trace_dispatch() as dt:                 # dt: a DispatchTrace, filled as it runs
...     F.linear(x, w, b).sum().backward()
>>> print(dt)                                     # #, phase, Python call, ATen op, shapes

Two modes watch the block. A `TorchFunctionMode` sees each call into torch's Python API
(``torch.nn.functional.linear``, ``Tensor.sum``, ``Tensor.backward``). A
`TorchDispatchMode` sees each ATen op after the Autograd key has been handled, so
it records what actually runs: ``F.linear`` becomes ``aten.t`` and ``aten.addmm``, and
the backward kernels of every autograd Node show up as the ops they are made of. Each
op is tied to the Python call it ran under and marked "forward" or "backward"
(the autograd engine runs a graph task: ``torch._C._current_graph_task_id() != -1``).

The modes only look: every op is called with the arguments it was given and its result
returned untouched, so outputs and gradients are the same as without tracing.
"""
from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import keystr, tree_flatten_with_path

from ..records import TensorMeta
from .records import DispatchEvent, DispatchPhase, DispatchTrace, PythonCall

__all__ = ["trace_dispatch", "DispatchTrace", "DispatchEvent", "PythonCall", "dispatch_keys"]

#: Python calls that start a backward pass: ops under them (the seed gradient
#: ``ones_like``) belong to the backward even before the engine starts.
_BACKWARD_CALLS = frozenset({"Tensor.backward", "torch.autograd.backward",
                             "torch.autograd.grad"})
_DEFAULT_MAX_EVENTS = 100_000


def dispatch_keys(t: torch.Tensor) -> tuple[str, ...]:
    """Names in ``torch._C._dispatch_keys(t)``, highest priority last, as torch prints them:
    ``("CPU", "ADInplaceOrView", "AutogradCPU", "AutocastCPU")``."""
    text = str(torch._C._dispatch_keys(t))
    inner = text[text.index("(") + 1:text.rindex(")")]
    return tuple(k.strip() for k in inner.split(",") if k.strip())


def _call_name(func: Any) -> str:
    """A readable name for what ``__torch_function__`` received."""
    name = getattr(func, "__name__", None)
    # resolve_name maps an object to one of its public spellings, and for aliases it can
    # pick another op's name (torch.mm -> "torch.spmm"); torch.<name> wins when it is func.
    if name and getattr(torch, name, None) is func:
        return f"torch.{name}"
    resolved = resolve_name(func)
    if resolved is None:
        module = getattr(func, "__module__", None) or ""
        qual = getattr(func, "__qualname__", None) or repr(func)
        resolved = f"{module}.{qual}" if module else qual
    if resolved.startswith("torch.Tensor."):
        resolved = resolved[len("torch."):]
    if resolved.endswith(".__get__"):  # an attribute read: Tensor.shape.__get__
        resolved = resolved[:-len(".__get__")]
    return resolved


def _metas(obj: Any, prefix: str) -> tuple[list[TensorMeta], list[torch.Tensor]]:
    """TensorMeta (key path, shape, dtype) of every tensor in `obj`, and the tensors."""
    metas, tensors = [], []
    leaves, _ = tree_flatten_with_path(obj)
    for path, leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            dtype = str(leaf.dtype).removeprefix("torch.")
            metas.append(TensorMeta(prefix + keystr(path), tuple(leaf.shape), dtype))
            tensors.append(leaf)
    return metas, tensors


class _Calls(TorchFunctionMode):
    """Records Python-level calls and keeps the one running now for `_Ops` to read."""

    def __init__(self, tracer: _DispatchTracer) -> None:
        super().__init__()
        self._tracer = tracer

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        tracer = self._tracer
        name = _call_name(func)
        in_engine = torch._C._current_graph_task_id() != -1
        phase: DispatchPhase = ("backward" if in_engine or name in _BACKWARD_CALLS
                                else "forward")
        call = PythonCall(len(tracer.record.calls), name, phase)
        with tracer.lock:
            tracer.record.calls.append(call)
        # One stack shared by all threads, on purpose: while a CUDA backward runs on the
        # engine's device thread, the call that started it (Tensor.backward) is on top.
        tracer.stack.append(call)
        try:
            return func(*args, **kwargs)
        finally:
            tracer.stack.pop()


class _Ops(TorchDispatchMode):
    """Records each ATen op with its shapes, dispatch keys, phase and enclosing call."""

    def __init__(self, tracer: _DispatchTracer) -> None:
        super().__init__()
        self._tracer = tracer

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self._tracer.add(func, args, kwargs, out)
        return out


class _DispatchTracer:
    """What `trace_dispatch` returns: a one-use context manager that pushes the two modes
    on entry, yields their `DispatchTrace`, and pops them on exit (also on an error)."""

    def __init__(self, max_events: int | None) -> None:
        if max_events is not None and (isinstance(max_events, bool)
                                       or not isinstance(max_events, int) or max_events < 1):
            raise ValueError(f"max_events must be a positive int or None, got {max_events!r}")
        self.record = DispatchTrace(max_events=max_events)
        self.stack: list[PythonCall] = []
        self.lock = threading.Lock()
        self._calls = _Calls(self)
        self._ops = _Ops(self)
        self._state = "new"

    def add(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        record = self.record
        # Reading shapes must not show up as Python calls of the traced code.
        with torch._C.DisableTorchFunction():
            node = torch._C._current_autograd_node()
            in_engine = torch._C._current_graph_task_id() != -1
            call = self.stack[-1] if self.stack else None
            phase: DispatchPhase = ("backward" if in_engine or
                                    (call is not None and call.name in _BACKWARD_CALLS)
                                    else "forward")
            inputs, tensors = _metas(args, "args")
            kw_inputs, kw_tensors = _metas(kwargs, "kwargs")
            outputs, _ = _metas(out, "")
            keys = tuple(dispatch_keys(t) for t in tensors + kw_tensors)
        with self.lock:
            if record.max_events is not None and len(record.events) >= record.max_events:
                record.dropped += 1
                return
            record.events.append(DispatchEvent(
                index=len(record.events), phase=phase, op=str(func),
                call=None if call is None else call.name,
                call_index=None if call is None else call.index,
                inputs=tuple(inputs + kw_inputs), outputs=tuple(outputs), input_keys=keys,
                node=None if node is None else type(node).__name__))

    def __enter__(self) -> DispatchTrace:
        if self._state != "new":
            raise RuntimeError("a trace_dispatch() context records one with-block and "
                               "cannot be entered twice (nor nested in itself); call "
                               "trace_dispatch() again for a new trace")
        self._state = "entered"
        self._calls.__enter__()
        try:
            self._ops.__enter__()
        except BaseException:
            self._calls.__exit__(None, None, None)
            raise
        return self.record

    def __exit__(self, *exc: Any) -> None:
        # Pop in reverse order; the function mode goes even if popping the other failed.
        try:
            self._ops.__exit__(*exc)
        finally:
            self._calls.__exit__(*exc)
            self._state = "done"


def trace_dispatch(*, max_events: int | None = _DEFAULT_MAX_EVENTS,
                   ) -> AbstractContextManager[DispatchTrace]:
    """Record the Python calls and the ATen ops the ``with`` block runs.

    >>> with trace_dispatch() as dt:
    ...     F.linear(x, w, b).sum().backward()
    >>> dt.ops("forward")        # ['aten.t.default', 'aten.addmm.default', 'aten.sum.default']
    >>> dt                       # an HTML table in Jupyter; print(dt) for text

    What it records: a `DispatchTrace`, one `DispatchEvent` per ATen op (overload name,
    phase, the Python call it ran under, input and output shapes, the inputs' dispatch
    keys, the autograd Node running it in the backward) and one `PythonCall` per call the
    ``__torch_function__`` mode saw. Ops past `max_events` are counted in
    ``dt.dropped`` only, so a long loop cannot fill memory; None removes the limit.
    Compare `autogradviz.trace`, which records the autograd graph that the backward ops
    here come from.
    """
    return _DispatchTracer(max_events)
