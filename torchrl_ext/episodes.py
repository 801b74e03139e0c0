"""Deprecated module: the episode index moved to :mod:`torchrl_ext.core.episodes`."""
from torchrl_ext._compat import moved_names

__getattr__ = moved_names(
    "torchrl_ext.episodes",
    {
        "EpisodeIndex": "torchrl_ext.core.episodes.EpisodeIndex",
        "WritePlan": "torchrl_ext.core.episodes.WritePlan",
    },
)
