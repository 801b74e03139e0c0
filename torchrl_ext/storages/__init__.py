"""Storages: where rows live. See :class:`TransitionStorage` and :class:`EpisodePool`."""
from torchrl_ext._compat import moved_names
from torchrl_ext.storages.transition import TransitionStorage
from torchrl_ext.storages.pool import EpisodePool

__all__ = ["EpisodePool", "TransitionStorage"]

__getattr__ = moved_names(
    "torchrl_ext.storages", {"EpisodeStorage": "torchrl_ext.storages.transition.TransitionStorage"}
)
