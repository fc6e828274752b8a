"""What the Chapter 10 rank scripts share: handing results back.

Under ``autogradviz.torchrun`` (the notebook) each rank's results go to ``report``; under a
plain ``torchrun`` there is no results folder, so each rank prints them as one JSON line.
"""
from __future__ import annotations

import json
import os

from autogradviz import report
from autogradviz.launch import RESULTS_ENV


def publish(rank: int, data: dict) -> None:
    """Report ``data`` for this rank, or print it when no notebook is listening."""
    if os.environ.get(RESULTS_ENV):
        report(data)
    else:
        print(f"rank {rank}: {json.dumps(data, default=str)}", flush=True)
