"""The info entries ``HerReplayStorage(copy_info_dict=True)`` stores: numeric, per env, of fixed shapes."""
from __future__ import annotations

import warnings
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from torchrl_ext.envs._inputs import cast_exactly
from torchrl_ext.envs.gym import FINAL_INFO_KEYS, final_entry
from torchrl_ext.facades._convert import to_numpy

__all__ = ["INFO_KEY", "InfoEntries"]

#: where the stored info entries lie in a row (each step's info is its next-only entry)
INFO_KEY = ("next", "info")


class InfoEntries:
    """The numeric per-env entries of the info dicts of each ``add``, by stored key (``("next", "info", name)``).

    The entries of the first ``add`` and ``keys`` fix the set, each entry's
    dtype and shape; later missing ones are zeros, later new ones warn once.
    In SAME_STEP mode a done env's values come from ``final_info`` (its last
    step's info).

    Args:
        keys: entries stored even if the first ``add``'s infos lack them (float32 scalars).
        num_envs: envs per ``add``.

    Examples:
        >>> entries = InfoEntries(["is_success"], num_envs=2)
        >>> out = entries({"dist": np.array([0.5, 1.5])}, np.zeros(2, bool), same_step=False)
        >>> {key: value.tolist() for key, value in out.items()}
        {('next', 'info', 'dist'): [0.5, 1.5], ('next', 'info', 'is_success'): [0.0, 0.0]}
    """

    def __init__(self, keys: list[str], num_envs: int) -> None:
        self.keys = keys
        self.num_envs = num_envs
        self.schema: dict[str, tuple[np.dtype, tuple[int, ...]]] | None = None  # fixed by the first add
        self.unknown: set[str] = set()  # entries seen after the set was fixed

    def __call__(self, infos: Any, done: np.ndarray, *, same_step: bool) -> dict[tuple[str, ...], np.ndarray]:
        """The ``[num_envs, ...]`` entries of ``infos`` to store; ``done`` marks the envs whose
        episode ended at this step (their values come from ``final_info`` if ``same_step``)."""
        n = self.num_envs
        found = _numeric_entries(infos, n)
        if self.schema is None:
            schema = {k: (v.dtype, v.shape[1:]) for k, v in found.items()}
            for key in self.keys:
                schema.setdefault(key, (np.dtype(np.float32), ()))
            self.schema = schema
        new = set(found) - set(self.schema) - self.unknown
        if new:
            self.unknown |= new
            warnings.warn(
                f"HerReplayStorage.add: infos carry {sorted(new)}, absent from the first add's "
                f"infos {sorted(self.schema)}: they are not stored and reward_fn does not "
                f"get them. Declare them: HerReplayStorage(..., info_keys={sorted(new)}).",
                UserWarning,
                stacklevel=3,
            )
        out: dict[tuple[str, ...], np.ndarray] = {}
        for key, (dtype, shape) in self.schema.items():
            value = found.get(key)
            out[(*INFO_KEY, key)] = np.zeros((n, *shape), dtype) if value is None else _as_info(
                f"infos[{key!r}]", value, dtype, (n, *shape))
        if same_step and done.any():
            out = {k: v.copy() for k, v in out.items()}
            for i in np.flatnonzero(done).tolist():
                final = final_entry(infos, FINAL_INFO_KEYS, i)
                if not isinstance(final, Mapping):
                    continue
                for key, (dtype, shape) in self.schema.items():
                    if key in final:
                        out[(*INFO_KEY, key)][i] = _as_info(
                            f"the final info of env {i}, [{key!r}]", to_numpy(final[key]), dtype, shape)
        return out

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps (JSON): the fixed schema and the entries warned about."""
        schema = self.schema
        return {
            "info_schema": None if schema is None else {
                key: [dtype.str, list(shape)] for key, (dtype, shape) in schema.items()},
            "info_unknown": sorted(self.unknown),
        }

    def load_state(self, meta: dict[str, Any]) -> None:
        """Restore what :meth:`state` kept."""
        schema = meta["info_schema"]
        self.schema = None if schema is None else {
            key: (np.dtype(dtype), tuple(shape)) for key, (dtype, shape) in schema.items()}
        self.unknown = set(meta["info_unknown"])


def _as_info(name: str, value: np.ndarray, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """An info entry as stored: the first add's shape, and values its dtype holds exactly."""
    if value.shape != shape:
        raise ValueError(
            f"HerReplayStorage.add: {name} has shape {value.shape}, expected {shape} as in the "
            "first add (which fixed each info entry's shape and dtype)."
        )
    cast, off = cast_exactly(value, dtype)
    if off is not None:  # 0.5 into int64, 0.3 into bool
        raise ValueError(
            f"HerReplayStorage.add: {name} holds {off!r}, "
            f"which the entry's dtype {dtype.name} (fixed by the first add) cannot hold exactly; "
            "give the entry one dtype at every step (floats from the first step on, if any step has them)."
        )
    return cast


def _numeric_entries(infos: Any, n: int) -> dict[str, np.ndarray]:
    """The numeric ``[n, ...]`` arrays of a gymnasium vector info dict, ``_``-masks excluded.

    ``infos`` may also be a list of ``n`` per-env dicts (SB3 VecEnv, LEGACY mode).
    """
    if isinstance(infos, (list, tuple)) and len(infos) == n and all(
            isinstance(info, Mapping) for info in infos):
        infos = _per_env_entries(infos)
    found: dict[str, np.ndarray] = {}
    if isinstance(infos, Mapping):
        for key, value in infos.items():
            if not isinstance(key, str) or key.startswith("_"):
                continue
            if isinstance(value, torch.Tensor):
                value = value.detach().cpu().numpy()
            if not isinstance(value, np.ndarray) or value.ndim == 0 or value.shape[0] != n:
                continue
            if value.dtype == bool or np.issubdtype(value.dtype, np.number):
                found[key] = value
    return found


#: entries of SB3 VecEnv infos that are the adapter's (final observation, truncation), not info
_LEGACY_ENTRIES = ("terminal_observation", "TimeLimit.truncated")


def _per_env_entries(infos: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Per-env dicts as ``[n, ...]`` arrays: each numeric entry of one shape and kind, zeros where absent."""
    out: dict[str, np.ndarray] = {}
    for key in dict.fromkeys(k for info in infos for k in info):  # first-seen order
        if not isinstance(key, str) or key in _LEGACY_ENTRIES:
            continue
        values = [None if (v := info.get(key)) is None else to_numpy(v) for info in infos]
        given = [v for v in values if v is not None]
        first = given[0]
        if first.dtype.kind not in "biuf" or any(
                v.shape != first.shape or v.dtype.kind != first.dtype.kind for v in given):
            continue
        dtype = np.result_type(*given)
        out[key] = np.stack([np.zeros(first.shape, dtype) if v is None else v.astype(dtype, copy=False)
                             for v in values])
    return out
