"""Gymnasium's autoreset modes, and where SAME_STEP vector envs put final observations."""
from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

import numpy as np

__all__ = [
    "CONVENTIONS",
    "FINAL_INFO_KEYS",
    "FINAL_OBS_KEYS",
    "AutoresetMode",
    "check_mode",
    "declared_mode",
    "final_entry",
    "final_observation",
    "legacy_infos",
]


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


def declared_mode(envs: Any) -> AutoresetMode | None:
    """The autoreset mode a vector env declares, ``None`` if it declares none.

    A gymnasium 1.x vector env declares it (``envs.autoreset_mode``; a wrapped
    one in ``envs.metadata["autoreset_mode"]``); vector envs from before
    gymnasium 1.0 (gym's, SB3's, d3rlpy's) declare none.

    Raises:
        ValueError: the declared value is not a mode.

    Examples:
        >>> import gymnasium as gym
        >>> from types import SimpleNamespace
        >>> env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
        >>> declared_mode(env), declared_mode(SimpleNamespace(num_envs=2))
        (<AutoresetMode.NEXT_STEP: 'NextStep'>, None)
    """
    mode = getattr(envs, "autoreset_mode", None)
    if mode is None:
        metadata = getattr(envs, "metadata", None)
        mode = metadata.get("autoreset_mode") if isinstance(metadata, Mapping) else None
    return None if mode is None else AutoresetMode.parse(mode, type(envs).__name__)


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


def check_mode(mode: AutoresetMode, infos: Any, done: np.ndarray) -> None:
    """At an episode end (``done``: ``[num_envs]`` bool): do the infos contradict the declared ``mode``?

    Raises:
        ValueError: a NEXT_STEP or DISABLED env's infos carry final observations
            or infos of done envs, as a SAME_STEP env (or an SB3 VecEnv, LEGACY)
            returns them.

    Examples:
        >>> import numpy as np
        >>> infos = {"final_obs": np.array([None, 3], dtype=object), "_final_obs": np.array([False, True])}
        >>> check_mode(AutoresetMode.SAME_STEP, infos, np.array([False, True]))  # consistent
        >>> check_mode(AutoresetMode.NEXT_STEP, infos, np.array([False, True]))
        Traceback (most recent call last):
        ...
        ValueError: GymVectorAdapter: autoreset_mode is NEXT_STEP, but the infos of an episode end carry ['final_obs'], ...
    """
    if mode in (AutoresetMode.LEGACY, AutoresetMode.SAME_STEP):
        return  # SAME_STEP without a final observation raises in final_observation
    if isinstance(infos, (list, tuple)):  # per-env dicts: an SB3 VecEnv's final observations?
        envs = [i for i in np.flatnonzero(done).tolist() if i < len(infos)
                and isinstance(infos[i], Mapping) and "terminal_observation" in infos[i]]
        if envs:
            raise ValueError(
                f"GymVectorAdapter: autoreset_mode is {mode.name}, but the infos of an "
                f"episode end carry ['terminal_observation'] (infos[{envs[0]}]), as an SB3 "
                "VecEnv (which resets in the step) returns them: the next observations of "
                "done steps would be reset observations. Pass autoreset_mode='legacy'."
            )
        return
    if not isinstance(infos, Mapping):
        return
    keys = [
        k for k in FINAL_OBS_KEYS + FINAL_INFO_KEYS
        if k in infos and any(final_entry(infos, (k,), i) is not None
                              for i in np.flatnonzero(done).tolist())
    ]
    if keys:
        raise ValueError(
            f"GymVectorAdapter: autoreset_mode is {mode.name}, but the infos of an "
            f"episode end carry {keys}, as a SAME_STEP env (gymnasium 1.x, or "
            "gymnasium 0.26-0.29's autoreset) returns them: the next observations of "
            "done steps would be reset observations. Pass autoreset_mode='same_step' "
            "(or envs.metadata['autoreset_mode'])."
        )


def legacy_infos(infos: Any, num_envs: int) -> list[dict]:
    """A LEGACY (SB3 ``VecEnv``) step's infos: a list of ``num_envs`` dicts.

    Examples:
        >>> legacy_infos(({}, {"TimeLimit.truncated": True}), 2)
        [{}, {'TimeLimit.truncated': True}]
        >>> legacy_infos(None, 2)
        Traceback (most recent call last):
        ...
        ValueError: GymVectorAdapter.step: LEGACY mode needs infos as a list of 2 dicts (one per env), got NoneType.
    """
    if infos is None or len(infos) != num_envs:
        raise ValueError(
            f"GymVectorAdapter.step: LEGACY mode needs infos as a list of {num_envs} "
            f"dicts (one per env), got {type(infos).__name__}"
            f"{'' if infos is None else f' of length {len(infos)}'}."
        )
    return list(infos)


def final_observation(mode: AutoresetMode, infos: Any, i: int, num_envs: int) -> Any:
    """The true final observation of done env ``i``, where ``mode`` puts it in the infos.

    Raises:
        ValueError: the infos do not hold it (naming where it was looked for).

    Examples:
        >>> import numpy as np
        >>> infos = {"final_obs": np.array([None, 3], dtype=object), "_final_obs": np.array([False, True])}
        >>> final_observation(AutoresetMode.SAME_STEP, infos, 1, 2)
        3
        >>> final_observation(AutoresetMode.LEGACY, [{}, {"terminal_observation": 5}], 1, 2)
        5
    """
    if mode is AutoresetMode.LEGACY:
        info = legacy_infos(infos, num_envs)[i]
        if "terminal_observation" not in info:
            raise ValueError(
                f"GymVectorAdapter.step: env {i} is done but infos[{i}] has no "
                "'terminal_observation' (LEGACY mode needs the true final observation)."
            )
        return info["terminal_observation"]
    found = final_entry(infos, FINAL_OBS_KEYS, i)
    if found is None:
        raise ValueError(
            f"GymVectorAdapter.step: env {i} is done but infos has no final observation "
            f"for it (infos['final_obs'][{i}], or gymnasium 0.26-0.29's "
            f"infos['final_observation'][{i}]), as autoreset_mode=SAME_STEP needs. If the "
            "env resets in the next step (gymnasium 1.x's default), pass "
            "autoreset_mode='next_step'; if it does not reset itself, 'disabled'."
        )
    return found
