"""Shared pytest set-up: scripts/ is importable, and tests marked `gpu` run only where CUDA is present.

The marker is declared in pyproject.toml. torch is imported lazily, so collecting notebooks
under nbval or the site's tests does not pay for it unless a gpu-marked test is collected.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The site and notebook tools in scripts/ are plain scripts; their tests import them by name.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (torch.cuda.is_available() is False)")
    for item in gpu_items:
        item.add_marker(skip)
