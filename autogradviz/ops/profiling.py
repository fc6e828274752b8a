"""`quiet_profile()`: torch.profiler around a block, with the profiler's own log lines
kept out of the output.

On torch 2.13 the Kineto backend writes a timestamped line to file descriptor 2 when a
profile starts and when it stops (``... profiler_start``, ``... profiler_stop``). It writes
below Python, so `contextlib.redirect_stderr` cannot catch it; in a notebook the kernel
copies that descriptor into the cell's output, where a timestamp differs on every run.
"""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

import torch

__all__ = ["quiet_profile"]


@contextlib.contextmanager
def quiet_profile(**options) -> Iterator[torch.profiler.profile]:
    """``torch.profiler.profile(**options)`` around the block, with descriptor 2 sent to
    /dev/null while the profiler starts, runs and stops; yields the profile object.

    Everything written to descriptor 2 inside the block is dropped, so an error the block
    raises still propagates (as an exception), but a C++ warning printed there does not
    show. The descriptor is restored however the block ends.
    """
    sys.stderr.flush()  # whatever Python wrote before the block keeps its place
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as sink:
            os.dup2(sink.fileno(), 2)
            try:
                with torch.profiler.profile(**options) as prof:
                    yield prof
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)
