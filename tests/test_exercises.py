"""autogradviz.exercises: a check cell prints the verdict, never the expected value."""
from __future__ import annotations

import pytest
import torch

import autogradviz as agv
from autogradviz.exercises import VERDICT_COLUMNS, SolutionError

# Expected values a message must never quote (chosen so that no wrong answer below contains them).
SECRET_NUMBER = 4.0
SECRET_TEXT = "int_slice"
SECRET_OPS = ["aten::mm", "aten::t", "aten::sum"]


def _printed(capsys, *args, **kwargs) -> str:
    """What check printed, its wrapped lines joined back into one."""
    agv.check(*args, **kwargs)
    return " ".join(capsys.readouterr().out.splitlines()) + "\n"


@pytest.mark.parametrize(
    ("answer", "expected", "kwargs"),
    [(SECRET_NUMBER, SECRET_NUMBER, {}),
     (4.0000001, SECRET_NUMBER, {}),
     (torch.tensor(4.0), SECRET_NUMBER, {}),
     (SECRET_TEXT, SECRET_TEXT, {}),
     (list(SECRET_OPS), SECRET_OPS, {}),
     (list(reversed(SECRET_OPS)), SECRET_OPS, {"ordered": False}),
     ({"a": 1, "b": [2, 3]}, {"a": 1, "b": [2, 3]}, {}),
     (torch.arange(6.0).view(2, 3), torch.arange(6.0).view(2, 3), {}),
     (True, True, {})],  # fmt: skip
)
def test_a_right_answer_prints_only_correct(capsys, answer, expected, kwargs) -> None:
    assert _printed(capsys, answer, expected, name="my_answer", hint="never shown", **kwargs) == "correct!\n"
    assert agv.verdict(answer, expected, **kwargs).ok


@pytest.mark.parametrize(
    ("answer", "expected", "kwargs", "says"),
    [(None, SECRET_NUMBER, {}, "`my_answer` is still None: replace it with your answer"),
     (..., SECRET_NUMBER, {}, "is still Ellipsis"),
     (5.0, SECRET_NUMBER, {}, "`my_answer` = 5.0 is too high"),
     (3, SECRET_NUMBER, {}, "`my_answer` = 3 is too low"),
     ("4", SECRET_NUMBER, {}, "`my_answer` is a str; the exercise asks for a number"),
     (1, True, {}, "asks for True or False"),
     ("half", SECRET_TEXT, {}, "`my_answer` = 'half' is not it"),
     (["aten::mm"], SECRET_OPS, {}, "has 1 items: too few"),
     (["aten::mm", "aten::t", "aten::add"], SECRET_OPS, {}, "item(s) at position 2 are wrong"),
     (["aten::mm", "aten::add"], SECRET_OPS, {"ordered": False}, "not expected: 'aten::add'; 2 item(s) missing"),
     ({"a": 1, "z": 0}, {"a": 2, "b": 3}, {}, "keys not asked for: 'z'; 1 key(s) missing; wrong values for 'a'"),
     (torch.zeros(3), torch.zeros(2, 3), {}, "has shape (3,), which is not the shape asked for"),
     (torch.zeros(2, dtype=torch.int64), torch.zeros(2), {}, "has dtype torch.int64, which is not the dtype asked for"),
     (torch.tensor([0.0, 1.0, 2.0]), torch.zeros(3), {}, "2 of the 3 elements of `my_answer` are wrong"),
     ([1, 2], torch.zeros(2), {}, "`my_answer` is a list; the exercise asks for a tensor")],  # fmt: skip
)
def test_a_wrong_answer_says_what_is_wrong_and_never_the_answer(capsys, answer, expected, kwargs, says) -> None:
    out = _printed(capsys, answer, expected, name="my_answer", hint="think about strides", **kwargs)
    assert out.startswith("not yet: ") and says in out, out
    assert out.rstrip().endswith("Hint: think about strides")
    assert "correct" not in out
    for secret in ("4.0", SECRET_TEXT, "aten::sum", "aten::t'", "'b'"):
        assert secret not in out, f"the message gives away {secret!r}: {out}"
    v = agv.verdict(answer, expected, name="my_answer", **kwargs)
    assert not v and not v.ok and str(v) == v.message and "Hint" not in v.message


