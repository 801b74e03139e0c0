"""Deprecated module: ``EpisodeStorage`` is :class:`~torchrl_ext.storages.TransitionStorage`."""
from torchrl_ext._compat import moved_names

__getattr__ = moved_names(
    "torchrl_ext.storages.episode",
    {"EpisodeStorage": "torchrl_ext.storages.transition.TransitionStorage"},
)
