"""Client code written for maltemosbach/buffers, run on ours with only the imports changed."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from torchrl_ext import EpisodeReplayBuffer, IndividualFileDataset, RingBufferDataset
from torchrl_ext.facades.episodic.utils import to_torch  # buffers.utils.to_torch


def play(replay_buffer, steps, seed=0):
    """The notebooks' loop: gym steps through ``to_torch``, one ``add_step`` each."""
    env = gym.make("Pendulum-v1", max_episode_steps=25)
    obs, _ = env.reset(seed=seed)
    obs, done = to_torch(obs), True
    for _ in range(steps):
        action = env.action_space.sample()
        replay_buffer.add_step({"obs": obs, "action": to_torch(action)}, done)
        next_obs, reward, terminated, truncated, info = to_torch(env.step(action))
        assert isinstance(info, dict)  # left as it is
        done = bool(terminated or truncated)
        obs = to_torch(env.reset()[0]) if done else next_obs
    env.close()


def test_to_torch_converts_a_gym_step_tuple():
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = to_torch(env.step(0))
    assert obs.dtype == torch.float32 and obs.shape == (4,)
    assert reward.dtype == torch.float32 and terminated.dtype == truncated.dtype == torch.bool
    assert info == {}
    assert to_torch(np.ones((2, 3))[:, ::-1]).shape == (2, 3)  # negative strides too


def test_quickstart_loop_samples_sequences():
    replay_buffer = EpisodeReplayBuffer(RingBufferDataset(500), batch_size=4, sequence_length=8,
                                        num_workers=0)
    play(replay_buffer, 120)
    batch = replay_buffer.sample()
    assert batch["obs"].shape == (4, 8, 3) and batch["action"].shape == (4, 8, 1)
    assert replay_buffer.num_episodes >= 4


def test_extend_exposes_other_dataset_and_other_dataloader(tmp_path):
    large = IndividualFileDataset(1000, directory=tmp_path / "episodes")
    front = RingBufferDataset(60)
    front.extend(large, other_batch_size=2, other_num_workers=0)
    assert front.other_dataset is large  # the original's public attributes
    play(EpisodeReplayBuffer(front, batch_size=2, sequence_length=4, num_workers=0), 200)
    assert front.other_dataset.num_episodes > front.num_episodes
    episodes = next(iter(front.other_dataloader))  # whole episodes from the large dataset
    assert episodes["obs"].shape[-1] == 3


def test_sampled_fields_come_in_the_order_of_the_step_dict():
    # fields of different dtype sizes were returned widest first: obs, reward, action = batch.values()
    # then unpacked the int64 actions as obs
    rb = EpisodeReplayBuffer(RingBufferDataset(500), batch_size=4, sequence_length=2, num_workers=0)
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    done = True
    for _ in range(60):
        action = env.action_space.sample()
        next_obs, reward, terminated, truncated, _ = env.step(action)
        rb.add_step({"obs": to_torch(obs), "reward": to_torch(float(reward)), "action": to_torch(action)}, done)
        done = terminated or truncated
        obs = env.reset()[0] if done else next_obs
    batch = rb.sample()
    obs, reward, action = batch.values()
    assert list(batch.keys()) == ["obs", "reward", "action"]
    assert obs.shape == (4, 2, 4) and obs.dtype == torch.float32 and action.dtype == torch.int64
    assert list(rb.dataset.fields) == ["obs", "reward", "action"]


def test_an_evictor_subclass_written_for_the_original_evicts():
    from torchrl_ext.facades.episodic import Evictor

    class OldestFirst(Evictor):  # the original's subclasses override evict, not __call__
        def evict(self, *args, **kwargs) -> int:
            return 0

    dataset = RingBufferDataset(8, evictor=OldestFirst())
    for n in (3, 4, 5):
        dataset.add_episode({"obs": torch.full((n, 1), float(n))})
    assert dataset.episode_lengths == [5]  # 3 + 4 + 5 > 8: the oldest two made room

    class Unfinished(Evictor):  # overrides neither: refused when built, as an abstract class
        pass

    with pytest.raises(TypeError, match=r"Can't instantiate Unfinished: an Evictor overrides __call__"):
        Unfinished()


def test_field_types_are_built_as_in_the_original():
    from torchrl_ext.facades.episodic import ColorImage, PaddedPointcloud

    import dataclasses

    image, cloud = ColorImage(device="cpu", height=64, width=48), PaddedPointcloud(device="cpu", num_points=128)
    assert (image.shape, image.dtype, image.height) == ((64, 48, 3), torch.uint8, 64)
    assert (cloud.shape, cloud.dtype, cloud.num_points) == ((128, 4), torch.float32, 128)
    assert dataclasses.replace(image, device="meta").shape == (64, 48, 3)  # as with the original's dataclasses
    with pytest.raises(TypeError, match=r"ColorImage: height=64, width=None; expected both \(or shape=\)\."):
        ColorImage("cpu", 64)
    with pytest.raises(TypeError, match=r"PaddedPointcloud: num_points=None; expected a count \(or shape=\)\."):
        PaddedPointcloud("cpu")


def test_to_torch_makes_a_tuple_observation_one_tensor():
    env = gym.make("Blackjack-v1")
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = to_torch(env.step(0))  # obs: (sum, dealer card, usable ace)
    assert obs.shape == (3,) and obs.dtype == torch.int64
    assert reward.dtype == torch.float32 and terminated.dtype == torch.bool and info == {}
    for widths in ((2, 3), (2, 2)):  # arrays: a tuple of tensors (no torch warning for same shapes)
        boxes = gym.spaces.Tuple(tuple(gym.spaces.Box(0, 1, (w,)) for w in widths))
        obs = to_torch((boxes.sample(), 0.0, False, False, {}))[0]
        assert isinstance(obs, tuple) and all(isinstance(o, torch.Tensor) for o in obs)
        assert [tuple(o.shape) for o in obs] == [(w,) for w in widths]


def test_is_empty_guards_sample_until_an_episode_is_long_enough():
    rb = EpisodeReplayBuffer(RingBufferDataset(500), batch_size=2, sequence_length=10, num_workers=0)
    for t in range(12):  # three 4-step episodes: none has 10 steps
        rb.add_step({"obs": torch.full((3,), float(t)), "action": torch.zeros(1)}, t % 4 == 3)
    rb.flush()
    assert rb.num_episodes == 3 and rb.is_empty  # the original's guard: nothing to sample yet
    if not rb.is_empty:
        rb.sample()
    play(rb, 60)  # Pendulum episodes of 25 steps
    assert not rb.is_empty and rb.sample()["obs"].shape == (2, 10, 3)
