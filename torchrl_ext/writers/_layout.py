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
    # a plain TensorDict's entries are its _tensordict dict (items() builds a generator over it)
    items = td._tensordict.items() if type(td) is TensorDict else td.items()
    for key, value in items:
        if type(value) is torch.Tensor or isinstance(value, torch.Tensor):
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

    ``flatten`` maps an entry to ``[streams * time, ...]``: stream-major, or
    time-major for a time-first ``[T, K]`` batch (``time_major``: no
    transposing copy; the writer reads its steps at :meth:`positions`);
    ``grid`` maps a flattened ``[streams * time]`` array to ``[streams, time]``;
    ``restore`` maps ``[streams, time]`` rows back to the batch shape.

    Examples:
        >>> layout = _Layout((3, 2), time_first=True)  # [T=3, K=2]
        >>> layout.shape, layout.positions(np.array([[0], [1]]), np.arange(3)).tolist()
        ((2, 3), [[0, 2, 4], [1, 3, 5]])
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
        self.time_major = len(batch) == 2 and time_first

    def flatten(self, value: torch.Tensor) -> torch.Tensor:
        if self.flat:
            return value
        nb = len(self.batch)
        return value.reshape(self.shape[0] * self.shape[1], *value.shape[nb:])

    def grid(self, flat: np.ndarray) -> np.ndarray:
        """A flattened ``[streams * time]`` array (any shape of that size) as ``[streams, time]`` (a view)."""
        K, T = self.shape
        return flat.reshape(T, K).T if self.time_major else flat.reshape(K, T)

    def positions(self, k: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Where step ``t`` of stream ``k`` lies in flattened entries: ``k * T + t``, or ``t * K + k`` time-major."""
        K, T = self.shape
        return t * K + k if self.time_major else k * T + t

    def restore(self, rows: np.ndarray) -> torch.Tensor:
        """``[streams, time]`` rows (an array) as a tensor shaped like the batch."""
        if len(self.batch) == 0:
            shaped = rows[0, 0, ...]
        elif len(self.batch) == 1:
            shaped = rows[0] if self.time_first else rows[:, 0]
        else:
            shaped = rows.T if self.time_first else rows
        return torch.from_numpy(shaped)
