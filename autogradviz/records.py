"""What every domain shares, at the very bottom of the package: byte units and the
description of one tensor at a boundary. No torch, and no other package module.

Each domain keeps its own records beside its recorders and views
(graphs/records.py, memory/records.py, ops/records.py, distributed/records.py);
only what two or more of them use lives here.
"""
from __future__ import annotations

from dataclasses import dataclass

# --- units -------------------------------------------------------------------

_BINARY_UNITS: tuple[tuple[str, int], ...] = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def format_bytes(n: int) -> str:
    """Bytes in binary units, one decimal: ``format_bytes(1536) == "1.5 KiB"``.

    The one byte formatter of the package, so captions, tables and plots agree.
    Below one KiB the exact count is shown (``"64 B"``).
    """
    if isinstance(n, bool) or not isinstance(n, (int, float)):
        raise TypeError(f"format_bytes expects a byte count (int), got {type(n).__name__}")
    for unit, size in _BINARY_UNITS:
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def byte_unit(n: float) -> tuple[str, int]:
    """The unit `format_bytes` writes ``n`` in, and its size: ``byte_unit(3 * 2**20) ==
    ("MiB", 2**20)``; ``("B", 1)`` below one KiB. For axes that scale many values at once."""
    for unit, size in _BINARY_UNITS:
        if abs(n) >= size:
            return unit, size
    return "B", 1


@dataclass(frozen=True)
class TensorMeta:
    """One tensor seen at a call boundary: where it sat, its shape and its dtype."""

    path: str  # pytree key path inside args/kwargs or the output: "args[0]", "[1]", "['x']"
    shape: tuple[int, ...]
    dtype: str  # "float32", "int64", ...
