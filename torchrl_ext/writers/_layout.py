"""How an incoming batch maps to streams and time: the writer's view of a TensorDict's batch dims."""
from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl_ext.core.schema import as_key

__all__: list[str] = []


def _entries(data: TensorDictBase) -> dict[tuple[str, ...], torch.Tensor]:
    """Every tensor leaf of ``data`` by tuple key, as ``items(include_nested=True, leaves_only=True)``.

    Plain nested ``TensorDict``s (what collectors and facades write) are walked
    level by level, about three times cheaper than the nested iterator on a
    vector-env step; anything else (lazy stacks, non-tensor data, tensorclasses)
    goes through that iterator. Same keys, same order.
    """
    out: dict[tuple[str, ...], torch.Tensor] = {}
    if _walk(data, (), out):
        return out
    return {as_key(k): v for k, v in data.items(include_nested=True, leaves_only=True)}


def _walk(td: TensorDictBase, prefix: tuple[str, ...], out: dict[tuple[str, ...], torch.Tensor]) -> bool:
    """Add the leaves of ``td`` to ``out`` (depth first); False at a value that is not a tensor or plain TensorDict."""
    for key, value in td.items():
        if isinstance(value, torch.Tensor):
            out[prefix + (key,)] = value
        elif type(value) is not TensorDict or not _walk(value, prefix + (key,), out):
            return False
    return True


def _select_steps(
    leaves: dict[tuple[str, ...], torch.Tensor], steps: torch.Tensor
) -> dict[tuple[str, ...], torch.Tensor]:
    """Steps ``steps`` (a CPU LongTensor) of every entry, on the entry's device (data may come from a GPU)."""
    on: dict[torch.device, torch.Tensor] = {}
    return {
        key: value.index_select(0, on.setdefault(value.device, steps.to(value.device)))
        for key, value in leaves.items()
    }


class _Layout:
    """Which batch dims are streams and which is time, and how to flatten.

    ``flatten`` maps an entry to ``[streams * time, ...]`` (stream-major);
    ``restore`` maps ``[streams, time]`` rows back to the batch shape.
    """

    def __init__(self, batch: tuple[int, ...], time_first: bool) -> None:
        self.batch = batch
        self.time_first = time_first
        if len(batch) == 0:
            self.shape = (1, 1)
        elif len(batch) == 1:
            self.shape = (1, batch[0]) if time_first else (batch[0], 1)
        elif len(batch) == 2:
            self.shape = (batch[1], batch[0]) if time_first else (batch[0], batch[1])
        else:
            raise ValueError(
                f"TransitionWriter: batch shape {batch} has {len(batch)} dims, expected "
                "[], [num_envs], [num_envs, time] or a flat batch with trajectory ids; "
                "reshape to [num_envs, time] first."
            )
        self.streams = self.shape[0]
        # [N, ...] is already stream-major with T == 1: flatten is the identity
        self.flat = len(batch) == 1 and not time_first

    def flatten(self, value: torch.Tensor) -> torch.Tensor:
        nb = len(self.batch)
        if self.flat:
            return value
        if nb == 2 and self.time_first:
            value = value.transpose(0, 1)
        return value.reshape(self.shape[0] * self.shape[1], *value.shape[nb:])

    def restore(self, rows: np.ndarray) -> torch.Tensor:
        """``[streams, time]`` rows (an array) as a tensor shaped like the batch."""
        if len(self.batch) == 0:
            shaped = rows[0, 0, ...]
        elif len(self.batch) == 1:
            shaped = rows[0] if self.time_first else rows[:, 0]
        else:
            shaped = rows.T if self.time_first else rows
        return torch.from_numpy(shaped)
