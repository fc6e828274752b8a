"""DDP communication you can see: which buckets were all-reduced, how big, when, and
against which backward Nodes.

Inside a rank script (launched with `autogradviz.torchrun`)::

    ddp = DDP(model, bucket_cap_mb=1)
    with agv.record_comm(ddp, optimizer=opt) as comm:     # a CommTrace
        for x, y in micro_batches[:-1]:
            with ddp.no_sync():
                loss_fn(ddp(x), y).backward()             # accumulates, no all-reduce
        loss_fn(ddp(*micro_batches[-1])).backward()       # one all-reduce per bucket
        opt.step()
    agv.report({"comm": comm.to_dict()})

Two kinds of hooks fill the `CommTrace` (`autogradviz.distributed.records`):

* a DDP communication hook (``ddp.register_comm_hook``) doing what DDP's default does,
  divide the bucket by the world size and ``all_reduce`` it asynchronously, and writing
  down the bucket (index, numel, bytes, dtype, parameter names), the launch time, and
  the completion time (a callback on the all-reduce's future);
* a forward hook on the DDP model that walks each new autograd graph (the package's
  `GraphWalk`) and puts a pre-hook and a hook on every Node, so each backward pass's
  Nodes are timed too. Those hooks are removed when the backward pass ends.

DDP takes one communication hook per model, for the model's life: the recording hook
stays after the block and then only averages, and a later `record_comm` on the same
model re-uses it.
"""
from __future__ import annotations

import time
from contextlib import AbstractContextManager
from typing import Any

import torch
import torch.distributed as dist
from torch.utils._pytree import tree_leaves

from ..graphs.trace import GraphWalk, root_node
from .records import BackwardPass, CommCall, CommTrace, NodeSpan

__all__ = ["CommCall", "CommTrace", "record_comm"]

_STATE_ATTR = "_autogradviz_comm_recorder"


class _HookState:
    """The state object DDP passes to the hook: the group, and the recorder to tell
    (None between recordings, when the hook only averages)."""

    def __init__(self, process_group: Any) -> None:
        self.process_group = process_group
        self.recorder: _CommRecorder | None = None


def _recording_allreduce(state, bucket):  # noqa: ANN001, ANN201
    # No annotations: DDP compares them with dist.GradBucket/Future, and this module's
    # ``from __future__ import annotations`` would make them strings.
    group = state.process_group if state.process_group is not None else dist.group.WORLD
    tensor = bucket.buffer()
    tensor.div_(group.size())  # what DDP's default allreduce_hook does
    recorder = state.recorder
    slot = recorder.launched(bucket) if recorder is not None else None
    fut = dist.all_reduce(tensor, group=group, async_op=True).get_future()

    def done(f):  # noqa: ANN001, ANN202
        if slot is not None:
            slot[-1] = time.perf_counter()
        return f.value()[0]

    return fut.then(done)


def _has_trained(ddp: Any) -> bool:
    """Whether a backward already ran: a gradient exists, or DDP has counted a forward
    after one (its logging data counts iterations at each forward after the first)."""
    if any(p.grad is not None for p in ddp.module.parameters()):
        return True
    try:
        return int(ddp._get_ddp_logging_data().get("iteration", 0)) > 0
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return False


def _is_ddp(model: Any) -> bool:
    from torch.nn.parallel import DistributedDataParallel

    return isinstance(model, DistributedDataParallel)


