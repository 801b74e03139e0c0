"""A vector-env step's inputs as numpy arrays, checked for one row per env (``GymVectorAdapter.convert``)."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from torchrl_ext.core.checks import is_flags
from torchrl_ext.core.schema import EntryKeyError, key_str

__all__ = ["cast_exactly", "column", "env_mask", "flat", "put_final", "rows"]


def rows(name: str, value: Any, num_envs: int) -> np.ndarray:
    """``value`` (array, tensor, list) as a numpy array of ``num_envs`` rows, not copied where it can be.

    Examples:
        >>> rows("action", [[0.5], [1.0]], 2).shape
        (2, 1)
        >>> rows("action", [0.5], 2)
        Traceback (most recent call last):
        ...
        ValueError: GymVectorAdapter.step: action has shape (1,), expected (2, ...) (one row per env).
    """
    if isinstance(value, tuple) and value and isinstance(value[0], (np.ndarray, torch.Tensor)):
        # np.asarray would stack it as [entries, num_envs, ...]: rows of entries, not envs
        raise TypeError(
            f"GymVectorAdapter.step: {name} is a tuple of {len(value)} arrays (a gymnasium "
            "Tuple space's batch), which would be stacked across envs; a Tuple space is not "
            "supported. Use a Dict space (gymnasium.spaces.Dict({'a': ..., 'b': ...})) or "
            "flatten it (gymnasium.wrappers.FlattenObservation), or pass one "
            f"[{num_envs}, ...] array."
        )
    array = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
    if array.ndim == 0 or array.shape[0] != num_envs:
        raise ValueError(
            f"GymVectorAdapter.step: {name} has shape {tuple(array.shape)}, expected "
            f"({num_envs}, ...) (one row per env)."
        )
    return array


def column(name: str, value: Any, dtype: Any, num_envs: int) -> np.ndarray:
    """``value`` as a ``[num_envs]`` array of ``dtype``; ``dtype=bool``: flags, booleans or 0 / 1.

    Examples:
        >>> column("terminated", [0, 1], bool, 2)
        array([False,  True])
        >>> column("terminated", [0.5, 0.0], bool, 2)
        Traceback (most recent call last):
        ...
        ValueError: GymVectorAdapter.step: terminated holds [0.0, 0.5], expected booleans or 0 / 1.
    """
    array = rows(name, value, num_envs)
    if array.shape != (num_envs,):
        raise ValueError(
            f"GymVectorAdapter.step: {name} has shape {tuple(array.shape)}, "
            f"expected ({num_envs},)."
        )
    if dtype is bool and not is_flags(array):
        raise ValueError(
            f"GymVectorAdapter.step: {name} holds {np.unique(array)[:5].tolist()}, "
            "expected booleans or 0 / 1."
        )
    return array.astype(dtype, copy=False)


def flat(
    name: str, value: Any, prefix: tuple[str, ...], observation_key: str, num_envs: int | None = None
) -> dict[tuple[str, ...], np.ndarray]:
    """Observation entries by key; dict observations keep their entries at the root.

    ``num_envs``: each entry has one row per env (checked); ``None``: one env's
    observation (a final observation), taken as it is.

    Examples:
        >>> obs = {"pos": [[0.0], [1.0]], "goal": {"xy": [[1, 2], [3, 4]]}}
        >>> {k: v.shape for k, v in flat("obs", obs, ("next",), "observation", 2).items()}
        {('next', 'pos'): (2, 1), ('next', 'goal', 'xy'): (2, 2)}
    """
    if isinstance(value, np.ndarray) or not isinstance(value, Mapping):
        array = np.asarray(value) if num_envs is None else rows(name, value, num_envs)
        return {prefix + (observation_key,): array}
    out: dict[tuple[str, ...], np.ndarray] = {}
    for key, item in value.items():
        if isinstance(item, Mapping):
            out.update(flat(f"{name}[{key!r}]", item, prefix + (key,), observation_key, num_envs))
        elif num_envs is not None:
            out[prefix + (key,)] = rows(f"{name}[{key!r}]", item, num_envs)
        else:
            out[prefix + (key,)] = np.asarray(item)
    return out


def env_mask(where: str, envs: Any, num_envs: int) -> np.ndarray:
    """``envs`` (``None`` for all, env positions, or a ``[num_envs]`` bool mask) as a bool mask.

    Examples:
        >>> env_mask("reset", [2], 3).tolist(), env_mask("reset", None, 2).tolist()
        ([False, False, True], [True, True])
        >>> env_mask("reset", [3], 3)
        Traceback (most recent call last):
        ...
        ValueError: reset: envs=[3], expected env positions in [0, 3) or a bool mask of 3 envs.
    """
    mask = np.zeros(num_envs, dtype=bool)
    if envs is None:
        mask[:] = True
        return mask
    chosen = np.asarray(envs)
    if chosen.dtype == np.bool_ and chosen.shape == (num_envs,):
        return chosen.copy()
    if chosen.dtype.kind in "iu" and chosen.ndim <= 1 and ((chosen >= 0) & (chosen < num_envs)).all():
        mask[chosen] = True
        return mask
    raise ValueError(
        f"{where}: envs={envs!r}, expected env positions in [0, {num_envs}) or a bool mask "
        f"of {num_envs} envs."
    )


def put_final(
    where: str,
    name: str,
    targets: Mapping[tuple[str, ...], np.ndarray],
    env: int,
    final: Mapping[tuple[str, ...], np.ndarray],
    describe: Callable[[tuple[str, ...]], str] = key_str,
) -> None:
    """Write one env's true final observation into row ``env`` of the step's next-observation arrays.

    Held to what the step's own next observation passed: every entry of
    ``targets`` and no other, each of the entry's shape, and of values its
    dtype holds exactly (``300`` into ``uint8`` would wrap around to ``44``,
    ``3.7`` be cut to ``3``: refused). Float values go to float entries as
    observations do (``float64`` to ``float32``).

    Args:
        where: the caller, for messages.
        name: where the final observation was read (``"infos['final_obs'][0]"``).
        targets: ``[num_envs, ...]`` arrays by key, written to.
        env: the row.
        final: the final observation's entries by key (``targets``' keys).
        describe: a key's name in messages.

    Raises:
        KeyError: an entry is missing or not in the step (an ``EntryKeyError``).
        ValueError: an entry's shape differs, or its values do not fit the dtype.

    Examples:
        >>> import numpy as np
        >>> nxt = {("next", "observation"): np.zeros((2, 2), np.uint8)}
        >>> put_final("step", "final_obs[1]", nxt, 1, {("next", "observation"): np.array([3.0, 4.0])})
        >>> nxt[("next", "observation")].tolist()
        [[0, 0], [3, 4]]
        >>> put_final("step", "final_obs[1]", nxt, 1, {("next", "observation"): np.array([300, 4])})
        Traceback (most recent call last):
        ...
        ValueError: step: final_obs[1] holds values of ('next', 'observation') that uint8 cannot hold exactly (300 in its place), the dtype of the step's next observations; pass the final observation as the env returns its observations.
    """
    if final.keys() != targets.keys():
        missing = [describe(k) for k in targets if k not in final]
        extra = [describe(k) for k in final if k not in targets]
        raise EntryKeyError(
            f"{where}: {name} has entries {[describe(k) for k in final]}, expected those of the "
            f"step's next observations {[describe(k) for k in targets]} (missing {missing}, "
            f"not in the step {extra})."
        )
    for key, value in final.items():
        target = targets[key]
        value = np.asarray(value)
        if value.shape != target.shape[1:] and _squeezed(value.shape) == _squeezed(target.shape[1:]):
            value = value.reshape(target.shape[1:])  # a Discrete value held as a column, (1,)
        if value.shape != target.shape[1:]:
            raise ValueError(
                f"{where}: {name} gives {describe(key)} shape {value.shape}, expected "
                f"{target.shape[1:]} as the step's next observations."
            )
        value, off = cast_exactly(value, target.dtype)
        if off is not None:
            raise ValueError(
                f"{where}: {name} holds values of {describe(key)} that {target.dtype.name} "
                f"cannot hold exactly ({off!r} in its place), the "
                "dtype of the step's next observations; pass the final observation as the "
                "env returns its observations."
            )
        target[env] = value


def cast_exactly(value: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, Any]:
    """``value`` cast to ``dtype``, and the first of its values an integer or bool ``dtype`` cannot
    hold exactly (``300`` in ``uint8``, ``3.7`` or NaN in ``int64``, ``0.3`` in ``bool``; ``None``: none).

    Casts to float dtypes round, as observations do (``float64`` to ``float32``).

    Examples:
        >>> import numpy as np
        >>> cast_exactly(np.array([1.0, 2.0]), np.dtype(np.int64))
        (array([1, 2]), None)
        >>> cast_exactly(np.array([1.0, 2.5]), np.dtype(np.int64))[1]
        2.5
    """
    if value.dtype == dtype:
        return value, None
    cast = value.astype(dtype)
    if dtype.kind in "iub":
        off = cast != value  # NaN too
        if off.any():
            return cast, value[off].reshape(-1)[0].item()
    return cast, None


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1)
