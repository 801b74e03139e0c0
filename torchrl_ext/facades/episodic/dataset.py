"""``EpisodeDataset``: whole episodes, real eviction, sequences for DataLoader workers."""
from __future__ import annotations

import dataclasses
import functools
import operator
from typing import Any, Iterator

import numpy as np
import torch
from tensordict import TensorDictBase
from torch.utils.data import DataLoader, IterableDataset

from torchrl_ext.core.checks import check_count
from torchrl_ext.facades.episodic.evictors import Evictor, FIFOEvictor, eviction_choice
from torchrl_ext.facades.episodic.fields import (
    EpisodeDatasetInfo,
    Fields,
    VerificationMode,
    as_episode,
    verify,
)
from torchrl_ext.facades.episodic.sequences import MASK_KEY, SequenceStream, concat_chunks, split_episodes
from torchrl_ext.loader import RestartingIterator, worker_loader
from torchrl_ext.storages.pool import EpisodePool

__all__ = ["EpisodeDataset", "MASK_KEY"]


class EpisodeDataset(IterableDataset):
    """Episodes of arbitrary step fields, sampled as sequences that stay inside one episode.

    The seed's ``EpisodeDataset`` API over an
    :class:`~torchrl_ext.storages.pool.EpisodePool`. Differences from the
    original maltemosbach/buffers (the ids name the regression tests
    ``test_b1_*`` .. ``test_b19_*`` in ``tests/facades/test_episodic*.py``): eviction frees the evicted episode's
    storage (B1), the evictor is called with the dataset (B17), an episode
    longer than the capacity is a clear ``ValueError`` (B8), every window is
    sampled, the last included (B3), whole episodes of different lengths are
    padded with a ``"mask"`` entry (B7, B11), workers all sample the whole
    dataset (B13), no Manager process is started (B16), pinning is off unless
    asked for (B10), and the verification modes check (B19).

    Sampling is uniform over windows: a transition's probability does not
    depend on how many episodes there are (B18). Whole episodes are uniform
    over episodes.

    Args:
        capacity (int): capacity in steps (the sum of the stored episodes' lengths).
        info (EpisodeDatasetInfo, optional): fields (the storage is allocated at
            once when given) and the verification mode.
        evictor (Evictor, optional): chooses the episode to evict. Defaults to
            :class:`FIFOEvictor`.

    Examples:
        >>> import torch
        >>> from torchrl_ext import RingBufferDataset
        >>> dataset = RingBufferDataset(capacity=12)
        >>> for length in (5, 4, 6):  # the third episode evicts the first
        ...     dataset.add_episode({"obs": torch.arange(float(length))})
        >>> dataset.episode_lengths, dataset.is_full
        ([4, 6], True)
        >>> batch = next(iter(dataset.get_loader(batch_size=3, sequence_length=None, seed=0)))
        >>> batch["obs"].shape[0], batch["mask"].sum(-1).tolist()  # whole episodes, padded
        (3, [6, 4, 4])
    """

    def __init__(
        self,
        capacity: int,
        info: EpisodeDatasetInfo | None = None,
        evictor: Evictor | None = None,
    ) -> None:
        capacity = check_count(type(self).__name__, "capacity", capacity)
        info = EpisodeDatasetInfo() if info is None else info
        if info.num_episodes or info.num_timesteps or info.episode_lengths:
            raise ValueError(
                f"{type(self).__name__}: info describes {info.num_episodes} stored episodes, "
                "but a new dataset is empty; pass only fields and verification_mode."
            )
        evictor = FIFOEvictor() if evictor is None else evictor
        self._choose = eviction_choice(evictor, type(self).__name__)
        self.capacity = capacity
        # a copy: the statistics are this dataset's, even when one info builds several datasets
        self.info = dataclasses.replace(
            info, episode_lengths=[], verification_mode=VerificationMode(info.verification_mode)
        )
        self.evictor = evictor
        self._pool: EpisodePool | None = None
        self._slots: list[int] = []  # pool slot of each stored episode, oldest first
        self._longest = 0
        self._other: _Composition | None = None
        if info.fields is not None:
            self._allocate(info.fields)

    # ------------------------------------------------------ subclass hooks
    def _pool_options(self) -> dict[str, Any]:
        """Keyword arguments of the :class:`EpisodePool` (device, precision)."""
        return {}

    def _preferred_num_workers(self, num_workers: int | None) -> int:
        return 0 if num_workers is None else check_count(type(self).__name__, "num_workers", num_workers, 0)

    def _max_sampling_rounds(self) -> int:
        """Rejection rounds before sampling counts the valid windows exactly."""
        return 16

    def _stored(self, episode: TensorDictBase) -> None:
        """Called after an episode is appended (persistence)."""

    def _evicted(self, position: int) -> None:
        """Called after the episode at ``position`` is evicted (persistence)."""

    # ------------------------------------------------------------ statistics
    @property
    def fields(self) -> Fields | None:
        """The stored fields, ``None`` before the first episode."""
        return self.info.fields

    @property
    def verification_mode(self) -> VerificationMode:
        """Checks run on each added episode."""
        return self.info.verification_mode

    @property
    def num_episodes(self) -> int:
        """Stored episodes."""
        return self.info.num_episodes

    @property
    def num_timesteps(self) -> int:
        """Stored steps."""
        return self.info.num_timesteps

    @property
    def episode_lengths(self) -> list[int]:
        """Lengths of the stored episodes, oldest first."""
        return self.info.episode_lengths

    @property
    def is_empty(self) -> bool:
        """No episode is stored."""
        return self.info.num_episodes == 0

    @property
    def is_full(self) -> bool:
        """An episode was evicted at least once."""
        return self.info.is_full

    @property
    def average_episode_length(self) -> float:
        """Mean stored episode length (0 when empty)."""
        return self.num_timesteps / self.num_episodes if self.num_episodes else 0.0

    @property
    def pool(self) -> EpisodePool | None:
        """The :class:`~torchrl_ext.storages.EpisodePool` holding the episodes.

        ``None`` until the fields are known (the first episode, or ``info.fields``).

        Examples:
            >>> import torch
            >>> from torchrl_ext import RingBufferDataset
            >>> dataset = RingBufferDataset(10, half_precision=True)
            >>> dataset.pool is None
            True
            >>> dataset.add_episode({"obs": torch.zeros(3)})
            >>> dataset.pool.rows["obs"].dtype  # stored in half precision
            torch.float16
        """
        return self._pool

    def episode(self, position: int) -> TensorDictBase:
        """The stored episode at ``position`` (0 = oldest), ``[length]`` steps.

        Raises:
            IndexError: no episode at ``position``.

        Examples:
            >>> import torch
            >>> from torchrl_ext import RingBufferDataset
            >>> dataset = RingBufferDataset(10)
            >>> dataset.add_episode({"obs": torch.arange(3.0)})
            >>> dataset.episode(0)["obs"].tolist()
            [0.0, 1.0, 2.0]
        """
        if not -self.num_episodes <= position < self.num_episodes:
            raise IndexError(
                f"{type(self).__name__}.episode: position {position}, but {self.num_episodes} "
                "episodes are stored."
            )
        pool = self._stored_pool()
        return pool.gather(pool.episode_rows(self._slots[position]).numpy())

    @property
    def longest_episode(self) -> int:
        """Length of the longest stored episode (0 when empty)."""
        return self._longest

    def __len__(self) -> int:
        return self.num_timesteps

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(capacity={self.capacity}, num_episodes={self.num_episodes}, "
            f"num_timesteps={self.num_timesteps})"
        )

    # ----------------------------------------------------------------- writes
    def _allocate(self, fields: Fields) -> EpisodePool:
        self.info.fields = fields
        self._pool = EpisodePool(self.capacity, fields.spec(), **self._pool_options())
        return self._pool

    def _stored_pool(self) -> EpisodePool:
        """The pool, which exists once an episode was added (or fields were given)."""
        if self._pool is None:
            raise RuntimeError(f"{type(self).__name__}: no episode was added yet.")
        return self._pool

    def add_episode(self, episode: Any) -> None:
        """Store an episode, evicting others (chosen by the evictor) to make room.

        Args:
            episode: a dict mapping each field to a list of per-step tensors
                (the seed's format), a dict of stacked ``[length, ...]`` tensors,
                or a ``[length]`` TensorDict.

        Raises:
            ValueError: the episode is longer than the capacity, its fields'
                shapes do not match (see :class:`VerificationMode`), or a
                per-step list changes shape.
            TypeError: a field's dtype does not match, or a per-step list
                changes dtype (never promoted).
            KeyError: fields missing or unknown.
        """
        episode = as_episode(episode)
        if self._other is None:
            self._add(episode)
        else:
            self._other.add(self, episode)

    def _check_fits(self, length: int) -> None:
        if length > self.capacity:
            raise ValueError(
                f"add_episode: an episode of {length} steps does not fit in "
                f"{type(self).__name__}(capacity={self.capacity}); raise the capacity."
            )

    def _add(self, episode: TensorDictBase) -> None:
        length = int(episode.shape[0])
        self._check_fits(length)
        fields = self.info.fields
        if fields is None:  # the first episode fixes the fields and allocates the pool
            fields = Fields.from_episode(episode)
            self._allocate(fields)
        verify(episode, fields, self.info.verification_mode)
        self._stored_pool().check_range(episode, type(self).__name__)  # refused before evicting
        while self.num_timesteps + length > self.capacity:
            chosen = self._choose(self)
            try:  # an int, or an integer numpy scalar or 0-d tensor (np.argmin's), as list.pop takes
                position = operator.index(chosen)
            except TypeError:
                position = -1  # neither: refused below
            if isinstance(chosen, bool) or not 0 <= position < self.num_episodes:
                raise ValueError(
                    f"add_episode: {type(self.evictor).__name__} returned {chosen!r}, "
                    f"expected an episode position in [0, {self.num_episodes})."
                )
            self.evict_episode(position)
            self.info.is_full = True
        self.append_episode(episode, range_checked=True)

    def append_episode(self, episode: TensorDictBase, *, range_checked: bool = False) -> None:
        """Store ``episode`` in free space (the caller made room) and count it.

        ``range_checked``: see :meth:`~torchrl_ext.storages.pool.EpisodePool.append`.
        """
        self._slots.append(self._stored_pool().append(episode, range_checked=range_checked))
        length = int(episode.shape[0])
        self.info.episode_lengths.append(length)
        self.info.num_episodes += 1
        self.info.num_timesteps += length
        self._longest = max(self._longest, length)
        self._stored(episode)

    def evict_episode(self, idx: int) -> None:
        """Evict the episode at position ``idx`` (0 = oldest) and free its storage."""
        self._stored_pool().evict(self._slots.pop(idx))
        length = self.info.episode_lengths.pop(idx)
        self.info.num_episodes -= 1
        self.info.num_timesteps -= length
        if length == self._longest:
            self._longest = max(self.info.episode_lengths, default=0)
        self._evicted(idx)

    # ------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Episodes, statistics and the evictor's generator, copied.

        Examples:
            >>> import torch
            >>> from torchrl_ext import RingBufferDataset
            >>> dataset = RingBufferDataset(10)
            >>> dataset.add_episode({"obs": torch.arange(4.)})
            >>> restored = RingBufferDataset(10)
            >>> restored.load_state_dict(dataset.state_dict())
            >>> restored.episode_lengths
            [4]
        """
        generator = getattr(self.evictor, "generator", None)
        fields = self.info.fields
        return {
            "capacity": self.capacity,
            "info": dataclasses.replace(self.info, episode_lengths=list(self.episode_lengths)),
            # where each field's batches go, as tensors: torch.load's map_location moves
            # them with the data (a GPU run's checkpoint read on a machine without one)
            "devices": None if fields is None else {
                k: torch.empty(0, device=t.device) for k, t in fields.items()},
            "slots": list(self._slots),
            "pool": None if self._pool is None else self._pool.state_dict(),
            "evictor": None if generator is None else generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` into this dataset, which must be empty.

        Each field's batches go to the device its data was loaded onto: a
        state read with ``torch.load(..., map_location="cpu")`` serves them on
        the CPU, even if the steps came from a GPU.

        Raises:
            ValueError: the dataset is not empty or has another capacity.
        """
        if state["capacity"] != self.capacity or not self.is_empty:
            raise ValueError(
                f"load_state_dict: the checkpoint has capacity {state['capacity']}; load it "
                f"into an empty dataset of that capacity (this one: {self.capacity}, "
                f"{self.num_episodes} episodes)."
            )
        info = dataclasses.replace(state["info"], episode_lengths=list(state["info"].episode_lengths))
        devices = state.get("devices")
        if info.fields is not None and devices is not None:
            info = dataclasses.replace(info, fields=Fields(
                {k: t.to(devices[k].device) for k, t in info.fields.items()}))
        if info.fields is not None and self._pool is None:
            self._allocate(info.fields)
        self.info = info
        self._slots = list(state["slots"])
        self._longest = max(info.episode_lengths, default=0)
        if state["pool"] is not None:
            self._stored_pool().load_state_dict(state["pool"])
        if state["evictor"] is not None:  # saved only if the evictor has a generator
            generator = getattr(self.evictor, "generator", None)
            if generator is None:
                raise ValueError(
                    f"load_state_dict: the checkpoint holds an evictor's generator, but "
                    f"{type(self.evictor).__name__} has none; restore into a dataset with "
                    "the same kind of evictor."
                )
            generator.set_state(state["evictor"].cpu())

    # -------------------------------------------------------------- sampling
    def get_loader(
        self,
        batch_size: int,
        sequence_length: int | None = None,
        chunk_size: int | None = None,
        num_workers: int | None = None,
        pin_memory: bool | None = None,
        *,
        pad: bool = False,
        seed: int | None = None,
        multiprocessing_context: str | None = None,
        mask_key: str = MASK_KEY,
    ) -> DataLoader:
        """An endless DataLoader of ``[batch_size, sequence_length]`` TensorDict batches.

        Each worker samples the whole dataset (shared memory), including
        episodes added after it started. A batch is ``batch_size // chunk_size``
        chunks of ``chunk_size`` sequences, concatenated.

        Args:
            batch_size (int): sequences per batch.
            sequence_length (int, optional): steps per sequence; ``None`` for
                whole episodes, padded to the longest of the batch, with a
                ``"mask"`` entry.
            chunk_size (int, optional): sequences per worker item; divides
                ``batch_size``. Defaults to ``batch_size``.
            num_workers (int, optional): worker processes (default 0).
            pin_memory (bool, optional): pin batches; needs CUDA. Default False.

        Keyword Args:
            pad (bool): also serve episodes shorter than ``sequence_length``,
                padded, with a ``"mask"`` entry.
            seed (int, optional): makes the sampled sequence reproducible.
            multiprocessing_context (str, optional): as in :func:`~torchrl_ext.make_loader`
                (default ``"fork"`` where available).
            mask_key (str): the name of the padding mask (default ``"mask"``);
                another one when a stored field has that name.

        Raises:
            ValueError: a size is not positive, ``chunk_size`` does not divide
                ``batch_size``, or ``pin_memory`` without CUDA. When iterated:
                padded sequences of a dataset with a field named ``mask_key``.
            TypeError: ``pad`` is not a bool.
        """
        batch_size = check_count("get_loader", "batch_size", batch_size)
        chunk_size = batch_size if chunk_size is None else check_count("get_loader", "chunk_size", chunk_size)
        if chunk_size < 1 or batch_size % chunk_size:
            raise ValueError(
                f"get_loader: chunk_size={chunk_size} must be >= 1 and divide "
                f"batch_size={batch_size}."
            )
        if sequence_length is not None and check_count("get_loader", "sequence_length", sequence_length, 0) < 1:
            raise ValueError(
                f"get_loader: sequence_length={sequence_length}, expected >= 1 or None "
                "(whole episodes)."
            )
        if not isinstance(pad, (bool, np.bool_)):  # the sampler refuses it too, but only when sequences are drawn
            raise TypeError(f"get_loader: pad={pad!r} ({type(pad).__name__}), expected True or False.")
        return worker_loader(
            SequenceStream(self, chunk_size, sequence_length, pad=pad, seed=seed, mask_key=mask_key),
            batch_size=batch_size // chunk_size,
            collate_fn=functools.partial(concat_chunks, mask_key=mask_key),
            num_workers=self._preferred_num_workers(num_workers),
            pin_memory=bool(pin_memory),
            seed=seed,
            multiprocessing_context=multiprocessing_context,
            owner="get_loader",
        )

    def __iter__(self) -> Iterator[TensorDictBase]:
        """Endless whole episodes, one per item (``[1, length]``)."""
        return iter(SequenceStream(self, 1, None))

    # ----------------------------------------------------------- composition
    @property
    def other_dataset(self) -> EpisodeDataset | None:
        """The dataset this one fronts after :meth:`extend` (``None`` before).

        Examples:
            >>> from torchrl_ext.facades.episodic import RingBufferDataset
            >>> front, large = RingBufferDataset(20), RingBufferDataset(200)
            >>> front.other_dataset is None
            True
            >>> front.extend(large, other_batch_size=2, other_num_workers=0)
            >>> front.other_dataset is large, front.other_dataloader is not None
            (True, True)
        """
        return None if self._other is None else self._other.other

    @property
    def other_dataloader(self) -> DataLoader | None:
        """The loader of whole episodes from :attr:`other_dataset` (``None`` before :meth:`extend`)."""
        return None if self._other is None else self._other.loader

    def extend(
        self,
        other: EpisodeDataset,
        other_batch_size: int = 64,
        other_num_workers: int | None = None,
        fetch_from_other_every: int = 1,
    ) -> None:
        """Front ``other`` (a large dataset) with this one (a small, fast one).

        From now on, :meth:`add_episode` stores each episode in ``other`` and
        here; once this dataset is full, every ``fetch_from_other_every``-th
        episode also pulls ``other_batch_size`` whole episodes from ``other``
        (uniform, any lengths, any dataset kind) into this one, before the new
        episode (which is always kept, unlike the original, B11).

        Raises:
            ValueError: ``other`` is this dataset, a size is not positive, or
                ``other`` holds an episode longer than this dataset's capacity.
        """
        if other is self:
            raise ValueError("extend: a dataset cannot extend itself.")
        if int(other_batch_size) < 1 or int(fetch_from_other_every) < 1:
            raise ValueError(
                f"extend: other_batch_size={other_batch_size} and "
                f"fetch_from_other_every={fetch_from_other_every} must be >= 1."
            )
        if other.longest_episode > self.capacity:  # every episode fetched from other must fit here
            raise ValueError(
                f"extend: other holds an episode of {other.longest_episode} steps, more than "
                f"this {type(self).__name__}'s capacity={self.capacity}; raise the capacity."
            )
        loader = other.get_loader(
            other_batch_size, None, num_workers=other_num_workers, mask_key=_EXTEND_MASK_KEY
        )
        self._other = _Composition(other, loader, int(fetch_from_other_every))


class _Composition:
    """The large dataset behind a small one, and when to fetch from it."""

    def __init__(self, other: EpisodeDataset, loader: DataLoader, every: int) -> None:
        self.other = other
        self.loader = loader
        self.every = every
        self.count = 0
        self._iterator = RestartingIterator(loader.__iter__, "EpisodeDataset.extend")

    def add(self, front: EpisodeDataset, episode: TensorDictBase) -> None:
        # refused before other stores it: other's episodes are fetched into the front
        front._check_fits(int(episode.shape[0]))
        self.other.add_episode(episode)
        self.count += 1
        if front.is_full and self.count >= self.every:
            self.count = 0
            for fetched in split_episodes(next(self._iterator), _EXTEND_MASK_KEY):
                front._add(fetched)
        front._add(episode)


#: the padding mask of the whole episodes ``extend`` fetches (not "mask": a field may have that name)
_EXTEND_MASK_KEY = "_extend_mask"
