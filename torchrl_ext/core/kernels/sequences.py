"""Which rows a sequence reads: valid window starts, and the runs of rows from them.

A sequence of ``L`` steps of one episode is a *run* of consecutive rows: in a
per-stream ring (:class:`~torchrl_ext.core.EpisodeIndex`: stream ``s``'s ring
of ``C`` slots is rows ``s * C .. s * C + C - 1``, the row after slot
``C - 1`` is slot ``0``) or in an episode's run of an
:class:`~torchrl_ext.storages.EpisodePool` table. A padded sequence repeats
its last real step.
"""
from __future__ import annotations

import numpy as np

from torchrl_ext.core.kernels import jit
from torchrl_ext.core.kernels.rows import live_row, ring_divmod

__all__ = [
    "candidate_steps", "episode_runs", "keep_windows", "pool_steps", "sequence_span", "table_runs",
    "valid_start", "valid_starts", "wrapped_runs",
]


@jit
def valid_start(step: int, length: int, width: int, pad: bool) -> bool:
    """Whether a window of ``width`` steps may start at ``step`` of an episode of ``length`` steps.

    Every window inside the episode, the last one included (``step + width <=
    length``); with ``pad``, also step 0 of an episode shorter than ``width``.

    Examples:
        >>> valid_start(1, 3, 2, False), valid_start(2, 3, 2, False), valid_start(0, 1, 2, True)
        (True, False, True)
    """
    return step + width <= length or (pad and step == 0 and length < width)


@jit
def valid_starts(step: np.ndarray, length: np.ndarray, width: int, pad: bool, out: np.ndarray) -> None:
    """``out[i] = valid_start(step[i], length[i], width, pad)`` (flat arrays of one size).

    Examples:
        >>> out = np.empty(3, bool)
        >>> valid_starts(np.array([0, 1, 2]), np.full(3, 3), 2, False, out); out.tolist()
        [True, True, False]
    """
    for i in range(step.shape[0]):
        out[i] = valid_start(step[i], length[i], width, pad)


@jit
def keep_windows(
    key: np.ndarray, step: np.ndarray, length: np.ndarray, width: int, pad: bool,
    out_key: np.ndarray, out_step: np.ndarray, out_real: np.ndarray, filled: int,
) -> int:
    """Append to ``out_*[filled:]`` the candidates that start valid windows, in order; return the new fill.

    Candidate ``i`` is step ``step[i]`` of the episode ``key[i]`` (``-1``: no
    episode) of ``length[i]`` steps; it is kept iff :func:`valid_start`, with
    its number of real steps ``min(length, width)``. Stops once the outputs
    are full: the kept candidates of i.i.d. uniform draws over a set holding
    every valid start are i.i.d. uniform valid windows (rejection sampling).

    Examples:
        >>> out_key, out_step, out_real = (np.empty(2, np.int64) for _ in range(3))
        >>> keep_windows(np.array([4, -1, 4, 4]), np.array([2, 0, 0, 1]), np.full(4, 3), 2, False,
        ...              out_key, out_step, out_real, 0), out_step.tolist()  # step 2 ends too late
        (2, [0, 1])
    """
    n = out_key.shape[0]
    for i in range(key.shape[0]):
        if filled == n:
            break
        if key[i] >= 0 and valid_start(step[i], length[i], width, pad):
            out_key[filled] = key[i]
            out_step[filled] = step[i]
            out_real[filled] = min(length[i], width)
            filled += 1
    return filled


@jit
def candidate_steps(
    rows: np.ndarray, C: int, E: int, written: np.ndarray, row_episode: np.ndarray,
    episode_start: np.ndarray, episode_length: np.ndarray,
    slot: np.ndarray, step: np.ndarray, length: np.ndarray,
) -> None:
    """The episode facts of live rows of an episode index: its table slot, the row's step, its length.

    See :func:`~torchrl_ext.core.kernels.rows.live_row` for where a row's
    logical time and its episode's table slot come from; the episode starts
    at ``episode_start[slot]``.

    Examples:
        >>> slot, step, length = (np.empty(2, np.int64) for _ in range(3))
        >>> # one stream of 4 slots, 6 rows written: episode 0 (3 steps, rows 0-3), episode 1 (tau 4, 5)
        >>> candidate_steps(np.array([1, 0]), 4, 4, np.array([6]), np.array([1, 1, 0, 0]),
        ...                 np.array([0, 4, 0, 0]), np.array([3, 1, 0, 0]), slot, step, length)
        >>> slot.tolist(), step.tolist(), length.tolist()  # rows 1 and 0 now hold tau 5 and 4
        ([1, 1], [1, 0], [1, 1])
    """
    for i in range(rows.shape[0]):
        _, tau, e = live_row(rows[i], C, E, written, row_episode)
        slot[i] = e
        step[i] = tau - episode_start[e]
        length[i] = episode_length[e]


@jit
def pool_steps(
    rows: np.ndarray, row_slot: np.ndarray, row_step: np.ndarray, length: np.ndarray,
    slot: np.ndarray, step: np.ndarray, out_length: np.ndarray,
) -> None:
    """The episode facts of rows of an :class:`~torchrl_ext.storages.EpisodePool`: slot, step, length.

    A free row has slot ``-1`` (and length 0).

    Examples:
        >>> slot, step, length = (np.empty(2, np.int64) for _ in range(3))
        >>> pool_steps(np.array([1, 2]), np.array([0, 0, -1]), np.array([0, 1, 0]), np.array([2]),
        ...            slot, step, length)
        >>> slot.tolist(), step.tolist(), length.tolist()  # row 2 is free
        ([0, -1], [1, 0], [2, 0])
    """
    for i in range(rows.shape[0]):
        r = rows[i]
        e = row_slot[r]
        slot[i] = e
        step[i] = row_step[r]
        out_length[i] = length[e] if e >= 0 else 0


