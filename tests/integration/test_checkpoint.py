"""Checkpoint and resume: data, cursors, episode index, in-progress episodes, RNG."""
from __future__ import annotations

import pickle

import pytest
import torch

from conftest import steps, transitions_of
from torchrl_ext import make_replay_buffer


def fill(rb, start=0, n_steps=9):
    """Two envs with different episode lengths; stream 0 ends mid-way (in progress)."""
    for t in range(start, start + n_steps):
        obs = torch.tensor([[float(t)], [100.0 + t]])
        done = torch.tensor([[t % 4 == 3], [t % 3 == 2]])
        rb.extend(steps(obs, obs + 0.5, terminated=done))


@pytest.mark.parametrize("backend", ["tensor", "memmap"])
def test_dumps_loads_round_trip(backend, tmp_path):
    rb = make_replay_buffer(20, batch_size=4, seed=3, backend=backend, scratch_dir=tmp_path / "a")
    fill(rb, n_steps=13)  # wraps the 10-row rings
    rb.sample()  # move the RNG away from its seed
    rb.dumps(tmp_path / "ckpt")

    restored = make_replay_buffer(20, batch_size=4, seed=999, backend=backend, scratch_dir=tmp_path / "b")
    restored.loads(tmp_path / "ckpt")

    assert len(restored) == len(rb)
    assert restored.write_count == rb.write_count
    assert transitions_of(restored.storage.get(slice(None))) == transitions_of(rb.storage.get(slice(None)))
    for name in ("written", "is_open", "episode_count", "row_episode", "episode_start", "episode_length"):
        assert torch.equal(getattr(restored.storage.index, name), getattr(rb.storage.index, name)), name
    # the next sample is the one the original draws
    assert torch.equal(restored.sample()["index"], rb.sample()["index"])
    # in-progress episodes continue identically
    fill(rb, start=13, n_steps=3)
    fill(restored, start=13, n_steps=3)
    assert transitions_of(restored.storage.get(slice(None))) == transitions_of(rb.storage.get(slice(None)))
    assert torch.equal(restored.sample()["observation"], rb.sample()["observation"])


def test_state_dict_round_trip():
    rb = make_replay_buffer(40, batch_size=4, seed=1)
    fill(rb)
    state = rb.state_dict()
    restored = make_replay_buffer(40, batch_size=4, seed=2)
    restored.load_state_dict(state)
    assert transitions_of(restored.storage.get(slice(None))) == transitions_of(rb.storage.get(slice(None)))
    assert torch.equal(restored.sample()["index"], rb.sample()["index"])


def test_empty_buffer_round_trip(tmp_path):
    rb = make_replay_buffer(40, seed=1)
    rb.dumps(tmp_path)
    restored = make_replay_buffer(40, seed=1)
    restored.loads(tmp_path)
    assert len(restored) == 0


def test_pickle_copy_is_independent():
    rb = make_replay_buffer(40, batch_size=4, seed=1)
    fill(rb)
    copy = pickle.loads(pickle.dumps(rb.storage))
    fill(rb, start=9, n_steps=2)
    assert len(copy) != len(rb)
    assert len(copy) == 18  # 9 steps of 2 envs, nothing evicted


def test_load_into_buffer_with_other_entries_refused(tmp_path):
    rb = make_replay_buffer(40, seed=1)
    fill(rb)
    rb.dumps(tmp_path)
    other = make_replay_buffer(40, seed=1)
    other.extend(steps(torch.zeros(2, 3), torch.ones(2, 3)))
    with pytest.raises(ValueError, match="entries or stream count differ"):
        other.loads(tmp_path)
