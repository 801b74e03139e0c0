"""Checkpoints of the facades: ``dumps`` / ``loads`` restore the buffer and each env's running episode.

HerReplayStorage and BatchReplayBuffer had no checkpoint (a user combined
``rb.dumps`` with the adapter's state by hand); the rllte facades' ``save``
works only with a snapshot directory. Each facade is filled mid-episode,
checkpointed and loaded into a fresh one: the next samples are the
original's, and both go on identically, each env's episode continued.
"""
from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from torchrl_ext import BatchReplayBuffer, HerReplayStorage, MBReplayBuffer, NStepReplayStorage
from torchrl_ext.transforms import StandardScaler

N = 3
BOX = gym.spaces.Box(-100, 100, (2,), np.float32)
GOALS = gym.spaces.Dict(observation=BOX, achieved_goal=BOX, desired_goal=BOX)


def nstep(**kwargs):
    space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    return NStepReplayStorage(space, gym.spaces.Discrete(2), storage_size=300, num_envs=N, batch_size=8,
                              num_workers=0, **{"n_step": 3, "seed": 0, **kwargs})


def her(**kwargs):
    args = dict(storage_size=300, num_envs=N, batch_size=8, num_goals=2, seed=0,
                reward_fn=lambda a, d, i: -np.abs(a - d).sum(-1), copy_info_dict=True)
    return HerReplayStorage(GOALS, gym.spaces.Discrete(2), **{**args, **kwargs})


def d3rlpy(**kwargs):
    return BatchReplayBuffer(300, observation_space=BOX, action_space=gym.spaces.Discrete(2),
                             **{"n_envs": N, "seed": 0, "create_mask": True, "mask_size": 3, **kwargs})


class Feed:
    """The same steps for every copy of a facade: a CartPole vector env, or synthetic episodes."""

    def __init__(self, kind: str, steps: int):
        self.kind, self.steps = kind, []
        if kind == "nstep":
            envs = gym.make_vec("CartPole-v1", N, vectorization_mode="sync")
            obs, _ = envs.reset(seed=0)
            for t in range(steps):
                action = np.array([(t + e) % 2 for e in range(N)])
                nxt, reward, term, trunc, infos = envs.step(action)
                self.steps.append((obs, action, reward, term, trunc, infos, nxt))
                obs = nxt
            envs.close()
            return
        t = np.zeros(N)
        for _ in range(steps):
            obs = np.stack([t, np.arange(N)], 1).astype(np.float32)  # [step, env]
            done = t + 1 == 4 + np.arange(N)  # episodes of 4, 5 and 6 steps
            self.steps.append((obs, done))
            t = np.where(done, 0, t + 1)

    def add(self, facade, lo: int, hi: int) -> None:
        for step in self.steps[lo:hi]:
            if self.kind == "nstep":
                facade.add(*step)
                continue
            obs, done = step
            action = (obs[:, 0] % 2).astype(np.int64)
            nxt = obs + np.array([1.0, 0.0], np.float32)
            if self.kind == "her":
                goal = np.full((N, 2), 50.0, np.float32)
                facade.add({"observation": obs, "achieved_goal": obs, "desired_goal": goal}, action,
                           -np.ones(N), done, np.zeros(N, bool), {"dist": obs[:, 0]},
                           {"observation": nxt, "achieved_goal": nxt, "desired_goal": goal})
            else:
                facade.append(obs, action, obs[:, 0], done)


def batch_of(facade) -> list[torch.Tensor]:
    """A sample's tensors: the rllte facades' tuple (observation dicts flattened), d3rlpy's fields."""
    if isinstance(facade, BatchReplayBuffer):
        batch = facade.sample(8, n_steps=2)
        return [batch.observations, batch.actions, batch.rewards, batch.next_observations, batch.terminals,
                batch.masks]
    out = []
    for field in facade.sample():
        out += [field[k] for k in sorted(field)] if isinstance(field, dict) else [field]
    assert len(out) >= 5 and all(isinstance(t, torch.Tensor) for t in out)
    return out


