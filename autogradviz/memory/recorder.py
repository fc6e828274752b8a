"""The one event recorder behind the memory timeline and the gradient trace.

Two parts, both plain recording with no drawing:

* `TrainingHooks` installs the hooks a training step offers (root-module forward
  pre/post hooks, a tensor hook and a post-accumulate-grad hook per parameter,
  optimizer step pre/post hooks, wrapped ``zero_grad``) and forwards each event
  to a listener. The recorders behind `track_memory` and `trace_grads` are two
  such listeners.
* `StorageLedger` is a ``TorchDispatchMode`` that sees every aten op's outputs
  and keeps one entry per live untyped storage, so bytes are exact even when many
  views share a storage. A DTensor counts as the storage of its local shard,
  all that this process holds (`autogradviz.ops.storage.held_storage`). A weak
  reference on each storage reports its free the moment it happens. A
  ``saved_tensors_hooks`` pair counts how many autograd nodes hold each
  storage, which is what "activation" means here. Its samples go straight into
  a `MemoryRecord` (`autogradviz.memory.records`).

Layering: `autogradviz.memory.records` (plain dataclasses and vocabularies) below, this
module and the recorders that use it in the middle, `autogradviz.memory.plots` (matplotlib,
no torch) on top, reached from a record's ``plot()``.

Saved-tensor hook pairs do not stack: autograd runs only the innermost pair.
So while a ledger is active, any pair pushed through
``saved_tensors_hooks.__enter__`` (``torch.utils.checkpoint``'s forward and
recompute hooks, ``save_on_cpu``, a user's own pair) is pushed composed with
the ledger's bookkeeping, and a pair already active at start is composed
instead of shadowed (see `_compose`). The watched code's pack and unpack
functions still see and return exactly what they would alone.

Category precedence (highest wins; every live byte is in exactly one category):
``parameter > gradient > optimizer_state > input > activation > temporary``.
So a weight saved by ``mm`` for backward stays "parameter", a model input saved
by the first layer stays "input", and an activation stops being one when the
graph that saved it is freed (it falls back to "temporary" if still alive).
A storage that first turns from "temporary" into any other category is
re-labelled back to its birth: Adam's ``exp_avg`` is optimizer state from the
``zeros_like`` that made it, not only from the step hook that names it.
"""
from __future__ import annotations

import sys
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack as _current_modes
from torch.utils._pytree import tree_leaves

from ..ops.storage import held_storage
from .records import CATEGORIES, MemoryRecord, Phase

__all__ = [
    "StorageLedger",
    "TrainingHooks",
    "own_saved_tensor",
    "tensors_in",
]

# Indices into a row of bytes, in `CATEGORIES` order (asserted below).
_PARAM, _GRAD, _OPT, _INPUT, _ACT, _TEMP = range(6)
assert CATEGORIES == ("parameter", "gradient", "optimizer_state", "input", "activation",
                      "temporary")
#: The categories a tensor gets from what it is rather than from autograd holding it.
Role = Literal["parameter", "gradient", "optimizer_state", "input"]
_ROLE_BITS: dict[Role, int] = {"parameter": 1, "gradient": 2, "optimizer_state": 4, "input": 8}
_ALLOCATES, _RESIZES = 1, 2  # what an op can do to storages (bit flags, cached per op)
# (flags, timeline name) per aten overload. Shared by every ledger: reading an
# op's schema costs tens of microseconds the first time, far more than a step's
# worth of dict lookups, and it never changes within a process.
_OP_INFO: dict[Any, tuple[int, str]] = {}


def tensors_in(obj: Any) -> list[torch.Tensor]:
    """The tensors in ``obj``: itself, or the leaves of the (nested) tuples, lists, dicts
    and other containers torch's pytree knows."""
    return [x for x in tree_leaves(obj) if isinstance(x, torch.Tensor)]


class _Live(weakref.ref):
    """One live storage: a weak reference to it plus what we know about it.

    Why a weak reference on an ``UntypedStorage`` follows the C++ storage's life: the
    Python storage object is kept alive by the C++ ``StorageImpl`` it wraps (torch
    "preserves" the PyObject, as it does a tensor's) for as long as any tensor or view
    uses that storage, even after our own reference is gone. It is deallocated, and the
    callback (`StorageLedger._freed`) runs, when the last C++ reference is dropped: the
    moment the bytes go back to the allocator, whichever tensor went last.
    """

    __slots__ = ("key", "nbytes", "cat", "roles", "saved", "born", "relabelled")


