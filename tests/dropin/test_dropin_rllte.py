"""Client code written for rllte's storages, run on ours with only the import changed."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torchrl_ext import HerReplayStorage, NStepReplayStorage  # the only line that differs

PIXELS = gym.spaces.Box(0, 255, (3, 16, 16), np.uint8)
ACTIONS = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


def pixel_storage(num_envs=1, **kwargs):
    args = dict(storage_size=2_000, num_envs=num_envs, batch_size=8, num_workers=0, n_step=3,
                discount=0.99)
    args.update(kwargs)
    storage = NStepReplayStorage(PIXELS, ACTIONS, **args)
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 256, (num_envs, 3, 16, 16), dtype=np.uint8)
    for t in range(30):  # each observation is the previous next observation, as from an env
        nxt = rng.integers(0, 256, (num_envs, 3, 16, 16), dtype=np.uint8)
        done = np.full(num_envs, t % 10 == 9)
        storage.add(obs, rng.uniform(-1, 1, (num_envs, 2)).astype(np.float32),
                    rng.normal(size=num_envs), done, np.zeros(num_envs, bool), {}, nxt)
        obs = nxt
    return storage


def test_nstep_batch_is_the_originals_named_tuple():
    storage = pixel_storage()
    batch = storage.sample()
    obs, act, rew, disc, next_obs = batch
    assert batch._fields == ("observations", "actions", "rewards", "discounts", "next_observations")
    assert len(batch) == 5 and batch[0] is batch.observations is obs
    assert all(x.dtype == torch.float32 for x in batch)
    assert obs.shape == (8, 3, 16, 16) and rew.shape == disc.shape == (8, 1)
    assert float(obs.max()) > 1.0  # 0..255, not normalised, as the original


def test_replay_iter_yields_a_list_of_five_tensors():
    storage = pixel_storage()
    item = next(storage.replay_iter)
    assert isinstance(item, list) and len(item) == 5
    obs, action, reward, discount, next_obs = item
    assert obs.dtype == next_obs.dtype == torch.uint8  # as collated from the stored frames
    assert reward.shape == discount.shape == (8, 1)
    assert storage.replay_iter is storage.replay_iter


def test_n1_terminal_windows_do_not_bootstrap_in_the_original_batch():
    storage = pixel_storage(batch_size=512)
    *_, disc, _ = storage.sample()
    assert bool((disc == 0).any())  # the original: every discount gamma**n
    assert bool(((disc == 0) | (disc > 0.97)).all())


def test_n4_every_env_is_stored():
    storage = pixel_storage(num_envs=3)
    assert len(storage) == 3 * 28  # the original: env 0 only (NEXT_STEP: 2 reset steps each)


class RandomShift(nn.Module):
    """DrQ-v2's image augmentation, as rllte's DrQ-v2 agent applies it to ``batch.observations``."""

    def __init__(self, pad: int = 2) -> None:
        super().__init__()
        self.pad = pad

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, _, h, w = x.size()
        x = F.pad(x, (self.pad,) * 4, "replicate")  # float input only: uint8 raises here
        eps = 1.0 / (h + 2 * self.pad)
        arange = torch.linspace(-1.0 + eps, 1.0 - eps, h + 2 * self.pad)[:h]
        arange = arange.unsqueeze(0).repeat(h, 1).unsqueeze(2)
        base_grid = torch.cat([arange, arange.transpose(1, 0)], dim=2)
        base_grid = base_grid.unsqueeze(0).repeat(n, 1, 1, 1)
        gen = torch.Generator().manual_seed(0)
        shift = torch.randint(0, 2 * self.pad + 1, (n, 1, 1, 2), generator=gen).float()
        grid = base_grid + shift * 2.0 / (h + 2 * self.pad)
        return F.grid_sample(x, grid, padding_mode="zeros", align_corners=False)


def test_drqv2_update_on_pixels_consumes_the_batch_unchanged():
    torch.manual_seed(0)
    storage = pixel_storage(batch_size=16)
    encoder = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2), nn.ReLU(), nn.Flatten())
    feat = 4 * 7 * 7
    actor = nn.Sequential(nn.Linear(feat, 2), nn.Tanh())
    critic = nn.Sequential(nn.Linear(feat + 2, 16), nn.ReLU(), nn.Linear(16, 1))
    critic_target = nn.Sequential(nn.Linear(feat + 2, 16), nn.ReLU(), nn.Linear(16, 1))
    critic_target.load_state_dict(critic.state_dict())
    aug = RandomShift()
    opt_c = torch.optim.Adam([*encoder.parameters(), *critic.parameters()], lr=1e-3)
    opt_a = torch.optim.Adam(actor.parameters(), lr=1e-3)
    before = [p.detach().clone() for p in critic.parameters()]
    for _ in range(3):
        obs, action, reward, discount, next_obs = storage.sample()  # rllte's DrQv2Agent.update
        obs = encoder(aug(obs / 255.0 - 0.5))
        with torch.no_grad():
            next_obs = encoder(aug(next_obs / 255.0 - 0.5))
            next_action = actor(next_obs)
            target_q = reward + discount * critic_target(torch.cat([next_obs, next_action], -1))
        critic_loss = F.mse_loss(critic(torch.cat([obs, action], -1)), target_q)
        opt_c.zero_grad()
        critic_loss.backward()
        opt_c.step()
        actor_loss = -critic(torch.cat([obs.detach(), actor(obs.detach())], -1)).mean()
        opt_a.zero_grad()
        actor_loss.backward()
        opt_a.step()
        assert torch.isfinite(critic_loss) and torch.isfinite(actor_loss)
    assert any(not torch.equal(a, b) for a, b in zip(before, critic.parameters()))


# ---------------------------------------------------------------------- HER
BITS = gym.spaces.MultiBinary(4)
GOAL_SPACE = gym.spaces.Dict(observation=BITS, achieved_goal=BITS, desired_goal=BITS)


def her_storage(strategy="future", **kwargs):
    storage = HerReplayStorage(GOAL_SPACE, ACTIONS, storage_size=1_000, num_envs=2,
                               batch_size=20, goal_selection_strategy=strategy, num_goals=4,
                               **kwargs)
    rng = np.random.default_rng(0)
    for t in range(24):
        state = rng.integers(0, 2, (2, 4), dtype=np.int8)
        nxt = rng.integers(0, 2, (2, 4), dtype=np.int8)
        goal = np.ones((2, 4), np.int8)
        obs = {"observation": state, "achieved_goal": state, "desired_goal": goal}
        next_obs = {"observation": nxt, "achieved_goal": nxt, "desired_goal": goal}
        storage.add(obs, rng.uniform(-1, 1, (2, 2)).astype(np.float32), -np.ones(2),
                    np.full(2, t % 6 == 5), np.zeros(2, bool), {"step": np.full(2, t)}, next_obs)
    return storage


def test_her_batch_is_the_originals_float32_named_tuple():
    batch = her_storage().sample()
    assert batch._fields == ("observations", "actions", "rewards", "terminateds", "truncateds",
                             "next_observations")
    assert isinstance(batch.observations, dict)
    assert batch.observations["desired_goal"].dtype == torch.float32
    not_done = 1.0 - batch.terminateds  # bool in a native batch: this raised
    assert not_done.dtype == torch.float32 and not_done.shape == (20, 1)


def test_h1_default_reward_fn_samples():
    batch = her_storage().sample()  # the original's default reward_fn raised a TypeError
    relabelled = slice(4, 20)  # int(20 * 4 / 5) = 16 virtual rows, last
    hit = (batch.next_observations["achieved_goal"][relabelled]
           == batch.observations["desired_goal"][relabelled]).all(-1)
    assert torch.equal(batch.rewards[relabelled].view(-1), torch.where(hit, 0.0, -1.0))


@pytest.mark.parametrize("copy_info_dict", [False, True])
def test_a_reward_fn_written_for_rllte_gets_numpy_arrays_and_a_dict_per_row(copy_info_dict):
    # rllte calls reward_fn with numpy arrays (stored dtypes) and a list of one dict per row;
    # this one (numpy methods, len(infos)) raised TypeError on tensors and infos=None
    calls = []

    def reward_fn(achieved, desired, infos):
        assert len(infos) == len(achieved) and all(isinstance(info, dict) for info in infos)
        assert isinstance(infos, np.ndarray if copy_info_dict else list)  # rllte's infos table, or its list
        calls.append((achieved.dtype, infos))
        return -(np.abs(achieved - desired).max(axis=-1) > 0.05).astype(np.float32).reshape(-1, 1)

    batch = her_storage(reward_fn=reward_fn, copy_info_dict=copy_info_dict).sample()
    relabelled = slice(4, 20)
    hit = (batch.next_observations["achieved_goal"][relabelled]
           == batch.observations["desired_goal"][relabelled]).all(-1)
    assert torch.equal(batch.rewards[relabelled].view(-1), torch.where(hit, 0.0, -1.0))
    dtype, infos = calls[-1]
    assert dtype == np.int8  # the goals' stored dtype, as rllte keeps them
    # each row's own info entries with copy_info_dict, rllte's empty dicts without
    assert all(list(info) == (["step"] if copy_info_dict else []) for info in infos)
    native = her_storage(reward_fn=lambda a, d, infos: calls.append((a, infos)) or -torch.ones(len(a)),
                         copy_info_dict=copy_info_dict, native=True)
    native.sample()
    assert isinstance(calls[-1][0], torch.Tensor)  # native=True: the components' tensors
    assert (calls[-1][1] is None) is not copy_info_dict


def test_h3_random_strategy_samples():
    assert her_storage("random").sample().rewards.shape == (20, 1)  # the original raised


def test_ddpg_her_update_consumes_the_batch_unchanged():
    torch.manual_seed(0)
    storage = her_storage()
    width = 4 + 4  # observation + desired goal
    actor = nn.Sequential(nn.Linear(width, 16), nn.ReLU(), nn.Linear(16, 2), nn.Tanh())
    critic = nn.Sequential(nn.Linear(width + 2, 16), nn.ReLU(), nn.Linear(16, 1))
    opt_a = torch.optim.Adam(actor.parameters(), lr=1e-3)
    opt_c = torch.optim.Adam(critic.parameters(), lr=1e-3)
    before = [p.detach().clone() for p in actor.parameters()]
    for _ in range(3):
        batch = storage.sample()
        obs = torch.cat([batch.observations["observation"], batch.observations["desired_goal"]], -1)
        nxt = torch.cat([batch.next_observations["observation"],
                         batch.next_observations["desired_goal"]], -1)
        with torch.no_grad():
            target = batch.rewards + 0.98 * (1.0 - batch.terminateds) * critic(
                torch.cat([nxt, actor(nxt)], -1))
        critic_loss = F.mse_loss(critic(torch.cat([obs, batch.actions], -1)), target)
        opt_c.zero_grad()
        critic_loss.backward()
        opt_c.step()
        actor_loss = -critic(torch.cat([obs, actor(obs)], -1)).mean()
        opt_a.zero_grad()
        actor_loss.backward()
        opt_a.step()
        assert torch.isfinite(critic_loss) and torch.isfinite(actor_loss)
    assert any(not torch.equal(a, b) for a, b in zip(before, actor.parameters()))


@pytest.mark.parametrize("make", [pixel_storage, her_storage])
def test_native_batches_are_an_opt_in(make):
    batch = make(native=True).sample()
    assert batch.actions.dtype == torch.float32  # the action space's own dtype
    assert batch.terminateds.dtype == torch.bool  # stored dtypes, not the original's floats
