"""Tables of a `DispatchTrace`: plain text (``print(dt)``) and HTML (Jupyter).

Reads records only (no torch). One row per ATen op with the columns #, phase, Python
call, ATen op, input shapes, output shapes. Consecutive ops under one Python call and
one autograd Node form a group: the call is named on the group's first row only, and
a backward group names the Node that ran its ops (``▸ AddmmBackward0``), so the table
reads as "this call ran these ops". Shapes are Python's spelling, ``(4, 3)`` and ``()``
for a scalar, with the dtype added when it is not float32. The inputs' dispatch keys
are summed up under the table (and, in HTML, shown per input on hover).
"""
from __future__ import annotations

import html
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the record reaches this module lazily
    from ..records import TensorMeta
    from .records import DispatchEvent, DispatchTrace

__all__ = ["text_table", "html_table", "groups", "shapes_text", "short_op", "short_call",
           "HEADERS", "COMPACT_HEADERS"]

HEADERS = ("#", "phase", "Python call", "ATen op", "input shapes", "output shapes")
#: The narrow form (``compact=True``) for a page column or a phone: no row number, the
#: phase abbreviated, ``aten.`` and ``.default`` dropped, shapes as "inputs → outputs".
COMPACT_HEADERS = ("phase", "Python call", "ATen op", "shapes (in → out)")
_MAX_SHAPES = 4  # per cell; more are counted ("+2 more") so a cat of 50 stays one line
_PHASE_FILL = {"forward": "#e8eef7", "backward": "#fde9d9"}
_CELL = "padding:1px 6px;text-align:left;vertical-align:top;border-bottom:1px solid #eee"


def _shape(m: TensorMeta) -> str:
    dims = str(tuple(m.shape))
    return dims if m.dtype == "float32" else f"{dims} {m.dtype}"


def shapes_text(metas: Sequence[TensorMeta]) -> str:
    """Shapes of one cell, ``"(2,) · (4, 3)"``; "—" when the op had no tensor there."""
    if not metas:
        return "—"
    items = [_shape(m) for m in metas[:_MAX_SHAPES]]
    if len(metas) > _MAX_SHAPES:
        items.append(f"+{len(metas) - _MAX_SHAPES} more")
    return " · ".join(items)


def groups(events: Sequence[DispatchEvent]) -> list[tuple[str, list[DispatchEvent]]]:
    """Runs of consecutive events with one (Python call, autograd Node), with the label
    drawn for each run: the call name when the call changes, then ``▸ Node``."""
    out: list[tuple[str, list[DispatchEvent]]] = []
    previous_call: object = object()  # no event has this call index
    for e in events:
        if out and out[-1][1][-1].call_index == e.call_index and out[-1][1][-1].node == e.node:
            out[-1][1].append(e)
            continue
        parts = []
        if e.call_index != previous_call:
            parts.append(e.call or "(no Python call)")
        if e.node is not None:
            parts.append(f"▸ {e.node}")
        out.append((" ".join(parts), [e]))
        previous_call = e.call_index
    return out


def _keys_summary(trace: DispatchTrace) -> list[str]:
    """One line per distinct key set of the inputs, most frequent first."""
    counts = Counter(k for e in trace.events for k in e.input_keys)
    total = sum(counts.values())
    lines = []
    for keys, n in counts.most_common():
        share = "all inputs" if n == total else f"{n} of {total} inputs"
        lines.append(f"dispatch keys ({share}): {', '.join(keys)}")
    return lines


def _shown(trace: DispatchTrace, max_rows: int | None) -> tuple[list[DispatchEvent], int]:
    if max_rows is not None and max_rows < 1:
        raise ValueError(f"max_rows must be a positive int or None, got {max_rows!r}")
    events = trace.events if max_rows is None else trace.events[:max_rows]
    return list(events), len(trace.events) - len(events)


def short_call(name: str) -> str:
    """``torch.nn.functional.linear`` -> ``F.linear``: the spelling people write."""
    return name.replace("torch.nn.functional.", "F.", 1)


def short_op(op: str) -> str:
    """``aten.addmm.default`` -> ``addmm``; a named overload stays (``sum.dim_IntList``)."""
    name = op.removeprefix("aten.")
    return name.removesuffix(".default")


def _row(e: DispatchEvent, call: str, compact: bool) -> tuple[str, ...]:
    if compact:
        return ("fw" if e.phase == "forward" else "bw", call, short_op(e.op),
                f"{shapes_text(e.inputs)} → {shapes_text(e.outputs)}")
    return (str(e.index), e.phase, call, e.op, shapes_text(e.inputs), shapes_text(e.outputs))


