"""autogradviz: see what autograd does.

Recording (hooks, dispatch modes, graph walks) produces plain dataclass records;
views (DOT, SVG, HTML, matplotlib) read only those records.
"""
from __future__ import annotations

# --- graphs: trace, render, live, backward stepper ---------------------------
from .graph import Graph, GraphNode, trace
from .live import LiveGraph, live
from .modules import ModuleRecord, record_modules
from .render import SVG, GraphvizNotFound, LayoutPolicy
from .stepper import BackwardOrder, Step, backward_order

_GRAPH_API = [
    "Graph", "GraphNode", "trace", "record_modules", "ModuleRecord", "live", "LiveGraph",
    "backward_order", "BackwardOrder", "Step", "SVG", "GraphvizNotFound", "LayoutPolicy",
]

# --- memory and gradients: recorder, memory timeline, gradient trace ---------
from .gradtrace import GradEvent, GradTrace, GradTraceRecord
from .memory import (
    CATEGORIES, PHASES, MemoryRecord, MemorySample, MemoryTracker, compare_memory,
    estimate_memory, track_memory,
)

_MEMORY_AND_GRADIENTS = [
    "CATEGORIES", "PHASES", "MemoryRecord", "MemorySample", "MemoryTracker", "compare_memory",
    "estimate_memory", "track_memory", "GradEvent", "GradTrace", "GradTraceRecord",
]

__all__: list[str] = [*_MEMORY_AND_GRADIENTS]
__all__ += _GRAPH_API
