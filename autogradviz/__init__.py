"""autogradviz: see what autograd does.

One folder per thing the book draws; inside each, three layers with imports pointing
down only (tests/test_architecture.py checks it):

* graphs/: autograd graphs and module calls: `trace` (trace.py), `record_modules`,
  `live`, `backward_order`, `trace_modules`, `roll_up`, and their drawings
  (render.py: DOT/SVG/PNG/HTML; strips.py; module_view.py);
* memory/: the one event recorder (recorder.py), `track_memory`/`estimate_memory`/
  `compare_memory` (track.py), `trace_grads` (gradtrace.py), their plots (plots.py);
* ops/: tensors and the dispatcher: `trace_dispatch`, `storage_map` and their views,
  `quiet_profile` (torch.profiler without its log lines);
* distributed/: `torchrun` jobs (launch.py), `record_comm` and `plot_comm`, the memory
  planner, the pipeline simulator and its lanes, a Megatron-style layer shard;
* at the top: records.py (what all domains share: `format_bytes`, `TensorMeta`),
  style.py (figure settings), proof.py, versions.py, exercises.py.

In a folder, records.py holds plain dataclass records and vocabularies (no torch), the
recorders (hooks, dispatch modes, graph walks) fill them, and the views read only
records. A record reaches its view through one lazy import per view. Folders import
each other in one direction only: distributed -> graphs -> memory -> ops -> the top.

Entry points are functions; the ones that watch a block of code are context
managers that yield the record they fill (``with live(model) as lg:``).
Every public name is listed, with what it records or draws, in the README.
"""
from __future__ import annotations

from .distributed.comm import record_comm
from .distributed.comm_view import plot_comm
from .distributed.launch import DistributedJobError, init_distributed, report, torchrun
from .distributed.pipeline import simulate_pipeline
from .distributed.pipeline_view import compare_pipelines
from .distributed.planner import (
    activation_bytes_per_layer, model_state_bytes, plan_memory, ring_all_reduce_traffic,
)
from .distributed.records import (
    CommCall, CommOverlap, CommTrace, DistributedRun, MemoryPlan, ModelStateBytes, PipelineOp,
    PipelineSchedule,
)
from .exercises import Verdict, answer_digest, check, verdict
from .graphs.backward_order import backward_order
from .graphs.live import live
from .graphs.module_graph import trace_modules
from .graphs.modules import record_modules
from .graphs.records import (
    BackwardOrder, Graph, GraphNode, LiveGraph, ModuleGraph, ModuleRecord, Step,
)
from .graphs.render import SVG, GraphvizNotFound, LayoutPolicy, LayoutTimeout
from .graphs.rollup import roll_up
from .graphs.trace import trace
from .memory.gradtrace import GRAD_ACTIONS, GRAD_EVENT_KINDS, trace_grads
from .memory.records import (
    CATEGORIES, PHASES, GradEvent, GradTraceRecord, MemoryRecord, MemorySample,
)
from .memory.track import compare_memory, estimate_memory, track_memory
from .ops.dispatch import trace_dispatch
from .ops.records import (
    DISPATCH_PHASES, DispatchEvent, DispatchTrace, PythonCall, StorageBlock, StorageMap,
    TensorLayout,
)
from .ops.profiling import quiet_profile
from .ops.storage import storage_map
from .proof import show_error, written_for
from .records import format_bytes
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
    "answer_digest",
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
    "quiet_profile",
    "record_comm",
    "record_modules",
    "report",
    "ring_all_reduce_traffic",
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
