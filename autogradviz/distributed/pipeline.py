"""Pipeline-parallel schedules, simulated: when every stage runs which microbatch.

A model cut into ``stages`` pieces, one per device, trains on ``microbatches`` per step.
Each stage runs its operations in the order its schedule prescribes; an operation starts
when its device is free and the operations it needs have finished:

* the forward of microbatch i on a stage needs the forward of i on the stage before it;
* the backward of i on a stage needs the backward of i on the stage after it (the last
  stage's backward needs its own forward).

The orders are those of the schedules as published and as implemented in
``torch.distributed.pipelining``:

* "gpipe" (Huang et al. 2019, https://arxiv.org/abs/1811.06965): every forward, then every
  backward;
* "1f1b" (PipeDream-Flush; Narayanan et al. 2021, https://arxiv.org/abs/2104.04473):
  stage s runs ``min(stages - s - 1, m)`` warm-up forwards, then alternates one forward and
  one backward, then drains the remaining backwards;
* "interleaved" (the same paper, Section 2.2): each device holds ``chunks`` model chunks
  (virtual stages ``chunk * stages + device``), taking microbatches in rounds of
  ``stages``; the order is that of torch's ``ScheduleInterleaved1F1B``.

The simulation is event-driven: it pops the next finishing operation from a heap and starts
whatever became runnable. The bubble, the in-flight activations and everything else the
returned `PipelineSchedule` reports are read off the simulated times; no closed form is
used. Communication between stages is taken as free.
"""
from __future__ import annotations

import heapq
import math

from .records import PIPELINE_SCHEDULES, PipelineOp, PipelineSchedule, PipelineScheduleName

__all__ = ["simulate_pipeline"]

# (kind, chunk, microbatch): one entry of a device's run order.
_Entry = tuple[str, int, int]


def _one_f_one_b(forwards: list[tuple[int, int]], backwards: list[tuple[int, int]],
                 warmup: int) -> list[_Entry]:
    """Warm-up forwards, then one forward and one backward in turn, then the rest of the
    backwards (the cool-down)."""
    warmup = min(warmup, len(forwards))
    order: list[_Entry] = [("F", *f) for f in forwards[:warmup]]
    for i, f in enumerate(forwards[warmup:]):
        order += [("F", *f), ("B", *backwards[i])]
    order += [("B", *b) for b in backwards[len(forwards) - warmup:]]
    return order


