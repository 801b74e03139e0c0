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
    ``torch.tensor`` makes it, and one of arrays a tuple of tensors; tensors
    pass as they are; what has no tensor form (an ``info`` dict, a string,
    ``None``) is returned unchanged. Lists, tuples and named tuples keep their
    type.

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
    return _each(value) if isinstance(value, (list, tuple)) else _as_tensor(value)


def _each(value: list | tuple) -> Any:
    """Each element of ``value`` as a tensor where it converts, in a list / tuple / named tuple as ``value``."""
    items = [_as_tensor(item) for item in value]
    return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)


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
    if isinstance(value, (list, tuple)):
        if _numbers_only(value):  # nested numbers: one tensor, as the original's torch.tensor
            try:
                return torch.tensor(value)
            except (TypeError, ValueError):  # ragged
                pass
        return _each(value)  # arrays, or what has no tensor form: each element on its own
    return value


def _numbers_only(value: Any) -> bool:
    """Whether nested lists / tuples ``value`` hold Python or numpy numbers only (no array, no string)."""
    return all(_numbers_only(v) if isinstance(v, (list, tuple)) else
               isinstance(v, (bool, int, float, np.bool_, np.number)) for v in value)