def test_check_returns_none_so_a_cell_shows_only_the_verdict(capsys) -> None:
    assert agv.check(1, 1) is None
    assert capsys.readouterr().out == "correct!\n"


@pytest.mark.parametrize(("kwargs", "error"), [({"name": ""}, TypeError), ({"rtol": -1.0}, ValueError)])
def test_bad_arguments_are_refused_with_what_to_pass(kwargs, error) -> None:
    with pytest.raises(error, match="name must be|must be >= 0"):
        agv.verdict(1, 1, **kwargs)


def test_tolerances_apply_to_numbers_and_tensors() -> None:
    assert agv.verdict(1.05, 1.0, rtol=0.1)
    assert not agv.verdict(1.05, 1.0)
    assert agv.verdict(torch.tensor([1.0, 2.0]) + 1e-3, torch.tensor([1.0, 2.0]), atol=1e-2)


def test_the_contract_chapters_check_cell_judges_the_readers_cell(capsys) -> None:
    """The fixture's exercise run top to bottom, as Run All or Shift+Enter runs it: the
    hidden solution cell runs between the reader's cell and the check, and the check still
    judges the reader's answer (the stub, then a wrong guess), never the solution's."""
    from fixtures.contract_chapter import CHECK_SOURCE, SOLUTION_SOURCE, contract_chapter

    nb = contract_chapter()
    stub, solution, check = (next(c for c in nb.cells if tag in c.metadata.get("tags", []))
                             for tag in ("exercise", "solution", "check"))  # fmt: skip
    assert check.source == CHECK_SOURCE and solution.source == SOLUTION_SOURCE
    assert solution.source.splitlines()[0] == "# Solution"  # what a collapsed input shows
    scope: dict[str, object] = {"agv": agv}
    for cell in (stub, solution, check):
        exec(cell.source, scope)  # noqa: S102 - the fixture's own cells
    out = capsys.readouterr().out
    assert out.startswith("not yet: `my_prediction` is still None") and "4" not in out
    for guess, says in [(5.0, "not yet: `my_prediction` = 5.0 is too high. Hint: add up the two doubled ones\n"),
                        (4.0, "correct!\n")]:
        scope["my_prediction"] = guess
        for cell in (solution, check):  # stepping on from the reader's cell
            exec(cell.source, scope)  # noqa: S102
        assert capsys.readouterr().out == says
        assert scope["my_prediction"] == guess  # the solution left the reader's name alone
    assert check.outputs[0]["text"] == "correct!\n"


def test_a_correct_solution_is_checked_silently(capsys) -> None:
    assert not agv.verdict(5.0, SECRET_NUMBER, solution=SECRET_NUMBER)
    agv.check(None, SECRET_OPS, name="my_ops", solution=list(SECRET_OPS))
    out = capsys.readouterr().out
    assert out == "not yet: `my_ops` is still None: replace it with your answer\n"


@pytest.mark.parametrize("solution", [5.0, None, "4", [4.0]])
def test_a_wrong_solution_fails_loudly_without_the_answer(capsys, solution) -> None:
    """A broken exercise raises (nbval then fails the chapter) instead of judging readers
    against it, whatever the reader wrote; the message still does not quote the answer."""
    for answer in (None, SECRET_NUMBER):
        with pytest.raises(SolutionError, match="reference solution for `my_prediction` does not pass") as err:
            agv.check(answer, SECRET_NUMBER, name="my_prediction", solution=solution)
        assert "4" not in str(err.value)
    assert capsys.readouterr().out == ""


def _stub(t: torch.Tensor) -> int:
    raise NotImplementedError("walk t.grad_fn.next_functions")


def _nodes(t: torch.Tensor) -> int:
    seen, stack = set(), [t.grad_fn]
    while stack:
        node = stack.pop()
        if node is not None and node not in seen:
            seen.add(node)
            stack.extend(fn for fn, _ in node.next_functions)
    return len(seen)