def _run_order(schedule: PipelineScheduleName, stages: int, microbatches: int, chunks: int,
               device: int) -> list[_Entry]:
    p, m, v = stages, microbatches, chunks
    if schedule == "gpipe":
        return [("F", 0, i) for i in range(m)] + [("B", 0, i) for i in range(m)]
    if schedule == "1f1b":
        mbs = [(0, i) for i in range(m)]
        return _one_f_one_b(mbs, mbs, p - device - 1)
    # Interleaved, as torch.distributed.pipelining's ScheduleInterleaved1F1B orders it:
    # microbatches go in rounds of `per_round` (= p when p divides m); each round runs
    # through chunk 0, then chunk 1, ... forward, and through the chunks in reverse order
    # backward. Every chunk counts its own microbatches.
    per_round = m // max(1, m // p)
    forwards, backwards = [], []
    next_forward, next_backward = [0] * v, [0] * v
    for k in range(m * v):
        chunk = (k // per_round) % v
        forwards.append((chunk, next_forward[chunk]))
        next_forward[chunk] += 1
        chunk = v - 1 - (k // per_round) % v
        backwards.append((chunk, next_backward[chunk]))
        next_backward[chunk] += 1
    # Warm-up: the last device runs (v - 1) rounds ahead; each hop before it, 2 more.
    warmup = (v - 1) * per_round + 2 * (p - 1 - device)
    return _one_f_one_b(forwards, backwards, warmup)


def _positive_number(name: str, value: object) -> float:
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or value <= 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def simulate_pipeline(stages: int, microbatches: int,
                      schedule: PipelineScheduleName = "1f1b", chunks: int = 1,
                      t_forward: float = 1.0, t_backward: float = 2.0) -> PipelineSchedule:
    """Simulate one training step of a pipeline and return its timeline.

    ``t_forward`` and ``t_backward`` are one stage's times for one microbatch; with
    ``chunks`` model chunks per device (interleaved only) each chunk takes 1/chunks of
    them. The interleaved schedule needs ``chunks >= 2``, and ``microbatches`` divisible by
    its number of rounds, ``max(1, microbatches // stages)`` (as torch's
    ``ScheduleInterleaved1F1B``; Megatron-LM asks for a multiple of ``stages``).
    """
    for name, value in (("stages", stages), ("microbatches", microbatches), ("chunks", chunks)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if schedule not in PIPELINE_SCHEDULES:
        raise ValueError(f"schedule must be one of {PIPELINE_SCHEDULES}, got {schedule!r}")
    if schedule == "interleaved":
        if chunks < 2:
            raise ValueError("the interleaved schedule needs chunks >= 2 model chunks per "
                             "stage (chunks=1 is plain 1f1b)")
        rounds = max(1, microbatches // stages)
        if microbatches % rounds:
            raise ValueError(f"the interleaved schedule runs microbatches in {rounds} rounds "
                             f"(microbatches // stages): microbatches ({microbatches}) must "
                             f"be a multiple of {rounds}")
    elif chunks != 1:
        raise ValueError(f"chunks={chunks} needs schedule='interleaved'; {schedule!r} runs "
                         "one model chunk per stage")
    tf = _positive_number("t_forward", t_forward) / chunks
    tb = _positive_number("t_backward", t_backward) / chunks

    p, v = stages, chunks
    last = p * v - 1
    orders = [_run_order(schedule, p, microbatches, v, d) for d in range(p)]
    finished: dict[tuple[str, int, int], float] = {}  # (kind, virtual stage, mb) -> end
    position = [0] * p  # index of each device's next op in its order
    busy = [False] * p
    ops: list[list[PipelineOp]] = [[] for _ in range(p)]
    running: list[tuple[float, int, int]] = []  # heap of (end, device, sequence)
    now = 0.0

    def needs(kind: str, vs: int, mb: int) -> tuple[str, int, int]:
        if kind == "F":
            return ("F", vs - 1, mb) if vs > 0 else ("", -1, -1)
        return ("B", vs + 1, mb) if vs < last else ("F", vs, mb)

    def start_runnable() -> None:
        for d in range(p):
            if busy[d] or position[d] == len(orders[d]):
                continue
            kind, chunk, mb = orders[d][position[d]]
            vs = chunk * p + d
            dep = needs(kind, vs, mb)
            if dep[1] >= 0 and dep not in finished:
                continue
            end = now + (tf if kind == "F" else tb)
            ops[d].append(PipelineOp(stage=d, chunk=chunk, virtual_stage=vs, microbatch=mb,
                                     kind=kind, start=now, end=end))  # type: ignore[arg-type]
            busy[d] = True
            heapq.heappush(running, (end, d, position[d]))

    start_runnable()
    while running:
        now, d, _ = heapq.heappop(running)
        op = ops[d][-1]
        finished[(op.kind, op.virtual_stage, op.microbatch)] = op.end
        busy[d] = False
        position[d] += 1
        start_runnable()
    if any(pos != len(order) for pos, order in zip(position, orders)):
        stuck = [d for d in range(p) if position[d] != len(orders[d])]
        raise RuntimeError(f"pipeline schedule {schedule!r} deadlocked on stages {stuck}")
    return PipelineSchedule(stages=p, microbatches=microbatches, schedule=schedule,
                            chunks=v, t_forward=float(t_forward),
                            t_backward=float(t_backward),
                            ops=tuple(op for lane in ops for op in lane))
