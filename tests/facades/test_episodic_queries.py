"""EpisodeDataset's public queries and the errors of its checkpoints and loaders."""
from __future__ import annotations

import re

import pytest
import torch
from torch.utils.data import DataLoader

from torchrl_ext import EpisodeReplayBuffer, RingBufferDataset
from torchrl_ext.facades.episodic import FIFOEvictor
from torchrl_ext.facades.episodic.evictors import RandomEvictor


def episode(eid: int, length: int) -> dict[str, torch.Tensor]:
    return {"x": torch.stack([torch.full((length,), float(eid)), torch.arange(float(length))], -1)}


def test_episode_returns_each_stored_episode_by_position():
    dataset = RingBufferDataset(12)
    for eid, n in enumerate([5, 4, 6]):  # the third evicts the first
        dataset.add_episode(episode(eid, n))
    assert dataset.episode(0)["x"].tolist() == episode(1, 4)["x"].tolist()
    assert dataset.episode(-1)["x"].tolist() == episode(2, 6)["x"].tolist()
    with pytest.raises(IndexError, match=re.escape("RingBufferDataset.episode: position 2, but 2 episodes are stored.")):
        dataset.episode(2)


def test_pool_exists_once_fields_are_known():
    dataset = RingBufferDataset(12)
    assert dataset.pool is None
    dataset.add_episode(episode(0, 3))
    assert dataset.pool is not None and dataset.pool.capacity == 12


def test_evictor_state_needs_an_evictor_with_a_generator():
    source = RingBufferDataset(12, evictor=RandomEvictor(seed=0))
    source.add_episode(episode(0, 3))
    with pytest.raises(ValueError, match=re.escape(
            "load_state_dict: the checkpoint holds an evictor's generator, but FIFOEvictor has "
            "none; restore into a dataset with the same kind of evictor.")):
        RingBufferDataset(12, evictor=FIFOEvictor()).load_state_dict(source.state_dict())


class PlainLoaderDataset(RingBufferDataset):
    """A dataset whose loader is not a SequenceStream loader."""

    def get_loader(self, *args, **kwargs):
        return DataLoader([torch.zeros(1)])


def test_buffer_needs_a_sequence_stream_loader():
    with pytest.raises(TypeError, match=re.escape(
            "EpisodeReplayBuffer: PlainLoaderDataset.get_loader serves list, expected a SequenceStream.")):
        EpisodeReplayBuffer(PlainLoaderDataset(12), batch_size=2)


@pytest.mark.parametrize(("sequence_length", "pad", "chunk_size"), [(3, False, None), (6, True, 2), (None, False, 1)])
def test_sample_without_workers_serves_the_loader_s_batches(sequence_length, pad, chunk_size):
    # sample() in this process skips the DataLoader's per-batch machinery: same batches
    buffers = [EpisodeReplayBuffer(RingBufferDataset(60), batch_size=4, sequence_length=sequence_length,
                                   chunk_size=chunk_size, pad=pad, seed=7) for _ in range(2)]
    for rb in buffers:
        for eid, n in enumerate([5, 2, 8, 4]):
            rb.dataset.add_episode(episode(eid, n))
    sampled, loaded = buffers[0], iter(buffers[1].loader)
    for _ in range(5):
        a, b = sampled.sample(), next(loaded)
        assert a.batch_size == b.batch_size and (a == b).all()
