"""Storages: where rows live. See :class:`EpisodeStorage` and :class:`EpisodePool`."""
from torchrl_ext.storages.episode import EpisodeStorage
from torchrl_ext.storages.pool import EpisodePool

__all__ = ["EpisodePool", "EpisodeStorage"]
