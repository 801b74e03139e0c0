"""Uniform sampling of live transitions, O(batch) at any capacity."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torchrl.data.replay_buffers.samplers import Sampler

from torchrl_ext.core.episodes import EMPTY_BUFFER, EmptyBufferError, EpisodeIndex
from torchrl_ext.samplers._generator import generator_state, restore_generator
from torchrl_ext.storages.transition import TransitionStorage

__all__ = [
    "EmptyBufferError", "UniformTransitionSampler", "check_batch_size", "draw_rows",
    "draw_transitions",
    "storage_index",
]


def draw_transitions(
    storage: TransitionStorage, batch_size: int, generator: torch.Generator | None
) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``batch_size`` live transitions uniformly, with replacement.

    A live row is drawn uniformly over all streams (``tau`` in
    ``[written - stream_capacity, written)`` of its stream); rows that hold only
    an observation (an episode's final or pending observation) are redrawn. That
    is exact rejection sampling: the result is uniform over live transitions.
    Such rows are one per episode, so a redraw round is rarely needed.

    Returns:
        ``(tau, stream)``, numpy int64 arrays of ``[batch_size]``.

    Raises:
        ValueError: the storage holds no transition, or ``batch_size`` is not in
            ``[1, number of live transitions]``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import make_replay_buffer
        >>> rb = make_replay_buffer(16, seed=0)
        >>> _ = rb.extend(TensorDict({"observation": torch.zeros(2, 1), "action": torch.zeros(2, 1),
        ...     "next": {"observation": torch.ones(2, 1), "reward": torch.ones(2, 1),
        ...              "done": torch.zeros(2, 1, dtype=torch.bool)}}, [2]))
        >>> tau, stream = draw_transitions(rb.storage, 2, torch.Generator().manual_seed(0))
        >>> tau.tolist(), set(stream.tolist()) <= {0, 1}  # step 0 of either stream
        ([0, 0], True)
    """
    return storage_index(storage).row_coordinates(draw_rows(storage, batch_size, generator))


def draw_rows(
    storage: TransitionStorage, batch_size: int, generator: torch.Generator | None
) -> np.ndarray:
    """:func:`draw_transitions` as physical rows of ``storage`` (``[batch_size]`` int64).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import make_replay_buffer
        >>> rb = make_replay_buffer(16, seed=0)
        >>> _ = rb.extend(TensorDict({"observation": torch.zeros(1, 1), "action": torch.zeros(1, 1),
        ...     "next": {"observation": torch.ones(1, 1), "reward": torch.ones(1, 1),
        ...              "done": torch.ones(1, 1, dtype=torch.bool)}}, [1]))
        >>> draw_rows(rb.storage, 3, torch.Generator().manual_seed(0)).tolist()  # the one step
        [0, 0, 0]
    """
    index = storage_index(storage)
    if batch_size < 1:
        check_batch_size(batch_size, len(storage))
    return index.draw_rows(batch_size, generator)


def storage_index(storage: TransitionStorage) -> EpisodeIndex:
    """The episode index of ``storage``, which exists from its first write on.

    Raises:
        ValueError: nothing was written yet.

    Examples:
        >>> from torchrl_ext import make_replay_buffer
        >>> storage_index(make_replay_buffer(8).storage)
        Traceback (most recent call last):
        ...
        torchrl_ext.core.checks.EmptyBufferError: cannot sample: the buffer holds no transition yet; extend it first.
    """
    if not isinstance(storage, TransitionStorage):  # a stock TorchRL storage: no episode index
        raise TypeError(
            f"torchrl_ext's samplers read the episode index of a "
            f"torchrl_ext.storages.TransitionStorage, not a {type(storage).__name__}; build the "
            "buffer with storage=TransitionStorage(max_size) (make_replay_buffer does)."
        )
    index = storage.index
    if index is None:
        raise EmptyBufferError(EMPTY_BUFFER)
    return index


def check_batch_size(batch_size: int, available: int) -> None:
    """Raise unless ``batch_size`` transitions can be drawn from ``available`` ones.

    Draws are with replacement, as in TorchRL's ``RandomSampler``, SB3 and
    cpprb: a batch may be larger than the buffer, but the buffer must hold a
    transition and the batch must have one.

    Raises:
        ValueError: the buffer is empty, or ``batch_size < 1``; the message
            says how many transitions there are and what to do.

    Examples:
        >>> check_batch_size(4, 10)
        >>> check_batch_size(256, 10)  # with replacement
        >>> check_batch_size(4, 0)
        Traceback (most recent call last):
        ...
        torchrl_ext.core.checks.EmptyBufferError: cannot sample: the buffer holds no transition yet; extend it first.
    """
    if available == 0:
        raise EmptyBufferError(EMPTY_BUFFER)
    if batch_size < 1:
        raise ValueError(
            f"cannot sample: batch_size={batch_size}, expected >= 1 (the buffer holds "
            f"{available} transitions; batches are drawn with replacement)."
        )


class UniformTransitionSampler(Sampler):
    """Uniform transitions of an :class:`~torchrl_ext.storages.TransitionStorage`.

    Only live transitions are drawn: never an unwritten slot, never an
    overwritten row, never an episode's final-observation row (which is not a
    transition but the next observation of the step before it). Cost is
    O(batch + num_streams), independent of capacity.

    Randomness comes from the buffer's generator (``TensorDictReplayBuffer(generator=...)``,
    checkpointed with ``rb.dumps``), else from ``generator``, else torch's global RNG.

    Keyword Args:
        generator (torch.Generator, optional): RNG used when the buffer sets none.

    Examples:
        >>> import torch
        >>> from torchrl_ext import make_replay_buffer
        >>> from tensordict import TensorDict
        >>> rb = make_replay_buffer(100, batch_size=3, seed=0)
        >>> td = TensorDict({"observation": torch.randn(4, 2), "action": torch.randn(4, 1),
        ...     "next": {"observation": torch.randn(4, 2), "reward": torch.zeros(4, 1),
        ...              "done": torch.ones(4, 1, dtype=torch.bool)}}, [4])
        >>> _ = rb.extend(td)  # four one-step episodes in four streams
        >>> sample = rb.sample()
        >>> sample["index"].shape, bool(sample["next", "done"].all())
        (torch.Size([3]), True)
    """

    def __init__(self, *, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.generator = generator

    def _generator(self) -> torch.Generator | None:
        return self._rng if self._rng is not None else self.generator

    def sample(self, storage: TransitionStorage, batch_size: int) -> tuple[torch.Tensor, dict]:
        return torch.from_numpy(draw_rows(storage, batch_size, self._generator())), {}

    def _empty(self) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return generator_state(self.generator)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.generator = restore_generator(self.generator, state_dict)

    def dumps(self, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state = self.state_dict()
        if "generator" in state:
            torch.save(state, path / "state.pt")
        (path / "metadata.json").write_text(json.dumps({"generator": "generator" in state}))

    def loads(self, path: str | Path) -> None:
        path = Path(path)
        if json.loads((path / "metadata.json").read_text())["generator"]:
            self.load_state_dict(torch.load(path / "state.pt"))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