@pytest.mark.parametrize("kind, build", [("nstep", nstep), ("her", her), ("d3rlpy", d3rlpy)])
def test_a_loaded_facade_samples_and_goes_on_as_the_saved_one(kind, build, tmp_path):
    feed = Feed(kind, 60)
    original = build()
    feed.add(original, 0, 30)  # every env in the middle of an episode
    original.dumps(tmp_path / "ckpt")
    restored = build(seed=7)  # another seed: the checkpoint's generator takes over
    restored.loads(tmp_path / "ckpt")
    assert len(restored) == len(original)
    for _ in range(3):
        for mine, theirs in zip(batch_of(restored), batch_of(original), strict=True):
            assert torch.equal(mine, theirs)
    feed.add(original, 30, 60)
    feed.add(restored, 30, 60)  # episodes continued, none cut or glued
    rows = [facade.rb.storage.index for facade in (original, restored)]
    assert rows[0].episode_count.tolist() == rows[1].episode_count.tolist()
    assert len(restored) == len(original)
    for mine, theirs in zip(batch_of(restored), batch_of(original), strict=True):
        assert torch.equal(mine, theirs)


@pytest.mark.parametrize("build, other, message", [
    (nstep, lambda: nstep(autoreset_mode="same_step"),
     r"autoreset_mode: the checkpoint has 'NextStep', this one 'SameStep'"),
    (her, lambda: HerReplayStorage(GOALS, gym.spaces.Discrete(2), storage_size=300, num_envs=2,
                                   reward_fn=lambda a, d, i: -np.abs(a - d).sum(-1)),
     r"num_envs: the checkpoint has 3, this one 2"),
    (d3rlpy, lambda: d3rlpy(n_envs=1), r"n_envs: the checkpoint has 3, this one 1"),
    (nstep, lambda: NStepReplayStorage(gym.spaces.Box(-np.inf, np.inf, (3,), np.float32), gym.spaces.Discrete(2),
                                       storage_size=300, num_envs=N),
     r"observation_space: the checkpoint has 'Box\(-inf, inf, \(4,\), float32\)', this one "
     r"'Box\(-inf, inf, \(3,\), float32\)'"),
    (her, lambda: her(copy_info_dict=False), r"copy_info_dict: the checkpoint has True, this one False"),
])
def test_a_checkpoint_of_a_facade_built_otherwise_is_refused(build, other, message, tmp_path):
    facade = build()
    facade.dumps(tmp_path / "ckpt")
    target = other()
    with pytest.raises(ValueError, match=r"\.loads: .*ckpt was written by a facade built otherwise: .*" + message):
        target.loads(tmp_path / "ckpt")
    assert len(target) == 0
    with pytest.raises(ValueError, match=r"holds no checkpoint written by dumps\(\)"):
        target.loads(tmp_path)


def test_the_constructor_s_sample_settings_stay_after_a_load(tmp_path):
    """n_step, hindsight goals and the mask size are drawn at sample time from the stored
    steps: a facade built with others keeps its own (it took the checkpoint's, so that
    NStepReplayStorage(n_step=5) served 3-step windows and masks kept the saved width)."""
    saved = nstep()
    Feed("nstep", 20).add(saved, 0, 20)
    saved.dumps(tmp_path / "nstep")
    loaded = nstep(n_step=1)
    loaded.loads(tmp_path / "nstep")
    assert loaded.rb.sampler.n == 1
    saved = her()
    Feed("her", 20).add(saved, 0, 20)
    saved.dumps(tmp_path / "her")
    loaded = her(num_goals=0)
    loaded.loads(tmp_path / "her")
    assert loaded.rb.sampler.num_goals == 0 and loaded.num_goals == 0
    saved = d3rlpy()
    Feed("d3rlpy", 20).add(saved, 0, 20)
    saved.dumps(tmp_path / "d3rlpy")
    loaded = d3rlpy(mask_size=2)
    loaded.loads(tmp_path / "d3rlpy")
    assert loaded.sample(8).masks.shape == (2, 8, 1)


def model_based():
    actor = SimpleNamespace(action_space=gym.spaces.Discrete(2), dynamics_model=SimpleNamespace(
        standard_scaler=StandardScaler(), reward_function=None))
    return MBReplayBuffer(30, "cpu", actor, None, None)


@pytest.mark.parametrize("build, owner", [(nstep, "NStepReplayStorage"), (her, "HerReplayStorage"),
                                          (d3rlpy, "BatchReplayBuffer"), (model_based, "MBReplayBuffer")])
def test_a_checkpoint_path_that_is_no_path_is_refused_naming_it(build, owner):
    """dumps(3) / loads(3) failed in pathlib ('expected str, bytes or os.PathLike object, not int')."""
    facade = build()
    for call in ("dumps", "loads"):
        for path in (3, None):
            with pytest.raises(TypeError, match=rf"{owner}.{call}: path={path} \(\w+\), expected a str or "
                                                r"os.PathLike naming a directory\.$"):
                getattr(facade, call)(path)
