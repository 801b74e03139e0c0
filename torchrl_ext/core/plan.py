"""A pending write: where its steps go, and the index update published after them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from torchrl_ext.core.writes import IndexWrites

__all__ = ["WritePlan"]


@dataclass(slots=True)
class WritePlan:
    """Where the ``[K, T]`` steps of one write go, and what publishing them changes.

    ``rows``, ``next_rows`` and ``start`` tell the storage where to write;
    :meth:`commit` then publishes the write in the index (episode tables,
    the rows' episodes and transition flags, the stream cursors), all derived
    from the fields below.

    Attributes:
        index: the index the plan updates.
        streams: ``[K]`` the streams written.
        done: ``[K, T]`` bool, the step ends its episode.
        traj: ``[K, T]`` trajectory ids (an empty ``[0, 0]`` array: none).
        tau: ``[K, T]`` logical time of each step's row in its stream.
        start: ``[K, T]`` bool, the step opens an episode (its observation is
            written to ``rows``; otherwise that row already holds it).
        episode: ``[K, T]`` per-stream episode number of each step.
        rows: ``[K, T]`` physical row of each step (its observation, action and
            next-only entries).
        next_rows: ``[K, T]`` physical row of each step's next observation.
        opened: the number of episodes the write opens (steps set in ``start``).

    Examples:
        >>> import numpy as np
        >>> from torchrl_ext.core import EpisodeIndex
        >>> index = EpisodeIndex(num_streams=1, stream_capacity=8)
        >>> plan = index.plan(np.array([0]), np.array([[False, True]]), None)
        >>> plan.rows.tolist(), plan.next_rows.tolist()  # 2 steps then the final observation
        ([[0, 1]], [[1, 2]])
        >>> plan.commit()
        >>> index.num_transitions()
        2
    """

    index: IndexWrites
    streams: np.ndarray
    done: np.ndarray
    traj: np.ndarray
    tau: np.ndarray
    start: np.ndarray
    episode: np.ndarray
    rows: np.ndarray
    next_rows: np.ndarray
    opened: int

    def commit(self) -> None:
        """Publish the write in the index (after the rows are stored)."""
        self.index.commit(self)
