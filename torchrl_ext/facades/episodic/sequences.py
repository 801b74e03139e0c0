"""Sequences of an episode dataset as a loader serves them: the stream its workers draw, padding and collation."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

import torch
from tensordict import TensorDictBase

from torchrl_ext.loader import SampleStream
from torchrl_ext.storages.pool import EpisodePool

if TYPE_CHECKING:
    from torchrl_ext.facades.episodic.dataset import EpisodeDataset

__all__ = ["MASK_KEY", "SequenceStream", "concat_chunks", "split_episodes"]

MASK_KEY = "mask"


def split_episodes(batch: TensorDictBase, mask_key: str = MASK_KEY) -> list[TensorDictBase]:
    """The episodes of a padded whole-episode batch, without padding.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> batch = TensorDict({"obs": torch.arange(6.0).view(2, 3),
        ...                     MASK_KEY: torch.tensor([[True, True, False], [True, True, True]])}, [2, 3])
        >>> [e["obs"].tolist() for e in split_episodes(batch)]
        [[0.0, 1.0], [3.0, 4.0, 5.0]]
    """
    lengths = batch.get(mask_key).sum(-1).tolist()
    episodes = batch.exclude(mask_key)
    return [episodes[i, :n] for i, n in enumerate(lengths)]


def concat_chunks(chunks: list[TensorDictBase], mask_key: str = MASK_KEY) -> TensorDictBase:
    """Collate chunks along dim 0, padding whole-episode chunks to one width.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> def chunk(width):  # one padded whole-episode chunk of ``width`` steps
        ...     mask = torch.ones(1, width, dtype=torch.bool)
        ...     return TensorDict({"obs": torch.ones(1, width), MASK_KEY: mask}, [1, width])
        >>> out = concat_chunks([chunk(2), chunk(3)])
        >>> out.shape, out[MASK_KEY].tolist()
        (torch.Size([2, 3]), [[True, True, False], [True, True, True]])
    """
    if len(chunks) == 1:  # one chunk a batch (chunk_size = batch_size): the batch itself
        return chunks[0]
    width = max(chunk.shape[1] for chunk in chunks)
    if any(chunk.shape[1] != width for chunk in chunks):
        chunks = [_pad(chunk, width, mask_key) for chunk in chunks]
    return torch.cat(chunks, 0)


def _pad(chunk: TensorDictBase, width: int, mask_key: str) -> TensorDictBase:
    extra = width - chunk.shape[1]
    if not extra:
        return chunk
    tail = chunk[:, -1:].expand(chunk.shape[0], extra).clone()
    tail.set(mask_key, torch.zeros(chunk.shape[0], extra, dtype=torch.bool))
    return torch.cat([chunk, tail], 1)


class SequenceStream(SampleStream):
    """The endless stream of chunks a dataset's loader iterates.

    Holds the dataset's :class:`EpisodePool` (shared memory) and the sampling
    settings; a worker process gets its own generator from the DataLoader's
    per-worker seed, so workers draw different sequences, all from the whole
    dataset.

    Examples:
        >>> import torch
        >>> from torchrl_ext.facades.episodic import RingBufferDataset
        >>> dataset = RingBufferDataset(capacity=100)
        >>> dataset.add_episode({"obs": torch.arange(10.0)[:, None], "reward": torch.zeros(10)})
        >>> stream = dataset.get_loader(4, 5, num_workers=0, seed=0).dataset
        >>> isinstance(stream, SequenceStream), next(stream.batches(torch.Generator())).shape
        (True, torch.Size([4, 5]))
    """

    def __init__(
        self,
        dataset: EpisodeDataset,
        chunk_size: int,
        sequence_length: int | None,
        *,
        pad: bool = False,
        seed: int | None = None,
        mask_key: str = MASK_KEY,
    ) -> None:
        super().__init__()
        self.dataset = dataset
        self.chunk_size = chunk_size
        self.sequence_length = None if sequence_length is None else int(sequence_length)
        self.pad = pad
        self.seed = seed
        self.mask_key = mask_key
        self.max_rounds = dataset._max_sampling_rounds()
        # the in-process generator (checkpointed by EpisodeReplayBuffer)
        self.generator: torch.Generator | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Workers only need the pool: it must exist (an episode was added) by then.
        pool = self.dataset._pool
        if pool is None:
            raise RuntimeError("Cannot sample from empty dataset: add an episode first.")
        state = dict(self.__dict__)
        state["dataset"] = None
        state["pool"] = pool
        return state

    def _pool(self) -> EpisodePool:
        pool = self.__dict__.get("pool") or self.dataset._pool
        if pool is None:
            raise RuntimeError("Cannot sample from empty dataset.")
        return pool

    def in_process_generator(self) -> torch.Generator:
        """The generator of in-process sampling (``num_workers=0``), created once."""
        if self.generator is None:
            seed = self.seed if self.seed is not None else int(torch.randint(2**62, ()))
            self.generator = torch.Generator().manual_seed(seed)
        return self.generator

    def draw(self, generator: torch.Generator | None) -> TensorDictBase:
        """One chunk of ``chunk_size`` sequences drawn from the pool with ``generator``.

        Raises:
            ValueError: padded sequences (whole episodes, or ``pad=True``) of a
                pool that stores a field named ``mask_key``.

        Examples:
            >>> import torch
            >>> from torchrl_ext.facades.episodic import RingBufferDataset
            >>> dataset = RingBufferDataset(capacity=100)
            >>> dataset.add_episode({"obs": torch.arange(10.0)[:, None]})
            >>> stream = dataset.get_loader(4, 5, num_workers=0).dataset
            >>> stream.draw(torch.Generator().manual_seed(0)).shape
            torch.Size([4, 5])
        """
        pool = self._pool()
        if (self.sequence_length is None or self.pad) and self.mask_key in pool.rows.keys():
            raise ValueError(
                f"Cannot sample padded sequences: the stored field {self.mask_key!r} has the "
                "name of the padding mask that whole episodes (sequence_length=None) and "
                "pad=True add; pass mask_key='<another name>' to EpisodeReplayBuffer or "
                "get_loader."
            )
        return pool.sample(
            self.chunk_size,
            self.sequence_length,
            pad=self.pad,
            generator=generator,
            max_rounds=self.max_rounds,
            mask_key=self.mask_key,
        )

    def batches(self, generator: torch.Generator | None) -> Iterator[TensorDictBase]:
        """Endless chunks of ``chunk_size`` sequences drawn from the pool."""
        while True:
            yield self.draw(generator)
