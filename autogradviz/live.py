"""Watch the autograd DAG grow while the forward pass runs.

Inside ``with live(model) as lg:``, a TorchFunctionMode sees every torch call;
every `every` calls that produced a tensor with a grad_fn it snapshots the
graph built so far (a `Graph` record) and, in a notebook, redraws it in place
through an IPython display handle. The intermediate frames exist only live (and
in ``lg.frames`` / ``lg.strip()``); the stored output is the final frame.

Why the display is done this way: the tools that store and check notebook
outputs disagree about display updates. nbclient (nbconvert --execute,
scripts/execute_notebook.py) applies ``update_display_data`` to the stored
output it belongs to, so a handle ends on its last update; nbval ignores
updates and compares the first ``display_data`` of each handle. A handle whose
first and last content differ therefore never compares equal. So the live
handle starts EMPTY (a display with no data: invisible in Jupyter and dropped
by the static site), receives the frames as updates, is blanked again on exit,
and the final frame is then shown by a fresh display with no id. Both tools
then hold the same two outputs: [empty, final frame].
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .graph import Graph, trace_nodes
from .modules import ModuleRecord, _tensors, record_modules
from .render import SVG, compose_strip, render_svg

__all__ = ["LiveGraph", "live"]


@dataclass
class LiveGraph:
    """What `live()` saw: snapshots in order, and the final graph."""

    every: int
    frames: list[Graph] = field(default_factory=list)
    graph: Graph | None = None
    ops: int = 0  # torch calls that produced a tensor with a grad_fn

    def strip(self, max_frames: int = 6) -> SVG:
        """Evenly spaced frames, the last one included, side by side in one SVG."""
        if max_frames < 1:
            raise ValueError(f"max_frames must be at least 1, got {max_frames}")
        if not self.frames:
            raise ValueError("no frames were recorded: run a forward pass with grad enabled inside live()")
        n = len(self.frames)
        picks = sorted({round(i * (n - 1) / max(max_frames - 1, 1)) for i in range(max_frames)}) if n > 1 else [0]
        svgs = [render_svg(self.frames[i]) for i in picks]
        labels = [f"{self.frames[i].num_functions} Nodes" for i in picks]
        return SVG(compose_strip(svgs, labels))

    def _repr_svg_(self) -> str:
        if self.graph is None:
            raise ValueError("live() has not finished; display it after the with-block")
        return self.graph.svg()


class _Watch(TorchFunctionMode):
    def __init__(self, on_node) -> None:
        super().__init__()
        self.on_node = on_node

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        new = [t.grad_fn for t in _tensors(out) if t.grad_fn is not None]
        if new:
            self.on_node(new)
        return out


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


@contextmanager
def live(model: torch.nn.Module | None = None, *, every: int = 1, display: bool = True,
         group_modules: bool = False) -> Iterator[LiveGraph]:
    """Record (and in a notebook, draw) the DAG as the forward pass builds it.

    `model` names parameters and, with `group_modules=True`, clusters Nodes by
    module. `every`: snapshot after this many graph-building torch calls.
    Outside an IPython kernel nothing is displayed; frames are still recorded.
    """
    if not isinstance(every, int) or every < 1:
        raise ValueError(f"every must be a positive int, got {every!r}")
    if model is not None and not isinstance(model, torch.nn.Module):
        raise TypeError(f"live() takes an nn.Module or None, got {type(model).__name__}")
    lg = LiveGraph(every=every)
    produced: list[Any] = []  # Nodes returned by torch calls, in creation order
    known: set[Any] = set()
    consumed: set[Any] = set()
    show = display and _in_kernel()
    handle: list[Any] = []
    rec_box: list[ModuleRecord | None] = [None]

    def snapshot() -> Graph:
        sinks = [n for n in reversed(produced) if n not in consumed]
        return trace_nodes(sinks, params=model, modules=rec_box[0], group_modules=group_modules)

    def draw(obj: Any) -> None:
        from IPython.display import display as ipy_display

        if not handle:
            # Empty first content: what nbval records for this handle (see module docstring).
            handle.append(ipy_display({}, raw=True, display_id=True))
        handle[0].update(obj)

    def finish(obj: Any) -> None:
        from IPython.display import display as ipy_display

        if handle:
            handle[0].update({}, raw=True)  # what nbclient stores for the handle: empty again
        ipy_display(obj)  # the final frame as a plain output, identical in both tools

    def on_node(nodes: list[Any]) -> None:
        fresh = False
        for n in nodes:
            if n in known:
                continue
            known.add(n)
            produced.append(n)
            consumed.update(f for f, _ in n.next_functions if f is not None)
            fresh = True
        if not fresh:
            return
        lg.ops += 1
        if lg.ops % every == 0:
            frame = snapshot()
            lg.frames.append(frame)
            if show:
                draw(SVG(render_svg(frame)))

    with ExitStack() as stack:
        if model is not None:
            rec_box[0] = stack.enter_context(record_modules(model))
        stack.enter_context(_Watch(on_node))
        yield lg
    if produced:
        final = snapshot()
        if lg.ops % every != 0:
            lg.frames.append(final)
        lg.graph = final
        if show:
            finish(SVG(render_svg(final)))
    produced.clear()
    known.clear()
    consumed.clear()