class _Saved:
    """What the pack hook hands autograd: the saved tensor, what autograd's own
    in-place check needs (see `_check_version`), and a ticket that tells the
    ledger, when autograd drops it, that one holder fewer remains (``entry`` is
    None for a tensor off the watched device: checked, not counted)."""

    __slots__ = ("tensor", "entry", "ledger", "version", "source", "fn_name", "output_nr")

    def __del__(self) -> None:
        if self.entry is not None:
            self.ledger._unsave(self.entry)


_next_sequence_nr = torch._C._autograd._get_sequence_nr


def _save(t: torch.Tensor, entry: _Live | None, ledger: StorageLedger) -> _Saved:
    """Pack ``t`` as autograd would keep it: detached (holding an output itself
    would make a cycle through its grad_fn; a detached tensor shares the version
    counter, which is all the check reads) plus the facts torch's error names."""
    s = _Saved()
    s.entry = entry
    s.ledger = ledger
    s.version = t._version
    s.source = s.fn_name = None
    fn = t.grad_fn
    if fn is not None:
        s.output_nr = t.output_nr
        if fn._sequence_nr() == _next_sequence_nr() - 1:
            # An output of the Node being built now (the newest on this thread): torch
            # names that Node, so its name is all we keep.
            s.fn_name = fn.name()
        else:
            # An input: torch keeps the original tensor (no cycle: its grad_fn is
            # upstream) and names the grad_fn it has at unpack, after the in-place op.
            s.source = t
    # A plain tensor's detach (a view: nothing for the ledger) skips the Python
    # dispatch modes, so this bookkeeping op costs no mode round trip and stays
    # out of any other mode's view; subclasses take the normal path.
    if type(t) is torch.Tensor:
        with torch._C._DisableTorchDispatch():
            s.tensor = t.detach()
    else:
        s.tensor = t.detach()
    return s


def _forward_name(node_name: str) -> str:
    """How torch's in-place error names a Node: ``ReluBackward0`` -> ``Relu``."""
    cut = node_name.rfind("Backward")
    return node_name[:cut] if cut > 0 else node_name


def _check_version(s: _Saved) -> None:
    """Raise autograd's own in-place error when ``s.tensor`` changed since it was saved.

    Saved-tensor hooks switch that check off in torch (the hooks own the saved
    value), so the ledger, which must not change what the watched code does, makes
    it here, at the same point (the unpack) with the same message. Which Node the
    message names follows torch: for a tensor saved as an output, the Node that
    saved it; for a saved input, the grad_fn the tensor has now."""
    current = s.tensor._version
    shape = list(s.tensor.shape)
    name = s.fn_name
    if s.source is not None:
        fn = s.source.grad_fn
        name = fn.name() if fn is not None else None
    where = "" if name is None else f", which is output {s.output_nr} of {_forward_name(name)},"
    if torch.is_anomaly_enabled():
        hint = ("Hint: the backtrace further above shows the operation that failed to compute "
                "its gradient. The variable in question was changed in there or anywhere "
                "later. Good luck!")
    else:
        hint = ("Hint: enable anomaly detection to find the operation that failed to compute "
                "its gradient, with torch.autograd.set_detect_anomaly(True, check_nan=False).")
    raise RuntimeError(
        "one of the variables needed for gradient computation has been modified by an "
        f"inplace operation: [{s.tensor.type()} {shape}]{where} is at version {current}; "
        f"expected version {s.version} instead. {hint}")


class _Held:
    """What a composed pack hook hands autograd when the inner hook's packed
    value holds tensors: that value plus tickets, one per (ledger, storage),
    returned when autograd drops it."""

    __slots__ = ("packed", "tickets")

    def __init__(self, packed: Any, tickets: list[tuple[StorageLedger, _Live]]) -> None:
        self.packed = packed
        self.tickets = tickets

    def __del__(self) -> None:
        for ledger, e in self.tickets:
            ledger._unsave(e)


