"""autogradviz.versions: the registry of version-dependent facts, checked against torch.

Each fact is measured here on the running torch, independently of the chapters, so
`make compat TORCH=<v>` checks the registry on every tested release. The drift page is
checked to be exactly what the generator writes from the registry.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

import autogradviz as agv
from autogradviz.versions import (
    DRIFT_PAGE, PINNED_TORCH, TESTED_TORCH, VERSION_FACTS, VersionFact, _release, outcome,
    version_fact,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import build_site  # noqa: E402 - scripts/ is not a package


# --- the registry itself -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "release"),
    [("2.13.0", (2, 13, 0)), ("2.14.1+cu130", (2, 14, 1)), ("2.13.0+cpu", (2, 13, 0)),
     ("2.15.0a0+git1234", (2, 15, 0)), ("2.14", (2, 14, 0)), (" 2.14.1 ", (2, 14, 1))],
)
def test_release_reads_torch_version_strings(text, release):
    assert _release(text) == release


@pytest.mark.parametrize("bad", ["", "+cpu", "two.fourteen", "x2.14"])
def test_release_refuses_what_is_not_a_version(bad):
    with pytest.raises(ValueError, match="torch version"):
        _release(bad)


@pytest.mark.parametrize("name", list(VERSION_FACTS))
def test_every_fact_has_a_value_and_words_for_each_tested_release(name):
    fact = VERSION_FACTS[name]
    assert fact.name == name and fact.title and fact.claim and fact.questions
    assert fact.source.startswith("https://") and fact.source_title
    for release in TESTED_TORCH:
        assert fact.described(release)
        fact.expected(release)  # defined for every tested release
    # the facts are on this page because the tested releases differ
    assert len({repr(fact.expected(r)) for r in TESTED_TORCH}) > 1
    assert version_fact(name) == fact.expected(torch.__version__) == fact.expected()


def test_expected_takes_the_latest_release_not_newer_than_the_asked_one():
    fact = VERSION_FACTS["clamp_gradient_at_bounds"]
    assert fact.expected("2.13.0") == fact.expected("2.13.9+cpu") == fact.since["2.13"]
    assert fact.expected("2.14.0") == fact.expected("2.16.0") == fact.since["2.14"]
    with pytest.raises(ValueError, match="older than every release"):
        fact.expected("2.12.1")


def test_version_fact_names_the_known_facts_when_asked_for_another():
    with pytest.raises(KeyError, match="clamp_gradient_at_bounds"):
        version_fact("no_such_fact")
    with pytest.raises(TypeError, match="fact name"):
        version_fact(3)  # type: ignore[arg-type]


def test_a_fact_must_describe_every_value():
    with pytest.raises(ValueError, match="describe every value"):
        VersionFact("x", "t", "c", (1,), {"2.13": 1, "2.14": 2}, {"2.13": "one"}, "https://x",
                    "x", ())
    with pytest.raises(ValueError, match="torch version"):
        VersionFact("x", "t", "c", (1,), {"two": 1}, {"two": "one"}, "https://x", "x", ())


def test_the_registry_is_read_only_and_exported():
    with pytest.raises(TypeError):
        VERSION_FACTS["new"] = VERSION_FACTS["clamp_gradient_at_bounds"]  # type: ignore[index]
    assert agv.version_fact is version_fact and agv.VERSION_FACTS is VERSION_FACTS
    assert PINNED_TORCH == TESTED_TORCH[0]


# --- outcome --------------------------------------------------------------------------


def test_outcome_is_ok_when_nothing_is_raised():
    assert outcome(lambda: torch.ones(2).sum()) == "ok"


def test_outcome_is_the_exception_and_the_first_line_of_torch_message():
    with pytest.raises(RuntimeError) as info:
        torch.ones(2) @ torch.ones(3)
    first = str(info.value).splitlines()[0].strip()
    assert outcome(lambda: torch.ones(2) @ torch.ones(3)) == f"RuntimeError: {first}"


def test_outcome_refuses_what_it_cannot_call():
    with pytest.raises(TypeError, match="zero-argument callable"):
        outcome(None)  # type: ignore[arg-type]


# --- each fact, measured on the running torch -----------------------------------------


def test_jit_deprecation_warning_class():
    def double(t: torch.Tensor) -> torch.Tensor:
        return t * 2

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.jit.script(double)
        torch.jit.trace(double, torch.ones(2))
    deprecations = {w.category.__name__ for w in caught if "is deprecated" in str(w.message)}
    assert deprecations == {version_fact("jit_deprecation_warning")}


def test_forward_ad_first_use_warning_in_a_fresh_process():
    # The decompositions load once per process, so the first use is measured in a new one.
    code = textwrap.dedent(
        """
        import json, warnings, torch
        import torch.autograd.forward_ad as fwAD
        with warnings.catch_warnings(record=True) as seen, fwAD.dual_level():
            warnings.simplefilter("always")
            fwAD.make_dual(torch.ones(2), torch.ones(2))
        print(json.dumps(sorted({w.category.__name__ for w in seen
                                 if "torch.jit.script" in str(w.message)})))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert json.loads(out.splitlines()[-1]) == [version_fact("forward_ad_first_use_warning")]


