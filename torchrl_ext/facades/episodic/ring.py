"""``RingBufferDataset``: episodes in memory, on a device."""
from __future__ import annotations

from typing import Any

import torch

from torchrl_ext.facades.episodic.dataset import EpisodeDataset
from torchrl_ext.facades.episodic.evictors import Evictor
from torchrl_ext.facades.episodic.fields import EpisodeDatasetInfo

__all__ = ["RingBufferDataset"]


class RingBufferDataset(EpisodeDataset):
    """Episodes in preallocated tensors, in memory, on ``device``.

    The seed's ``RingBufferDataset``: ``capacity`` steps in one tensor per
    field. Evicting any episode (not only the oldest, B17) frees its steps
    for the next episodes (B1). On CPU the tensors are in shared memory, so
    ``get_loader(num_workers=N)`` workers sample the whole dataset; on another
    device sampling stays in the main process.

    Args:
        capacity (int): capacity in steps.
        info (EpisodeDatasetInfo, optional): fields and verification mode.
        evictor (Evictor, optional): defaults to FIFO.
        device (torch.device or str): where the steps are stored and sampled.
        half_precision (bool): store float32 fields as float16 (half the
            memory); samples return them as float32 (B9). An episode holding
            a finite value beyond float16's +-65504 is refused (ValueError),
            never stored as inf.

    Examples:
        >>> import torch
        >>> dataset = RingBufferDataset(100)
        >>> dataset.add_episode({"obs": [torch.full((3,), float(t)) for t in range(10)]})
        >>> batch = next(iter(dataset.get_loader(batch_size=4, sequence_length=5, seed=0)))
        >>> batch["obs"].shape
        torch.Size([4, 5, 3])
        >>> bool((batch["obs"][:, 1:, 0] - batch["obs"][:, :-1, 0] == 1).all())  # consecutive
        True
    """

    def __init__(
        self,
        capacity: int,
        info: EpisodeDatasetInfo | None = None,
        evictor: Evictor | None = None,
        device: torch.device | str = torch.device("cpu"),
        half_precision: bool = False,
    ) -> None:
        self.device = torch.device(device)
        self.half_precision = bool(half_precision)
        super().__init__(capacity, info, evictor)

    def _pool_options(self) -> dict[str, Any]:
        return {"device": self.device, "half_precision": self.half_precision}

    def _preferred_num_workers(self, num_workers: int | None) -> int:
        workers = super()._preferred_num_workers(num_workers)
        if workers and self.device.type != "cpu":
            raise ValueError(
                f"RingBufferDataset on {self.device} samples in the main process: "
                f"num_workers={workers}, expected 0 (or store the dataset on CPU)."
            )
        return workers