def own_saved_tensor(packed: Any) -> torch.Tensor | None:
    """The tensor inside a value packed by this recorder's saved-tensor hooks, or None
    for anything else packed (a checkpoint handle, save_on_cpu's copy): the graph trace
    sees through the package's own tickets without running anyone's unpack hook."""
    while type(packed) is _Held:
        packed = packed.packed
    return packed.tensor if type(packed) is _Saved else None


class _Watch(weakref.ref):
    """A ticket that ends when one tensor object dies (see `_compose_recompute`),
    unless an unpack hands it on to a `_Held` first."""

    __slots__ = ("entry", "obj_id")


def _packed_tensors(packed: Any) -> list[torch.Tensor]:
    """The tensors an inner pack hook's value keeps (a tensor, or tensors in
    tuples/lists/dicts as ``save_on_cpu``'s ``(device, copy)``; another
    ledger's ticket holds its tensor). Handles, keys and the like hold none."""
    if type(packed) is _Saved:
        return [packed.tensor]
    return tensors_in(packed)


# --- composing saved-tensor hook pairs -------------------------------------------
_HOOKS_CLS = torch.autograd.graph.saved_tensors_hooks
_push_hooks = torch._C._autograd._push_saved_tensors_default_hooks
#: Ledgers whose bookkeeping is composed into pairs pushed while they are active.
_COMPOSING: list[StorageLedger] = []
#: ``saved_tensors_hooks.__enter__`` as found when the first ledger started.
_ORIGINAL_ENTER: list[Any] = []


def _recompute_types() -> tuple[type | None, type | None]:
    """``torch.utils.checkpoint``'s recompute hook class and its early-stop
    exception, when that module is loaded and still has them (else None)."""
    mod = sys.modules.get("torch.utils.checkpoint")
    return (getattr(mod, "_recomputation_hook", None),
            getattr(mod, "_StopRecomputationError", None))


def _compose(pack: Callable[[torch.Tensor], Any], unpack: Callable[[Any], torch.Tensor],
             ledgers: tuple[StorageLedger, ...]) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """A pair that runs ``pack``/``unpack`` unchanged and labels the storages
    the packed value keeps as saved for as long as autograd keeps that value
    (save_on_cpu's copy, a hook's clone). A value holding no tensor, such as
    checkpoint's forward handle, labels nothing: the tensor it was made from is
    not kept for backward. When unpack returns a tensor a ledger is watching
    (checkpoint's recomputed one), its ticket moves to the packed value, so it
    ends when autograd drops the saved value, as for any other saved tensor."""

    def composed_pack(t: torch.Tensor) -> Any:
        packed = pack(t)
        tensors = _packed_tensors(packed)
        return _Held(packed, [(led, e) for led in ledgers for p in tensors
                              if (e := led.hold(p)) is not None])

    def composed_unpack(held: Any) -> torch.Tensor:
        if type(held) is not _Held:  # packed before the ledgers started
            return unpack(held)
        out = unpack(held.packed)
        if isinstance(out, torch.Tensor):
            for led in ledgers:
                led.hand_on(out, held)
        return out

    return composed_pack, composed_unpack


def _compose_recompute(pack: Callable[[torch.Tensor], Any],
                       ledgers: tuple[StorageLedger, ...], stop: type | None) -> Callable[..., Any]:
    """The pack hook of checkpoint's recomputation, composed.

    Its packed value is not what keeps the tensor: the hook stores the (detached)
    tensor in the checkpoint frame until the forward handle is unpacked, and the
    recompute graph that holds the packed value is dropped at once. So the
    ticket ends when that tensor object dies. The hook detaches tensors that
    require grad itself; detaching first (the same op it would run) lets the
    ledger know the very object stored, also when the hook stores it and then
    raises checkpoint's early-stop exception. Unpack is unchanged.
    """

    def composed_pack(t: torch.Tensor) -> Any:
        x = t.detach() if t.requires_grad else t
        try:
            packed = pack(x)
        except BaseException as err:
            if stop is not None and isinstance(err, stop):
                for led in ledgers:
                    led.hold_while_alive(x)
            raise
        for p in _packed_tensors(packed):
            for led in ledgers:
                led.hold_while_alive(p)
        return packed

    return composed_pack


