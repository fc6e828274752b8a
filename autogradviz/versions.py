"""What the book's claims expect from each torch release: one registry of the facts
that changed between the versions the book is tested on.

A chapter proves each claim with an ``assert`` against the running torch. Where two
releases behave differently, the expected value comes from here rather than from an
``if`` in the chapter: ``agv.version_fact("clamp_gradient_at_bounds")`` is ``1.0`` on
torch 2.13 and ``0.0`` since 2.14. Each fact also carries the question it belongs to,
what every tested release does, and the pull request or release note behind the change,
so the page "What changed between torch versions" (``docs/torch-versions.md`` and the
site) is generated from the very records the proofs use and cannot drift from them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping, Union

import torch

__all__ = [
    "DRIFT_PAGE",
    "PINNED_TORCH",
    "TESTED_TORCH",
    "VERSION_FACTS",
    "VersionFact",
    "outcome",
    "version_fact",
]

#: A fact's expected value: plain data, so the drift page can print it as it is.
Value = Union[str, float, int, bool]

#: The release the chapters' stored outputs come from (``agv.written_for`` in each set-up cell).
PINNED_TORCH = "2.13.0"
#: Every release the book has been run on, oldest first (``make compat TORCH=<v>`` for the others).
TESTED_TORCH: tuple[str, ...] = ("2.13.0", "2.14.1")
#: The page that lists every fact below, as the repository and the site name it.
DRIFT_PAGE = "docs/torch-versions.md (on the site: What changed between torch versions)"


def _release(version: str) -> tuple[int, int, int]:
    """``"2.14.1+cu130"`` -> ``(2, 14, 1)``. A pre-release (``2.15.0a0``) counts as its
    release: the book is tested on releases, and a nightly of 2.15 behaves like 2.15."""
    if not isinstance(version, str):
        raise TypeError(f"a torch version must be a string such as '2.14.1', got {version!r}")
    parts = version.split("+", 1)[0].strip().split(".")
    numbers = [re.match(r"\d+", p) for p in parts[:3]]
    if not parts[0] or any(m is None for m in numbers):
        raise ValueError(f"cannot read {version!r} as a torch version such as '2.14.1'")
    found = [int(m.group()) for m in numbers if m is not None] + [0, 0]
    return found[0], found[1], found[2]


@dataclass(frozen=True)
class VersionFact:
    """One claim whose truth depends on the torch release.

    ``since`` maps the first release of each behaviour (``"2.13"``, ``"2.14"``) to the
    value a proof asserts from then on; ``behaviour`` says the same in words, with the
    same keys. ``questions`` are the book's question numbers whose proofs assert it.
    """

    name: str
    title: str  # a heading for the drift page
    claim: str
    questions: tuple[int, ...]
    since: Mapping[str, Value]
    behaviour: Mapping[str, str]
    source: str  # the pull request, issue or release note that changed it (a URL)
    source_title: str
    proofs: tuple[str, ...]  # where it is asserted: "notebooks/04_....ipynb", "tests/..."

    def __post_init__(self) -> None:
        if not self.since:
            raise ValueError(f"fact {self.name!r} needs at least one release in `since`")
        if set(self.since) != set(self.behaviour):
            raise ValueError(
                f"fact {self.name!r}: `since` names releases {sorted(self.since)} but "
                f"`behaviour` names {sorted(self.behaviour)}; describe every value in words"
            )
        for key in self.since:
            _release(key)  # refuses a key that is not a version

    def expected(self, version: str | None = None) -> Value:
        """The value for ``version`` (the running torch when ``None``): that of the latest
        ``since`` release not newer than it."""
        return self.since[self._key(version)]

    def described(self, version: str | None = None) -> str:
        """What torch ``version`` (the running one when ``None``) does, in words."""
        return self.behaviour[self._key(version)]

    def _key(self, version: str | None) -> str:
        running = _release(torch.__version__ if version is None else version)
        known = sorted(self.since, key=_release)
        older = [k for k in known if _release(k) <= running]
        if not older:
            raise ValueError(
                f"fact {self.name!r} is recorded from torch {known[0]} on; torch "
                f"{version or torch.__version__} is older than every release the book knows"
            )
        return older[-1]


_FACTS = (
    VersionFact(
        name="jit_deprecation_warning",
        title="TorchScript's deprecation warning is a FutureWarning",
        claim="`torch.jit.trace` and `torch.jit.script` warn that TorchScript is deprecated "
        "(\"Please switch to `torch.compile` or `torch.export`\"); the warning's class changed.",
        questions=(9,),
        since={"2.13": "DeprecationWarning", "2.14": "FutureWarning"},
        behaviour={
            "2.13": "a `DeprecationWarning`, which Python's default filters hide unless the "
            "call is made in `__main__`",
            "2.14": "a `FutureWarning`, which Python shows to every user by default",
        },
        source="https://github.com/pytorch/pytorch/blob/v2.14.1/torch/jit/_script.py",
        source_title="`torch/jit/_script.py` and `torch/jit/_trace.py` at v2.14.1 warn with "
        "`FutureWarning` (v2.13.0: `DeprecationWarning`); no pull request found",
        proofs=("notebooks/02_tensors_under_the_hood.ipynb",),
    ),
    VersionFact(
        name="forward_ad_first_use_warning",
        title="The first forward-mode call prints a warning",
        claim="The first forward-mode call in a process (`fwAD.make_dual`, `torch.func.jvp`) "
        "loads torch's jvp decompositions, which torch compiles with `torch.jit.script`; "
        "that call warns with the TorchScript deprecation warning.",
        questions=(14, 17),
        since={"2.13": "DeprecationWarning", "2.14": "FutureWarning"},
        behaviour={
            "2.13": "a hidden `DeprecationWarning`: nothing is printed",
            "2.14": "a `FutureWarning` printed on stderr once per process, from torch's own "
            "code (`torch/_decomp/decompositions_for_jvp.py`)",
        },
        source="https://github.com/pytorch/pytorch/blob/v2.14.1/torch/_decomp/decompositions_for_jvp.py",
        source_title="`torch/_decomp/decompositions_for_jvp.py` at v2.14.1 calls "
        "`torch.jit.script` at import, whose warning became a `FutureWarning` in 2.14; "
        "no pull request found",
        proofs=("notebooks/03_autograd_engine.ipynb", "notebooks/04_extending_autograd.ipynb"),
    ),
    VersionFact(
        name="make_fx_saved_detach",
        title="`make_fx` records a saved tensor's detach as `alias`",
        claim="When autograd saves a tensor for backward it detaches it; `make_fx` with its "
        "default decompositions records that op in its graph (a `TorchDispatchMode` still "
        "sees `aten.detach.default`).",
        questions=(8,),
        since={"2.13": "aten.detach.default", "2.14": "aten.alias.default"},
        behaviour={
            "2.13": "`make_fx` records `aten.detach.default`",
            "2.14": "`make_fx` records `aten.alias.default` unless given an explicit "
            "`decomposition_table` (so a replayed graph can be differentiated twice)",
        },
        source="https://github.com/pytorch/pytorch/pull/186845",
        source_title="pytorch#186845: [make_fx] Decompose detach by default for higher-order "
        "grads (fixes pytorch#175477)",
        proofs=("tests/test_dispatch.py",),
    ),
    VersionFact(
        name="cdist_double_backward",
        title="`torch.cdist` on small inputs has a double backward",
        claim="`torch.cdist` on 25 rows or fewer (its own kernel, not the matmul path) and a "
        "second `autograd.grad` through its gradient.",
        questions=(20,),
        since={
            "2.13": "NotImplementedError: the derivative for '_cdist_backward' is not implemented.",
            "2.14": "ok",
        },
        behaviour={
            "2.13": "raises `NotImplementedError: the derivative for '_cdist_backward' is not "
            "implemented.`",
            "2.14": "works: `_cdist_backward` has a derivative",
        },
        source="https://github.com/pytorch/pytorch/pull/188901",
        source_title="pytorch#188901: Implement double backward for `cdist` and `pdist` "
        "(pytorch#83510)",
        proofs=("notebooks/04_extending_autograd.ipynb",),
    ),
    VersionFact(
        name="clamp_gradient_at_bounds",
        title="`clamp`'s gradient at its bounds is 0",
        claim="The gradient of `x.clamp(lo, hi)` (scalar bounds) at `x == lo` or `x == hi`.",
        questions=(18,),
        since={"2.13": 1.0, "2.14": 0.0},
        behaviour={
            "2.13": "1: the bounds count as inside (unlike `F.hardtanh`, whose gradient there is 0)",
            "2.14": "0, as for `F.hardtanh` and `relu` (the minimum-norm subgradient); with "
            "tensor bounds the gradient is split, 0.5 to `x`",
        },
        source="https://github.com/pytorch/pytorch/pull/191142",
        source_title="pytorch#191142: [autograd] Align clamp and min/max subgradients "
        "(pytorch#184574)",
        proofs=("notebooks/04_extending_autograd.ipynb",),
    ),
)

#: Every version-dependent fact of the book, by name, in the order the chapters meet them.
VERSION_FACTS: Mapping[str, VersionFact] = MappingProxyType({f.name: f for f in _FACTS})


def version_fact(name: str, version: str | None = None) -> Value:
    """The value a proof expects for fact ``name`` on the running torch (or on
    ``version``): ``assert seen == agv.version_fact("clamp_gradient_at_bounds")``.

    The facts, their behaviour on each tested release and the change behind each are
    listed on the page "What changed between torch versions".
    """
    if not isinstance(name, str):
        raise TypeError(f"version_fact needs a fact name (str), got {type(name).__name__}")
    if name not in VERSION_FACTS:
        raise KeyError(
            f"no version fact named {name!r}; the known ones are {sorted(VERSION_FACTS)} "
            "(autogradviz/versions.py)"
        )
    return VERSION_FACTS[name].expected(version)


def outcome(fn: Callable[[], object]) -> str:
    """Run ``fn`` and say how it ended: ``"ok"``, or ``"ExcType: first line of the
    message"``. Lets a proof compare a call that raises on one release and not on
    another with :func:`version_fact`, without an ``if`` in the chapter."""
    if not callable(fn):
        raise TypeError(
            f"outcome needs a zero-argument callable, got {type(fn).__name__}; "
            "wrap the call, e.g. outcome(lambda: y.backward())"
        )
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the outcome is what is asked for
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return "ok"
