"""Facade inputs (numpy or torch, per env) to the numpy arrays the adapter resolves."""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

__all__ = ["space_error", "to_actions", "to_numpy"]


def space_error(owner: str, name: str, space: Any, expected: str = "a gymnasium Space") -> TypeError:
    """The ``TypeError`` for a constructor argument that is not the space expected.

    Examples:
        >>> raise space_error("Facade", "action_space", 3)
        Traceback (most recent call last):
        ...
        TypeError: Facade: action_space is int, expected a gymnasium Space.
    """
    return TypeError(f"{owner}: {name} is {type(space).__name__}, expected {expected}.")


def to_numpy(value: Any, space: gym.Space | None = None) -> Any:
    """numpy arrays (a dict of them for a dict), cast to ``space``'s dtype.

    numpy arithmetic often gives float64 where the space says float32; casting
    here keeps the stored dtype the space's. Tensors are detached and moved to CPU.

    Examples:
        >>> import gymnasium as gym, numpy as np, torch
        >>> space = gym.spaces.Dict(x=gym.spaces.Box(0, 1, (2,), np.float32))
        >>> to_numpy({"x": np.zeros((3, 2))}, space)["x"].dtype
        dtype('float32')
        >>> to_numpy(torch.ones(2)).tolist()
        [1.0, 1.0]
    """
    if isinstance(value, dict):
        spaces = getattr(space, "spaces", {})
        return {k: to_numpy(v, spaces.get(k)) for k, v in value.items()}
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    value = np.asarray(value)
    dtype = getattr(space, "dtype", None)
    return value if dtype is None else value.astype(dtype, copy=False)


def to_actions(actions: Any, space: gym.Space, num_envs: int) -> np.ndarray:
    """Actions in ``space``'s dtype, floats rounded for integer spaces, ``Discrete`` as ``[N, 1]``.

    Examples:
        >>> import gymnasium as gym, numpy as np
        >>> to_actions(np.array([0.9, 2.0]), gym.spaces.Discrete(3), num_envs=2).tolist()
        [[1], [2]]
    """
    value = to_numpy(actions)
    dtype = getattr(space, "dtype", None)
    if dtype is not None and np.issubdtype(dtype, np.integer) and not np.issubdtype(
        value.dtype, np.integer
    ):
        value = np.rint(value)
    value = value if dtype is None else value.astype(dtype, copy=False)
    if isinstance(space, gym.spaces.Discrete):
        value = value.reshape(num_envs, 1) if value.size == num_envs else value
    return value