def test_function_exercises_call_answer_and_solution_and_a_stub_is_not_yet() -> None:
    x = torch.ones(2, requires_grad=True)
    loss = (x * 2).sum()
    n = _nodes(loss)
    assert n == 3  # SumBackward0, MulBackward0, AccumulateGrad: torch's own graph is the oracle
    says = agv.verdict(_stub, n, name="count_nodes", solution=_nodes, args=(loss,))
    assert not says and "still raises NotImplementedError" in str(says)
    assert agv.verdict(_nodes, n, name="count_nodes", solution=_nodes, args=(loss,))
    wrong = agv.verdict(lambda t: 2, n, name="count_nodes", solution=_nodes, args=(loss,))
    assert str(wrong) == "not yet: `count_nodes` = 2 is too low"
    assert "a function" in str(agv.verdict(3, n, name="count_nodes", args=(loss,)))
    with pytest.raises(SolutionError, match="NotImplementedError"):
        agv.verdict(_nodes, n, name="count_nodes", solution=_stub, args=(loss,))
    # A reader's function that fails gets a verdict naming its error (no traceback), and a
    # reference solution that fails is still the exercise's own error.
    def _broken(t: torch.Tensor) -> int:
        return t.grad_fn.next_functions[5]
    crashed = agv.verdict(_broken, n, name="count_nodes", solution=_nodes, args=(loss,))
    assert not crashed and "`count_nodes` raised IndexError" in str(crashed)
    with pytest.raises(SolutionError, match="raised IndexError"):
        agv.verdict(_nodes, n, name="count_nodes", solution=_broken, args=(loss,))
    with pytest.raises(TypeError, match=r"args=\(x,\)"):
        agv.verdict(_nodes, n, args=loss)


def test_a_long_verdict_is_wrapped_without_splitting_words(capsys) -> None:
    hint = " ".join(["a_rather_long_identifier"] * 12)
    agv.check(None, 1.0, name="my_prediction", hint=hint)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) > 1 and all(len(line) <= VERDICT_COLUMNS for line in lines), lines
    assert " ".join(lines) == str(agv.verdict(None, 1.0, name="my_prediction", hint=hint))


def test_via_judges_properties_of_the_answer_and_of_the_solution() -> None:
    # The check holds no answer: it judges what a function's result depends on.
    def depends_on_second(fn):
        def judged(a: float, b: float) -> bool:
            return fn(a, b) != fn(a, b + 1) and fn(a, b) == fn(a + 1, b)
        return judged if callable(fn) else fn

    def double_b(a: float, b: float) -> float:
        return 2 * b

    def uses_a(a: float, b: float) -> float:
        return a + b

    def stub(a: float, b: float) -> float:
        raise NotImplementedError

    says = agv.verdict(double_b, True, name="f", solution=double_b, args=(1.0, 2.0),
                       via=depends_on_second)
    assert says
    wrong = agv.verdict(uses_a, True, name="f", solution=double_b, args=(1.0, 2.0),
                        via=depends_on_second)
    assert str(wrong) == "not yet: `f` is False, and that is not it"
    assert "NotImplementedError" in str(agv.verdict(stub, True, name="f", args=(1.0, 2.0),
                                                    via=depends_on_second))
    with pytest.raises(SolutionError):
        agv.verdict(double_b, True, name="f", solution=uses_a, args=(1.0, 2.0),
                    via=depends_on_second)
    # Without args, via maps the values themselves; None stays "still None".
    assert agv.verdict((1, 2), [True, True], name="pair", solution=(3, 4),
                       via=lambda v: v if v is None else [x > 0 for x in v])
    assert "still None" in str(agv.verdict(None, [True], name="pair", via=lambda v: v))
    with pytest.raises(TypeError, match="via must be a function"):
        agv.verdict(1, 1, via=3)


def test_answer_digest_judges_the_rounded_value_and_refuses_non_numbers() -> None:
    import hashlib
    want = hashlib.sha256(b"0.125").hexdigest()[:16]  # hashlib is the oracle
    assert agv.answer_digest(0.12500001, ".3f") == want == agv.answer_digest(torch.tensor(0.125), ".3f")
    assert agv.answer_digest(0.126, ".3f") != want
    assert agv.answer_digest(None, ".3f") is None and agv.answer_digest("abc", ".3f") is None
