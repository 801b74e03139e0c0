"""examples/her_bit_flipping.py: a tiny run (5 bits) whose last two lines are the success rates."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "her_bit_flipping.py"


def test_tiny_run_prints_success_rates_last():
    env = {k: v for k, v in os.environ.items() if k != "RL_LOGGING_LEVEL"}
    result = subprocess.run(
        [sys.executable, "-W", "error", str(EXAMPLE), "--n-bits", "5", "--episodes", "400",
         "--eval-episodes", "64", "--seed", "0", "--no-plot"],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "[torchrl][INFO]" not in result.stdout + result.stderr  # the example silences it
    her_line, dqn_line = result.stdout.strip().splitlines()[-2:]
    her = re.fullmatch(r"HER success: (\d\.\d\d)", her_line)
    dqn = re.fullmatch(r"DQN success: (\d\.\d\d)", dqn_line)
    assert her and dqn, result.stdout[-500:]
    assert 0.0 <= float(dqn.group(1)) <= 1.0
    assert float(her.group(1)) >= 0.5