class _CommRecorder:
    """What `record_comm` returns: installs the hooks on entry, yields the `CommTrace`
    it fills, removes the Node and forward hooks on exit (the comm hook stays: DDP
    cannot remove it)."""

    def __init__(self, ddp: Any, optimizer: torch.optim.Optimizer | None) -> None:
        if not _is_ddp(ddp):
            raise TypeError(f"record_comm needs a DistributedDataParallel model, got "
                            f"{type(ddp).__name__}; wrap it first: "
                            f"ddp = DistributedDataParallel(model)")
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer or None, "
                            f"got {type(optimizer).__name__}")
        self.ddp = ddp
        self.optimizer = optimizer
        named = list(ddp.module.named_parameters())
        self._names = {id(p): name for name, p in named}
        group = ddp.process_group
        self.trace = CommTrace(
            rank=dist.get_rank(group), world_size=dist.get_world_size(group),
            backend=str(dist.get_backend(group)), params=tuple(n for n, _ in named),
            param_bytes={n: p.numel() * p.element_size() for n, p in named
                         if p.requires_grad})
        self._t0 = 0.0
        self._used = False
        self._active = False
        self._handles: list[Any] = []  # forward hook, optimizer hook
        self._node_handles: list[Any] = []
        self._walk: GraphWalk | None = None  # Nodes hooked since the last backward
        self._forward_synced = True
        self._micro = 0
        self._steps = 0
        self._open = False
        self._pending: list[list[Any]] = []  # per call: fields ..., end time (set by callback)
        self._spans: list[list[Any]] = []  # per Node: name, param, start, end
        self._bwd_start = 0.0
        self._bwd_synced = True

    # --- context -------------------------------------------------------------------
    def __enter__(self) -> CommTrace:
        if self._used:
            raise RuntimeError("a record_comm(...) context records one with-block; "
                               "call record_comm() again for a new one")
        self._used = True
        self._attach_comm_hook()
        self._handles.append(self.ddp.register_forward_hook(self._after_forward))
        if self.optimizer is not None:
            self._handles.append(self.optimizer.register_step_post_hook(self._after_step))
        self._t0 = time.perf_counter()
        self.trace.t0_unix = time.time()
        self._active = True
        return self.trace

    def __exit__(self, *exc: Any) -> None:
        self._active = False
        for h in self._handles + self._node_handles:
            h.remove()
        self._handles.clear()
        self._node_handles.clear()
        state = getattr(self.ddp, _STATE_ATTR, None)
        if state is not None and state.recorder is self:
            state.recorder = None

    def _attach_comm_hook(self) -> None:
        state = getattr(self.ddp, _STATE_ATTR, None)
        if state is None:
            if getattr(self.ddp, "_autogradviz_comm_state", None) is not None:
                raise ValueError("this DDP model carries trace_grads' communication hook, and "
                                 "DDP takes one hook per model; record_comm needs a DDP model "
                                 "that trace_grads has not watched")
            if _has_trained(self.ddp):
                raise ValueError("record_comm must start before the DDP model's first "
                                 "backward: DDP takes its communication hook before training "
                                 "(register_comm_hook); wrap the model in a new DDP and record "
                                 "from its first step")
            state = _HookState(self.ddp.process_group)
            try:
                self.ddp.register_comm_hook(state, _recording_allreduce)
            except RuntimeError as err:
                raise ValueError("this DDP model already has a communication hook and DDP "
                                 "takes only one; record_comm needs a DDP model without one "
                                 "(register_comm_hook can be called once)") from err
            object.__setattr__(self.ddp, _STATE_ATTR, state)
        state.recorder = self

    # --- hooks -----------------------------------------------------------------------
    def _now(self) -> float:
        return time.perf_counter() - self._t0

    def _after_forward(self, module: Any, inputs: Any, output: Any) -> None:
        if not self._active:
            return
        roots = [t for t in tree_leaves(output)
                 if isinstance(t, torch.Tensor) and t.requires_grad]
        if not roots:
            return
        self._forward_synced = bool(self.ddp.require_backward_grad_sync)
        if self._walk is None:
            self._walk = GraphWalk(saved=False)
        for node in self._walk.extend([root_node(t) for t in roots]):
            self._hook_node(node)

    def _hook_node(self, node: Any) -> None:
        walk = self._walk
        assert walk is not None
        name = walk.nodes[walk.index[node]].name
        var = getattr(node, "variable", None)
        param = self._names.get(id(var)) if var is not None else None
        span: list[Any] = [name, param, None, None]

        def pre(grad_outputs: Any) -> None:
            if not self._open:
                self._open_backward()
            span[2] = time.perf_counter()

        def post(grad_inputs: Any, grad_outputs: Any) -> None:
            span[3] = time.perf_counter()
            self._spans.append(span)

        self._node_handles.append(node.register_prehook(pre))
        self._node_handles.append(node.register_hook(post))

    def _open_backward(self) -> None:
        self._open = True
        self._micro += 1
        self._bwd_start = time.perf_counter()
        self._bwd_synced = self._forward_synced
        # Queued from inside a callback, the close runs after every callback queued
        # during backward, DDP's included (it waits for the all-reduces and writes the
        # averaged gradients back).
        engine = torch.autograd.Variable._execution_engine
        engine.queue_callback(lambda: engine.queue_callback(self._close_backward))

    def launched(self, bucket: Any) -> list[Any]:
        """Called by the hook as it launches a bucket's all-reduce; returns the slot
        whose last item the completion callback fills."""
        buf = bucket.buffer()
        params = tuple(self._names.get(id(p), "?") for p in bucket.parameters())
        slot: list[Any] = [bucket.index(), buf.numel(), buf.numel() * buf.element_size(),
                           str(buf.dtype).removeprefix("torch."), params,
                           time.perf_counter(), None]
        self._pending.append(slot)
        return slot

    def _close_backward(self) -> None:
        end = time.perf_counter()
        t0, micro, step = self._t0, self._micro, self._steps
        spans = [s for s in self._spans if s[2] is not None and s[3] is not None]
        nodes_end = max((s[3] for s in spans), default=end)
        for name, param, a, b in spans:
            self.trace.nodes.append(NodeSpan(micro, name, a - t0, b - t0, param))
        for bucket, numel, nbytes, dtype, params, a, b in self._pending:
            self.trace.calls.append(CommCall(
                len(self.trace.calls), micro, step, bucket, numel, nbytes, dtype, params,
                a - t0, None if b is None else b - t0))
        self.trace.backwards.append(BackwardPass(micro, self._bwd_synced, step,
                                                 self._bwd_start - t0, nodes_end - t0,
                                                 end - t0))
        self._spans.clear()
        self._pending.clear()
        # This graph has run: drop its Node hooks (AccumulateGrad Nodes live on).
        for h in self._node_handles:
            h.remove()
        self._node_handles.clear()
        self._walk = None
        self._open = False

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._active:
            self._steps += 1
            self.trace.steps.append(self._now())


def record_comm(ddp_model: Any, optimizer: torch.optim.Optimizer | None = None
                ) -> AbstractContextManager[CommTrace]:
    """Record the all-reduces of a DDP model's backward passes, and its backward Nodes.

    >>> with record_comm(ddp, optimizer=opt) as comm:   # a CommTrace
    ...     train_steps()
    >>> comm.calls, comm.backwards, comm.overlap(2), comm.plot()

    Each all-reduce becomes a `CommCall` (bucket index, numel, bytes, dtype, parameter
    names, launch and completion times, backward pass and optimizer step); each backward
    pass a `BackwardPass` (``synced`` False under ``no_sync()``), each Node a `NodeSpan`.
    ``optimizer`` (optional) marks optimizer steps. The model must not have a
    communication hook of its own and must not have run backward yet, because DDP takes
    one hook, before training; a later `record_comm` on the same model is fine.
    """
    return _CommRecorder(ddp_model, optimizer)

