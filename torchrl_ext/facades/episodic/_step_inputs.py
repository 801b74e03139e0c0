"""One step of ``EpisodeReplayBuffer.add_step`` as given: its flags and fields, as numpy flags and tensors."""
from __future__ import annotations

import warnings
from typing import Any, Mapping

import numpy as np
import torch
from tensordict import TensorDictBase

__all__ = ["field_tensor", "nested_field", "step_flags", "warn_if_batched"]


def step_flags(name: str, flag: Any) -> np.ndarray:
    """A flag as a numpy bool array, 0-d (single env) or ``[num_envs]``."""
    if isinstance(flag, torch.Tensor) and flag.dtype is torch.bool and flag.ndim <= 1:
        return flag.numpy() if flag.is_cpu else flag.cpu().numpy()  # the usual flag, as is
    if isinstance(flag, bool):
        return np.array(flag)
    if flag is None or isinstance(flag, (str, bytes)):
        raise TypeError(
            f"add_step: {name}={flag!r}, expected a bool, a 0-d or a [num_envs] bool tensor."
        )
    if type(flag) is np.ndarray and flag.dtype == bool and flag.ndim <= 1:
        return flag
    flag = torch.as_tensor(flag)
    if flag.ndim > 1 or flag.dtype != torch.bool and flag.is_floating_point():
        raise ValueError(
            f"add_step: {name} must be a bool, a 0-d or a [num_envs] bool tensor, "
            f"got {flag.dtype} of shape {tuple(flag.shape)}."
        )
    if flag.dtype != torch.bool and bool(((flag != 0) & (flag != 1)).any()):  # 2 is no flag
        raise ValueError(
            f"add_step: {name} holds {flag.unique().tolist()}, expected bools (or 0 / 1)."
        )
    return flag.bool().cpu().numpy()


def warn_if_batched(values: dict[str, torch.Tensor]) -> None:
    """Single-env data that looks like ``d`` envs' (every field ``[d, ...]``, ``d > 1``)."""
    leading = {int(v.shape[0]) if v.ndim else 0 for v in values.values()}
    shapes = [v.ndim for v in values.values()]
    if len(leading) != 1 or leading == {0} or leading == {1}:
        return
    if len(values) == 1 and shapes[0] != 2:  # one [d] or image-like field: no sign of envs
        return
    d = leading.pop()
    warnings.warn(
        f"add_step: done is a single bool, so this step is stored as ONE env's step, but every "
        f"field has a leading dim of {d} (fields {sorted(values)}), as {d} envs' data would. "
        f"If these are {d} envs, pass done as a [{d}] bool tensor (e.g. torch.zeros({d}, "
        "dtype=torch.bool)); if it is one env's step, ignore this warning (shown once).",
        UserWarning,
        stacklevel=3,
    )


def nested_field(key: Any) -> TypeError:
    """The error for a field that is not a string key with a tensor value."""
    return TypeError(
        f"add_step: field {key!r}: expected string keys and tensor values "
        "(nested fields are not supported)."
    )


def field_tensor(key: str, value: Any) -> torch.Tensor:
    """Field ``key``'s value as a tensor: a numpy array viewed (not copied), a number converted.

    Raises:
        TypeError: a nested field (a dict, a TensorDict), or a value that is not numeric.
    """
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (Mapping, TensorDictBase)):
        raise nested_field(key)
    if type(value) is np.ndarray and (
            not value.flags.writeable or any(stride < 0 for stride in value.strides)):
        # torch views neither a read-only array (it warns) nor negative strides (a reversed array)
        value = value.copy()
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(
            f"add_step: field {key!r} is {type(value).__name__} ({value!r:.40}), "
            "expected a tensor, array or number."
        ) from None
