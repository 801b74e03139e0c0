"""Hindsight goal positions: for part of a batch, a goal reached later in the same episode."""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from torchrl.data.replay_buffers.samplers import Sampler

from torchrl_ext.core.checks import check_count
from torchrl_ext.core.kernels import goals
from torchrl_ext.core.schema import set_unchecked, tensordict_of
from torchrl_ext.sample_index import SampleIndex, WindowReader, reader_of
from torchrl_ext.samplers.refining import RefiningSampler, plain_rows
from torchrl_ext.samplers.nstep import NStepSampler, StepWindows
from torchrl_ext.samplers.uniform import draw_rows, storage_index
from torchrl_ext.storages.transition import TransitionStorage

__all__ = ["HindsightSampler", "HindsightStrategy", "RealGoals"]


class HindsightStrategy(StrEnum):
    """Where a relabelled transition's goal comes from (Andrychowicz et al., 2017).

    For a transition at step ``i`` of an episode whose steps ``0 .. L-1`` are
    written (the episode may still run), the goal is the achieved goal after
    step ``j`` (``("next", achieved_goal)`` of step ``j``) with

    * ``FUTURE``: ``j`` uniform in ``i .. L-1`` (``i`` included);
    * ``FINAL``: ``j = L - 1``;
    * ``EPISODE``: ``j`` uniform over the episode's live steps;
    * ``RANDOM``: any live transition of the buffer.

    Examples:
        >>> HindsightStrategy("future") is HindsightStrategy.FUTURE
        True
        >>> [s.value for s in HindsightStrategy]
        ['future', 'final', 'episode', 'random']
    """

    FUTURE = "future"
    FINAL = "final"
    EPISODE = "episode"
    RANDOM = "random"


_STRATEGY_CODES = {
    HindsightStrategy.FUTURE: goals.FUTURE,
    HindsightStrategy.FINAL: goals.FINAL,
    HindsightStrategy.EPISODE: goals.EPISODE,
}


