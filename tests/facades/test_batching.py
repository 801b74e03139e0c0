"""Facades write added steps in chunks: same contents as step-by-step writes."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from conftest import transitions_of
from torchrl_ext import NStepReplayStorage, make_replay_buffer
from torchrl_ext.envs import GymVectorAdapter

SPACE = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_chunked_adds_store_what_direct_writes_store(mode):
    store = NStepReplayStorage(SPACE, gym.spaces.Discrete(2), num_envs=3, batch_size=4,
                               num_workers=0, n_step=1, autoreset_mode=mode, seed=0)
    direct = make_replay_buffer(store.rb.storage.max_size, seed=0)
    adapter = GymVectorAdapter(3, autoreset_mode=mode)
    rng = np.random.default_rng(0)
    obs = np.zeros((3, 1), np.float32)
    for t in range(150):  # over two chunks, episodes ending at random
        done = rng.random(3) < 0.1
        nxt = obs + 1
        infos = {}
        if mode == "SameStep" and done.any():
            infos = {"final_obs": np.array([o + 0.5 for o in obs], dtype=object), "_final_obs": done}
        args = (obs, rng.integers(0, 2, 3), np.ones(3, np.float32), done, np.zeros(3, bool), infos, nxt)
        store.add(*args)
        direct.extend(adapter.step(*args))
        obs = np.where(done[:, None], nxt + 100, nxt).astype(np.float32)
    assert len(store) == len(direct)  # len() flushes the held steps
    assert transitions_of(store.rb.storage.get(slice(None))) == transitions_of(direct.storage.get(slice(None)))


def test_bad_step_raises_at_its_add():
    store = NStepReplayStorage(SPACE, gym.spaces.Discrete(2), num_envs=1, batch_size=1, num_workers=0)
    for _ in range(3):
        store.add(np.zeros((1, 1), np.float32), np.array([0]), np.ones(1), np.zeros(1, bool),
                  np.zeros(1, bool), {}, np.zeros((1, 1), np.float32))
    with pytest.raises(ValueError, match=r"observations has shape \(1, 2\), expected \(1, 1\)"):
        store.add(np.zeros((1, 2), np.float32), np.array([0]), np.ones(1), np.zeros(1, bool),
                  np.zeros(1, bool), {}, np.zeros((1, 2), np.float32))
    assert len(store) == 3  # the good steps before it were written