def _composing_enter(hooks: Any) -> None:
    """Stands in for ``saved_tensors_hooks.__enter__`` while a ledger is active.

    Only ledgers whose dispatch mode this thread runs under take part: the
    patch is process-wide, the watching is per thread (autograd carries the
    mode to the threads that run a watched backward)."""
    modes = _current_modes() if _COMPOSING else ()
    ledgers = tuple(led for led in _COMPOSING if led._active and any(m is led for m in modes))
    pack, unpack = hooks.pack_hook, hooks.unpack_hook
    if ledgers:
        recompute, stop = _recompute_types()
        if recompute is not None and isinstance(hooks, recompute):
            pack = _compose_recompute(pack, ledgers, stop)
        else:
            pack, unpack = _compose(pack, unpack, ledgers)
    _push_hooks(pack, unpack)


# The patch is process-wide and `_start_composing`/`_stop_composing` take no lock: the
# check of ``_COMPOSING`` and the swap of ``__enter__`` are separate steps. Starting or
# stopping trackers on two threads at once can therefore lose the original ``__enter__``
# (both threads see no ledger and patch; the second saves the patch as "original") or
# restore it while a ledger is still active. Start and stop trackers from one thread at a
# time. While a tracker is active, other threads may enter hook pairs freely: they go
# through `_composing_enter`, which composes nothing for a thread not under the ledger's
# dispatch mode.
def _keep_dynamo_out() -> bool:
    """Tell Dynamo to skip the ledger's ``__torch_dispatch__`` and everything it calls
    (the C-level per-code strategy ``torch._dynamo.disable`` would otherwise emulate
    per call); False where this torch lacks that API, and the wrapper stays."""
    try:
        from torch._C._dynamo import eval_frame as ef

        skip = ef._FrameExecStrategy(ef._FrameAction.SKIP, ef._FrameAction.SKIP)
        return skip is not None and callable(ef.set_code_exec_strategy)
    except (ImportError, AttributeError, TypeError):
        return False


def _skip_dynamo_in(fn: Any) -> None:
    from torch._C._dynamo import eval_frame as ef

    ef.set_code_exec_strategy(
        fn.__code__, ef._FrameExecStrategy(ef._FrameAction.SKIP, ef._FrameAction.SKIP))


def _start_composing(ledger: StorageLedger) -> None:
    if not _COMPOSING:
        _ORIGINAL_ENTER[:] = [_HOOKS_CLS.__dict__["__enter__"]]
        _HOOKS_CLS.__enter__ = _composing_enter  # type: ignore[method-assign]
    _COMPOSING.append(ledger)


def _stop_composing(ledger: StorageLedger) -> None:
    if ledger in _COMPOSING:
        _COMPOSING.remove(ledger)
    if not _COMPOSING and _ORIGINAL_ENTER:
        _HOOKS_CLS.__enter__ = _ORIGINAL_ENTER.pop()  # type: ignore[method-assign]


