"""autogradviz.quiet_profile: the profiler's own lines on descriptor 2 are dropped, its
events are torch's, and descriptor 2 comes back however the block ends.

torch is the oracle twice: a plain ``torch.profiler.profile`` does write to descriptor 2
(else there would be nothing to silence), and the events come from torch's profiler.
"""
from __future__ import annotations

import os

import pytest
import torch

import autogradviz as agv


def test_plain_profiler_writes_to_descriptor_2(capfd):
    with torch.profiler.profile():
        torch.ones(3) + 1
    assert "profiler_st" in capfd.readouterr().err   # profiler_start / profiler_stop


def test_quiet_profile_drops_them_and_keeps_the_events(capfd):
    os.write(2, b"before\n")
    with agv.quiet_profile(record_shapes=True) as prof:
        torch.ones(3) + 1
        os.write(2, b"inside\n")
    os.write(2, b"after\n")
    err = capfd.readouterr().err
    assert err.splitlines() == ["before", "after"]
    adds = [e for e in prof.events() if e.name == "aten::add"]
    assert adds and adds[0].input_shapes[0] == [3]


def test_descriptor_2_comes_back_after_an_error(capfd):
    with pytest.raises(ValueError, match="inside"):
        with agv.quiet_profile():
            raise ValueError("inside")
    os.write(2, b"after the error\n")
    assert "after the error" in capfd.readouterr().err


def test_a_wrong_option_is_torchs_error_and_leaves_descriptor_2(capfd):
    with pytest.raises(TypeError, match="activity"):
        with agv.quiet_profile(activity=["cpu"]):
            pass
    os.write(2, b"still here\n")
    assert "still here" in capfd.readouterr().err