class HindsightSampler(RefiningSampler):
    """Relabel part of each batch with goals from the same episode.

    The first ``batch_size - n_virtual`` rows stay real, the last ``n_virtual =
    int(batch_size * num_goals / (num_goals + 1))`` get a goal position chosen
    by ``strategy`` (the original HER ratio ``1 - 1 / (k + 1)``). Goals never
    come from another env, another episode or an overwritten row, also when
    an episode wraps its stream's ring, and an episode still being written is
    used up to its last written step. Cost is O(batch).

    The sample's index is a ``[B, 3]`` :class:`~torchrl_ext.sample_index.SampleIndex`
    ``(row, steps, goal_row)`` read by :class:`~torchrl_ext.samplers.nstep.StepWindows`
    (``goal_row`` is ``-1`` for real rows; ``steps`` are n-step window lengths
    when ``base`` is an :class:`~torchrl_ext.samplers.NStepSampler`, else
    ones), which reads the observations at the goal rows, and
    :class:`~torchrl_ext.transforms.HindsightTransform` relabels. With
    ``num_goals=0`` no goal is drawn: the sample is the base's (its index and
    entries, the same draws), read by :class:`RealGoals`, which adds an empty
    ``"her"``.

    Args:
        strategy (HindsightStrategy or str): defaults to ``"future"``.
        num_goals (int): ``k``, virtual goals per real transition. Defaults to 4.

    Keyword Args:
        base (Sampler, optional): picks the transitions (and windows): a
            uniform, prioritized or n-step sampler. Defaults to uniform.

    Examples:
        >>> from torchrl_ext.samplers import HindsightSampler
        >>> sampler = HindsightSampler("final", num_goals=3)
        >>> sampler.n_virtual(8)
        6
    """

    _real_goals: RealGoals | None = None  # the reader of the last num_goals=0 batch

    extends_transitions = True

    def __init__(
        self,
        strategy: HindsightStrategy | str = HindsightStrategy.FUTURE,
        num_goals: int = 4,
        *,
        base: Sampler | None = None,
    ) -> None:
        self.strategy = strategy  # type: ignore[assignment]  # the setter converts a str
        self.num_goals = num_goals
        super().__init__(base if base is not None else NStepSampler(1))

    @property
    def strategy(self) -> HindsightStrategy:
        """How goals are chosen; may be set between samples (a :class:`HindsightStrategy` or its value)."""
        return self._strategy

    @strategy.setter
    def strategy(self, value: HindsightStrategy | str) -> None:
        try:
            self._strategy = HindsightStrategy(value)
        except ValueError:
            raise ValueError(
                f"HindsightSampler: strategy={value!r}, expected one of "
                f"{[s.value for s in HindsightStrategy]}."
            ) from None

    @property
    def num_goals(self) -> int:
        """``k``, virtual goals per real transition; may be set between samples."""
        return self._num_goals

    @num_goals.setter
    def num_goals(self, value: int) -> None:
        self._num_goals = check_count("HindsightSampler", "num_goals", value, minimum=0)

    def n_virtual(self, batch_size: int) -> int:
        """How many rows of a batch are relabelled."""
        return int(batch_size * self.num_goals / (self.num_goals + 1))

    def sample(self, storage: TransitionStorage, batch_size: int) -> tuple[SampleIndex, dict]:
        index, info = self.base.sample(storage, batch_size)
        if not self.num_goals:  # every row real: the base's batch as it is, no goal columns
            inner, real = reader_of(index), self._real_goals
            if real is None or real.inner is not inner:  # (a reader is immutable: kept while it serves)
                real = self._real_goals = RealGoals(inner)
            return SampleIndex.wrap(index, real), info
        columns = np.empty((batch_size, 3), dtype=np.int64)  # [B, 3] (row, steps, goal row)
        windows = index.reader if isinstance(index, SampleIndex) else None
        if isinstance(windows, StepWindows):
            columns[:, :2] = index.numpy()[:, :2]
            one_step = windows.one_step
        else:
            columns[:, 0] = plain_rows(index, self).numpy()
            columns[:, 1] = 1
            one_step = True
        columns[:, 2] = -1  # real rows keep their goal
        n_virtual = self.n_virtual(batch_size)
        if n_virtual:
            virtual = columns[batch_size - n_virtual :]
            virtual[:, 2] = self._goal_rows(storage, np.ascontiguousarray(virtual[:, 0]))
        return SampleIndex.wrap(torch.from_numpy(columns), StepWindows(one_step)), info

    def _goal_rows(self, storage: TransitionStorage, rows: np.ndarray) -> np.ndarray:
        """Row holding ``("next", achieved_goal)`` of the goal step, per row."""
        index = storage_index(storage)
        generator = self._rng
        if self.strategy is HindsightStrategy.RANDOM:
            return storage.next_rows(draw_rows(storage, rows.size, generator))
        u = np.zeros(rows.size)  # FINAL draws nothing
        if self.strategy is not HindsightStrategy.FINAL:
            u = torch.rand(rows.size, generator=generator, dtype=torch.float64).numpy()
        return index.goal_rows(rows, u, _STRATEGY_CODES[self.strategy])

    def settings(self) -> dict[str, Any]:
        return {"strategy": HindsightStrategy(self.strategy).value, "num_goals": self.num_goals}

    def load_settings(self, settings: dict[str, Any]) -> None:
        self.strategy = HindsightStrategy(settings["strategy"])
        self.num_goals = int(settings["num_goals"])

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(strategy={self.strategy.value!r}, "
            f"num_goals={self.num_goals}, base={self.base!r})"
        )


@dataclass(frozen=True)
class RealGoals:
    """The reader of a :class:`HindsightSampler` batch without goals (``num_goals=0``): ``inner``'s batch.

    Reads the base sampler's index as ``inner`` (its reader) does, and adds an
    empty ``"her"`` TensorDict: no row is relabelled, and
    :class:`~torchrl_ext.transforms.HindsightTransform` passes the batch on.

    Args:
        inner (WindowReader): the base sampler's reader.

    Examples:
        >>> import torch
        >>> from torchrl_ext.sample_index import RowReads
        >>> RealGoals(RowReads()).spans(torch.tensor([5, 9]))
        (tensor([5, 9]), tensor([1, 1]))
    """

    inner: WindowReader

    def read(
        self, storage: TransitionStorage, index: torch.Tensor, *, observations: bool = True
    ) -> TensorDictBase:
        out = self.inner.read(storage, index, observations=observations)
        set_unchecked(out, "her", tensordict_of({}, out.batch_size, out.device))
        return out

    def spans(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inner.spans(index)

    def rows_read(self, storage: Any, index: torch.Tensor) -> torch.Tensor:
        return self.inner.rows_read(storage, index)
