"""Writers: validate incoming data, split it into streams, place rows."""
from torchrl_ext.writers.episode import DEFAULT_DONE_KEYS, EpisodeWriter

__all__ = ["EpisodeWriter", "DEFAULT_DONE_KEYS"]