def _second_order(fn, t):
    t = t.detach().requires_grad_()
    (g,) = torch.autograd.grad(fn(t), t, create_graph=True)
    return torch.autograd.grad(g.pow(2).sum(), t)[0]


def test_cdist_double_backward_on_its_own_kernel():
    small = torch.randn(4, 8)  # at most 25 rows: cdist's kernel, not the matmul path
    got = outcome(lambda: _second_order(lambda t: torch.cdist(t, torch.ones(3, 8)).sum(), small))
    assert got == version_fact("cdist_double_backward")
    big = torch.randn(30, 8)  # the matmul path works on every release
    assert outcome(lambda: _second_order(lambda t: torch.cdist(t, torch.ones(3, 8)).sum(), big)) == "ok"


def test_clamp_gradient_at_its_bounds():
    x = torch.tensor([-1.0, 0.0, 1.0], requires_grad=True)
    (g,) = torch.autograd.grad(x.clamp(-1, 1).sum(), x)
    bound = version_fact("clamp_gradient_at_bounds")
    assert g.tolist() == [bound, 1.0, bound]
    (h,) = torch.autograd.grad(torch.nn.functional.hardtanh(x).sum(), x)
    assert h.tolist() == [0.0, 1.0, 0.0]  # the reference the change aligned clamp with


# make_fx_saved_detach is measured in tests/test_dispatch.py (against the dispatch trace).


# --- the facts and the chapters stay linked --------------------------------------------

_CALL = re.compile(r"""version_fact\(\s*["']([a-z0-9_]+)["']""")


def _sources(path: Path) -> str:
    if path.suffix == ".ipynb":
        nb = json.loads(path.read_text(encoding="utf-8"))
        return "\n".join("".join(c["source"]) for c in nb["cells"])
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", list(VERSION_FACTS))
def test_every_fact_is_asserted_where_it_says(name):
    fact = VERSION_FACTS[name]
    questions = {q.number for q in build_site.load_questions(ROOT / build_site.QUESTIONS_YML)}
    assert set(fact.questions) <= questions
    for proof in fact.proofs:
        assert name in _CALL.findall(_sources(ROOT / proof)), f"{proof} does not assert {name}"


def test_every_version_fact_call_in_the_chapters_names_a_registered_fact():
    called = {n for p in (ROOT / "notebooks").glob("*.ipynb") for n in _CALL.findall(_sources(p))}
    assert called, "no chapter asserts a version fact"
    assert called <= set(VERSION_FACTS)


# --- the drift page ---------------------------------------------------------------------


def _pages(for_site: bool) -> str:
    questions = build_site.load_questions(ROOT / build_site.QUESTIONS_YML)
    chapters = build_site.find_chapters(ROOT / "notebooks", max(q.chapter for q in questions))
    return build_site.render_version_page(questions, chapters, ROOT, for_site=for_site)


@pytest.mark.parametrize(("for_site", "path"), [(False, build_site.VERSIONS_DOC),
                                                 (True, build_site.VERSIONS_MD)])
def test_the_committed_drift_page_is_what_the_generator_writes(for_site, path):
    assert (ROOT / path).read_text(encoding="utf-8") == _pages(for_site), (
        f"{path} is out of date: run .venv/bin/python scripts/build_site.py"
    )


def test_the_drift_page_lists_every_fact_with_its_questions_and_source():
    for for_site in (False, True):
        page = _pages(for_site)
        for fact in VERSION_FACTS.values():
            assert f"## {fact.title}" in page and f'version_fact("{fact.name}")' in page
            assert f"]({fact.source})" in page
            for n in fact.questions:
                assert f"[Q{n}. " in page
            for release in TESTED_TORCH:
                assert f"**torch {release}:** {fact.described(release)}" in page


def test_the_drift_page_is_in_the_table_of_contents_and_named_by_written_for():
    assert "file: book/torch-versions" in (ROOT / "book" / "_toc.yml").read_text()
    assert DRIFT_PAGE.startswith(build_site.VERSIONS_DOC.as_posix())
