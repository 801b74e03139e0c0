"""Helpers shared by the episodic tests (``test_episodic*.py``).

Episodes carry their identity in the data: field ``"x"`` is ``(episode id, step)``.
"""
from __future__ import annotations

import torch


def episode(eid: int, length: int) -> dict[str, torch.Tensor]:
    steps = torch.arange(length, dtype=torch.float32)
    return {"x": torch.stack([torch.full_like(steps, eid), steps], -1)}


def within_one_episode(batch) -> bool:
    """Every sequence is consecutive steps of a single episode."""
    x = batch["x"]
    same = (x[..., 0] == x[..., :1, 0]).all()
    consecutive = (x[..., 1:, 1] - x[..., :-1, 1] == 1).all()
    return bool(same and consecutive)


def draw(dataset, batch_size, sequence_length, batches=1, **kwargs):
    loader = dataset.get_loader(batch_size, sequence_length, seed=0, **kwargs)
    it = iter(loader)
    return torch.cat([next(it) for _ in range(batches)])
