"""Client code written for maltemosbach/buffers, run on ours with only the imports changed."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
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
