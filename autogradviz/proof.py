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
import warnings
from typing import Callable, Pattern, Union

import torch

from .versions import DRIFT_PAGE

__all__ = ["SHOWN_WIDTH", "show_error", "written_for"]

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


def _first_sentence(text: str) -> str:
    """The text up to the end of its first sentence: a full stop, question or
    exclamation mark followed by a space. Dots inside names (``torch.fx``) and numbers
    (``0.5``) are not followed by a space, so they do not end the sentence."""
    found = re.search(r"[.!?](?=\s)", text)
    return text[: found.end()] if found else text


def _shown(exc: BaseException) -> str:
    """The one line ``show_error`` prints: ``ExcType: first sentence``, cut with an
    ellipsis to :data:`SHOWN_WIDTH` columns so a long torch message does not make the
    page scroll. The check itself always runs on the full message."""
    line = f"{type(exc).__name__}: {_first_sentence(_first_line(exc))}"
    if len(line) > SHOWN_WIDTH:
        line = line[: SHOWN_WIDTH - 1].rstrip() + "\u2026"
    return line


def show_error(
    fn: Callable[[], object], exc_type: type[BaseException], match: Match
) -> BaseException:
    """Call ``fn``, check that it raises ``exc_type`` with ``match`` in its message,
    print one line, ``ExcType: first sentence of the message``, and return the exception.

    ``match`` is a plain substring (``str``) or a compiled regular expression, searched
    anywhere in the *full* message, so a chapter can assert on a hint that is not
    printed. The check makes the notebook fail when torch stops raising, raises
    something else or changes what the error says. The printed line is cut to
    ``SHOWN_WIDTH`` (88) columns, ending in an ellipsis when cut.
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
    print(_shown(caught))
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
