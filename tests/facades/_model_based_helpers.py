"""Helpers shared by the ``MBReplayBuffer`` tests (``test_model_based*.py``).

pytorchrl-style actors and transition dicts, buffers filled with traced steps
(the observation of env ``i`` at step ``t`` is ``t + 100 i``), de-normalised
training batches, and CartPole driven by gymnasium vector envs in every
autoreset mode with its dynamics checked pair by pair.
"""
from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import torch

from torchrl_ext import MBReplayBuffer
from torchrl_ext.transforms import StandardScaler

MODES = gym.vector.AutoresetMode


def make_actor(space=None, scaler=None, reward_function=None):
    space = gym.spaces.Discrete(2) if space is None else space
    model = SimpleNamespace(standard_scaler=scaler if scaler is not None else StandardScaler(),
                            reward_function=reward_function)
    return SimpleNamespace(action_space=space, dynamics_model=model)


def step(t, n=1, done=0.0, next_done=0.0, obs_dim=2, action=None):
    """A pytorchrl transition dict of ``n`` envs whose observation is ``t`` (env i: ``t + 100 i``)."""
    base = (t + 100.0 * np.arange(n, dtype=np.float32))[:, None]
    return {
        "Observation": np.repeat(base, obs_dim, 1).astype(np.float32),
        "Action": np.zeros((n, 1), np.int64) if action is None else action,
        "Reward": base.astype(np.float32),
        "NextObservation": np.repeat(base + 1, obs_dim, 1).astype(np.float32),
        "Done": np.full((n, 1), done, np.float32),
        "NextDone": np.full((n, 1), next_done, np.float32),
    }


def filled(steps, size=50, n=1, **kwargs):
    kwargs.setdefault("autoreset_mode", "next_step")  # the traced steps' flags follow gymnasium's default
    buffer = MBReplayBuffer(size, "cpu", make_actor(), None, None, seed=0, **kwargs)
    for t in range(steps):
        buffer.insert_transition(step(t, n))
    return buffer


def decoded(buffer, batches):
    """De-normalised ``(inputs, labels)`` of every training batch."""
    scaler = buffer.scaler
    inputs = torch.cat([b["train_input"] for b in batches]) * scaler.input_std + scaler.input_mu
    labels = scaler.inverse_transform(torch.cat([b["train_label"] for b in batches]))
    return inputs, labels


# ------------------------------------------------------------ gymnasium vector envs
def drive(buffer, mode, steps=40, num_envs=3, pass_info=True, seed=0, legacy=False):
    """Run CartPole (5-step episodes) in ``mode``, inserting pytorchrl transition dicts.

    ``legacy``: a SAME_STEP env's infos passed as an SB3 ``VecEnv`` gives them, a
    list of per-env dicts with each done env's ``"terminal_observation"``.
    """
    env = gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1", max_episode_steps=5)] * num_envs, autoreset_mode=mode
    )
    obs, _ = env.reset(seed=seed)
    done = np.zeros(num_envs, bool)
    rng = np.random.default_rng(seed)
    real = 0
    for _ in range(steps):
        action = rng.integers(0, 2, num_envs)
        nxt, reward, term, trunc, info = env.step(action)
        next_done = term | trunc
        sample = {"Observation": obs, "Action": action[:, None], "Reward": reward[:, None].astype(np.float32),
                  "NextObservation": nxt, "Done": done[:, None].astype(np.float32),
                  "NextDone": next_done[:, None].astype(np.float32)}
        if legacy:
            final = info.get("_final_obs", np.zeros(num_envs, bool))
            info = [{"terminal_observation": info["final_obs"][i]} if final[i] else {} for i in range(num_envs)]
        if pass_info:
            sample["EnvironmentInformation"] = info
        buffer.insert_transition(sample)
        real += int((~done).sum()) if mode == MODES.NEXT_STEP else num_envs
        if mode == MODES.DISABLED and next_done.any():
            nxt, _ = env.reset(options={"reset_mask": next_done})
        obs, done = nxt, next_done
    env.close()
    return real


def assert_cartpole_dynamics(inputs, labels):
    """Every pair is a real CartPole step: obs + delta == step(obs, action), reward 1."""
    sim = gym.make("CartPole-v1").unwrapped
    sim.reset(seed=0)
    for x, y in zip(inputs.tolist(), labels.tolist()):
        sim.state, sim.steps_beyond_terminated = np.array(x[:4], np.float64), None
        nxt, *_ = sim.step(int(np.argmax(x[4:])))
        np.testing.assert_allclose(np.array(x[:4]) + np.array(y[:4]), nxt, atol=2e-4)
        assert abs(y[4] - 1.0) < 1e-4
