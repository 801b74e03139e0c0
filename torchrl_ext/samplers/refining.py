"""Samplers that refine another sampler's draws (windows, goals)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torchrl.data.replay_buffers.samplers import Sampler

__all__ = ["RefiningSampler"]


class RefiningSampler(Sampler):
    """Base of samplers that add to the transitions ``base`` draws.

    Everything about choosing transitions belongs to ``base``: the buffer's
    generator, priorities, write notifications and checkpoints go to it. The
    subclass only extends the index (``(rows, ...)`` tuples whose first entry
    is the rows ``base`` drew). :class:`~torchrl_ext.samplers.NStepSampler` and
    :class:`~torchrl_ext.samplers.HindsightSampler` are refining samplers; the
    buffer finds the priorities of ``base`` through them.

    Args:
        base (Sampler): the sampler whose draws are refined.

    Examples:
        >>> from torchrl_ext.samplers import NStepSampler, PrioritizedTransitionSampler
        >>> sampler = NStepSampler(3, base=PrioritizedTransitionSampler())
        >>> isinstance(sampler, RefiningSampler), type(sampler.base).__name__
        (True, 'PrioritizedTransitionSampler')
    """

    def __init__(self, base: Sampler) -> None:
        super().__init__()
        self.base = base

    @property
    def _rng(self) -> torch.Generator | None:
        return self.base._rng

    @_rng.setter
    def _rng(self, generator: torch.Generator | None) -> None:
        if "base" in self.__dict__:  # Sampler.__init__ sets it before base exists
            self.base._rng = generator

    def update_priority(self, index: Any, priority: Any, *, storage: Any = None) -> None:
        """Give ``base`` the rows of a ``(rows, ...)`` index (``[B, k]`` once stacked)."""
        if isinstance(index, tuple):
            index = index[0]
        elif isinstance(index, torch.Tensor) and index.ndim == 2 and index.shape[-1] in (2, 3):
            index = index[:, 0]
        self.base.update_priority(index, priority, storage=storage)

    def mark_update(self, index: Any, *, storage: Any = None) -> None:
        self.base.mark_update(index, storage=storage)

    def extend(self, index: Any) -> None:
        self.base.extend(index)

    def add(self, index: Any) -> None:
        self.base.add(index)

    def _empty(self) -> None:
        self.base._empty()

    def dumps(self, path: str | Path) -> None:
        self.base.dumps(path)

    def loads(self, path: str | Path) -> None:
        self.base.loads(path)
