"""Which stored episode makes room for a new one."""
from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Callable

import torch

if TYPE_CHECKING:
    from torchrl_ext.facades.episodic.dataset import EpisodeDataset

__all__ = ["Evictor", "FIFOEvictor", "RandomEvictor", "ShortestEpisodeEvictor"]


class Evictor:
    """Chooses the episode to evict when a dataset is full.

    Called with the dataset, whose state it may read (``episode_lengths``,
    ``num_timesteps``, ``capacity``, ...); returns the position of the episode
    to evict in ``dataset.episode_lengths`` (0 is the oldest). The dataset
    frees that episode's storage (rows, file) before storing the new one.
    A subclass overrides ``__call__(dataset)``, or :meth:`evict` as the
    original's do (``evict(self, *args, **kwargs)``); an evictor written for
    the original API, blind to the dataset (B17), is called without it.

    Examples:
        >>> import torch
        >>> from torchrl_ext.facades.episodic import RingBufferDataset
        >>> class NewestEvictor(Evictor):
        ...     def __call__(self, dataset):
        ...         return dataset.num_episodes - 1
        >>> dataset = RingBufferDataset(8, evictor=NewestEvictor())
        >>> for n in (3, 4, 5):
        ...     dataset.add_episode({"obs": torch.zeros(n)})
        >>> dataset.episode_lengths  # the 4-step episode made room
        [3, 5]
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Evictor:
        if cls.__call__ is Evictor.__call__ and cls.evict is Evictor.evict:  # as an abstract class is
            raise TypeError(
                f"Can't instantiate {cls.__name__}: an Evictor overrides __call__(dataset), "
                "or evict() as in the original."
            )
        return super().__new__(cls)

    def __call__(self, dataset: EpisodeDataset) -> int:
        """Position of the episode to evict, oldest first: :meth:`evict`'s, unless overridden."""
        return eviction_choice(self.evict, type(self).__name__)(dataset)

    def evict(self, *args: Any, **kwargs: Any) -> int:
        """The original's hook: a subclass that does not override ``__call__`` overrides this.

        Examples:
            >>> import torch
            >>> from torchrl_ext.facades.episodic import RingBufferDataset
            >>> class OldestFirst(Evictor):  # as the original's evictors are written
            ...     def evict(self, *args, **kwargs):
            ...         return 0
            >>> dataset = RingBufferDataset(6, evictor=OldestFirst())
            >>> for n in (3, 3, 2):
            ...     dataset.add_episode({"obs": torch.zeros(n)})
            >>> dataset.episode_lengths  # the first 3-step episode made room
            [3, 2]
        """
        raise NotImplementedError(
            f"{type(self).__name__}: an Evictor overrides __call__(dataset), or evict() as in the original."
        )


class FIFOEvictor(Evictor):
    """Evicts the oldest episode.

    Examples:
        >>> from torchrl_ext.facades.episodic import RingBufferDataset
        >>> FIFOEvictor()(RingBufferDataset(10))
        0
    """

    def __call__(self, dataset: EpisodeDataset) -> int:
        return 0


class RandomEvictor(Evictor):
    """Evicts a uniformly random episode (reservoir-like: old data survives longer).

    Keyword Args:
        seed (int, optional): seeds the evictor's own generator.

    Examples:
        >>> import torch
        >>> from torchrl_ext.facades.episodic import RingBufferDataset
        >>> dataset = RingBufferDataset(10, evictor=RandomEvictor(seed=0))
        >>> for _ in range(3):
        ...     dataset.add_episode({"obs": torch.zeros(4, 2)})
        >>> dataset.num_episodes  # 12 steps do not fit in 10: one episode went
        2
    """

    def __init__(self, *, seed: int | None = None) -> None:
        self.generator = torch.Generator()
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(seed)

    def __call__(self, dataset: EpisodeDataset) -> int:
        return int(torch.randint(dataset.num_episodes, (), generator=self.generator))


class ShortestEpisodeEvictor(Evictor):
    """Evicts the shortest episode (the oldest among equals).

    Keeps long episodes, e.g. so that long sequences stay available.

    Examples:
        >>> import torch
        >>> from torchrl_ext.facades.episodic import RingBufferDataset
        >>> dataset = RingBufferDataset(10, evictor=ShortestEpisodeEvictor())
        >>> for n in (6, 2, 3):
        ...     dataset.add_episode({"obs": torch.zeros(n, 2)})
        >>> dataset.episode_lengths
        [6, 3]
    """

    def __call__(self, dataset: EpisodeDataset) -> int:
        lengths = dataset.episode_lengths
        return lengths.index(min(lengths))


def eviction_choice(evictor: Any, owner: str) -> Callable[[EpisodeDataset], int]:
    """``evictor`` as a callable of the dataset (one taking no argument is called without it).

    Raises:
        TypeError: ``evictor`` is not callable, or takes neither the dataset nor no argument.

    Examples:
        >>> from torchrl_ext.facades.episodic import RingBufferDataset
        >>> eviction_choice(lambda: 0, "RingBufferDataset")(RingBufferDataset(10))
        0
    """
    if not callable(evictor):
        raise TypeError(
            f"{owner}: evictor is {type(evictor).__name__}, expected an Evictor (a callable "
            "taking the dataset and returning an episode position)."
        )
    try:
        signature = inspect.signature(evictor)
    except (TypeError, ValueError):  # no signature to read (a builtin): called as documented
        return evictor
    for args, choice in (((None,), evictor), ((), _WithoutDataset(evictor))):
        try:
            signature.bind(*args)
        except TypeError:
            continue
        return choice
    raise TypeError(
        f"{owner}: evictor {type(evictor).__name__} takes {len(signature.parameters)} arguments, "
        "expected a callable taking the dataset (or none, as in the original)."
    )


class _WithoutDataset:
    """An evictor of the original API (called without the dataset), called with it."""

    def __init__(self, evictor: Callable[[], int]) -> None:
        self.evictor = evictor

    def __call__(self, dataset: EpisodeDataset) -> int:
        return self.evictor()
