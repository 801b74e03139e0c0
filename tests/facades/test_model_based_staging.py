"""MBReplayBuffer's staged inserts: steps held, then written in chunks to the buffer underneath.

Every inserted step reaches the buffer underneath, a chunk longer than the ring
keeps the newest steps in order, large observations stage at most a slab,
inserts while batches are generated never pair one step with another, and a
copy (pytorchrl's async gradient worker deep-copies the buffer) keeps its own
staged steps.
"""
from __future__ import annotations

import copy
import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch

from _model_based_helpers import decoded, filled, make_actor, step
from torchrl_ext import MBReplayBuffer


@pytest.mark.parametrize("copy_buffer", [copy.deepcopy, lambda b: pickle.loads(pickle.dumps(b))],
                         ids=["deepcopy", "pickle"])
def test_a_copy_with_staged_steps_stores_the_steps_inserted_after_it(copy_buffer):
    # pytorchrl's async gradient worker deep-copies the collector's storage (which
    # holds the staged start steps); both copies then keep inserting
    buffer = MBReplayBuffer(50, "cpu", make_actor(gym.spaces.Box(-1, 1, (1,))), None, None)
    for t in range(5):
        buffer.insert_transition(step(t, action=np.zeros((1, 1), np.float32)))
    copied = copy_buffer(buffer)
    for t in range(5, 8):
        copied.insert_transition(step(t, action=np.zeros((1, 1), np.float32)))
        buffer.insert_transition(step(t, action=np.full((1, 1), 0.5, np.float32)))
    data = copied.get_all_buffer_data()
    assert data["Observation"][:, 0, 0].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    assert data["Action"][:, 0, 0].tolist() == [0.0] * 8  # the original's inserts stay in the original
    assert buffer.get_all_buffer_data()["Action"][:, 0, 0].tolist() == [0.0] * 5 + [0.5] * 3


def test_the_buffer_underneath_holds_every_inserted_step():
    buffer = filled(7, n=2)
    assert buffer._steps.staged == 7  # staged, none written yet
    assert len(buffer.rb) == 7 * 2 and buffer._steps.staged == 0


def test_a_chunk_of_more_steps_than_the_ring_keeps_the_newest_in_order():
    buffer = filled(23, size=5, n=2)  # 23 staged steps, written as one chunk into 5 positions
    data = buffer.get_all_buffer_data()
    assert data["Observation"][:, :, 0].tolist() == [[t, t + 100] for t in range(18, 23)]
    assert len(buffer) == 5


def test_large_observations_stage_at_most_slab_bytes_and_are_written_as_they_fill():
    # 2 envs x 2 x 300,000 float32 observations: 4.8 MB a step, more than a slab
    buffer = MBReplayBuffer(4, "cpu", make_actor(), None, None, seed=0)
    for t in range(3):
        buffer.insert_transition(step(t, n=2, obs_dim=300_000))
    staged = sum(block.nbytes for block in buffer._steps._stage.values())
    assert buffer._steps.chunk == 1 and staged < 5_000_000  # one step, not 1024 of them
    assert buffer._steps.staged == 0  # each step was written when it filled the chunk
    obs = buffer.get_all_buffer_data()["Observation"]
    assert obs.shape == (3, 2, 300_000) and obs[:, :, -1].tolist() == [[0, 100], [1, 101], [2, 102]]


def test_steps_inserted_while_batches_are_generated_never_pair_one_step_with_another():
    # a Dyna-style loop inserts while it trains: each epoch is drawn from the
    # steps held when it starts (rows captured at the call held other steps then)
    buffer = MBReplayBuffer(8, "cpu", make_actor(), None, None, seed=0, autoreset_mode="next_step")
    t = 0
    for t in range(8):  # NEXT_STEP: episodes of 3 steps, then the reset step
        buffer.insert_transition(step(t, done=float(t % 4 == 3), next_done=float(t % 4 == 2)))
    batches = buffer.generate_batches(1, 2, num_epochs=3)
    seen = []
    for batch in batches:
        seen.append(batch)
        for t in range(t + 1, t + 4):
            buffer.insert_transition(step(t, done=float(t % 4 == 3), next_done=float(t % 4 == 2)))
        buffer.get_all_buffer_data()  # the staged steps are written
    inputs, labels = decoded(buffer, seen)
    assert torch.allclose(labels, torch.cat([torch.ones(len(seen) * 2, 2), inputs[:, :1]], 1), atol=1e-4)
    for epoch in range(3):  # each epoch: every transition held when it started, once
        starts = [i for i, b in enumerate(seen) if b["epoch"] == epoch]
        obs = sorted(inputs[2 * starts[0]: 2 * starts[-1] + 2, 0].round().tolist())
        assert len(obs) == len(set(obs)) == 6 and obs[-1] - obs[0] < 8
