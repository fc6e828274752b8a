"""Tests for autogradviz.proof, with real torch errors as the oracle."""
from __future__ import annotations

import re
import warnings

import pytest
import torch

from autogradviz.proof import SHOWN_LINES, SHOWN_WIDTH, show_error, written_for


def _backward_twice() -> None:
    x = torch.ones(2, requires_grad=True)
    y = (x * x).sum()
    y.backward()
    y.backward()  # the saved tensors were freed by the first call


def _backward_without_grad() -> None:
    torch.ones(2).sum().backward()


def _inference_tensor_saved() -> None:
    with torch.inference_mode():
        frozen = torch.ones(2)
    torch.ones(2, requires_grad=True) * frozen  # mul must save ``frozen``: refused


def _raised(fn) -> BaseException:
    """torch's own exception for ``fn``, raised afresh: the oracle for the tests."""
    with pytest.raises(Exception) as info:
        fn()
    return info.value


def _inplace_on_saved_output() -> None:
    w = torch.tensor([-1.0, 2.0, -3.0], requires_grad=True)
    y = torch.relu(w * 1.0)
    y += 1  # relu saved its output
    y.sum().backward()


def _joined(out: str) -> str:
    return " ".join(line.strip() for line in out.splitlines())


def test_show_error_returns_the_real_torch_error(capsys) -> None:
    exc = show_error(_backward_twice, RuntimeError, "second time")
    assert isinstance(exc, RuntimeError)
    assert str(exc) == str(_raised(_backward_twice))
    out = capsys.readouterr().out
    assert out.startswith("RuntimeError: ") and 1 <= out.count("\n") <= SHOWN_LINES


def test_show_error_prints_the_first_sentence_when_it_holds_the_match(capsys) -> None:
    # torch's message has several sentences; the first holds the match and fits on a line.
    fresh = str(_raised(_inference_tensor_saved))
    first, rest = fresh.split(". ", 1)
    assert rest  # the oracle really has a second sentence
    show_error(_inference_tensor_saved, RuntimeError, "saved for backward")
    assert capsys.readouterr().out == f"RuntimeError: {first}.\n"


def test_show_error_wraps_a_long_first_sentence_onto_two_lines(capsys) -> None:
    fresh = str(_raised(_backward_twice))
    first = fresh.split(". ")[0] + "."
    assert len(f"RuntimeError: {first}") > SHOWN_WIDTH  # a long oracle
    show_error(_backward_twice, RuntimeError, "second time")
    out = capsys.readouterr().out
    assert out.count("\n") == 2 and all(len(line) <= SHOWN_WIDTH for line in out.splitlines())
    assert _joined(out) == f"RuntimeError: {' '.join(first.split())}"


@pytest.mark.parametrize(
    ("fn", "match"),
    [
        (_backward_twice, "Specify retain_graph=True"),  # in the third sentence
        (_backward_twice, "access saved tensors after calling backward"),  # its last words
        (_inplace_on_saved_output, "is at version 1; expected version 0"),
        (_inplace_on_saved_output, "modified by an inplace operation"),
        (_inplace_on_saved_output, re.compile(r"output \d+ of \w+")),
    ],
)
def test_show_error_shows_the_asserted_part_whole_on_two_lines(capsys, fn, match) -> None:
    show_error(fn, RuntimeError, match)
    out = capsys.readouterr().out
    lines = out.splitlines()
    fresh = " ".join(str(_raised(fn)).split())
    wanted = match.search(fresh).group(0) if isinstance(match, re.Pattern) else match
    assert wanted in _joined(out).replace("\u2026", " ") or wanted in out
    assert len(lines) <= SHOWN_LINES and all(len(line) <= SHOWN_WIDTH for line in lines)
    assert lines[0].startswith("RuntimeError: " + fresh[:20])  # how torch's message starts


def test_show_error_never_cuts_inside_the_match(capsys) -> None:
    # Every run of 1-6 words of torch's message, asserted in turn, is printed whole.
    fresh = " ".join(str(_raised(_inplace_on_saved_output)).split())
    words = fresh.split(" ")
    for n in (1, 3, 6):
        for i in range(0, len(words) - n, 3):
            wanted = " ".join(words[i:i + n])
            show_error(_inplace_on_saved_output, RuntimeError, wanted)
            out = capsys.readouterr().out
            assert any(wanted in line for line in out.splitlines()) or wanted in _joined(out), (wanted, out)
            assert all(len(line) <= SHOWN_WIDTH for line in out.splitlines()), out


