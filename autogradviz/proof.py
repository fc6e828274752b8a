"""Small helpers that let a chapter prove what it says.

A notebook that explains an error should show the error *and* check it: a printed
traceback proves nothing once the library changes its wording, and a long traceback
full of machine paths makes the stored output non-deterministic. ``show_error`` runs
the failing call, asserts the exception type and message, and prints one stable line.

A chapter is written against one torch release; ``written_for`` says so out loud
when the reader runs a different one, so differing outputs are not a surprise.
"""
from __future__ import annotations

import re
import textwrap
import warnings
from typing import Callable, Pattern, Union

import torch

from .versions import DRIFT_PAGE

__all__ = ["SHOWN_LINES", "SHOWN_WIDTH", "show_error", "written_for"]

Match = Union[str, Pattern[str]]


#: The width of a printed error line: a notebook page scrolls sideways beyond it.
SHOWN_WIDTH = 88


def _first_line(exc: BaseException) -> str:
    """The first non-empty line of the message: it carries the meaning and, unlike the
    rest (hints, stack summaries), rarely contains paths or addresses."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()
    return ""


#: The most lines ``show_error`` prints for one error.
SHOWN_LINES = 2
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")


def _sentence_end(text: str, at: int) -> int:
    """The end of the sentence holding position ``at``: the next full stop, question or
    exclamation mark followed by a space or the end. Dots inside names (``torch.fx``)
    and numbers (``0.5``) are not followed by a space, so they end nothing."""
    found = _SENTENCE_END.search(text, at)
    return found.end() if found else len(text)


def _match_span(text: str, match: Match) -> tuple[int, int]:
    if isinstance(match, re.Pattern):
        found = match.search(text)
        return found.span() if found else (0, 0)
    wanted = " ".join(match.split())
    at = text.find(wanted)
    return (at, at + len(wanted)) if at >= 0 else (0, 0)


def _window(text: str, begin: int, end: int, width: int) -> str:
    """``text`` cut at word boundaries to about ``width`` columns around
    ``text[begin:end]``, which stays whole, with an ellipsis where words were left out."""
    if len(text) <= width:
        return text
    room = width - 2  # an ellipsis at each end at most
    lo = 0
    if end > room:  # start later, at a word boundary no later than the asserted part
        lo = max(0, min(begin, end - room))
        space = text.find(" ", lo)
        lo = space + 1 if 0 <= space < begin else lo
    hi = max(end, min(len(text), lo + room))
    if hi < len(text):
        space = text.rfind(" ", end, hi + 1)
        hi = space if space > end else hi
    return ("\u2026" if lo else "") + text[lo:hi].strip() + ("\u2026" if hi < len(text) else "")


def _shown(exc: BaseException, match: Match) -> str:
    """What ``show_error`` prints: ``ExcType: message`` from the start of the message
    through the end of the sentence holding the asserted part (at least the first
    sentence), on one line or wrapped onto two of :data:`SHOWN_WIDTH` columns. Longer,
    the first line shows how the message starts and the second the asserted part in its
    sentence, each shortened with an ellipsis: the asserted part itself is never cut."""
    text = " ".join(str(exc).split())  # torch's own line breaks would break the page
    begin, end = _match_span(text, match)
    head, indent = f"{type(exc).__name__}: ", "    "
    cut = max(_sentence_end(text, 0), _sentence_end(text, max(end - 1, 0)))
    lines = textwrap.wrap(head + text[:cut], SHOWN_WIDTH, subsequent_indent=indent,
                          break_long_words=False, break_on_hyphens=False)
    if len(lines) <= SHOWN_LINES:
        return "\n".join(lines)
    line1 = head + _window(text[:cut], 0, 0, SHOWN_WIDTH - len(head))
    shown = len(line1) - len(head) - 1  # characters of the message on line 1
    if end <= shown:
        return line1
    starts = [m.end() for m in re.finditer(r"[.!?]\s+", text[:begin])]
    # Line 2 starts after line 1's words, or at the asserted part's first word when
    # line 1 ends inside it (a word or two are then shown twice, the match whole).
    resume = shown if shown <= begin else text.rfind(" ", 0, begin) + 1
    at = max(starts[-1] if starts else 0, resume)
    rest = _window(text[at:cut], begin - at, end - at, SHOWN_WIDTH - len(indent) - 1)
    return line1 + "\n" + indent + ("" if rest.startswith("\u2026") else "\u2026") + rest


def show_error(
    fn: Callable[[], object], exc_type: type[BaseException], match: Match,
    *, quiet: bool = False,
) -> BaseException:
    """Call ``fn``, check that it raises ``exc_type`` with ``match`` in its message,
    print the message and return the exception.

    ``match`` is a plain substring (``str``) or a compiled regular expression, searched
    in the message. The check makes the notebook fail when torch stops raising, raises
    something else or changes what the error says. What is printed is
    ``ExcType: message`` from its start through the end of the sentence that holds
    ``match`` (so the reader sees what the cell asserts), on one or two lines of at most
    ``SHOWN_WIDTH`` (88) columns; longer, the first sentence and the asserted one, each
    on its line and shortened with an ellipsis, never inside the asserted part.

    ``quiet=True`` checks the same and prints nothing: for an error a chapter has
    already shown once, so a later cell asserts it without printing it again.
    """
    if not callable(fn):
        raise TypeError(
            f"show_error needs a zero-argument callable, got {type(fn).__name__}; "
            "wrap the failing code, e.g. show_error(lambda: x.backward(), ...)"
        )
    if not (isinstance(exc_type, type) and issubclass(exc_type, BaseException)):
        raise TypeError(
            f"exc_type must be an exception class such as RuntimeError, got {exc_type!r}"
        )
    if not isinstance(match, (str, re.Pattern)):
        raise TypeError(
            f"match must be a str or a compiled re.Pattern, got {type(match).__name__}"
        )
    try:
        fn()
    except exc_type as exc:  # the expected case
        caught: BaseException = exc
    except BaseException as other:  # noqa: BLE001 - reported, not swallowed
        raise AssertionError(
            f"expected {exc_type.__name__}, but the call raised "
            f"{type(other).__name__}: {_first_line(other)}"
        ) from other
    else:
        raise AssertionError(f"expected {exc_type.__name__}, but the call raised nothing")
    message = str(caught)
    found = match.search(message) is not None if isinstance(match, re.Pattern) else (
        match in message
    )
    if not found:
        shown = match.pattern if isinstance(match, re.Pattern) else match
        raise AssertionError(
            f"{type(caught).__name__} was raised, but its message does not contain "
            f"{shown!r}; the message was: {_first_line(caught)!r}"
        )
    if not quiet:
        print(_shown(caught, match))
    return caught


def _public(version: str) -> str:
    """Drop a local build suffix (``2.13.0+cpu`` -> ``2.13.0``): the build flavour
    does not change the behaviour a chapter describes."""
    return version.split("+", 1)[0].strip()


def written_for(version: str) -> bool:
    """Say whether the running torch is the release the text was written for.

    Returns ``True`` on a match and prints nothing (a stored notebook output stays
    unchanged). On a mismatch it emits a ``UserWarning`` naming both versions, because
    printed shapes, error messages and graph node names can differ between releases,
    and the page that lists what the book found changed (:data:`versions.DRIFT_PAGE`).
    """
    if not isinstance(version, str) or not _public(version):
        raise TypeError(
            f"written_for needs a version string such as '2.13.0', got {version!r}"
        )
    running = _public(torch.__version__)
    wanted = _public(version)
    if running == wanted:
        return True
    warnings.warn(
        f"this text was written for torch {wanted}, but torch {running} is running; "
        "outputs (messages, node names, byte counts) may differ. What the book found "
        f"changed between torch versions: {DRIFT_PAGE}",
        UserWarning,
        stacklevel=2,
    )
    return False
