"""Hindsight goal rows: where the achieved goal of a later step of the same episode lies.

Rows, streams and episodes are addressed as in :class:`~torchrl_ext.core.EpisodeIndex`:
stream ``s``'s ring of ``C`` slots is rows ``s * C .. s * C + C - 1``; the
episode tables hold ``E`` episodes per stream (episode ``e`` of stream ``s`` at
``s * E + e % E``).
"""
from __future__ import annotations

import numpy as np

from torchrl_ext.core.kernels import jit
from torchrl_ext.core.kernels.rows import live_row, ring_divmod

__all__ = ["EPISODE", "FINAL", "FUTURE", "goal_rows"]

FUTURE, FINAL, EPISODE = 0, 1, 2  # strategy codes (HindsightStrategy)


@jit
def goal_rows(
    rows: np.ndarray, u: np.ndarray, strategy: int, C: int, E: int,
    written: np.ndarray, row_episode: np.ndarray, episode_start: np.ndarray,
    episode_length: np.ndarray, out: np.ndarray,
) -> None:
    """``out[i]``: the row holding ``("next", achieved_goal)`` of the goal step of ``rows[i]``.

    For a live transition at step ``i`` of an episode whose steps ``0 .. L-1``
    are written, the goal step ``j`` is ``i + floor(u * (L - i))``
    (``FUTURE``, ``j`` in ``i .. L-1``), ``L - 1`` (``FINAL``), or uniform over
    the episode's live steps (``EPISODE``: from the oldest step the ring still
    holds); ``u`` is uniform in ``[0, 1)``, one per row. The achieved goal
    after step ``j`` is the observation of the row after it.

    Examples:
        >>> # one stream of 8 slots: episode 0 is steps 0-3 (tau 0-3), its final obs at tau 4
        >>> written, row_episode = np.array([5]), np.array([0, 0, 0, 0, 0, -1, -1, -1])
        >>> start, length = np.array([0, 0, 0, 0, 0, 0]), np.array([4, 0, 0, 0, 0, 0])
        >>> out = np.empty(2, np.int64)
        >>> goal_rows(np.array([1, 2]), np.array([0.0, 0.0]), FINAL, 8, 6, written, row_episode,
        ...           start, length, out); out.tolist()  # the final obs of step 3: row 4
        [4, 4]
        >>> goal_rows(np.array([1, 2]), np.array([0.0, 0.99]), FUTURE, 8, 6, written, row_episode,
        ...           start, length, out); out.tolist()  # steps 1 and 3
        [2, 4]
    """
    n = rows.shape[0]
    # first each row's logical time and episode: the loop is short and its rows
    # independent, so their (random, mostly uncached) row_episode reads overlap
    stream, tau, episode = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
    for i in range(n):
        stream[i], tau[i], episode[i] = live_row(rows[i], C, E, written, row_episode)
    for i in range(n):
        s, e = stream[i], episode[i]
        start = episode_start[e]
        last = start + episode_length[e] - 1  # tau of the episode's last written step
        if strategy == FINAL:
            goal = last
        else:
            if strategy == FUTURE:
                lo = tau[i]
            else:  # EPISODE: the episode's oldest live step
                lo = max(start, max(written[s] - C, 0))
            goal = lo + min(np.int64(u[i] * (last - lo + 1)), last - lo)
        out[i] = s * C + ring_divmod(goal + 1, C)[1]
