"""Deprecated module: ``EpisodeWriter`` is :class:`~torchrl_ext.writers.TransitionWriter`."""
from torchrl_ext._compat import moved_names

__getattr__ = moved_names(
    "torchrl_ext.writers.episode",
    {
        "EpisodeWriter": "torchrl_ext.writers.transition.TransitionWriter",
        "DEFAULT_DONE_KEYS": "torchrl_ext.writers.transition.DEFAULT_DONE_KEYS",
    },
)
