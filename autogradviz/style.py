"""Figure settings the matplotlib views share, so every chapter's figures match.

The site shows a figure at up to about 730 px, a 390 px phone at about 350 px: figures
are made at `FIGURE_DPI`, `PHONE_WIDTH_IN` wide unless they need more, and no text is
drawn below `SMALL_PT`. A figure passed in through ``ax=`` keeps its own settings.
No torch, no matplotlib: plain numbers.
"""
from __future__ import annotations

__all__ = ["FIGURE_DPI", "PHONE_WIDTH_IN", "SMALL_PT"]

#: Resolution of the figures the views create.
FIGURE_DPI = 110
#: Default width of the views' figures: 4.6 in is 506 px at FIGURE_DPI. A 390 px phone gives
#: a figure about 350 px, so it shows at 69% of its natural width and 9 pt text stays above
#: 9 px; on a desktop page (~730 px) it shows at full size.
PHONE_WIDTH_IN = 4.6
#: The smallest text drawn (legends, notes, bar labels), in points.
SMALL_PT = 9
