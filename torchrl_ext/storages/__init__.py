"""Storages: where rows live. See :class:`EpisodeStorage`."""
from torchrl_ext.storages.episode import EpisodeStorage

__all__ = ["EpisodeStorage"]
