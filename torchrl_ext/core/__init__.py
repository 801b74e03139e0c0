"""The foundation every component builds on: the episode index, row schema, windows.

Nothing here imports from the rest of the package: storages, writers,
samplers, transforms and facades import from :mod:`torchrl_ext.core`, never
the other way round.
"""
from torchrl_ext.core.draws import uniform_below
from torchrl_ext.core.episodes import EpisodeIndex
from torchrl_ext.core.plan import WritePlan
from torchrl_ext.core.schema import EntryKeyError, RowSchema, as_key, key_str
from torchrl_ext.core.streams import StreamOwnership
from torchrl_ext.core.views import NumpyViews
from torchrl_ext.core.windows import RejectionRounds, WindowSource, draw_windows, valid_window
from torchrl_ext.core.writes import IndexWrites

__all__ = [
    "EntryKeyError",
    "EpisodeIndex",
    "IndexWrites",
    "NumpyViews",
    "RejectionRounds",
    "RowSchema",
    "StreamOwnership",
    "WindowSource",
    "WritePlan",
    "as_key",
    "draw_windows",
    "key_str",
    "uniform_below",
    "valid_window",
]
