"""examples/frame_stack_dqn.py and examples/offline_export.py: tiny runs, checked."""
from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def frame_stack_dqn():
    pytest.importorskip("matplotlib", reason="the `examples` extra (matplotlib) is not installed")
    yield from load("frame_stack_dqn")


def test_frame_stack_dqn_quick_run_plots_both_curves(frame_stack_dqn, tmp_path, capsys):
    plot = tmp_path / "curves.png"
    curves = frame_stack_dqn.main(["--quick", "--quiet", "--plot", str(plot)])
    assert sorted(curves) == [1, 4]
    assert all(len(h) == 2 and all(0 < r <= 500 for _, r in h) for h in curves.values())
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "n_frames=4: final eval return" in capsys.readouterr().out


def test_agent_stacks_match_the_buffer_padding(frame_stack_dqn):
    stacks = frame_stack_dqn.Stacks(np.array([[1.0, 1.0]], np.float32), 3)
    stacks.push(np.array([[2.0, 2.0]], np.float32), np.array([False]))
    assert stacks.frames[0, :, 0].tolist() == [1.0, 1.0, 2.0]
    stacks.push(np.array([[9.0, 9.0]], np.float32), np.array([True]))  # a new episode
    assert stacks.frames[0, :, 0].tolist() == [9.0, 9.0, 9.0]


def test_offline_export_quick_run_trains_on_what_the_buffer_holds(capsys):
    pytest.importorskip("d3rlpy", reason="the `d3rlpy` extra is not installed (make test installs it)")
    for module in load("offline_export"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # gym 0.26, imported by d3rlpy
            result = module.main(["--quick"])
    # every held transition, running episodes' last ones included
    assert 0 < result["exported"] == result["transitions"] <= 600
    assert 0 < result["cql"] <= 500
    assert "DiscreteCQL after 50 offline steps" in capsys.readouterr().out
