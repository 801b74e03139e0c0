"""Gymnasium vector-env steps to TorchRL transitions, in every autoreset mode."""
from __future__ import annotations

from enum import StrEnum
from typing import Any, Mapping

import numpy as np
import torch
from tensordict import TensorDict

__all__ = ["AutoresetMode", "GymVectorAdapter"]


class AutoresetMode(StrEnum):
    """How the vector env resets finished sub-envs.

    The values match :class:`gymnasium.vector.AutoresetMode`, plus ``LEGACY``:
    Stable-Baselines3-style vectorized envs that reset inside the step and put
    the true final observation in ``infos[i]["terminal_observation"]`` (and
    truncation in ``infos[i]["TimeLimit.truncated"]`` when ``truncated`` is not
    given separately).
    """

    NEXT_STEP = "NextStep"
    SAME_STEP = "SameStep"
    DISABLED = "Disabled"
    LEGACY = "Legacy"


class GymVectorAdapter:
    """Builds TorchRL transition rows from gymnasium vector-env steps.

    Call :meth:`step` with what the training loop has after each
    ``env.step(action)``: the observation the action was taken in, the action
    and the step's outputs. It returns a ``[num_envs]`` TensorDict to pass to
    ``rb.extend``:

    * ``"observation"`` (or each entry of a dict observation at the root),
      ``"action"``, and under ``"next"`` the *true* next observation,
      ``"reward"`` (float32 ``[num_envs, 1]``), ``"terminated"``, ``"truncated"``,
      ``"done"`` (bool ``[num_envs, 1]``);
    * ``("collector", "mask")``: False for a sub-env whose step is not a
      transition, which the :class:`~torchrl_ext.writers.EpisodeWriter` skips.

    Per autoreset mode:

    ==============  ======================================  ==============================
    mode            true final observation                  steps that are not transitions
    ==============  ======================================  ==============================
    ``NEXT_STEP``   ``next_obs`` of the done step           the step after a done (the reset step)
    ``SAME_STEP``   ``infos["final_obs"][i]``               none
    ``DISABLED``    ``next_obs`` of the done step            none (you reset by hand)
    ``LEGACY``      ``infos[i]["terminal_observation"]``    none
    ==============  ======================================  ==============================

    Args:
        num_envs (int): number of sub-envs.

    Keyword Args:
        autoreset_mode (AutoresetMode or str): defaults to gymnasium's default, ``NEXT_STEP``.
            A :class:`gymnasium.vector.AutoresetMode` is accepted too.
        observation_key (str): key of a non-dict observation. Defaults to ``"observation"``.

    Examples:
        >>> import gymnasium as gym
        >>> from torchrl_ext import make_replay_buffer
        >>> from torchrl_ext.envs import GymVectorAdapter
        >>> env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
        >>> adapter = GymVectorAdapter(2)
        >>> rb = make_replay_buffer(1000, batch_size=4, seed=0)
        >>> obs, _ = env.reset(seed=0)
        >>> for _ in range(30):
        ...     action = env.action_space.sample()
        ...     next_obs, reward, terminated, truncated, infos = env.step(action)
        ...     _ = rb.extend(adapter.step(obs, action, reward, terminated, truncated, infos, next_obs))
        ...     obs = next_obs
        >>> len(rb) <= 60, rb.sample()["next", "reward"].shape
        (True, torch.Size([4, 1]))
    """

    def __init__(
        self,
        num_envs: int,
        *,
        autoreset_mode: AutoresetMode | str | Any = AutoresetMode.NEXT_STEP,
        observation_key: str = "observation",
    ) -> None:
        self.num_envs = int(num_envs)
        value = getattr(autoreset_mode, "value", autoreset_mode)
        try:
            self.autoreset_mode = AutoresetMode(value)
        except ValueError:
            raise ValueError(
                f"GymVectorAdapter: autoreset_mode={autoreset_mode!r}, expected one of "
                f"{[m.value for m in AutoresetMode]}."
            ) from None
        self.observation_key = observation_key
        self._resetting = torch.zeros(self.num_envs, dtype=torch.bool)

    def reset(self) -> None:
        """Forget the pending reset steps (call after ``env.reset()``)."""
        self._resetting.zero_()

    def step(
        self,
        obs: Any,
        action: Any,
        reward: Any,
        terminated: Any,
        truncated: Any | None,
        infos: Mapping[str, Any] | list[dict] | None,
        next_obs: Any,
    ) -> TensorDict:
        """One vector-env step as ``[num_envs]`` TorchRL transitions.

        In LEGACY mode ``truncated`` may be ``None``: ``terminated`` then holds
        the vector env's ``dones`` and truncation comes from
        ``infos[i]["TimeLimit.truncated"]``.

        Raises:
            ValueError: an input does not have ``num_envs`` rows, or a done env
                has no final observation in SAME_STEP / LEGACY mode.
        """
        n = self.num_envs
        if truncated is None and self.autoreset_mode is AutoresetMode.LEGACY:
            # SB3 VecEnv: ``terminated`` holds the dones, truncation is in the infos
            done = self._column("dones", terminated, torch.bool)
            truncated = torch.tensor(
                [[bool(info.get("TimeLimit.truncated", False))] for info in self._infos(infos)]
            ) & done
            terminated = done & ~truncated
        else:
            terminated = self._column("terminated", terminated, torch.bool)
            truncated = self._column("truncated", truncated, torch.bool)
            done = terminated | truncated
        obs_td = self._observation("obs", obs).auto_batch_size_(1)
        next_td = self._observation("next_obs", next_obs).auto_batch_size_(1)
        mode = self.autoreset_mode
        if mode in (AutoresetMode.SAME_STEP, AutoresetMode.LEGACY) and bool(done.any()):
            next_td = next_td.clone()
            for i in torch.nonzero(done.view(-1)).view(-1).tolist():
                next_td[i] = self._observation("final observation", self._final_obs(infos, i), batch=False)
        out = obs_td.clone(False)
        out.set("action", self._rows("action", action))
        nxt = next_td.clone(False)
        nxt.set("reward", self._column("reward", reward, torch.float32))
        nxt.set("terminated", terminated)
        nxt.set("truncated", truncated)
        nxt.set("done", done)
        out.set("next", nxt)
        valid = torch.ones(n, dtype=torch.bool)
        if mode is AutoresetMode.NEXT_STEP:
            valid = ~self._resetting
            self._resetting = done.view(-1) & valid
        out.set(("collector", "mask"), valid)
        return out

    # ---------------------------------------------------------------- helpers
    def _infos(self, infos: Any) -> list[dict]:
        if infos is None or len(infos) != self.num_envs:
            raise ValueError(
                f"GymVectorAdapter.step: LEGACY mode needs infos as a list of {self.num_envs} "
                f"dicts (one per env), got {type(infos).__name__}"
                f"{'' if infos is None else f' of length {len(infos)}'}."
            )
        return list(infos)

    def _final_obs(self, infos: Any, i: int) -> Any:
        if self.autoreset_mode is AutoresetMode.LEGACY:
            info = self._infos(infos)[i]
            if "terminal_observation" not in info:
                raise ValueError(
                    f"GymVectorAdapter.step: env {i} is done but infos[{i}] has no "
                    "'terminal_observation' (LEGACY mode needs the true final observation)."
                )
            return info["terminal_observation"]
        if infos is None or "final_obs" not in infos or not infos["_final_obs"][i]:
            raise ValueError(
                f"GymVectorAdapter.step: env {i} is done but infos['final_obs'][{i}] is "
                "missing; is the env really in SAME_STEP autoreset mode?"
            )
        return infos["final_obs"][i]

    def _rows(self, name: str, value: Any, dtype: torch.dtype | None = None) -> torch.Tensor:
        tensor = torch.as_tensor(np.asarray(value), dtype=dtype)
        if tensor.ndim == 0 or tensor.shape[0] != self.num_envs:
            raise ValueError(
                f"GymVectorAdapter.step: {name} has shape {tuple(tensor.shape)}, expected "
                f"({self.num_envs}, ...) (one row per env)."
            )
        return tensor

    def _column(self, name: str, value: Any, dtype: torch.dtype) -> torch.Tensor:
        tensor = self._rows(name, value, dtype)
        if tensor.shape != (self.num_envs,):
            raise ValueError(
                f"GymVectorAdapter.step: {name} has shape {tuple(tensor.shape)}, "
                f"expected ({self.num_envs},)."
            )
        return tensor.unsqueeze(-1)

    def _observation(self, name: str, value: Any, batch: bool = True) -> TensorDict:
        if isinstance(value, Mapping):
            return self._entries(name, value, batch)
        return TensorDict({self.observation_key: self._tensor(name, value, batch)}, [])

    def _entries(self, name: str, value: Mapping, batch: bool) -> TensorDict:
        # dict observations keep their entries at the root, as TorchRL's GymWrapper does
        out = TensorDict({}, batch_size=[self.num_envs] if batch else [])
        for key, item in value.items():
            if isinstance(item, Mapping):
                out.set(key, self._entries(f"{name}[{key!r}]", item, batch))
            else:
                out.set(key, self._tensor(f"{name}[{key!r}]", item, batch))
        return out

    def _tensor(self, name: str, value: Any, batch: bool) -> torch.Tensor:
        return self._rows(name, value) if batch else torch.as_tensor(np.asarray(value))
