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
    """Where the ``[K, T]`` steps of one write go, and the index update to publish.

    ``rows``, ``next_rows`` and ``start`` tell the storage where to write; the
    other fields are the index entries :meth:`EpisodeIndex.commit` writes once
    the rows are stored.

    Attributes:
        index: the index the plan updates.
        streams: ``[K]`` the streams written.
        rows: ``[K, T]`` physical row of each step (its observation, action and
            next-only entries).
        next_rows: ``[K, T]`` physical row of each step's next observation.
        start: ``[K, T]`` bool, the step opens an episode (its observation is
            written to ``rows``; otherwise that row already holds it).
        episode: ``[K, T]`` per-stream episode number of each step.
        start_slots: episode-table slots of the episodes opened, and
        start_tau: their first ``tau``.
        length_slots: episode-table slots whose length changes, and
        lengths: their new lengths.
        written: ``[K]`` new write cursor of each stream.
        is_open: ``[K]`` the stream's last episode still runs.
        traj: ``[K]`` trajectory id of each stream's last step, or ``None``.

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
    rows: np.ndarray
    next_rows: np.ndarray
    start: np.ndarray
    episode: np.ndarray
    start_slots: np.ndarray
    start_tau: np.ndarray
    length_slots: np.ndarray
    lengths: np.ndarray
    written: np.ndarray
    is_open: np.ndarray
    traj: np.ndarray | None

    def commit(self) -> None:
        """Publish the write in the index (after the rows are stored)."""
        self.index.commit(self)
