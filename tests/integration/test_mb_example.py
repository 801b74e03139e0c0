"""examples/model_based_pendulum.py --quick: a real TorchRL collector, training and planning, checked."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from test_examples import load_example

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "model_based_pendulum.py"


@pytest.fixture(scope="module")
def example():
    yield from load_example(EXAMPLE)


def test_quick_run_reports_model_error_returns_and_m1(example, tmp_path, capsys):
    plot = tmp_path / "mb.png"
    threads = torch.get_num_threads()
    result = example.main(["--quick", "--no-progress", "--seed", "0", "--plot", str(plot)])
    out = capsys.readouterr().out

    assert torch.get_num_threads() == threads
    (stage,) = result["history"]
    assert stage["transitions"] == 600 and 0 < stage["heldout_error"] < 1.0
    assert -2000 < stage["return"] <= 0 and -2000 < result["random_return"] <= 0
    assert set(result["m1"]) == {"real transitions", "with reset jumps (M1)"}
    assert "M1: held-out one-step MSE" in out and out.splitlines()[-1] == f"plot: {plot}"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_reset_jumps_only_touch_done_steps(example):
    import numpy as np

    obs = np.arange(6, dtype=np.float32).reshape(3, 2, 1)  # [T, N, 1]
    data = {"Observation": obs, "NextObservation": obs + 0.5,
            "NextDone": np.array([[[0.0], [1.0]], [[0.0], [0.0]], [[1.0], [0.0]]])}
    out = example.with_reset_jumps(data)
    # env 1 ended at t = 0: its next observation becomes its observation at t = 1
    assert out["NextObservation"][:, :, 0].tolist() == [[0.5, 3.0], [2.5, 3.5], [4.5, 5.5]]


def test_demo_prints_the_model_based_summary():
    """`make demo`'s model-based section prints its results, not only its heading."""
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", "import demo; demo.model_based_section()"],
        capture_output=True, text=True, timeout=300, check=False,
        cwd=EXAMPLE.parent,  # demo.py imports its neighbours
    )
    assert result.returncode == 0, result.stderr[-2000:]
    labels = [line.split()[0] for line in result.stdout.strip().splitlines() if line[:1].strip()]
    assert labels == ["model-based:", "model", "planner", "M1"], result.stdout
