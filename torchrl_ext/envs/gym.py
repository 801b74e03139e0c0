"""Gymnasium vector-env steps to TorchRL transitions, in every autoreset mode."""
from __future__ import annotations

import logging
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

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

    Examples:
        >>> import gymnasium as gym
        >>> AutoresetMode(gym.vector.AutoresetMode.SAME_STEP.value) is AutoresetMode.SAME_STEP
        True
        >>> AutoresetMode("Legacy").value
        'Legacy'
    """

    NEXT_STEP = "NextStep"
    SAME_STEP = "SameStep"
    DISABLED = "Disabled"
    LEGACY = "Legacy"


logger = logging.getLogger(__name__)

#: what each mode means for the stored steps, logged once per adapter
_CONVENTION = {
    AutoresetMode.NEXT_STEP: "the step() after an episode end only resets that sub-env: "
    "it is not a transition and is not stored (its observation starts the next episode)",
    AutoresetMode.SAME_STEP: "the true final observation of a done step is read from "
    "infos['final_obs']; no step is dropped",
    AutoresetMode.DISABLED: "the observation of a done step is its true final observation; "
    "reset the done sub-envs yourself; no step is dropped",
    AutoresetMode.LEGACY: "the true final observation of a done step is read from "
    "infos[i]['terminal_observation'] (SB3 VecEnv); no step is dropped",
}


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
      transition, which the :class:`~torchrl_ext.writers.TransitionWriter` skips.

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
        autoreset_mode (AutoresetMode or str, optional): defaults to gymnasium's
            default, ``NEXT_STEP``. The mode, and what it means for the stored
            steps, is logged once at INFO on the ``torchrl_ext`` logger; infos
            that look like another mode's log a WARNING at the first episode end.
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
        autoreset_mode: AutoresetMode | str | Any | None = None,
        observation_key: str = "observation",
    ) -> None:
        self.num_envs = int(num_envs)
        defaulted = autoreset_mode is None
        mode = AutoresetMode.NEXT_STEP if autoreset_mode is None else autoreset_mode
        value = getattr(mode, "value", mode)
        try:
            self.autoreset_mode = AutoresetMode(value)
        except ValueError:
            raise ValueError(
                f"GymVectorAdapter: autoreset_mode={autoreset_mode!r}, expected one of "
                f"{[m.value for m in AutoresetMode]}."
            ) from None
        self.observation_key = observation_key
        self._resetting = np.zeros(self.num_envs, dtype=bool)
        self._mode_checked = False
        logger.info(
            "GymVectorAdapter(%d envs): autoreset mode %s%s; %s",
            self.num_envs,
            self.autoreset_mode.name,
            " (not given: gymnasium's default; pass autoreset_mode="
            "envs.metadata['autoreset_mode'] if your env uses another)" if defaulted else "",
            _CONVENTION[self.autoreset_mode],
        )

    def reset(self) -> None:
        """Forget the pending reset steps (call after ``env.reset()``)."""
        self._resetting[:] = False

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint must keep: the mode and each env's pending reset step.

        Examples:
            >>> adapter = GymVectorAdapter(2)
            >>> restored = GymVectorAdapter(2)
            >>> restored.load_state_dict(adapter.state_dict())
            >>> restored.state_dict()["resetting"]
            [False, False]
        """
        return {
            "num_envs": self.num_envs,
            "autoreset_mode": self.autoreset_mode.value,
            "resetting": self._resetting.tolist(),
            "mode_checked": self._mode_checked,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the env count and mode must match."""
        mine = (self.num_envs, self.autoreset_mode.value)
        theirs = (state["num_envs"], state["autoreset_mode"])
        if mine != theirs:
            raise ValueError(
                f"GymVectorAdapter.load_state_dict: the checkpoint has (num_envs, "
                f"autoreset_mode)={theirs}, this adapter {mine}; reopen with the same ones."
            )
        self._resetting = np.array(state["resetting"], dtype=bool)
        self._mode_checked = bool(state["mode_checked"])

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
        entries = self.resolve(obs, action, reward, terminated, truncated, infos, next_obs)
        return self.to_tensordict(entries, [self.num_envs])

    def resolve(
        self,
        obs: Any,
        action: Any,
        reward: Any,
        terminated: Any,
        truncated: Any | None,
        infos: Mapping[str, Any] | list[dict] | None,
        next_obs: Any,
    ) -> dict[tuple[str, ...], np.ndarray]:
        """:meth:`step` as numpy entries by TorchRL key (``[num_envs, ...]`` each).

        The entries may share memory with the inputs; :meth:`to_tensordict`
        turns one step, or steps stacked along a time dim, into a TensorDict.
        """
        n = self.num_envs
        if truncated is None and self.autoreset_mode is AutoresetMode.LEGACY:
            # SB3 VecEnv: ``terminated`` holds the dones, truncation is in the infos
            done = self._column("dones", terminated, bool)
            truncated = done & np.array(
                [bool(info.get("TimeLimit.truncated", False)) for info in self._infos(infos)]
            )
            terminated = done & ~truncated
        else:
            terminated = self._column("terminated", terminated, bool)
            truncated = self._column("truncated", truncated, bool)
            done = terminated | truncated
        entries = self._flat("obs", obs, ())
        nxt = self._flat("next_obs", next_obs, ("next",))
        mode = self.autoreset_mode
        if not self._mode_checked and done.any():
            self._check_mode(infos)
        if mode in (AutoresetMode.SAME_STEP, AutoresetMode.LEGACY) and done.any():
            nxt = {k: v.copy() for k, v in nxt.items()}
            for i in np.flatnonzero(done).tolist():
                final = self._flat("final observation", self._final_obs(infos, i), ("next",), batch=False)
                for key, value in final.items():
                    nxt[key][i] = value
        entries[("action",)] = self._rows("action", action)
        entries.update(nxt)
        entries[("next", "reward")] = self._column("reward", reward, np.float32).reshape(n, 1)
        entries[("next", "terminated")] = terminated.reshape(n, 1)
        entries[("next", "truncated")] = truncated.reshape(n, 1)
        entries[("next", "done")] = done.reshape(n, 1)
        valid = np.ones(n, dtype=bool)
        if mode is AutoresetMode.NEXT_STEP:
            valid = ~self._resetting
            self._resetting = done & valid
        entries[("collector", "mask")] = valid
        return entries

    @staticmethod
    def to_tensordict(entries: dict[tuple[str, ...], np.ndarray], batch_size: list[int]) -> TensorDict:
        """A TensorDict of ``batch_size`` from :meth:`resolve`'s entries."""
        tree: dict[str, Any] = {}
        for key, value in entries.items():
            node = tree
            for part in key[:-1]:
                node = node.setdefault(part, {})
            node[key[-1]] = torch.from_numpy(np.ascontiguousarray(value))
        return TensorDict(tree, batch_size=batch_size)

    # ---------------------------------------------------------------- helpers
    def _check_mode(self, infos: Any) -> None:
        """Once, at the first episode end: do the infos look like another mode's?"""
        self._mode_checked = True
        same_step = isinstance(infos, Mapping) and "final_obs" in infos
        if self.autoreset_mode is not AutoresetMode.SAME_STEP and same_step:
            logger.warning(
                "GymVectorAdapter: the infos of an episode end carry 'final_obs', as "
                "gymnasium's SAME_STEP autoreset returns them, but autoreset_mode is %s: "
                "the next observations of done steps may be reset observations. Pass "
                "autoreset_mode=envs.metadata['autoreset_mode'].",
                self.autoreset_mode.name,
            )

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

    def _rows(self, name: str, value: Any) -> np.ndarray:
        array = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
        if array.ndim == 0 or array.shape[0] != self.num_envs:
            raise ValueError(
                f"GymVectorAdapter.step: {name} has shape {tuple(array.shape)}, expected "
                f"({self.num_envs}, ...) (one row per env)."
            )
        return array

    def _column(self, name: str, value: Any, dtype: Any) -> np.ndarray:
        array = self._rows(name, value)
        if array.shape != (self.num_envs,):
            raise ValueError(
                f"GymVectorAdapter.step: {name} has shape {tuple(array.shape)}, "
                f"expected ({self.num_envs},)."
            )
        return array.astype(dtype, copy=False)

    def _flat(
        self, name: str, value: Any, prefix: tuple[str, ...], batch: bool = True
    ) -> dict[tuple[str, ...], np.ndarray]:
        """Observation entries by key; dict observations keep their entries at the root."""
        if isinstance(value, np.ndarray) or not isinstance(value, Mapping):
            array = self._rows(name, value) if batch else np.asarray(value)
            return {prefix + (self.observation_key,): array}
        out: dict[tuple[str, ...], np.ndarray] = {}
        for key, item in value.items():
            if isinstance(item, Mapping):
                sub = self._flat(f"{name}[{key!r}]", item, prefix + (key,), batch)
                out.update(sub)
            elif batch:
                out[prefix + (key,)] = self._rows(f"{name}[{key!r}]", item)
            else:
                out[prefix + (key,)] = np.asarray(item)
        return out
