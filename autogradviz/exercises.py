"""Check cells for the chapters' exercises: a verdict, never the answer.

A check cell that prints the expected value gives the exercise away to anyone who runs it
(or reads its stored output) before trying. ``check`` compares the reader's answer with the
expected one and prints only the verdict: ``correct!``, or what is wrong (a missing answer,
the wrong type, too high, a wrong shape, which of the reader's items are wrong) and the
exercise's hint. What is printed is built from the reader's own answer, never from the
expected value.

    agv.check(my_prediction, torch.ones(2).mul(2).sum().item(), name="my_prediction",
              hint="backward() sums the gradients of every use")

``verdict`` returns the same judgement without printing, for tests and for cells that
assert.

In a chapter the hidden solution cell sits between the reader's cell and the check, so
running the notebook top to bottom (Run All, or Shift+Enter cell after cell) runs it too.
It therefore assigns names of its own (``solution_prediction``, never ``my_prediction``),
and the check passes it as ``solution=``: the verdict is on the reader's answer only, while
the reference solution is verified silently and raises if it does not pass, so a broken
exercise fails loudly in nbval instead of marking readers wrong. With ``args=``, the
answer and the solution are functions called with those arguments; a stub that still
raises ``NotImplementedError`` is "not yet", not an error.

    agv.check(count_nodes, 5, name="count_nodes", solution=solution_count_nodes, args=(loss,))
"""
from __future__ import annotations

import hashlib
import math
import numbers
import textwrap
from collections import Counter
from dataclasses import dataclass
from typing import Any

__all__ = ["SolutionError", "Verdict", "answer_digest", "check", "verdict"]

CORRECT = "correct!"
#: Width a printed verdict wraps at: an output block on the site shows about 86 columns at
#: desktop width before it scrolls, and wraps at phone width (book.css).
VERDICT_COLUMNS = 80


@dataclass(frozen=True)
class Verdict:
    """The judgement of one answer: ``ok``, and the line ``check`` prints."""

    ok: bool
    message: str

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return self.message


def _is_tensor(x: Any) -> bool:
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Number) and not isinstance(x, bool)


def _kind(x: Any) -> str:
    return "a tensor" if _is_tensor(x) else f"a {type(x).__name__}"


def _wrong(what: str, hint: str | None) -> Verdict:
    return Verdict(False, f"not yet: {what}" + (f". Hint: {hint}" if hint else ""))


def _judge(answer: Any, expected: Any, name: str, rtol: float, atol: float, ordered: bool) -> str | None:
    """What is wrong with `answer` (in words that do not reveal `expected`), or None if right."""
    if answer is None or answer is Ellipsis:
        return f"`{name}` is still {answer!r}: replace it with your answer"
    if _is_tensor(expected):
        if not _is_tensor(answer):
            return f"`{name}` is {_kind(answer)}; the exercise asks for a tensor"
        if tuple(answer.shape) != tuple(expected.shape):
            return f"`{name}` has shape {tuple(answer.shape)}, which is not the shape asked for"
        if answer.dtype != expected.dtype:
            return f"`{name}` has dtype {answer.dtype}, which is not the dtype asked for"
        import torch

        if answer.dtype.is_floating_point or answer.dtype.is_complex:
            close = torch.isclose(answer.detach().cpu(), expected.detach().cpu(), rtol=rtol, atol=atol)
        else:
            close = answer.detach().cpu() == expected.detach().cpu()
        bad = int((~close).sum())
        return None if bad == 0 else f"{bad} of the {close.numel()} elements of `{name}` are wrong"
    if isinstance(expected, bool) or isinstance(answer, bool):
        if not isinstance(answer, bool) or not isinstance(expected, bool):
            return f"`{name}` is {_kind(answer)}; the exercise asks for True or False"
        return None if answer == expected else f"`{name}` is {answer}, and that is not it"
    if _is_number(expected):
        if _is_tensor(answer) and answer.numel() == 1:
            answer = answer.item()
        if not _is_number(answer):
            return f"`{name}` is {_kind(answer)}; the exercise asks for a number"
        if math.isclose(answer, expected, rel_tol=rtol, abs_tol=atol):
            return None
        if isinstance(answer, complex) or isinstance(expected, complex):
            return f"`{name}` = {answer!r} is not it"
        return f"`{name}` = {answer!r} is too {'high' if answer > expected else 'low'}"
    if isinstance(expected, str):
        if not isinstance(answer, str):
            return f"`{name}` is {_kind(answer)}; the exercise asks for a string"
        return None if answer.strip() == expected.strip() else f"`{name}` = {answer!r} is not it"
    if isinstance(expected, dict):
        if not isinstance(answer, dict):
            return f"`{name}` is {_kind(answer)}; the exercise asks for a dict"
        extra = sorted(map(repr, set(answer) - set(expected)))
        missing = len(set(expected) - set(answer))
        wrong = sorted(repr(k) for k in set(answer) & set(expected)
                       if _judge(answer[k], expected[k], name, rtol, atol, ordered) is not None)
        parts = ([f"keys not asked for: {', '.join(extra)}"] if extra else []) + (
            [f"{missing} key(s) missing"] if missing else []) + (
            [f"wrong values for {', '.join(wrong)}"] if wrong else [])
        return None if not parts else f"in `{name}`, " + "; ".join(parts)
    if isinstance(expected, (list, tuple, set, frozenset)):
        if not isinstance(answer, (list, tuple, set, frozenset)):
            return f"`{name}` is {_kind(answer)}; the exercise asks for a collection of items"
        if not ordered or isinstance(expected, (set, frozenset)):
            try:
                have, want = Counter(answer), Counter(expected)
            except TypeError:  # unhashable items: compare as sorted reprs
                have, want = Counter(map(repr, answer)), Counter(map(repr, expected))
            if have == want:
                return None
            extra = sorted(repr(x) for x in (have - want).elements())
            missing = sum((want - have).values())
            parts = ([f"not expected: {', '.join(extra)}"] if extra else []) + (
                [f"{missing} item(s) missing"] if missing else [])
            return f"in `{name}`, " + "; ".join(parts)
        if len(answer) != len(expected):
            return f"`{name}` has {len(answer)} items: too {'many' if len(answer) > len(expected) else 'few'}"
        wrong = [i for i, (a, e) in enumerate(zip(answer, expected))
                 if _judge(a, e, name, rtol, atol, ordered) is not None]
        return None if not wrong else f"in `{name}`, item(s) at position {', '.join(map(str, wrong))} are wrong"
    try:
        return None if answer == expected else f"`{name}` is not it"
    except Exception:  # noqa: BLE001 - e.g. an array's ambiguous truth value; say what to pass instead
        return f"`{name}` is {_kind(answer)}, which cannot be compared with the answer; pass {_kind(expected)}"


