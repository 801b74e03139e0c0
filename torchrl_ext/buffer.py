"""Assemble the components into a plain TorchRL replay buffer."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch
from tensordict.utils import NestedKey
from torchrl.data import TensorDictReplayBuffer
from torchrl.data.replay_buffers.samplers import Sampler
from torchrl.envs.transforms import Transform

from torchrl_ext.samplers.uniform import UniformTransitionSampler
from torchrl_ext.storages.episode import Backend, EpisodeStorage
from torchrl_ext.writers.episode import DEFAULT_DONE_KEYS, EpisodeWriter

__all__ = ["make_replay_buffer"]


def make_replay_buffer(
    capacity: int,
    *,
    batch_size: int | None = None,
    backend: Backend = "tensor",
    scratch_dir: str | Path | None = None,
    num_streams: int | None = None,
    sampler: Sampler | None = None,
    transform: Transform | None = None,
    done_keys: Sequence[NestedKey] = DEFAULT_DONE_KEYS,
    seed: int | None = None,
) -> TensorDictReplayBuffer:
    """Build a ``TensorDictReplayBuffer`` over an episode-aware storage.

    Equivalent to::

        TensorDictReplayBuffer(
            storage=EpisodeStorage(capacity, backend=backend, scratch_dir=scratch_dir),
            writer=EpisodeWriter(num_streams=num_streams, done_keys=done_keys),
            sampler=sampler or UniformTransitionSampler(),
            transform=transform, batch_size=batch_size, generator=generator)

    The components stay reachable as ``rb.storage``, ``rb.writer`` and
    ``rb.sampler``; nothing is hidden.

    Args:
        capacity (int): rows of the storage. An episode of ``L`` steps uses
            ``L + 1`` rows of its stream (each observation is stored once).

    Keyword Args:
        batch_size (int, optional): default ``rb.sample()`` size.
        backend (str): ``"tensor"`` (shared memory) or ``"memmap"`` (disk). Defaults to ``"tensor"``.
        scratch_dir (str or Path, optional): memmap directory.
        num_streams (int, optional): number of envs; inferred from the first write.
        sampler (Sampler, optional): defaults to :class:`~torchrl_ext.samplers.UniformTransitionSampler`.
        transform (Transform, optional): sample-time transform.
        done_keys (sequence of NestedKey): entries ending an episode.
        seed (int, optional): seeds the buffer's ``torch.Generator`` (checkpointed
            by ``rb.dumps``). Without it, a generator is seeded from torch's global RNG.

    Returns:
        the assembled :class:`~torchrl.data.TensorDictReplayBuffer`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import make_replay_buffer
        >>> rb = make_replay_buffer(1000, batch_size=8, seed=0)
        >>> step = TensorDict({"observation": torch.randn(8, 4), "action": torch.randn(8, 2),
        ...     "next": {"observation": torch.randn(8, 4), "reward": torch.randn(8, 1),
        ...              "terminated": torch.zeros(8, 1, dtype=torch.bool),
        ...              "truncated": torch.zeros(8, 1, dtype=torch.bool),
        ...              "done": torch.zeros(8, 1, dtype=torch.bool)}}, batch_size=[8])
        >>> _ = rb.extend(step)  # one step of 8 envs
        >>> batch = rb.sample()
        >>> batch.batch_size, batch["next", "observation"].shape
        (torch.Size([8]), torch.Size([8, 4]))
    """
    generator = torch.Generator()
    generator.manual_seed(int(torch.randint(2**62, ()).item()) if seed is None else seed)
    return TensorDictReplayBuffer(
        storage=EpisodeStorage(capacity, backend=backend, scratch_dir=scratch_dir),
        writer=EpisodeWriter(num_streams=num_streams, done_keys=done_keys),
        sampler=sampler if sampler is not None else UniformTransitionSampler(),
        transform=transform,
        batch_size=batch_size,
        generator=generator,
    )