class StorageLedger(TorchDispatchMode):
    """Live bytes per category on one device, sampled after every allocating op
    into ``self.record`` (a `MemoryRecord`).

    The record's compact rows are appended to directly (cheap in the hot path); the
    record builds `MemorySample` objects only when read.
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # TorchDispatchMode keeps Dynamo out of ``__torch_dispatch__`` by wrapping it in
        # ``torch._disable_dynamo``, a Python wrapper that swaps the frame evaluator on
        # every call: about 2 us per op, most of the ledger's own cost. The same
        # guarantee is given once per code object instead (`_keep_dynamo_out`).
        return not _keep_dynamo_out()

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.device = device
        self.phase: Phase = "other"
        self.record = MemoryRecord(str(device))
        # The record's lists, shared (not copied): `cur` is updated in place, one row of
        # bytes per sample is appended to `s_bytes` (lists: a late label rewrites old
        # rows, see `_recategorise`) and one (phase, op, optimizer_steps, cuda) tuple to
        # `s_info`.
        self.cur = self.record.current
        self.s_bytes = self.record.rows
        self.s_info = self.record.info
        self.total = 0
        self.peak_total = 0
        self.steps = 0  # optimizer steps seen so far
        self._live: dict[int, _Live] = {}
        self._active = False
        self._sample_cuda = device.type == "cuda"
        self._backward_open = False
        self._pushed = False
        # Tickets that end with a tensor object (checkpoint's recomputed tensors),
        # by the object's id (removed when it dies, so ids are never stale).
        self._watches: dict[int, list[_Watch]] = {}
        self._release_cb = self._released
        self._freed_cb = self._freed  # one bound method for every weak reference

    # --- lifetime --------------------------------------------------------------
    def start(self) -> None:
        """Push the dispatch mode and the saved-tensor hooks, and compose pairs
        pushed later; `stop` undoes all of it, also after an error."""
        self._active = True
        top = torch._C._autograd._top_saved_tensors_default_hooks(True)
        if top is None:
            pack, unpack = self._pack, self._unpack
        else:  # an outer pair (save_on_cpu around the with, another ledger): keep it working
            pack, unpack = _compose(top[0], top[1], (self,))
        _push_hooks(pack, unpack)
        self._pushed = True
        _start_composing(self)
        try:
            self.__enter__()
        except BaseException:
            self._undo_hooks()
            self._active = False
            raise

    def _undo_hooks(self) -> None:
        try:
            if self._pushed:
                self._pushed = False
                torch._C._autograd._pop_saved_tensors_default_hooks()
        finally:
            _stop_composing(self)

    def stop(self) -> None:
        try:
            try:
                self.__exit__(None, None, None)
            finally:
                self._undo_hooks()
            self.sample("end")
        finally:
            self._active = False
            # The record keeps the counts at the end; later frees must not move them.
            self.record.current = list(self.cur)
            # Dropping the weak references first means no callback fires after this.
            self._live = {}
            self._watches = {}

    # --- storage registry ------------------------------------------------------
    def _register(self, st: torch.UntypedStorage, born: int | None) -> _Live | None:
        if st.device != self.device:
            return None
        e = _Live(st, self._freed_cb)
        e.key = key = st._cdata
        e.nbytes = nb = st.nbytes()
        e.cat = _TEMP
        e.roles = 0
        e.saved = 0
        e.born = born
        e.relabelled = born is None
        self._live[key] = e
        self.cur[_TEMP] += nb
        self.total += nb
        return e

    def _freed(self, e: _Live) -> None:
        if not self._active:
            return
        # Identity, not key: ``_cdata`` is the storage's address, which the allocator may
        # hand to a new storage as soon as this one is freed. If that storage was
        # registered before this callback ran (a free on another thread, a deferred
        # deallocation), the slot holds the new entry, which must stay. This entry's bytes
        # leave the counts either way.
        if self._live.get(e.key) is e:
            del self._live[e.key]
        self.cur[e.cat] -= e.nbytes
        self.total -= e.nbytes

    def _recategorise(self, e: _Live) -> None:
        # The category by precedence (module docstring), inline: this runs twice for
        # every saved tensor. Role bits: 1 parameter, 2 gradient, 4 optimizer state, 8 input.
        roles = e.roles
        new = ((_PARAM if roles & 1 else _GRAD if roles & 2 else _OPT if roles & 4 else _INPUT)
               if roles else _ACT if e.saved else _TEMP)
        old = e.cat
        if new == old:
            return
        nb = e.nbytes
        self.cur[old] -= nb
        self.cur[new] += nb
        if old == _TEMP and not e.relabelled:
            # First real label: it has been this since birth (see module docstring).
            for row in self.s_bytes[e.born:]:
                row[_TEMP] -= nb
                row[new] += nb
        e.relabelled = True
        e.cat = new

    def entry(self, t: torch.Tensor) -> _Live | None:
        """The entry of ``t``'s storage, registered now if new (None off the device)."""
        if type(t) is torch.Tensor and t.layout is torch.strided:
            st = t.untyped_storage()  # what `held_storage` returns for a plain tensor
        else:
            st = held_storage(t)
        if st is None:
            return None
        e = self._live.get(st._cdata)
        if e is None:
            e = self._register(st, None)
        return e

    def mark(self, tensors: Iterable[torch.Tensor], role: Role, label: str | None) -> None:
        """Give ``tensors``' storages ``role``; register the ones not seen yet.
        A sample labelled ``label`` follows when that added bytes (None: no sample)."""
        if not self._active:
            return
        bit = _ROLE_BITS[role]
        before = self.total
        for t in tensors:
            e = self.entry(t)
            if e is None or e.roles & bit:
                continue
            e.roles |= bit
            self._recategorise(e)
        if self.total > before and label is not None:  # newly counted bytes can make a new peak
            self.sample(label)

    # --- saved tensors -----------------------------------------------------------
    def hold(self, t: torch.Tensor) -> _Live | None:
        """Count one more holder of ``t``'s storage for backward (registering
        it if new); the caller returns the ticket with `_unsave`."""
        e = self.entry(t) if self._active else None
        if e is None:
            return None
        before = self.total
        e.saved += 1
        if e.saved == 1:
            self._recategorise(e)
        if self.total > before:  # newly counted bytes can make a new peak
            self.sample("saved for backward")
        return e

    def hold_while_alive(self, t: torch.Tensor) -> None:
        """`hold` ``t``'s storage until the tensor object ``t`` dies or
        `hand_on` moves the ticket."""
        e = self.hold(t)
        if e is not None:
            w = _Watch(t, self._release_cb)
            w.entry = e
            w.obj_id = id(t)
            self._watches.setdefault(w.obj_id, []).append(w)

    def hand_on(self, t: torch.Tensor, held: _Held) -> None:
        """Move the tickets watching ``t`` to ``held`` (dropping a weak
        reference means its callback never runs)."""
        watches = self._watches.pop(id(t), None) if self._watches else None
        if watches:
            held.tickets.extend((self, w.entry) for w in watches)

    def _released(self, w: _Watch) -> None:
        watches = self._watches.get(w.obj_id)
        if watches is not None and w in watches:
            watches.remove(w)
            if not watches:
                del self._watches[w.obj_id]
            self._unsave(w.entry)

    def _pack(self, t: torch.Tensor) -> Any:
        return _save(t, self.hold(t), self)

    @staticmethod
    def _unpack(packed: Any) -> torch.Tensor:
        if type(packed) is not _Saved:
            return packed
        if packed.tensor._version != packed.version:
            _check_version(packed)
        return packed.tensor

    def _unsave(self, e: _Live) -> None:
        if not self._active:
            return
        e.saved -= 1
        # A ticket can outlive its storage (a watched tensor object and its
        # storage die together, callbacks in either order): a freed entry's
        # bytes are already gone from the counts.
        if e.saved == 0 and self._live.get(e.key) is e:
            self._recategorise(e)

    # --- samples ---------------------------------------------------------------
    def current_phase(self) -> Phase:
        return "backward" if torch._C._current_graph_task_id() != -1 else self.phase

    def sample(self, op: str, phase: Phase | None = None) -> None:
        """Append the current bytes per category; ``phase`` skips the lookup
        when the caller already knows it."""
        rows = self.s_bytes
        rows.append(self.cur.copy())
        if phase is None:
            phase = self.current_phase()
        cuda = ((torch.cuda.memory_allocated(self.device), torch.cuda.memory_reserved(self.device))
                if self._sample_cuda else None)
        self.s_info.append((phase, op, self.steps, cuda))
        if self.total > self.peak_total:
            self.peak_total = self.total
            self.record.peak_index = len(rows) - 1

    def _backward_done(self) -> None:
        self._backward_open = False
        if self._active:
            self.sample("backward end")

    # --- the hot path ----------------------------------------------------------
    # Every aten op on the thread passes through here, so the common cases are
    # kept to a few attribute reads: view and in-place ops leave after one dict
    # lookup, a single plain-tensor output skips the tuple walk, and a sample is
    # taken only when bytes were added.
    @staticmethod
    def _info(func: Any) -> tuple[int, str]:
        """(what the op can do to storages, its timeline name), cached per overload."""
        schema = func._schema
        name = func.overloadpacket.__name__
        kind = 0
        if any(r.alias_info is None for r in schema.returns):
            kind |= _ALLOCATES
        if name in ("resize_", "resize_as_", "set_") or func._overloadname.startswith("out"):
            kind |= _RESIZES
        info = (kind, f"aten.{name}")
        _OP_INFO[func] = info
        return info

    def _seen(self, t: Any, kind: int, born: int) -> bool:
        """Register ``t``'s storage if new (or update its size after a resize);
        True when that added bytes."""
        if not isinstance(t, torch.Tensor):
            return False
        st = held_storage(t)
        if st is None:
            return False
        e = self._live.get(st._cdata)
        if e is None:
            return bool(kind & _ALLOCATES) and self._register(st, born) is not None
        if kind & _RESIZES:
            nb = st.nbytes()
            if nb != e.nbytes:
                self.cur[e.cat] += nb - e.nbytes
                self.total += nb - e.nbytes
                e.nbytes = nb
                return True
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = func(*args, **(kwargs or {}))
        info = _OP_INFO.get(func) or self._info(func)
        kind = info[0]
        if not kind:  # views and in-place ops add no storage
            return out
        born = len(self.s_bytes)
        if type(out) is torch.Tensor and kind == _ALLOCATES:
            # The usual case, kept short: one fresh plain tensor (its storage read
            # directly: `held_storage` only adds the unwrapping of subclasses).
            try:
                st = out.untyped_storage()
            except (RuntimeError, NotImplementedError):  # sparse, nested: no storage
                return out
            if st._cdata in self._live or self._register(st, born) is None:
                return out
        elif type(out) is tuple or type(out) is list:
            grew = False
            for t in out:
                if self._seen(t, kind, born):
                    grew = True
            if not grew:
                return out
        elif not self._seen(out, kind, born):
            return out
        if torch._C._current_graph_task_id() == -1:
            self.sample(info[1], self.phase)
        else:
            self.sample(info[1], "backward")
            if not self._backward_open:
                self._backward_open = True
                torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)
        return out


