"""Watch the autograd DAG grow while the forward pass runs.

Inside ``with live(model) as lg:``, a TorchFunctionMode sees every torch call;
every `every` calls that produced a tensor with a new grad_fn it snapshots the
graph built so far (a `Graph` record) and, in a notebook, redraws it in place
through an IPython display handle. The intermediate frames exist only live (and
in ``lg.frames`` / ``lg.strip()``); the stored output is the final frame.

Frames are incremental: one `GraphWalk` is extended with the Nodes each call
created, so every Node is read once however many frames are taken (a frame
costs its new Nodes plus a copy of the record lists, not a walk of the graph).

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

torch.compile: Dynamo would trace this module's mode and hooks into the compiled
code (dozens of frames, graph breaks). A compiled module is refused with a clear
error, and calls made while Dynamo traces are passed through unrecorded.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .trace import GraphWalk
from .modules import record_modules, tensors_in
from .records import LiveGraph

__all__ = ["live"]


class _Watch(TorchFunctionMode):
    def __init__(self, on_nodes: Any) -> None:
        super().__init__()
        self.on_nodes = on_nodes

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if torch.compiler.is_compiling():  # never record inside code Dynamo traces
            return out
        new = [t.grad_fn for t in tensors_in(out) if t.grad_fn is not None]
        if new:
            self.on_nodes(new)
        return out


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


def _is_compiled(model: torch.nn.Module) -> bool:
    from torch._dynamo.eval_frame import OptimizedModule

    return (isinstance(model, OptimizedModule)
            or getattr(model, "_compiled_call_impl", None) is not None)


def _svg(graph: Any, options: dict[str, Any]) -> Any:
    from .render import SVG, render_svg  # view, only needed in a notebook

    return SVG(render_svg(graph, **options))


@contextmanager
def live(model: torch.nn.Module | None = None, *, every: int = 1, display: bool = True,
         group_modules: bool = False) -> Iterator[LiveGraph]:
    """Record (and in a notebook, draw) the DAG as the forward pass builds it.

    `model` names parameters and records which module produced each Node.
    `every`: snapshot after this many graph-building torch calls. `group_modules`
    is how the notebook display draws the frames (clusters by module); the frames
    themselves can be drawn any way later (``lg.frames[i].svg(...)``).
    Outside an IPython kernel nothing is displayed; frames are still recorded.
    """
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"every must be a positive int, got {every!r}")
    if model is not None and not isinstance(model, torch.nn.Module):
        raise TypeError(f"live() takes an nn.Module or None, got {type(model).__name__}")
    if group_modules and model is None:
        raise ValueError("group_modules=True needs the model: pass live(model, group_modules=True)")
    if model is not None and _is_compiled(model):
        raise TypeError(
            "live() cannot watch a torch.compile'd module: the compiled code runs as one fused "
            "graph and Dynamo would trace live()'s own hooks. Pass the uncompiled module "
            "instead, e.g. live(compiled._orig_mod) for compiled = torch.compile(model)"
        )
    lg = LiveGraph(every=every)
    show = display and _in_kernel()
    options = {"group_modules": group_modules}
    handle: list[Any] = []
    walk_box: list[GraphWalk] = []

    def snapshot() -> Any:
        walk = walk_box[0]
        walk.apply_new_owners()
        lg.visited = walk.visited
        return walk.graph()

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

    def on_nodes(nodes: list[Any]) -> None:
        walk = walk_box[0]
        fresh = [n for n in nodes if n not in walk.index]
        if not fresh:
            return
        walk.extend(fresh)
        lg.ops += 1
        if lg.ops % every == 0:
            frame = snapshot()
            lg.frames.append(frame)
            if show:
                draw(_svg(frame, options))

    with ExitStack() as stack:
        rec = stack.enter_context(record_modules(model)) if model is not None else None
        walk_box.append(GraphWalk(model, modules=rec))
        stack.enter_context(_Watch(on_nodes))
        yield lg
    if walk_box[0].order:
        final = snapshot()
        if lg.ops % every != 0:
            lg.frames.append(final)
        else:  # same Nodes as the last frame; modules may have claimed some since
            lg.frames[-1] = final
        lg.graph = final
        if show:
            finish(_svg(final, options))
    walk_box.clear()  # drop the autograd Nodes the walk holds