def text_table(trace: DispatchTrace, max_rows: int | None = None,
               compact: bool = False) -> str:
    """The trace as a fixed-width text table (all rows when `max_rows` is None).

    ``compact=True`` gives the narrow form of `COMPACT_HEADERS`, which fits an 88-column
    page for calls such as ``F.linear`` forward and backward.
    """
    events, hidden = _shown(trace, max_rows)
    headers = COMPACT_HEADERS if compact else HEADERS
    rows: list[tuple[str, ...]] = []
    for label, run in groups(events):
        indent = "  " if label.startswith("▸") else ""
        for k, e in enumerate(run):
            rows.append(_row(e, indent + label if k == 0 else "", compact))
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        first = cells[0] if compact else cells[0].rjust(widths[0])
        return "  ".join([first.ljust(widths[0]) if compact else first]
                         + [c.ljust(w) for c, w in zip(cells[1:], widths[1:])]).rstrip()

    out = [trace.caption(), line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    if hidden:
        out.append(f"… {hidden} more rows (table(max_rows=None) shows all)")
    out += _keys_summary(trace)
    return "\n".join(out)


def _shapes_html(metas: Sequence[TensorMeta]) -> str:
    """`shapes_text` escaped, with no line break inside one shape: cells wrap at " · "."""
    return html.escape(shapes_text(metas)).replace(", ", ",\u00a0")


def _op_html(op: str) -> str:
    """``aten.addmm`` in full weight and ``.default`` in grey: the packet, then the overload."""
    packet, _, overload = op.rpartition(".")
    if not packet:
        return html.escape(op)
    return (f"{html.escape(packet)}<span style='color:#888'>.{html.escape(overload)}"
            "</span>")


def _inputs_title(e: DispatchEvent) -> str:
    """Hover text of an input cell: each input's path, shape and dispatch keys."""
    keys = e.input_keys or tuple(() for _ in e.inputs)
    return "\n".join(f"{m.path} {_shape(m)}: {', '.join(k)}" for m, k in zip(e.inputs, keys))


def html_table(trace: DispatchTrace, max_rows: int | None = None,
               compact: bool = False) -> str:
    """The trace as one HTML table with inline styles (they survive notebook sanitizers);
    ``compact=True`` gives the narrow form, as in `text_table`."""
    events, hidden = _shown(trace, max_rows)
    # Compact (a phone's ~360 px): the phase is only the row's colour band, the call is
    # spelled short, and the shapes sit on a second line under the op.
    headers = ("", "Python call", "ATen op (shapes in → out)") if compact else HEADERS
    head = "".join(f"<th style='{_CELL};border-bottom:1px solid #999'>{html.escape(h)}</th>"
                   for h in headers)
    body = []
    for label, run in groups(events):
        for k, e in enumerate(run):
            cells = []
            if compact:
                cells.append(f"<td title='{e.phase}' style='width:4px;padding:0;"
                             f"background:{_PHASE_FILL[e.phase]}'></td>")
            else:
                cells += [f"<td style='{_CELL};text-align:right;color:#888'>{e.index}</td>",
                          f"<td style='{_CELL};background:{_PHASE_FILL[e.phase]}'>"
                          f"{e.phase}</td>"]
            if k == 0:
                pad = "padding-left:18px;" if label.startswith("▸") else ""
                shown = short_call(label) if compact else label
                cells.append(f"<td rowspan='{len(run)}' style='{_CELL};{pad}"
                             f"font-family:sans-serif'>{html.escape(shown)}</td>")
            if compact:
                cells.append(f"<td style='{_CELL}' title='{html.escape(_inputs_title(e))}'>"
                             f"{html.escape(short_op(e.op))}<br><span style='color:#666'>"
                             f"{_shapes_html(e.inputs)} → {_shapes_html(e.outputs)}</span></td>")
            else:
                cells += [f"<td style='{_CELL}'>{_op_html(e.op)}</td>",
                          f"<td style='{_CELL}' title='{html.escape(_inputs_title(e))}'>"
                          f"{_shapes_html(e.inputs)}</td>",
                          f"<td style='{_CELL}'>{_shapes_html(e.outputs)}</td>"]
            body.append("<tr>" + "".join(cells) + "</tr>")
    notes = ([f"… {hidden} more rows (dt.html(max_rows=None) shows all)"] if hidden else [])
    if compact:
        notes.append("left band: blue forward, orange backward")
    notes += _keys_summary(trace)
    foot = "".join(f"<div style='color:#555;margin-top:2px'>{html.escape(n)}</div>"
                   for n in notes)
    return ("<div class='agv-dispatch' style='max-width:730px;font-size:12px;"
            "font-family:monospace'>"
            f"<div style='font-family:sans-serif;margin-bottom:4px'>"
            f"{html.escape(trace.caption())}</div>"
            "<table style='border-collapse:collapse;margin:0'>"
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
            f"{foot}</div>")
