"""Writers: validate incoming data, split it into streams, place rows."""
from torchrl_ext._compat import moved_names
from torchrl_ext.writers.transition import DEFAULT_DONE_KEYS, TransitionWriter

__all__ = ["TransitionWriter", "DEFAULT_DONE_KEYS"]

__getattr__ = moved_names(
    "torchrl_ext.writers", {"EpisodeWriter": "torchrl_ext.writers.transition.TransitionWriter"}
)
