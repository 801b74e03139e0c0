"""What :class:`~torchrl_ext.facades.d3rlpy.BatchReplayBuffer` takes in: spaces, and checked copies of appends."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from torchrl_ext.core.checks import check_count, is_flags
from torchrl_ext.envs.modes import AutoresetMode, declared_mode
from torchrl_ext.facades._convert import to_numpy

__all__ = ["AppendInputs", "flags", "spaces"]

_NUMERIC = "biuf"  # numpy dtype kinds: bool, signed and unsigned integers, floats


def spaces(env: Any, observation_space: Any, action_space: Any, n_envs: Any) -> tuple:
    """(observation space, action space, n_envs) from a gymnasium vector env,
    a d3rlpy-style batch env (``len(env)``), or the keywords (D5, D13).

    A gymnasium vector env in SAME_STEP autoreset mode is refused: d3rlpy's
    append convention needs the final observation the step returns (NEXT_STEP,
    or DISABLED with resets by hand)."""
    if env is not None:
        if hasattr(env, "num_envs"):  # gymnasium vector env
            if declared_mode(env) is AutoresetMode.SAME_STEP:
                raise ValueError(
                    "BatchReplayBuffer: the env resets in the step that ends an episode "
                    "(autoreset_mode SAME_STEP): that step returns the next episode's first "
                    "observation, where d3rlpy's loop appends the final one, which only the "
                    "infos hold (infos['final_obs']): its transitions would end in the next "
                    "episode. Make the env with autoreset_mode=NEXT_STEP, gymnasium's default "
                    "(d3rlpy's own batch envs step so)."
                )
            return env.single_observation_space, env.single_action_space, int(env.num_envs)
        if hasattr(env, "__len__"):  # d3rlpy BatchEnv
            return env.observation_space, env.action_space, len(env)
        raise TypeError(
            f"BatchReplayBuffer: env is {type(env).__name__}, expected a gymnasium vector env "
            "(num_envs), a d3rlpy-style batch env (len(env)), or None with observation_space=, "
            "action_space= and n_envs= given."
        )
    missing = [name for name, v in (("observation_space", observation_space),
                                    ("action_space", action_space), ("n_envs", n_envs)) if v is None]
    if missing:
        raise TypeError(
            f"BatchReplayBuffer: env=None needs {', '.join(m + '=' for m in missing)} "
            "(the spaces and number of envs an env would give)."
        )
    return observation_space, action_space, check_count("BatchReplayBuffer", "n_envs", n_envs)


def flags(value: Any, name: str, n: int) -> np.ndarray:
    """Bool ``(n,)`` flags from bool or 0/1 numbers (D3), copied."""
    array = to_numpy(value)
    if array.shape != (n,):
        raise ValueError(f"BatchReplayBuffer.append: {name} has shape {array.shape}, expected ({n},).")
    if array.dtype.kind not in _NUMERIC:
        raise TypeError(
            f"BatchReplayBuffer.append: {name} has dtype {array.dtype}, expected booleans or 0/1."
        )
    if not is_flags(array):
        raise ValueError(
            f"BatchReplayBuffer.append: {name} holds {np.unique(array)[:5].tolist()}, "
            "expected booleans or 0/1."
        )
    return array != 0  # a copy, as bool


@dataclass(frozen=True)
class AppendInputs:
    """The layout of appended steps, and the checks that copy them into it.

    Observations are float32 vectors or ``(C, H, W)`` uint8 images; actions
    ``(n, 1)`` int32 (``Discrete``) or ``(n, action_size)`` float32. Every
    error names the input (``observations``, ``episode.actions``...), what came
    and what was expected.

    Examples:
        >>> inputs = AppendInputs((1, 4, 4), discrete=True, action_size=3, n_envs=2)
        >>> inputs.actions("actions", [2, 0], 2, "append").tolist(), inputs.obs_dtype.__name__
        ([[2], [0]], 'uint8')
        >>> inputs.actions("actions", [2, 3], 2, "append")
        Traceback (most recent call last):
        ...
        ValueError: BatchReplayBuffer.append: actions holds [3], expected integers in [0, 3) (the Discrete action space's n).
    """

    observation_shape: tuple[int, ...]
    discrete: bool
    action_size: int
    n_envs: int

    @property
    def image(self) -> bool:
        return len(self.observation_shape) == 3

    @property
    def obs_dtype(self) -> type:
        return np.uint8 if self.image else np.float32

    @property
    def action_shape(self) -> tuple[int, ...]:
        return (1,) if self.discrete else (self.action_size,)

    @property
    def action_dtype(self) -> type:
        return np.int32 if self.discrete else np.float32

    def check(self, name: str, value: Any, shape: tuple[int, ...], where: str) -> np.ndarray:
        """``value`` as a numeric array of ``shape`` (not copied)."""
        array = to_numpy(value)
        if array.shape != shape:
            raise ValueError(
                f"BatchReplayBuffer.{where}: {name} has shape {array.shape}, expected {shape} "
                f"(observation_shape={self.observation_shape}, action_size={self.action_size}, "
                f"n_envs={self.n_envs})."
            )
        if array.dtype.kind not in _NUMERIC:
            raise TypeError(
                f"BatchReplayBuffer.{where}: {name} has dtype {array.dtype}, expected numbers "
                "(bool, int or float)."
            )
        return array

    def observations(self, name: str, value: Any, n: int, where: str) -> np.ndarray:
        """``(n, *observation_shape)`` observations, copied as float32 (vectors) or uint8 (images, D4)."""
        obs = self.check(name, value, (n, *self.observation_shape), where)
        if self.image and obs.dtype != np.uint8:
            # d3rlpy asserted uint8 images; a cast would wrap values above 255 and
            # turn frames scaled to [0, 1] into zeros
            raise TypeError(
                f"BatchReplayBuffer.{where}: {name} has dtype {obs.dtype}, expected uint8 "
                f"(3-d observations {self.observation_shape} are images, stored as uint8)."
            )
        return obs.astype(self.obs_dtype, copy=True)

    def actions(self, name: str, actions: Any, n: int, where: str) -> np.ndarray:
        """``(n, *action_shape)`` actions, copied; discrete ones must be integers in ``[0, n)``.

        Actions of one number each come as ``(n,)`` or ``(n, 1)`` (d3rlpy took
        ``(n,)`` beside ``(n, action_size)``).
        """
        actions = to_numpy(actions)
        if self.action_shape == (1,) and actions.shape == (n,):
            actions = actions.reshape(n, 1)
        if self.discrete:
            actions = self.check(name, actions.reshape(-1) if actions.ndim == 2 and
                                 actions.shape[1] == 1 else actions, (n,), where)
            # refused, not cast: int32 would truncate 1.7 and wrap 2**40
            bad = (actions < 0) | (actions >= self.action_size) | (actions != np.round(actions))
            if bad.any():
                raise ValueError(
                    f"BatchReplayBuffer.{where}: {name} holds {np.unique(actions[bad])[:5].tolist()}, "
                    f"expected integers in [0, {self.action_size}) (the Discrete action space's n)."
                )
            return actions.astype(np.int32).reshape(n, 1)
        return self.check(name, actions, (n, self.action_size), where).astype(np.float32)
