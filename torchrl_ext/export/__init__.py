"""Offline export: the episodes a buffer holds, to d3rlpy, Minari or our own format.

Every exporter writes :func:`episodes_of`: complete and in-progress episodes
(in-progress ones marked as not finished), never more than the buffer holds.
d3rlpy and Minari are optional extras, imported on first use.
"""
from torchrl_ext.export.d3rlpy import to_d3rlpy
from torchrl_ext.export.episodes import HeldEpisode, episodes_of
from torchrl_ext.export.minari import to_minari
from torchrl_ext.export.native import load_buffer, load_episodes, save_episodes

__all__ = [
    "HeldEpisode",
    "episodes_of",
    "load_buffer",
    "load_episodes",
    "save_episodes",
    "to_d3rlpy",
    "to_minari",
]