_NO_SOLUTION: Any = object()  # `solution=None` is a value a wrong solution cell may hold


class SolutionError(AssertionError):
    """The exercise's own solution does not pass its check: the exercise is broken."""


def _call(fn: Any, args: tuple, name: str) -> tuple[Any, str | None]:
    """fn(*args), or the reason there is no answer yet (a stub, or not a function)."""
    if fn is None or fn is Ellipsis:
        return None, None  # judged as "still None" by _judge
    if not callable(fn):
        return None, f"`{name}` is {_kind(fn)}; the exercise asks for a function"
    try:
        return fn(*args), None
    except NotImplementedError:
        return None, f"`{name}` still raises NotImplementedError: write its body"
    except Exception as e:  # noqa: BLE001 - the reader's function failing is a verdict, not a crash
        return None, f"`{name}` raised {type(e).__name__}: {e}"


def answer_digest(value: Any, fmt: str) -> str | None:
    """A short SHA-256 digest of ``format(float(value), fmt)``, or None when `value` is not a
    number. A check cell stores the digest of the right answer and compares the reader's, so
    its source holds neither the answer nor the way to compute it (``fmt`` sets the rounding
    that is judged, e.g. ``".3f"`` or ``".4g"``)."""
    try:
        shown = format(float(value), fmt)
    except (TypeError, ValueError):
        return None
    return hashlib.sha256(shown.encode()).hexdigest()[:16]


def verdict(
    answer: Any,
    expected: Any,
    *,
    name: str = "your answer",
    hint: str | None = None,
    rtol: float = 1e-6,
    atol: float = 1e-9,
    ordered: bool = True,
    solution: Any = _NO_SOLUTION,
    args: tuple | None = None,
    via: Any = None,
) -> Verdict:
    """Judge `answer` against `expected` without printing.

    Numbers and tensors compare within ``rtol``/``atol``; lists and tuples item by item
    (``ordered=False``: as multisets, as sets always are); dicts key by key. The message
    names what is wrong in the reader's answer and never quotes `expected`.

    ``solution``: the exercise's reference answer (or function), checked against `expected`
    first; ``SolutionError`` if it fails, with no expected value in the message.
    ``args``: call `answer` (and `solution`) with these arguments and judge the results.
    ``via``: judge ``via(answer)`` and ``via(solution)`` instead (with ``args``, ``via``
    maps a function to the function whose results are judged), so a check can compare
    properties of an answer, such as what it depends on, rather than hold the answer."""
    if via is not None:
        if not callable(via):
            raise TypeError(f"via must be a function, got {_kind(via)}")
        answer = via(answer)
        solution = solution if solution is _NO_SOLUTION else via(solution)
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be the answer's variable name as a string, got {name!r}")
    if rtol < 0 or atol < 0:
        raise ValueError(f"rtol and atol must be >= 0, got rtol={rtol}, atol={atol}")
    if args is not None and not isinstance(args, tuple):
        raise TypeError(f"args must be a tuple of arguments for the function, got {_kind(args)}; "
                        f"pass args=(x,) for one argument")
    if solution is not _NO_SOLUTION:
        ref, problem = (solution, None) if args is None else _call(solution, args, "the solution")
        problem = problem or _judge(ref, expected, "the solution", rtol, atol, ordered)
        if problem is not None:
            raise SolutionError(f"the reference solution for `{name}` does not pass its own check "
                                f"({problem}): fix the solution cell or the expected value")
    if args is not None:
        answer, problem = _call(answer, args, name)
        if problem is not None:
            return _wrong(problem, hint)
    problem = _judge(answer, expected, name, rtol, atol, ordered)
    return Verdict(True, CORRECT) if problem is None else _wrong(problem, hint)


def check(
    answer: Any,
    expected: Any,
    *,
    name: str = "your answer",
    hint: str | None = None,
    rtol: float = 1e-6,
    atol: float = 1e-9,
    ordered: bool = True,
    solution: Any = _NO_SOLUTION,
    args: tuple | None = None,
    via: Any = None,
) -> None:
    """Print only the verdict on `answer`: ``correct!`` or what is wrong and the hint.

    Returns None so that a check as a cell's last line shows the verdict and nothing else.
    A long verdict is wrapped at `VERDICT_COLUMNS` (whole words), so it reads on a phone."""
    text = verdict(answer, expected, name=name, hint=hint, rtol=rtol, atol=atol, ordered=ordered,
                  solution=solution, args=args, via=via).message
    print(textwrap.fill(text, width=VERDICT_COLUMNS, break_long_words=False, break_on_hyphens=False))
