"""autogradviz: see what autograd does.

Three layers, imports pointing down only (tests/test_architecture.py checks it):

* records.py: plain dataclass records and vocabularies, no torch;
* recorders (hooks, dispatch modes, graph walks) that fill them: graph.py,
  modules.py, live.py, stepper.py, module_graph.py, recorder.py, memory.py,
  gradtrace.py, dispatch.py, storage.py, launch.py (torchrun jobs),
  comm.py (DDP all-reduces); and, by arithmetic alone, planner.py (bytes per GPU
  of a parallel layout) and pipeline.py (pipeline schedules, simulated);
* views that read only records: render.py (DOT/SVG/PNG/HTML), rollup.py,
  strips.py (strips, animation), module_view.py (module graphs), plots.py
  (matplotlib), storage_view.py (storage/strides SVG), dispatch_view.py (op tables),
  comm_view.py (all-reduce timelines), pipeline_view.py (pipeline stage lanes).
  A record reaches its view through one lazy import per view.

Entry points are functions; the ones that watch a block of code are context
managers that yield the record they fill (``with live(model) as lg:``).
Every public name is listed, with what it records or draws, in the README.
"""
from __future__ import annotations

from .comm import record_comm
from .comm_view import plot_comm
from .dispatch import trace_dispatch
from .exercises import Verdict, check, verdict
from .gradtrace import GRAD_ACTIONS, GRAD_EVENT_KINDS, trace_grads
from .graph import trace
from .launch import DistributedJobError, init_distributed, report, torchrun
from .live import live
from .memory import compare_memory, estimate_memory, track_memory
from .module_graph import trace_modules
from .modules import record_modules
from .pipeline import simulate_pipeline
from .pipeline_view import compare_pipelines
from .planner import activation_bytes_per_layer, model_state_bytes, plan_memory
from .proof import show_error, written_for
from .records import (
    CATEGORIES, DISPATCH_PHASES, PHASES, BackwardOrder, DispatchEvent, DispatchTrace, GradEvent,
    GradTraceRecord, Graph, GraphNode, LiveGraph, MemoryPlan, MemoryRecord, MemorySample,
    ModelStateBytes, ModuleGraph, ModuleRecord, PipelineOp, PipelineSchedule, PythonCall, Step,
    StorageBlock, StorageMap,
    CommCall, CommOverlap, CommTrace, DistributedRun, TensorLayout, format_bytes,
)
from .render import SVG, GraphvizNotFound, LayoutPolicy, LayoutTimeout
from .rollup import roll_up
from .stepper import backward_order
from .storage import storage_map
from .versions import VERSION_FACTS, VersionFact, outcome, version_fact

__all__: list[str] = [
    "BackwardOrder",
    "CATEGORIES",
    "CommCall",
    "CommOverlap",
    "CommTrace",
    "DISPATCH_PHASES",
    "DispatchEvent",
    "DispatchTrace",
    "DistributedJobError",
    "DistributedRun",
    "GRAD_ACTIONS",
    "GRAD_EVENT_KINDS",
    "GradEvent",
    "GradTraceRecord",
    "Graph",
    "GraphNode",
    "GraphvizNotFound",
    "LayoutPolicy",
    "LayoutTimeout",
    "LiveGraph",
    "MemoryPlan",
    "MemoryRecord",
    "MemorySample",
    "ModelStateBytes",
    "ModuleGraph",
    "ModuleRecord",
    "PHASES",
    "PipelineOp",
    "PipelineSchedule",
    "PythonCall",
    "SVG",
    "Step",
    "StorageBlock",
    "StorageMap",
    "TensorLayout",
    "VERSION_FACTS",
    "VersionFact",
    "Verdict",
    "activation_bytes_per_layer",
    "backward_order",
    "check",
    "compare_memory",
    "compare_pipelines",
    "estimate_memory",
    "format_bytes",
    "init_distributed",
    "live",
    "model_state_bytes",
    "outcome",
    "plot_comm",
    "plan_memory",
    "record_comm",
    "record_modules",
    "report",
    "roll_up",
    "show_error",
    "simulate_pipeline",
    "storage_map",
    "torchrun",
    "trace",
    "trace_dispatch",
    "trace_grads",
    "trace_modules",
    "track_memory",
    "verdict",
    "version_fact",
    "written_for",
]