if not isinstance(StorageLedger.__dict__["__torch_dispatch__"], staticmethod) and \
        hasattr(StorageLedger.__dict__["__torch_dispatch__"], "__code__") and _keep_dynamo_out():
    _skip_dynamo_in(StorageLedger.__torch_dispatch__)


def named_params(
    model: nn.Module | None, optimizer: torch.optim.Optimizer | None
) -> list[tuple[str, nn.Parameter]]:
    """Unique parameters with stable names: the model's names first (without
    DDP's ``module.`` prefix), then optimizer-only ones as ``group<g>.<i>``."""
    out: list[tuple[str, nn.Parameter]] = []
    seen: set[int] = set()
    if model is not None:
        is_ddp = type(model).__name__ == "DistributedDataParallel"
        inner = getattr(model, "module", None) if is_ddp else None
        for name, p in (inner or model).named_parameters():
            if id(p) not in seen:
                seen.add(id(p))
                out.append((name, p))
    if optimizer is not None:
        for g, group in enumerate(optimizer.param_groups):
            for i, p in enumerate(group["params"]):
                if id(p) not in seen:
                    seen.add(id(p))
                    out.append((f"group{g}.{i}", p))
    return out


def check_targets(model: Any, optimizer: Any) -> None:
    """Raise a TypeError naming the argument when ``model``/``optimizer`` has the wrong type."""
    if model is not None and not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module or None, got {type(model).__name__}")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"optimizer must be a torch.optim.Optimizer or None, got {type(optimizer).__name__}")


