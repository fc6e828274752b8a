"""Records of parallel training: memory plans, torchrun jobs, pipeline schedules and
communication traces; dataclasses and vocabularies, no torch.

Filled by planner.py, launch.py, pipeline.py and comm.py, drawn by pipeline_view.py
and comm_view.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

from ..records import format_bytes

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# --- memory-plan records -----------------------------------------------------
# Filled by `planner.py` (arithmetic only, no torch): the bytes one GPU holds for
# a training layout. Decimal units (1 GB = 1e9 B), as the ZeRO and Megatron papers use.

#: What `plan_memory` recomputes in backward instead of storing (Korthikanti et al. 2022):
#: "none" stores every activation; "selective" drops the attention core (the s x s scores,
#: softmax and its dropout), which is also what a FlashAttention kernel never stores; "full"
#: keeps only each layer's input and reruns the layer.
Recompute = Literal["none", "selective", "full"]
RECOMPUTE_POLICIES: tuple[Recompute, ...] = get_args(Recompute)
#: Pipeline schedules `plan_memory` knows how many microbatches a stage holds for.
PlanSchedule = Literal["gpipe", "1f1b"]
PLAN_SCHEDULES: tuple[PlanSchedule, ...] = get_args(PlanSchedule)


@dataclass(frozen=True)
class ModelStateBytes:
    """Model states one GPU holds, in bytes: weights, gradients, optimizer states
    (for mixed-precision Adam: fp32 master weights, momentum and variance)."""

    params: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer

    def __str__(self) -> str:
        return (f"params {self.params / 1e9:.2f} GB + grads {self.grads / 1e9:.2f} GB"
                f" + optimizer {self.optimizer / 1e9:.2f} GB = {self.total / 1e9:.2f} GB")


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes per GPU of one training layout, as `plan_memory` returns it.

    ``states`` are the model states after tensor/pipeline sharding and ZeRO;
    ``activations`` are the transformer layers' saved activations on the busiest
    pipeline stage (the first), ``activation_per_layer`` times ``layers_per_stage``
    times ``in_flight`` microbatches, plus ``recompute_bytes``: under full recompute,
    the one layer whose activations backward rebuilds at a time. Embeddings, logits,
    communication buffers,
    the CUDA context and allocator fragmentation are not counted: ``margin`` keeps
    that share of the device free when judging ``fits``.
    """

    dp: int
    tp: int
    pp: int
    cp: int
    zero: int
    params: float
    layers: int
    hidden: int
    heads: int
    seq_len: int
    micro_batch: int
    microbatches: int
    schedule: PlanSchedule
    recompute: Recompute
    sequence_parallel: bool
    states: ModelStateBytes
    activation_per_layer: float
    layers_per_stage: int
    in_flight: int
    gpu_bytes: float
    margin: float
    recompute_bytes: float = 0.0

    @property
    def world(self) -> int:
        return self.dp * self.cp * self.tp * self.pp

    @property
    def activations(self) -> float:
        stored = self.activation_per_layer * self.layers_per_stage * self.in_flight
        return stored + self.recompute_bytes

    @property
    def total(self) -> float:
        return self.states.total + self.activations

    @property
    def usable_bytes(self) -> float:
        return self.gpu_bytes * (1.0 - self.margin)

    @property
    def fits(self) -> bool:
        """The counted bytes fit in the device less the margin."""
        return self.total <= self.usable_bytes

    @property
    def layout(self) -> str:
        """``"dp32 tp8 pp4 zero1"``: the parallel sizes (cp only when used)."""
        cp = f" cp{self.cp}" if self.cp > 1 else ""
        return f"dp{self.dp}{cp} tp{self.tp} pp{self.pp} zero{self.zero}"

    @property
    def tokens_per_step(self) -> int:
        """Tokens in one optimizer step: every data-parallel replica's microbatches."""
        return self.dp * self.micro_batch * self.microbatches * self.seq_len

    def rows(self) -> list[tuple[str, float]]:
        """(item, GB) rows of the breakdown, total last."""
        s = self.states
        return [("parameters", s.params / 1e9), ("gradients", s.grads / 1e9),
                ("optimizer states", s.optimizer / 1e9),
                ("activations", self.activations / 1e9), ("total", self.total / 1e9)]

    def table(self) -> str:
        """A plain-text breakdown in GB, with the verdict against the device."""
        lines = [f"{self.layout}: {self.world} GPUs, {self.params / 1e9:g}B params, "
                 f"s={self.seq_len}, b={self.micro_batch}, m={self.microbatches}",
                 f"activations: recompute={self.recompute}, sp={self.sequence_parallel}, "
                 f"{self.layers_per_stage} layers x {self.in_flight} microbatches "
                 f"({self.schedule})"]
        lines += [f"  {name:<17}{gb:>9.2f} GB" for name, gb in self.rows()]
        verdict = "fits" if self.fits else "does NOT fit"
        lines.append(f"  {verdict} in {self.gpu_bytes / 1e9:g} GB with a "
                     f"{self.margin:.0%} margin ({self.usable_bytes / 1e9:.1f} GB usable)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


# --- distributed job records -------------------------------------------------
# Filled by `launch.py` (`torchrun`): what a multi-process job left behind, read
# back from one JSON file per rank. Plain Python values only.


@dataclass
class DistributedRun:
    """One finished `torchrun` job: what each rank passed to `report`, in rank order.

    ``results[r]`` is rank ``r``'s report (``{}`` for a rank that reported nothing, only
    possible with ``check=False``). ``log`` is torchrun's console output, every rank's
    lines prefixed ``[default<r>]:``. ``backend`` is what `init_distributed` chose
    ("gloo", "nccl"), None when no rank called it. ``failed_ranks`` and ``error`` say
    which ranks failed first and with which Python error (empty / None on success).
    """

    results: tuple[dict, ...]
    returncode: int
    elapsed_s: float
    log: str
    nproc: int
    backend: str | None
    failed_ranks: tuple[int, ...] = ()
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def __len__(self) -> int:
        return len(self.results)

    def __getitem__(self, rank: int) -> dict:
        return self.results[rank]

    def __repr__(self) -> str:
        # No timings or paths: a notebook may show this line in a compared output.
        state = "ok" if self.ok else f"returncode={self.returncode}"
        failed = f", failed_ranks={list(self.failed_ranks)}" if self.failed_ranks else ""
        return (f"DistributedRun(nproc={self.nproc}, backend={self.backend!r}, {state}, "
                f"{sum(1 for r in self.results if r)} rank reports{failed})")


# --- pipeline schedule records -----------------------------------------------
# Filled by `pipeline.py` (`simulate_pipeline`, no torch), drawn by
# `pipeline_view.py`: every forward and backward pass of every microbatch on every
# pipeline stage, with the times the simulation gave it. Quantities such as the bubble are
# read off these times, never from a closed form.

#: The pipeline schedules `simulate_pipeline` knows (Huang et al. 2019 GPipe; Narayanan et
#: al. 2021 for 1F1B, i.e. PipeDream-Flush, and the interleaved schedule).
PipelineScheduleName = Literal["gpipe", "1f1b", "interleaved"]
PIPELINE_SCHEDULES: tuple[PipelineScheduleName, ...] = get_args(PipelineScheduleName)
#: One pipeline operation's kind: "F" forward, "B" backward.
PipelineOpKind = Literal["F", "B"]


@dataclass(frozen=True)
class PipelineOp:
    """One forward or backward pass of one microbatch through one model chunk.

    ``stage`` is the device (0 is the first); ``chunk`` the model chunk on it (always 0
    unless the schedule is interleaved); ``virtual_stage`` = ``chunk * stages + stage`` is the
    position of that chunk in the model.
    """

    stage: int
    chunk: int
    virtual_stage: int
    microbatch: int
    kind: PipelineOpKind
    start: float
    end: float


@dataclass(frozen=True)
class PipelineSchedule:
    """A simulated pipeline timeline, as `simulate_pipeline` returns it.

    ``ops`` are in the order each stage ran them (stage by stage). The bubble is the idle
    share of the stages' time up to the last op's end: ``bubble_fraction`` of total time;
    ``bubble_over_ideal`` is Megatron's definition (idle time over the ideal, bubble-free
    time ``m (t_f + t_b)``).
    """

    stages: int
    microbatches: int
    schedule: PipelineScheduleName
    chunks: int
    t_forward: float
    t_backward: float
    ops: tuple[PipelineOp, ...]

    def ops_on(self, stage: int) -> tuple[PipelineOp, ...]:
        """The ops one stage ran, in its order."""
        return tuple(op for op in self.ops if op.stage == stage)

    @property
    def makespan(self) -> float:
        """Time from the first op's start to the last op's end (one training step)."""
        return max(op.end for op in self.ops) - min(op.start for op in self.ops)

    @property
    def busy_by_stage(self) -> tuple[float, ...]:
        return tuple(sum(op.end - op.start for op in self.ops_on(s)) for s in range(self.stages))

    @property
    def idle_by_stage(self) -> tuple[float, ...]:
        return tuple(self.makespan - busy for busy in self.busy_by_stage)

    @property
    def bubble_fraction(self) -> float:
        """Idle share of all stages' time over the step: sum(idle) / (stages * makespan)."""
        return sum(self.idle_by_stage) / (self.stages * self.makespan)

    @property
    def ideal_time(self) -> float:
        """One stage's compute with no bubble: m (t_f + t_b)."""
        return self.microbatches * (self.t_forward + self.t_backward)

    @property
    def bubble_over_ideal(self) -> float:
        """Megatron's bubble: the mean idle time per stage over the ideal time."""
        return sum(self.idle_by_stage) / self.stages / self.ideal_time

    @property
    def in_flight_by_stage(self) -> tuple[float, ...]:
        """Most microbatches whose activations a stage held at once: forwards run whose
        backward has not finished, in whole-stage units (a chunk counts 1/chunks)."""
        peaks = []
        for s in range(self.stages):
            # A forward holds its activations from its start; a backward frees them at its
            # end. At equal times the free comes first (-1 sorts before +1).
            events = sorted([(op.start, 1) for op in self.ops_on(s) if op.kind == "F"]
                            + [(op.end, -1) for op in self.ops_on(s) if op.kind == "B"])
            held = peak = 0
            for _, delta in events:
                held += delta
                peak = max(peak, held)
            peaks.append(peak / self.chunks)
        return tuple(peaks)

    @property
    def peak_in_flight(self) -> float:
        """The largest of `in_flight_by_stage` (the first stage's under these schedules)."""
        return max(self.in_flight_by_stage)

    def caption(self) -> str:
        v = f", {self.chunks} chunks" if self.chunks > 1 else ""
        return (f"{self.schedule}: p={self.stages}, m={self.microbatches}{v}; "
                f"bubble {self.bubble_fraction:.1%} of time, "
                f"peak in flight {self.peak_in_flight:g}")

    def plot(self, ax: Axes | None = None, title: str | None = None) -> Figure:
        """Stage lanes over time, F and B boxes labelled by microbatch, idle time blank."""
        # The one lazy import of the view: records stay importable without matplotlib.
        from .pipeline_view import plot_pipeline

        return plot_pipeline(self, ax=ax, title=title)

    def __repr__(self) -> str:
        return f"PipelineSchedule({self.caption()})"


# --- communication records ---------------------------------------------------
# Filled by `comm.py` (`record_comm`) inside a rank of a DDP job, drawn by
# `comm_view.py`. Times are seconds since the recording started (`t0_unix` is
# that moment on the host's clock, so ranks of one host can be aligned). Plain values
# only: a rank sends `trace.to_dict()` through `report`, the notebook rebuilds it.


@dataclass(frozen=True)
class CommCall:
    """One call of the DDP communication hook: one bucket's averaging all-reduce.

    ``bucket`` is DDP's bucket index (the first backward uses DDP's initial buckets, later
    ones the buckets rebuilt in the order gradients became ready). ``start_s`` is when
    the hook launched the all-reduce, ``end_s`` when its future completed (the callback
    ran; on nccl that is when the work was done on the stream the callback watched).
    """

    index: int  # order of the hook calls in the trace
    micro_step: int  # the backward pass it belongs to, from 1
    optimizer_step: int  # optimizer steps finished before that backward
    bucket: int
    numel: int
    nbytes: int
    dtype: str
    params: tuple[str, ...]  # parameter names in the bucket, in DDP's order
    start_s: float
    end_s: float | None


@dataclass(frozen=True)
class NodeSpan:
    """One autograd Node run during a backward pass, from its pre-hook to its hook.
    ``param`` names the parameter of an AccumulateGrad Node; its span includes DDP's hook
    on that Node (copying the gradient into the bucket, launching a complete bucket)."""

    micro_step: int
    name: str
    start_s: float
    end_s: float
    param: str | None = None


@dataclass(frozen=True)
class BackwardPass:
    """One backward pass of the DDP model: ``synced`` is False inside ``no_sync()``.
    ``nodes_end_s`` is when its last Node finished, ``end_s`` when backward returned
    (after DDP waited for the all-reduces and wrote the averaged gradients)."""

    micro_step: int
    synced: bool
    optimizer_step: int
    start_s: float
    nodes_end_s: float
    end_s: float


@dataclass(frozen=True)
class CommOverlap:
    """How one backward pass's all-reduces sat against its Nodes (`CommTrace.overlap`).

    ``overlapped_s``: seconds with an all-reduce in flight while the backward's Nodes
    still ran (communication hidden behind computation); ``exposed_s``: seconds of
    all-reduce after the last Node finished (communication the backward waited for).
    """

    micro_step: int
    overlapped_s: float
    exposed_s: float

    @property
    def overlapped_fraction(self) -> float:
        """The share of all-reduce time hidden behind the Nodes (0 when none ran)."""
        total = self.overlapped_s + self.exposed_s
        return self.overlapped_s / total if total > 0 else 0.0


def _union_length(spans: list[tuple[float, float]]) -> float:
    total, reach = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= reach:
            continue
        total += b - max(a, reach)
        reach = b
    return total


@dataclass(eq=False)
class CommTrace:
    """What `record_comm` saw on one rank: backward passes, their Nodes, and every
    all-reduce the DDP communication hook launched, with sizes and times.

    Plot with `.plot()` (or several ranks with `autogradviz.plot_comm`); send it from a
    rank with ``report({"comm": trace.to_dict()})`` and rebuild it with `from_dict`.
    """

    rank: int
    world_size: int
    backend: str
    params: tuple[str, ...]  # parameter names (``ddp.module.named_parameters()`` order)
    param_bytes: dict[str, int]  # gradient bytes of each parameter that requires grad
    t0_unix: float = 0.0
    calls: list[CommCall] = field(default_factory=list)
    nodes: list[NodeSpan] = field(default_factory=list)
    backwards: list[BackwardPass] = field(default_factory=list)
    steps: list[float] = field(default_factory=list)  # optimizer.step() end times

    # --- reading ------------------------------------------------------------------
    def calls_of(self, micro_step: int) -> list[CommCall]:
        """The all-reduces of one backward pass, in launch order."""
        return [c for c in self.calls if c.micro_step == micro_step]

    def calls_per_step(self) -> dict[int, list[CommCall]]:
        """Optimizer step (0 = before the first step) -> the all-reduces in it."""
        out: dict[int, list[CommCall]] = {}
        for c in self.calls:
            out.setdefault(c.optimizer_step, []).append(c)
        return out

    def overlap(self, micro_step: int) -> CommOverlap:
        """For one backward pass: seconds with an all-reduce in flight while its Nodes
        still ran (``overlapped_s``) and seconds of all-reduce after the last Node
        finished (``exposed_s``), as a `CommOverlap`."""
        bwd = next((b for b in self.backwards if b.micro_step == micro_step), None)
        if bwd is None:
            raise ValueError(f"no backward pass {micro_step}; recorded micro-steps are "
                             f"{[b.micro_step for b in self.backwards]}")
        spans = [(c.start_s, c.end_s if c.end_s is not None else bwd.end_s)
                 for c in self.calls_of(micro_step)]
        inside = [(a, min(b, bwd.nodes_end_s)) for a, b in spans if a < bwd.nodes_end_s]
        after = [(max(a, bwd.nodes_end_s), b) for a, b in spans if b > bwd.nodes_end_s]
        return CommOverlap(micro_step, _union_length(inside), _union_length(after))

    def table(self, times: bool = False) -> str:
        """One line per all-reduce: backward pass, bucket, size, parameters; launch and
        completion in ms with ``times=True`` (not stable from run to run)."""
        head = f"{'bwd':>3} {'step':>4} {'bucket':>6} {'numel':>7} {'bytes':>10}  params"
        lines = [head + ("   launch ms    done ms" if times else "")]
        for c in self.calls:
            names = ", ".join(c.params)
            row = (f"{c.micro_step:>3} {c.optimizer_step:>4} {c.bucket:>6} {c.numel:>7} "
                   f"{format_bytes(c.nbytes):>10}  {names}")
            if times:
                end = f"{c.end_s * 1e3:10.2f}" if c.end_s is not None else f"{'-':>10}"
                row += f"  {c.start_s * 1e3:10.2f} {end}"
            lines.append(row)
        return "\n".join(lines)

    def caption(self) -> str:
        synced = sum(1 for b in self.backwards if b.synced)
        return (f"rank {self.rank}/{self.world_size} ({self.backend}): "
                f"{len(self.backwards)} backward passes ({synced} synced), "
                f"{len(self.calls)} all-reduces, {len(self.steps)} optimizer steps")

    def __repr__(self) -> str:
        return f"CommTrace({self.caption()})"

    # --- transport ------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data (lists and numbers), for `autogradviz.report`."""
        return {
            "rank": self.rank, "world_size": self.world_size, "backend": self.backend,
            "params": list(self.params), "param_bytes": dict(self.param_bytes),
            "t0_unix": self.t0_unix, "steps": list(self.steps),
            "calls": [[c.index, c.micro_step, c.optimizer_step, c.bucket, c.numel, c.nbytes,
                       c.dtype, list(c.params), c.start_s, c.end_s] for c in self.calls],
            "nodes": [[n.micro_step, n.name, n.start_s, n.end_s, n.param] for n in self.nodes],
            "backwards": [[b.micro_step, b.synced, b.optimizer_step, b.start_s,
                           b.nodes_end_s, b.end_s] for b in self.backwards],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CommTrace:
        """The trace back from `to_dict` (after a JSON round trip)."""
        return cls(
            rank=data["rank"], world_size=data["world_size"], backend=data["backend"],
            params=tuple(data["params"]), param_bytes=dict(data["param_bytes"]),
            t0_unix=data["t0_unix"], steps=list(data["steps"]),
            calls=[CommCall(i, m, s, b, n, nb, dt, tuple(ps), a, e)
                   for i, m, s, b, n, nb, dt, ps, a, e in data["calls"]],
            nodes=[NodeSpan(*row) for row in data["nodes"]],
            backwards=[BackwardPass(*row) for row in data["backwards"]],
        )

    # The view is reached through `_comm_view()`, this record's one lazy import.
    def plot(self, micro_steps: Any = None, title: str | None = None,
             time_scale: str = "linear") -> Any:
        """Timeline of each backward pass: a lane of Nodes, a lane per bucket's
        all-reduce (launch to completion); see `autogradviz.plot_comm`."""
        return _comm_view().plot_comm([self], micro_steps=micro_steps, title=title,
                                      time_scale=time_scale)


def _comm_view() -> Any:
    """The communication timeline (lazy, as the other views of records)."""
    from . import comm_view

    return comm_view
