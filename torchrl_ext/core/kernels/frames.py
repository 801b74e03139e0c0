"""Frame stacks: the rows of each stacked observation's frames.

Rows, streams and episodes are addressed as in :class:`~torchrl_ext.core.EpisodeIndex`:
stream ``s``'s ring of ``C`` slots is rows ``s * C .. s * C + C - 1`` (logical
time ``tau`` at slot ``tau % C``); the episode tables hold ``E`` episodes per
stream (episode ``e`` of stream ``s`` at ``s * E + e % E``).
"""
from __future__ import annotations

import numpy as np

from torchrl_ext.core.kernels import jit
from torchrl_ext.core.kernels.rows import live_row, ring_divmod

__all__ = ["frame_rows"]


@jit
def frame_rows(
    rows: np.ndarray, steps: np.ndarray, F: int, C: int, E: int,
    written: np.ndarray, row_episode: np.ndarray, episode_start: np.ndarray,
    out: np.ndarray, lost: np.ndarray,
) -> int:
    """Frame rows of the observation and next observation of transitions ``rows``; returns how many are lost.

    For the transition at live row ``rows[i]`` (logical time ``tau``, its
    episode's step 0 at ``start``), whose next observation is ``steps[i]``
    steps later: ``out[i, 0, j]`` is the row of the observation at
    ``max(tau - (F - 1) + j, start)``, ``out[i, 1, j]`` the same from
    ``tau + steps[i]`` (frames before the episode's first observation repeat
    it), and ``lost[i]`` tells that the oldest frame of the observation's
    stack is older than the ring still holds (the ring overwrote it). A
    transition's two stacks are side by side, so a gather in this order reads
    each transition's frames as one run through its stream (its stacks
    overlap or nearly meet there). Returns the number of ``lost`` set (a
    caller tells "none", the usual case, without reading ``lost``).

    Examples:
        >>> # one stream of 8 slots: an episode from tau 0, 5 rows written
        >>> written, row_episode, start = np.array([5]), np.zeros(8, np.int64), np.zeros(6, np.int64)
        >>> out, lost = np.empty((2, 2, 3), np.int64), np.empty(2, bool)  # [B, 2, F]
        >>> frame_rows(np.array([0, 3]), np.array([1, 1]), 3, 8, 6, written, row_episode, start, out, lost)
        0
        >>> out.tolist(), lost.tolist()  # step 0 repeats the first observation
        ([[[0, 0, 0], [0, 0, 1]], [[1, 2, 3], [2, 3, 4]]], [False, False])
    """
    n_lost = 0
    for i in range(rows.shape[0]):
        s, tau, e = live_row(rows[i], C, E, written, row_episode)
        base = s * C
        start = episode_start[e]
        lost[i] = max(tau - (F - 1), start) < max(written[s] - C, 0)
        n_lost += lost[i]
        for half in range(2):
            end = tau + (steps[i] if half else 0)
            for j in range(F):
                out[i, half, j] = base + ring_divmod(max(end - (F - 1) + j, start), C)[1]
    return n_lost