class TrainingHooks:
    """Installs the training-step hooks on ``model``/``optimizer`` and forwards
    each event to ``listener``; `remove` undoes everything it installed.

    The listener defines any of ``forward_start(args, kwargs)``, ``forward_end()``,
    ``grad_incoming(name, param)``, ``grad_ready(name, param)``, ``zero_grad_start()``,
    ``zero_grad_end()``, ``step_start()`` and ``step_end()``; events it lacks are skipped.
    """

    def __init__(self, listener: Any, model: nn.Module | None,
                 optimizer: torch.optim.Optimizer | None,
                 params: list[tuple[str, nn.Parameter]]) -> None:
        """``params``: `named_params` of ``model``/``optimizer``, which the caller has
        already walked (and checked with `check_targets`)."""
        self.listener = listener
        self.model = model
        self.optimizer = optimizer
        self.params = params
        self._handles: list[Any] = []
        self._wrapped: list[tuple[Any, bool, Any]] = []

    def _call(self, event: str, *args: Any) -> None:
        fn = getattr(self.listener, event, None)
        if fn is not None:
            fn(*args)

    def install(self) -> None:
        if self.model is not None:
            self._handles.append(self.model.register_forward_pre_hook(
                lambda mod, args, kwargs: self._call("forward_start", args, kwargs),
                with_kwargs=True))
            self._handles.append(self.model.register_forward_hook(
                lambda mod, args, out: self._call("forward_end")))
        # Per-parameter hooks run once per parameter per backward, so only the
        # ones the listener listens to are installed.
        incoming = callable(getattr(self.listener, "grad_incoming", None))
        ready = callable(getattr(self.listener, "grad_ready", None))
        for name, p in self.params:
            if not p.requires_grad:
                continue
            if incoming:
                self._handles.append(p.register_hook(self._incoming_hook(name, p)))
            if ready:
                self._handles.append(p.register_post_accumulate_grad_hook(self._ready_hook(name)))
        if self.optimizer is not None:
            self._handles.append(self.optimizer.register_step_pre_hook(
                lambda opt, args, kwargs: self._call("step_start")))
            self._handles.append(self.optimizer.register_step_post_hook(
                lambda opt, args, kwargs: self._call("step_end")))
        for owner in (self.optimizer, self.model):
            if owner is not None:
                self._wrap_zero_grad(owner)

    def _incoming_hook(self, name: str, p: nn.Parameter) -> Callable[[torch.Tensor], None]:
        # A tensor hook on a leaf runs before AccumulateGrad, so .grad is still the old one.
        def hook(grad: torch.Tensor) -> None:
            self._call("grad_incoming", name, p)
        return hook

    def _ready_hook(self, name: str) -> Callable[[torch.Tensor], None]:
        def hook(p: torch.Tensor) -> None:
            self._call("grad_ready", name, p)
        return hook

    def _wrap_zero_grad(self, owner: Any) -> None:
        had_own = "zero_grad" in vars(owner)
        original = owner.zero_grad

        def zero_grad(*args: Any, **kwargs: Any) -> Any:
            self._call("zero_grad_start")
            try:
                return original(*args, **kwargs)
            finally:
                self._call("zero_grad_end")

        object.__setattr__(owner, "zero_grad", zero_grad)
        self._wrapped.append((owner, had_own, original))

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        for owner, had_own, original in reversed(self._wrapped):
            if had_own:
                object.__setattr__(owner, "zero_grad", original)
            else:
                object.__delattr__(owner, "zero_grad")
        self._wrapped.clear()


