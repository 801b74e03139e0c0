"""Gymnasium's autoreset modes, and where SAME_STEP vector envs put final observations."""
from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

__all__ = ["CONVENTIONS", "FINAL_INFO_KEYS", "FINAL_OBS_KEYS", "AutoresetMode", "final_entry"]


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

    @classmethod
    def parse(cls, mode: Any, owner: str = "GymVectorAdapter") -> AutoresetMode:
        """The mode as users write it: the enum, gymnasium's enum, or a name in any case.

        ``"same_step"``, ``"SameStep"``, ``"SAME_STEP"`` and ``"samestep"`` are
        one mode; ``None`` is gymnasium's default, ``NEXT_STEP``.

        Raises:
            ValueError: not a mode (the message lists them).

        Examples:
            >>> [AutoresetMode.parse(m).name for m in ("same_step", "SAME_STEP", "NextStep", None)]
            ['SAME_STEP', 'SAME_STEP', 'NEXT_STEP', 'NEXT_STEP']
        """
        if mode is None:
            return cls.NEXT_STEP
        value = getattr(mode, "value", mode)
        if isinstance(value, str):
            wanted = value.replace("_", "").replace("-", "").lower()
            for member in cls:
                if member.value.lower() == wanted:
                    return member
        raise ValueError(
            f"{owner}: autoreset_mode={mode!r}, expected one of "
            f"{[m.value for m in cls]} (any case, underscores allowed: 'same_step'), "
            "an AutoresetMode or gymnasium.vector.AutoresetMode."
        )


#: where SAME_STEP vector envs put the true final observations / infos of done
#: envs: gymnasium 1.x, then gymnasium 0.26-0.29 (each with a ``"_"`` mask)
FINAL_OBS_KEYS = ("final_obs", "final_observation")
FINAL_INFO_KEYS = ("final_info",)


def final_entry(infos: Any, names: tuple[str, ...], i: int) -> Any | None:
    """``infos[name][i]`` for the first of ``names`` present and set for env ``i``, else None.

    Examples:
        >>> import numpy as np
        >>> infos = {"final_observation": np.array([None, 7], dtype=object),
        ...          "_final_observation": np.array([False, True])}
        >>> final_entry(infos, FINAL_OBS_KEYS, 1), final_entry(infos, FINAL_OBS_KEYS, 0)
        (7, None)
    """
    if not isinstance(infos, Mapping):
        return None
    for name in names:
        if name in infos:
            mask = infos.get("_" + name)
            if mask is not None and not mask[i]:
                return None
            value = infos[name]
            if isinstance(value, Mapping):  # gymnasium 1.x final_info: a dict of arrays
                return {k: v[i] for k, v in value.items() if not str(k).startswith("_")}
            return value[i]  # None where an object array holds nothing
    return None


#: what each mode means for the stored steps, logged once per adapter
CONVENTIONS = {
    AutoresetMode.NEXT_STEP: "the step() after an episode end only resets that sub-env: "
    "it is not a transition and is not stored (its observation starts the next episode)",
    AutoresetMode.SAME_STEP: "the true final observation of a done step is read from "
    "infos['final_obs']; no step is dropped",
    AutoresetMode.DISABLED: "the observation of a done step is its true final observation; "
    "reset the done sub-envs yourself; no step is dropped",
    AutoresetMode.LEGACY: "the true final observation of a done step is read from "
    "infos[i]['terminal_observation'] (SB3 VecEnv); no step is dropped",
}
