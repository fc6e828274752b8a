"""Tests for autogradviz.proof, with real torch errors as the oracle."""
from __future__ import annotations

import re
import warnings

import pytest
import torch

from autogradviz.proof import SHOWN_WIDTH, show_error, written_for


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


def test_show_error_returns_the_real_torch_error_and_prints_one_line(capsys) -> None:
    exc = show_error(_backward_twice, RuntimeError, "second time")
    assert isinstance(exc, RuntimeError)
    fresh = _raised(_backward_twice)
    assert str(exc) == str(fresh)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("RuntimeError: ")


def test_show_error_prints_only_the_first_sentence(capsys) -> None:
    # torch's message has several sentences; only the first one is printed, whole,
    # because with its type name it fits in SHOWN_WIDTH columns.
    fresh = str(_raised(_inference_tensor_saved))
    first, rest = fresh.split(". ", 1)
    assert rest  # the oracle really has a second sentence
    show_error(_inference_tensor_saved, RuntimeError, "saved for backward")
    assert capsys.readouterr().out == f"RuntimeError: {first}.\n"


def test_show_error_cuts_a_long_first_sentence_with_an_ellipsis(capsys) -> None:
    fresh = str(_raised(_backward_twice))
    show_error(_backward_twice, RuntimeError, "second time")
    line = capsys.readouterr().out.rstrip("\n")
    assert len(f"RuntimeError: {fresh.split('. ')[0]}.") > SHOWN_WIDTH  # long oracle
    assert len(line) == SHOWN_WIDTH and line.endswith("\u2026")
    assert f"RuntimeError: {fresh}".startswith(line[:-1])


def test_show_error_matches_text_that_is_not_printed(capsys) -> None:
    # The hint in the third sentence is checked, though only the first is printed.
    show_error(_backward_twice, RuntimeError, "Specify retain_graph=True")
    assert "retain_graph" not in capsys.readouterr().out
    assert "retain_graph" in str(_raised(_backward_twice))


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
