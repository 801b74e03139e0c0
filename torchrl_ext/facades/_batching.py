"""Facade writes in ``[num_envs, T]`` chunks: one buffer write per ``T`` env steps."""
from __future__ import annotations

from typing import Any

import numpy as np
from torchrl.data import TensorDictReplayBuffer

from torchrl_ext.envs.gym import GymVectorAdapter

__all__ = ["ADD_CHUNK", "StepBatcher"]

#: steps a facade holds before writing them (one write costs about as much as one step)
ADD_CHUNK = 64


class StepBatcher:
    """Hold vector-env steps as numpy and write them ``chunk`` at a time.

    A buffer write costs about as much for one step as for a chunk of them, so
    facades whose API adds one step per call batch steps here. The facade
    calls :meth:`flush` before anything reads the buffer (``sample``,
    ``len``...), so reads always see every added step. A step whose entries
    differ in shape or dtype from the stored ones (or the very first step) is
    written at once, so a bad input raises at the ``add`` that brought it,
    with the writer's message naming the entry. A step the adapter finds
    after an unseen reset (``env.reset()`` mid-episode) ends that env's
    running episode first, so the new episode is never glued onto the old one.

    Args:
        rb: the buffer (its writer takes ``[num_envs, T]`` data with a mask).
        adapter: resolves each step's autoreset semantics.
        chunk: steps held before a write.
    """

    def __init__(self, rb: TensorDictReplayBuffer, adapter: GymVectorAdapter, chunk: int) -> None:
        self.rb = rb
        self.adapter = adapter
        self.chunk = max(1, int(chunk))
        # held steps, written into [num_envs, chunk, ...] slabs (one copy a step, no stack)
        self._slabs: dict[tuple[str, ...], np.ndarray] = {}
        self._held = 0
        self._specs: dict[tuple[str, ...], tuple] | None = None

    def add(self, *step: Any, extra: dict[tuple[str, ...], np.ndarray] | None = None) -> None:
        """Hold one step (``GymVectorAdapter.resolve``'s arguments), plus ``extra`` entries by key."""
        entries = self.adapter.resolve(*step)
        if self.adapter.unseen_resets.any():
            # envs reset by hand mid-episode: their running episodes end at the
            # steps already held, and this step opens new ones
            self.flush()
            self.rb.writer.end_episodes(self.adapter.unseen_resets)
        if extra:
            entries.update(extra)
        specs = {k: (v.shape, v.dtype) for k, v in entries.items()}
        if self._specs is None or specs != self._specs:
            self.flush()
            self.rb.extend(self.adapter.to_tensordict(entries, [self.adapter.num_envs]))
            self._specs, self._slabs = specs, {}  # reached only if the buffer took the step
            return
        if not self._slabs:  # reused chunk after chunk: each write copies them into the storage
            self._slabs = {
                k: np.empty((v.shape[0], self.chunk, *v.shape[1:]), v.dtype)
                for k, v in entries.items()
            }
        for key, value in entries.items():  # copies: the caller may reuse its arrays
            self._slabs[key][:, self._held] = value
        self._held += 1
        if self._held >= self.chunk:
            self.flush()

    def flush(self) -> None:
        """Write the held steps as one ``[num_envs, T]`` batch."""
        if not self._held:
            return
        held, self._held = self._held, 0
        steps = {k: v[:, :held] for k, v in self._slabs.items()}
        self.rb.extend(self.adapter.to_tensordict(steps, [self.adapter.num_envs, held]))

    def clear(self) -> None:
        """Drop held steps (the buffer is being emptied)."""
        self._held, self._slabs = 0, {}

    def __len__(self) -> int:
        return self._held