def test_show_error_keeps_a_message_without_a_sentence_end(capsys) -> None:
    fresh = str(_raised(_backward_without_grad))
    show_error(_backward_without_grad, RuntimeError, "does not require grad")
    assert capsys.readouterr().out == f"RuntimeError: {fresh.splitlines()[0]}\n"


def test_show_error_accepts_a_compiled_regex(capsys) -> None:
    exc = show_error(_backward_without_grad, RuntimeError, re.compile(r"does not require grad"))
    out = capsys.readouterr().out
    assert out.startswith("RuntimeError: ") and out.count("\n") == 1
    assert "does not require grad" in str(exc)


def test_show_error_accepts_a_base_class_of_the_raised_error() -> None:
    exc = show_error(lambda: torch.ones(2) @ torch.ones(3), Exception, "size")
    assert isinstance(exc, RuntimeError)


def test_show_error_fails_when_nothing_is_raised() -> None:
    with pytest.raises(AssertionError, match="raised nothing"):
        show_error(lambda: torch.ones(2).sum(), RuntimeError, "anything")


def test_show_error_fails_on_a_different_exception_type() -> None:
    with pytest.raises(AssertionError, match="expected ValueError.*RuntimeError"):
        show_error(_backward_twice, ValueError, "second time")


def test_show_error_fails_when_the_message_does_not_match() -> None:
    with pytest.raises(AssertionError, match="does not contain"):
        show_error(_backward_twice, RuntimeError, "no such words")
    with pytest.raises(AssertionError, match="does not contain"):
        show_error(_backward_twice, RuntimeError, re.compile(r"^no such"))


def test_show_error_prints_nothing_when_the_check_fails(capsys) -> None:
    with pytest.raises(AssertionError):
        show_error(_backward_twice, RuntimeError, "no such words")
    assert capsys.readouterr().out == ""


def test_show_error_quiet_checks_the_same_and_prints_nothing(capsys) -> None:
    exc = show_error(_backward_twice, RuntimeError, "second time", quiet=True)
    assert str(exc) == str(_raised(_backward_twice))
    assert capsys.readouterr().out == ""
    with pytest.raises(AssertionError, match="does not contain"):
        show_error(_backward_twice, RuntimeError, "no such words", quiet=True)
    with pytest.raises(AssertionError, match="raised nothing"):
        show_error(lambda: None, RuntimeError, "x", quiet=True)


@pytest.mark.parametrize(
    ("fn", "exc_type", "match", "says"),
    [
        (None, RuntimeError, "x", "callable"),
        (_backward_twice, "RuntimeError", "x", "exception class"),
        (_backward_twice, int, "x", "exception class"),
        (_backward_twice, RuntimeError, 3, "str or a compiled"),
    ],
)
def test_show_error_rejects_bad_arguments(fn, exc_type, match, says) -> None:
    with pytest.raises(TypeError, match=says):
        show_error(fn, exc_type, match)


def test_written_for_the_running_version_is_silent() -> None:
    public = torch.__version__.split("+")[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning would fail the test
        assert written_for(public) is True
        assert written_for(public + "+cpu") is True
        assert written_for(torch.__version__) is True


def test_written_for_another_version_warns_and_names_both() -> None:
    running = torch.__version__.split("+")[0]
    with pytest.warns(UserWarning, match="may differ") as record:
        assert written_for("0.4.1") is False
    text = str(record[0].message)
    assert "0.4.1" in text and running in text


def test_written_for_another_version_names_the_drift_page() -> None:
    from pathlib import Path

    from autogradviz.versions import DRIFT_PAGE

    with pytest.warns(UserWarning) as record:
        written_for("0.4.1")
    text = str(record[0].message)
    assert DRIFT_PAGE in text and "What changed between torch versions" in text
    # the page it names is in the repository (generated by scripts/build_site.py)
    page = DRIFT_PAGE.split()[0]
    assert (Path(__file__).resolve().parents[1] / page).is_file(), page


@pytest.mark.parametrize("bad", ["", "+cpu", 2.13, None])
def test_written_for_rejects_a_missing_version(bad) -> None:
    with pytest.raises(TypeError, match="version string"):
        written_for(bad)
