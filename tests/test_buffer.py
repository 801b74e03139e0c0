"""TransitionReplayBuffer.sample: the sampler's entries (index, masks, weights) join the batch."""
from __future__ import annotations

import pytest
import torch
from torchrl.envs.transforms import Transform

from conftest import steps
from torchrl_ext import make_replay_buffer
from torchrl_ext.samplers import SequenceSampler


class Flatten(Transform):
    """A sample-time transform that changes the batch: ``[B, L]`` sequences to ``[B * L]`` steps."""

    def forward(self, tensordict):
        return tensordict.reshape(-1)

    def _inv_call(self, tensordict):
        return tensordict


def episode(T: int = 6):
    obs = torch.arange(T, dtype=torch.float32).view(1, T, 1)
    done = torch.zeros(1, T, 1, dtype=torch.bool)
    done[0, -1] = True
    return steps(obs, obs + 1, terminated=done)


def test_sampler_entries_join_the_batch_with_its_leading_dims():
    rb = make_replay_buffer(32, batch_size=2, sampler=SequenceSampler(3, pad=True), seed=0)
    rb.extend(episode())
    batch = rb.sample()
    assert batch.batch_size == (2, 3)
    assert batch["index"].shape == (2, 3)
    assert batch["is_init"].shape == (2, 3, 1) and batch["is_init"][:, 0].all()
    assert batch["collector", "mask"].shape == (2, 3)


def test_a_sampler_entry_that_no_longer_fits_the_transformed_batch_is_an_error():
    # the transform returns [6] steps; the sampler's [2, 3] index cannot join them
    rb = make_replay_buffer(32, batch_size=2, sampler=SequenceSampler(3), transform=Flatten(), seed=0)
    rb.extend(episode())
    with pytest.raises(ValueError, match=r"TransitionReplayBuffer.sample: the sampler's entry "
                                         r"'(index|is_init)' has shape \(2, 3(, 1)?\), which does "
                                         r"not fit the batch of shape \(6,\) the transforms "
                                         r"returned"):
        rb.sample()
