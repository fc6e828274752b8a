"""autogradviz: see what autograd does.

Three layers, imports pointing down only (tests/test_architecture.py checks it):

* records.py: plain dataclass records and vocabularies, no torch;
* recorders (hooks, dispatch modes, graph walks) that fill them: graph.py,
  modules.py, live.py, stepper.py, module_graph.py, recorder.py, memory.py,
  gradtrace.py, dispatch.py, storage.py;
* views that read only records: render.py (DOT/SVG/PNG/HTML), rollup.py,
  strips.py (strips, animation), module_view.py (module graphs), plots.py
  (matplotlib), storage_view.py (storage/strides SVG), dispatch_view.py (op tables).
  A record reaches its view through one lazy import per view.

Entry points are functions; the ones that watch a block of code are context
managers that yield the record they fill (``with live(model) as lg:``).
Every public name is listed, with what it records or draws, in the README.
"""
from __future__ import annotations

from .dispatch import trace_dispatch
from .gradtrace import GRAD_ACTIONS, GRAD_EVENT_KINDS, trace_grads
from .graph import trace
from .live import live
from .memory import compare_memory, estimate_memory, track_memory
from .module_graph import trace_modules
from .modules import record_modules
from .proof import show_error, written_for
from .records import (
    CATEGORIES, DISPATCH_PHASES, PHASES, BackwardOrder, DispatchEvent, DispatchTrace, GradEvent,
    GradTraceRecord, Graph, GraphNode, LiveGraph, MemoryRecord, MemorySample, ModuleGraph,
    ModuleRecord, PythonCall, Step, StorageBlock, StorageMap, TensorLayout, format_bytes,
)
from .render import SVG, GraphvizNotFound, LayoutPolicy
from .rollup import roll_up
from .stepper import backward_order
from .storage import storage_map

__all__: list[str] = [
    "BackwardOrder",
    "CATEGORIES",
    "DISPATCH_PHASES",
    "DispatchEvent",
    "DispatchTrace",
    "GRAD_ACTIONS",
    "GRAD_EVENT_KINDS",
    "GradEvent",
    "GradTraceRecord",
    "Graph",
    "GraphNode",
    "GraphvizNotFound",
    "LayoutPolicy",
    "LiveGraph",
    "MemoryRecord",
    "MemorySample",
    "ModuleGraph",
    "ModuleRecord",
    "PHASES",
    "PythonCall",
    "SVG",
    "Step",
    "StorageBlock",
    "StorageMap",
    "TensorLayout",
    "backward_order",
    "compare_memory",
    "estimate_memory",
    "format_bytes",
    "live",
    "record_modules",
    "roll_up",
    "show_error",
    "storage_map",
    "trace",
    "trace_dispatch",
    "trace_grads",
    "trace_modules",
    "track_memory",
    "written_for",
]