def state_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every tensor in ``optimizer.state`` (Adam's exp_avg, exp_avg_sq, step...)."""
    out: list[torch.Tensor] = []
    # Read after every step: the usual per-parameter dict of tensors and numbers is
    # walked directly (pytree costs microseconds per leaf); anything nested goes
    # through pytree.
    for state in optimizer.state.values():
        if type(state) is not dict:
            out += tensors_in(state)
            continue
        for v in state.values():
            if isinstance(v, torch.Tensor):
                out.append(v)
            elif isinstance(v, (list, tuple, dict)):
                out += tensors_in(v)
    return out


def model_tensors(model: nn.Module) -> list[torch.Tensor]:
    """Parameters and buffers: what the tracker counts as "parameter" from the start."""
    return [*model.parameters(), *model.buffers()]


def as_device(device: torch.device | str | None, tensors: Sequence[torch.Tensor]) -> torch.device:
    """The device to watch: the given one, else the one all ``tensors`` live on, else CPU."""
    if device is None:
        devices = {t.device for t in tensors}
        if len(devices) > 1:
            raise ValueError(
                "the model/optimizer tensors live on several devices "
                f"{sorted(map(str, devices))}; pass device=... to say which one to track")
        dev = devices.pop() if devices else torch.device("cpu")
    else:
        try:
            dev = torch.device(device)
        except (RuntimeError, TypeError) as err:
            raise TypeError("device must be a torch.device or a string like 'cpu' or 'cuda:0', "
                            f"got {device!r}") from err
    if dev.type == "cuda":
        # Asked before any torch.cuda call: on a CPU-only build those fail with a bare
        # "Torch not compiled with CUDA enabled" that does not say which argument is wrong.
        if not torch.cuda.is_available():
            why = ("this torch build has no CUDA support" if torch.version.cuda is None
                   else "torch sees no CUDA device here")
            raise ValueError(
                f"device={str(device)!r} asks to track CUDA memory, but {why}; pass the device "
                "the model lives on (device='cpu'), or leave device=None to use it")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    return dev
