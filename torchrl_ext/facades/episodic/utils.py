"""``buffers.utils`` of maltemosbach/buffers: :func:`to_torch` for gym step tuples."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["to_torch"]


def to_torch(value: Any) -> Any:
    """``value`` as a tensor where it converts, each element of a list or tuple alike.

    The original's ``buffers.utils.to_torch``, as its notebooks use it on gym
    step tuples: numbers, bools and numpy arrays (any strides) become tensors
    of their dtype; an element that is itself a tuple or list of numbers (a
    ``Tuple`` space's observation, as Blackjack's) becomes one tensor, as
    ``torch.tensor`` makes it; tensors pass as they are; what has no tensor
    form (an ``info`` dict, a string, ``None``) is returned unchanged. Lists,
    tuples and named tuples keep their type.

    Examples:
        >>> import numpy as np
        >>> obs, reward, terminated, truncated, info = to_torch(
        ...     (np.zeros(3, np.float32), 1.0, False, True, {"TimeLimit.truncated": True}))
        >>> obs.dtype, reward, terminated.dtype, info
        (torch.float32, tensor(1.), torch.bool, {'TimeLimit.truncated': True})
        >>> to_torch([np.arange(4)[::-2], "text"])
        [tensor([3, 1]), 'text']
        >>> to_torch(((11, 10, 0), 0.0, True, False, {}))[0]  # Blackjack's step
        tensor([11, 10,  0])
    """
    if isinstance(value, (list, tuple)):
        items = [_as_tensor(item) for item in value]
        if hasattr(value, "_fields"):  # a named tuple
            return type(value)(*items)
        return type(value)(items)
    return _as_tensor(value)


def _as_tensor(value: Any) -> Any:
    """One element as a tensor where it converts (see :func:`to_torch`), else unchanged."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return value
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, (bool, int, float, complex, np.generic)):
        return torch.as_tensor(value)
    if isinstance(value, (list, tuple)):  # nested numbers: one tensor, as the original's torch.tensor
        try:
            return torch.tensor(value)
        except (RuntimeError, TypeError, ValueError):  # ragged, or holding what has no tensor form
            return value
    return value
