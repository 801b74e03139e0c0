"""Samplers that refine another sampler's draws (windows, goals)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import torch
from torchrl.data.replay_buffers.samplers import Sampler

from torchrl_ext.sample_index import RowReads, SampleIndex

__all__ = ["RefiningSampler", "drawing_sampler", "plain_rows", "sampler_of_kind"]


def plain_rows(index: Any, sampler: Sampler) -> torch.Tensor:
    """The ``[B]`` rows of a base sampler's index, for a sampler that builds windows on them.

    Raises:
        TypeError: the base already serves windows that ``sampler`` cannot extend
            (e.g. frame stacks under n-step windows: wrap the other way round).

    Examples:
        >>> import torch
        >>> from torchrl_ext.sample_index import RowReads, SampleIndex
        >>> from torchrl_ext.samplers import UniformTransitionSampler
        >>> plain_rows(SampleIndex.wrap(torch.tensor([4, 7]), RowReads()), UniformTransitionSampler())
        tensor([4, 7])
    """
    if isinstance(index, SampleIndex):
        if not isinstance(index.reader, RowReads):
            raise TypeError(
                f"{type(sampler).__name__}: its base sampler serves windows read by "
                f"{index.reader!r}, which {type(sampler).__name__} cannot extend; put that "
                f"sampler outermost, e.g. FrameStackSampler(4, base={type(sampler).__name__}(...))."
            )
        return index.as_subclass(torch.Tensor)
    return index


def drawing_sampler(sampler: Sampler) -> Sampler:
    """The sampler that draws the transitions under a chain of refining samplers.

    ``sampler`` itself if it refines none.

    Examples:
        >>> from torchrl_ext.samplers import FrameStackSampler, NStepSampler
        >>> type(drawing_sampler(FrameStackSampler(4, base=NStepSampler(3)))).__name__
        'UniformTransitionSampler'
    """
    while isinstance(sampler, RefiningSampler):
        sampler = sampler.base
    return sampler


def sampler_of_kind(sampler: Sampler, kind: type) -> Any:
    """The first sampler of type ``kind`` in ``sampler``'s chain (itself, then its bases); ``None`` if none.

    Examples:
        >>> from torchrl_ext.samplers import FrameStackSampler, HindsightSampler, NStepSampler
        >>> chain = FrameStackSampler(4, base=NStepSampler(3))
        >>> type(sampler_of_kind(chain, NStepSampler)).__name__, sampler_of_kind(chain, HindsightSampler)
        ('NStepSampler', None)
    """
    while not isinstance(sampler, kind):
        if not isinstance(sampler, RefiningSampler):
            return None
        sampler = sampler.base
    return sampler


class RefiningSampler(Sampler):
    """Base of samplers that add to the transitions ``base`` draws.

    Everything about choosing transitions belongs to ``base``: the buffer's
    generator, priorities, write notifications and checkpoints go to it. The
    subclass only extends the index (a ``[B, k]``
    :class:`~torchrl_ext.sample_index.SampleIndex` whose first column is the
    rows ``base`` drew, read by the subclass's
    :class:`~torchrl_ext.sample_index.WindowReader`). NStepSampler,
    HindsightSampler, FrameStackSampler and BootstrapMaskSampler are refining
    samplers; the buffer finds the priorities of ``base`` through them.

    A subclass's own settings (``n``, ``n_frames``, ``strategy``..., which may
    change per call) are its :meth:`settings`: checkpoints (``state_dict``
    and ``dumps``, beside its base's) restore the current values, so the next
    sample after a reload is the one the saved buffer would have drawn.

    Args:
        base (Sampler): the sampler whose draws are refined.

    Examples:
        >>> from torchrl_ext.samplers import NStepSampler, PrioritizedTransitionSampler
        >>> sampler = NStepSampler(3, base=PrioritizedTransitionSampler())
        >>> isinstance(sampler, RefiningSampler), type(sampler.base).__name__
        (True, 'PrioritizedTransitionSampler')
    """

    def __init__(self, base: Sampler) -> None:
        if not isinstance(base, Sampler):
            raise TypeError(
                f"{type(self).__name__}: base is {type(base).__name__}, expected a TorchRL Sampler "
                "(e.g. UniformTransitionSampler(), PrioritizedTransitionSampler())."
            )
        if self.extends_transitions and getattr(drawing_sampler(base), "draws_sequences", False):
            raise TypeError(
                f"{type(self).__name__}: base draws sequences ({type(drawing_sampler(base)).__name__}), "
                f"not the [B] transitions {type(self).__name__} starts its windows or goals from; "
                "a sequence already holds each step's next steps. Sample sequences with "
                "SequenceSampler alone (frame stacks and masks may wrap it)."
            )
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
        """Give ``base`` the rows of a ``[B, k]`` window index (row first)."""
        if isinstance(index, tuple):
            index = index[0]
        elif isinstance(index, torch.Tensor) and index.ndim == 2:
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

    # ------------------------------------------------------------ checkpoints
    settings_file: ClassVar[str | None] = None  # defaults to "<ClassName>.json"
    # windows or goals start at each drawn transition: a base drawing sequences is refused
    extends_transitions: ClassVar[bool] = False

    def settings(self) -> dict[str, Any]:
        """This sampler's own settings (not its base's), JSON-ready."""
        return {}

    def load_settings(self, settings: dict[str, Any]) -> None:
        """Restore :meth:`settings`."""

    def _settings_path(self, path: str | Path) -> Path:
        return Path(path) / (self.settings_file or f"{type(self).__name__}.json")

    def state_dict(self) -> dict[str, Any]:
        return {**self.settings(), "base": self.base.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.load_settings(state_dict)
        self.base.load_state_dict(state_dict["base"])

    def dumps(self, path: str | Path) -> None:
        """The base's checkpoint, and this sampler's :meth:`settings` beside it."""
        self.base.dumps(path)
        self._settings_path(path).write_text(json.dumps(self.settings()))

    def loads(self, path: str | Path) -> None:
        self.base.loads(path)
        saved = self._settings_path(path)
        if saved.exists():  # absent from checkpoints written before settings were saved
            self.load_settings(json.loads(saved.read_text()))
