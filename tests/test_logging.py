"""The torchrl_ext logger: silent by default, one INFO line per fact a user needs."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from conftest import steps
from torchrl_ext import make_replay_buffer
from torchrl_ext.envs import GymVectorAdapter

ROOT = Path(__file__).resolve().parents[1]


def records(caplog, level=logging.INFO) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("torchrl_ext") and r.levelno >= level]


def test_package_logger_has_a_null_handler_and_no_level():
    logger = logging.getLogger("torchrl_ext")
    assert any(isinstance(h, logging.NullHandler) for h in logger.handlers)
    assert logger.level == logging.NOTSET  # the application decides; root is at WARNING


def test_stream_count_is_logged_once_at_the_first_write(caplog):
    caplog.set_level(logging.INFO, logger="torchrl_ext")
    rb = make_replay_buffer(100, seed=0)
    obs = torch.zeros(3, 1)
    rb.extend(steps(obs, obs + 1))
    rb.extend(steps(obs + 1, obs + 2))
    (record,) = records(caplog)
    assert record.name == "torchrl_ext.writers.transition"
    assert record.getMessage() == (
        "TransitionWriter: 3 stream(s) fixed by the first write (batch (3,)): each gets 33 of "
        "the 100 rows (1 left unused)."
    )


def test_default_autoreset_mode_is_logged_with_its_convention(caplog):
    caplog.set_level(logging.INFO, logger="torchrl_ext")
    GymVectorAdapter(4)
    GymVectorAdapter(4, autoreset_mode="SameStep")
    defaulted, given = (r.getMessage() for r in records(caplog))
    assert defaulted == (
        "GymVectorAdapter(4 envs): autoreset mode NEXT_STEP (not given: gymnasium's default; "
        "pass autoreset_mode=envs.metadata['autoreset_mode'] if your env uses another); the "
        "step() after an episode end only resets that sub-env: it is not a transition and is "
        "not stored (its observation starts the next episode)"
    )
    assert given == (
        "GymVectorAdapter(4 envs): autoreset mode SAME_STEP; the true final observation of a "
        "done step is read from infos['final_obs']; no step is dropped"
    )


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_infos_of_another_mode_raise_not_log(caplog, mode):
    """A SAME_STEP env fed to a NEXT_STEP adapter raises at the first episode end (issue 13)."""
    caplog.set_level(logging.INFO, logger="torchrl_ext")
    envs = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    adapter = GymVectorAdapter(2, autoreset_mode=mode)
    obs, _ = envs.reset(seed=0)
    envs.action_space.seed(0)

    def play() -> None:
        nonlocal obs
        ends = 0
        while ends < 3:  # several episode ends
            action = envs.action_space.sample()
            nxt, reward, terminated, truncated, infos = envs.step(action)
            adapter.step(obs, action, reward, terminated, truncated, infos, nxt)
            ends += int(np.sum(terminated | truncated))
            obs = nxt
    if mode == "SameStep":
        play()
    else:
        with pytest.raises(ValueError, match="autoreset_mode is NEXT_STEP, but the infos"):
            play()
    envs.close()
    assert records(caplog, logging.WARNING) == []


SILENT = """
import numpy as np
from torchrl_ext import make_replay_buffer
from torchrl_ext.envs import GymVectorAdapter
adapter = GymVectorAdapter(2)  # INFO: the defaulted mode
z = np.zeros((2, 1), np.float32)
td = adapter.step(z, np.zeros(2), np.zeros(2), np.array([True, False]), np.zeros(2, bool),
                  {}, z)
make_replay_buffer(10).extend(td)  # INFO: the stream count
print("done")
"""


def test_silent_by_default():
    """Without logging configured, the INFO lines are not printed."""
    result = subprocess.run([sys.executable, "-c", SILENT], capture_output=True, text=True,
                            timeout=120, check=False, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "done\n"
    assert "torchrl_ext" not in result.stderr and "GymVectorAdapter" not in result.stderr
