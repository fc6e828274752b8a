"""autogradviz: see what autograd does.

Recording (hooks, dispatch modes, graph walks) produces plain dataclass records;
views (DOT, SVG, HTML, matplotlib) read only those records.
"""
from __future__ import annotations

# --- graphs: trace, render, live, backward stepper ---------------------------

# --- memory and gradients: recorder, memory timeline, gradient trace ---------

__all__: list[str] = []
