"""CartPole's dynamics, to check sampled transitions one by one.

CartPole is deterministic: the next observation follows from the observation
and the action (gymnasium's Euler step, recomputed here in float64 from the
float32 observation). A transition whose next observation does not follow its
observation was stitched from two episodes (or two writers).
"""
from __future__ import annotations

import torch
from tensordict import TensorDictBase

GRAVITY, MASSCART, MASSPOLE, LENGTH, FORCE, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
TOTAL_MASS, POLEMASS_LENGTH = MASSPOLE + MASSCART, MASSPOLE * LENGTH


def cartpole_step(obs: torch.Tensor, push_right: torch.Tensor) -> torch.Tensor:
    """gymnasium ``CartPoleEnv.step`` for a batch: ``[..., 4]`` states, bool actions."""
    x, x_dot, theta, theta_dot = obs.double().unbind(-1)
    force = torch.where(push_right, FORCE, -FORCE)
    cos, sin = torch.cos(theta), torch.sin(theta)
    temp = (force + POLEMASS_LENGTH * theta_dot**2 * sin) / TOTAL_MASS
    theta_acc = (GRAVITY * sin - cos * temp) / (
        LENGTH * (4.0 / 3.0 - MASSPOLE * cos**2 / TOTAL_MASS)
    )
    x_acc = temp - POLEMASS_LENGTH * theta_acc * cos / TOTAL_MASS
    return torch.stack(
        [x + TAU * x_dot, x_dot + TAU * x_acc, theta + TAU * theta_dot, theta_dot + TAU * theta_acc],
        -1,
    )


def follows_dynamics(obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
    """``[...]`` bool: ``next_obs`` is CartPole's step from ``obs`` under ``action`` (one-hot)."""
    predicted = cartpole_step(obs, action.argmax(-1) == 1)
    return ((predicted - next_obs.double()).abs() < 1e-4).all(-1)


def broken_transitions(batch: TensorDictBase, mask: torch.Tensor | None = None) -> int:
    """How many transitions of ``batch`` (any batch shape) break CartPole's dynamics.

    Also checks the StepCounter: the next step count is the step count plus one.
    """
    ok = follows_dynamics(batch["observation"], batch["action"], batch["next", "observation"])
    if ("next", "step_count") in batch.keys(include_nested=True):
        ok &= (batch["next", "step_count"] == batch["step_count"] + 1).squeeze(-1)
    if mask is not None:
        ok |= ~mask
    return int((~ok).sum())


def make_goal_cartpole():
    """CartPole with goal entries: ``achieved_goal`` is (x, theta), ``desired_goal`` zeros.

    The goals ride along the observation, so hindsight relabelling can be
    checked: a relabelled goal is an achieved goal of a later step of the same
    episode.
    """
    import gymnasium as gym
    import numpy as np

    class GoalCartPole(gym.ObservationWrapper):
        def __init__(self, env):
            super().__init__(env)
            box = env.observation_space
            self.observation_space = gym.spaces.Dict(
                observation=box,
                achieved_goal=gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
                desired_goal=gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
            )

        def observation(self, obs):
            return {
                "observation": obs,
                "achieved_goal": obs[[0, 2]].astype(np.float32),
                "desired_goal": np.zeros(2, np.float32),
            }

    return GoalCartPole(gym.make("CartPole-v1"))


def goal_reward(achieved, desired, infos=None):
    """HER reward: 0 within 0.05 of the goal, else -1 (``[...]`` from ``[..., 2]``)."""
    return -((achieved - desired).norm(dim=-1) > 0.05).float()
