"""Record how tensors read their storage: `storage_map(x, x.t(), names=["x", "x.t()"])`.

A strided tensor is a flat buffer (its storage) plus a rule for reading it: element
``t[i_0, ..., i_k]`` is storage element ``storage_offset + sum(i_k * stride_k)``. Views
(``t()``, slices, ``expand``, ``view``, ``diagonal``) change only the rule; a copy
(``contiguous()`` of a non-contiguous tensor, ``reshape`` when no rule fits) gets a new
buffer. This module applies the rule to every element and groups tensors by the buffer
they share, so the view can draw it; it reads metadata and values and changes nothing.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from .records import MAX_STORAGE_ELEMENTS, StorageBlock, StorageMap, TensorLayout

__all__ = ["storage_map"]


def held_storage(t: torch.Tensor) -> torch.UntypedStorage | None:
    """The untyped storage that holds ``t``'s elements in this process (None for sparse,
    nested and other layouts without one).

    A wrapper subclass's own storage has the wrapper's (global) size but no data. When
    the wrapper is traceable and holds exactly one inner tensor, as a DTensor holds its
    local shard (``to_local()``), the bytes are that tensor's, so its storage is
    returned (unwrapping nested wrappers). Any other wrapper keeps its own storage.
    Used wherever the package measures or identifies storages (the memory ledger, the
    graph's saved bytes, the module graph's view test). `storage_map` does not use it:
    it reads a tensor through its own shape and strides, which for a DTensor are the
    global ones, not the shard's.
    """
    while type(t) is not torch.Tensor and is_traceable_wrapper_subclass(t):
        names, _ = t.__tensor_flatten__()
        # DTensor also lists its device mesh among the names: count tensors only.
        inner = [x for x in (getattr(t, n) for n in names) if isinstance(x, torch.Tensor)]
        if len(inner) != 1:
            break
        t = inner[0]
    try:
        return t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _check(t: object, name: str) -> torch.Tensor:
    """The tensor itself, or an error that says why it cannot be drawn."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"storage_map() draws tensors; {name} is a {type(t).__name__}")
    if t.layout != torch.strided:
        raise ValueError(f"{name} has layout {t.layout}: only strided tensors read one flat "
                         "storage through strides; pass t.to_dense()")
    if t.device.type == "meta":
        raise ValueError(f"{name} is a meta tensor: it has shape and strides but no storage "
                         "to read; create it on 'cpu'")
    if t.numel() > MAX_STORAGE_ELEMENTS:
        raise ValueError(f"{name} has {t.numel()} elements; storage_map draws at most "
                         f"{MAX_STORAGE_ELEMENTS}: pass a smaller tensor, e.g. "
                         "torch.arange(12.).view(3, 4)")
    return t


def _storage_numel(t: torch.Tensor, name: str) -> int:
    try:
        nbytes = t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError) as e:  # wrapper subclasses, functorch
        raise ValueError(f"{name} has no storage that can be read ({e})") from None
    n = nbytes // t.element_size()
    if n > MAX_STORAGE_ELEMENTS:
        # A small slice keeps its whole base buffer, so the slice alone is not enough.
        raise ValueError(f"the storage of {name} has {n} elements; storage_map draws at most "
                         f"{MAX_STORAGE_ELEMENTS}: pass a smaller tensor (a slice of a big "
                         "tensor still reads the big storage; .clone() it first)")
    return n


def _indices(t: torch.Tensor) -> tuple[int, ...]:
    """Storage index of every element, in row-major order of the shape."""
    offset, stride = t.storage_offset(), t.stride()
    return tuple(offset + sum(i * s for i, s in zip(idx, stride))
                 for idx in itertools.product(*(range(n) for n in t.shape)))


def _values(t: torch.Tensor, n: int) -> tuple[object, ...]:
    """Every element of `t`'s storage, read through a fresh 1-D tensor over it (so the
    tensor's own shape, offset and conj/neg flags play no part)."""
    flat = torch.empty(0, dtype=t.dtype, device=t.device)
    flat.set_(t.untyped_storage(), 0, (n,), (1,))
    return tuple(flat.cpu().tolist())


def storage_map(*tensors: torch.Tensor, names: Sequence[str] | None = None) -> StorageMap:
    """Group `tensors` by the storage they read and record, for each element, the
    storage element it reads.

    `names` labels the tensors in the drawing (default "t0", "t1", ...); name them as
    the code that made them (``"x.t()"``, ``"x[:, 1:3]"``). Storages are told apart by
    the address of their buffer, as ``untyped_storage().data_ptr()`` does. Storages and
    tensors of more than `MAX_STORAGE_ELEMENTS` elements are refused: the drawing is for
    small examples.
    """
    if not tensors:
        raise ValueError("storage_map() needs at least one tensor")
    if names is None:
        names = [f"t{i}" for i in range(len(tensors))]
    elif isinstance(names, str) or len(names) != len(tensors):
        raise ValueError(f"names must be a list of {len(tensors)} strings, one per tensor; "
                         f"got {names!r}")
    names = [str(n) for n in names]
    if len(set(names)) != len(names):
        raise ValueError(f"names must be distinct; got {names!r}")

    storages: list[StorageBlock] = []
    by_key: dict[tuple[str, int], int] = {}
    layouts: list[TensorLayout] = []
    for i, (t, name) in enumerate(zip(tensors, names)):
        t = _check(t, f"tensor {i} ({name!r})")
        n = _storage_numel(t, repr(name))
        ptr = t.untyped_storage().data_ptr()
        # Empty buffers all sit at address 0; each one is its own storage.
        key = (str(t.device), ptr) if ptr else ("empty", i)
        if key not in by_key:
            by_key[key] = len(storages)
            storages.append(StorageBlock(index=len(storages), dtype=_dtype_name(t.dtype),
                                         itemsize=t.element_size(), device=str(t.device),
                                         values=_values(t, n)))
        block = storages[by_key[key]]
        if block.dtype != _dtype_name(t.dtype):
            # Cells are elements of one dtype; a reinterpreting view (x.view(torch.int32))
            # would need a second row of cells over the same bytes.
            first = next(lay.name for lay in layouts if lay.storage == block.index)
            raise ValueError(f"{name!r} ({_dtype_name(t.dtype)}) and {first!r} "
                             f"({block.dtype}) share a storage but not a dtype; "
                             "draw them in separate storage_map() calls")
        layouts.append(TensorLayout(
            name=name, shape=tuple(t.shape), stride=tuple(t.stride()),
            storage_offset=t.storage_offset(), dtype=_dtype_name(t.dtype),
            contiguous=t.is_contiguous(), storage=block.index, indices=_indices(t)))
    return StorageMap(storages=storages, tensors=layouts)