@jit
def episode_runs(
    slot: np.ndarray, step: np.ndarray, real: np.ndarray, E: int, C: int,
    episode_start: np.ndarray, out: np.ndarray,
) -> None:
    """The rows of windows of an episode index: ``out[i, j]`` holds step ``step[i] + min(j, real[i] - 1)``.

    Window ``i`` starts at step ``step[i]`` of the episode at table slot
    ``slot[i]``: stream ``slot // E``, logical time ``episode_start[slot] +
    step``, so its rows are a run of consecutive rows of that stream's ring
    (wrapping from its last slot to its first); columns past ``real[i]``
    repeat the window's last real step (the padding of a short sequence).

    Examples:
        >>> out = np.empty((2, 3), np.int64)
        >>> # 2 streams of 4 rows, 3 episode slots each; stream 1's episode at slot 4 starts at tau 5
        >>> episode_start = np.array([0, 0, 0, 0, 5, 0])
        >>> episode_runs(np.array([0, 4]), np.array([2, 1]), np.array([3, 2]), 3, 4, episode_start, out)
        >>> out.tolist()  # stream 0: tau 2, 3, 4 (slot 0 again); stream 1: tau 6, 7, padded
        [[2, 3, 0], [6, 7, 7]]
    """
    W = out.shape[1]
    for i in range(slot.shape[0]):
        base = ring_divmod(slot[i], E)[0] * C
        first = ring_divmod(episode_start[slot[i]] + step[i], C)[1]
        last = real[i] - 1
        for j in range(W):
            s = first + min(j, last)
            if s >= C:
                s -= C
            out[i, j] = base + s


@jit
def sequence_span(rows: np.ndarray, C: int, out: np.ndarray) -> bool:
    """Whether each row of ``rows`` (``[B, L]``) is a run of one ring; if so ``out`` is it and the next row.

    Row ``j + 1`` of a run is the ring successor of row ``j``. When every row
    of ``rows`` is a run, ``out[:, :L]`` is ``rows`` and ``out[:, L]`` the
    successor of each run's last row (its last step's next observation), and
    the result is True; otherwise False, and ``out`` is unspecified.

    Examples:
        >>> out = np.empty((2, 3), np.int64)
        >>> sequence_span(np.array([[2, 3], [7, 4]]), 4, out), out.tolist()
        (True, [[2, 3, 0], [7, 4, 5]])
        >>> sequence_span(np.array([[2, 2]]), 4, out[:1])  # a padded sequence repeats its row
        False
    """
    L = rows.shape[1]
    for i in range(rows.shape[0]):
        r = rows[i, 0]
        base = r - ring_divmod(r, C)[1]
        for j in range(L + 1):
            if j < L:
                if rows[i, j] != r:
                    return False
            out[i, j] = r
            r += 1
            if r - base == C:
                r = base
    return True


@jit
def wrapped_runs(rows: np.ndarray, wraps: np.ndarray) -> int:
    """``wraps[i]``: run ``rows[i]`` (consecutive rows of one ring) crosses its ring's end; returns how many do.

    A run that stays inside its ring is ``rows[i, 0] + j`` at column ``j``;
    one that wraps is not, at its last column.

    Examples:
        >>> wraps = np.empty(2, bool)
        >>> wrapped_runs(np.array([[2, 3, 0], [5, 6, 7]]), wraps), wraps.tolist()  # a ring of 4 rows
        (1, [True, False])
    """
    last = rows.shape[1] - 1
    count = 0
    for i in range(rows.shape[0]):
        wraps[i] = rows[i, last] != rows[i, 0] + last
        count += wraps[i]
    return count


@jit
def table_runs(
    table: np.ndarray, offset: np.ndarray, slot: np.ndarray, step: np.ndarray, real: np.ndarray,
    out: np.ndarray,
) -> bool:
    """``out[i, j] = table[offset[slot[i]] + step[i] + min(j, real[i] - 1)]``: windows of a pool's episodes.

    An :class:`~torchrl_ext.storages.EpisodePool` keeps each episode's rows
    as one run of its ``table``, from ``offset[slot]`` on, in step order;
    columns past ``real[i]`` repeat the window's last real step. Returns
    whether every entry read lies in ``table``; if one does not (a read that
    met a write: a length and an offset of two different episodes), stops
    there, and ``out`` is unspecified (numba checks no bound: this does).

    Examples:
        >>> out = np.empty((2, 3), np.int64)
        >>> table = np.array([7, 8, 9, 4, 5])  # episode 0: rows 7, 8, 9; episode 1: rows 4, 5
        >>> table_runs(table, np.array([0, 3]), np.array([0, 1]), np.array([1, 0]), np.array([2, 2]), out)
        True
        >>> out.tolist()
        [[8, 9, 9], [4, 5, 5]]
        >>> table_runs(table, np.array([3]), np.array([0]), np.array([1]), np.array([2]), out[:1])
        False
    """
    W = out.shape[1]
    n = table.shape[0]
    for i in range(slot.shape[0]):
        at = offset[slot[i]] + step[i]
        last = real[i] - 1
        for j in range(W):
            k = at + min(j, last)
            if k < 0 or k >= n:
                return False
            out[i, j] = table[k]
    return True
