"""Which rows a batch reads: draws of live transitions, n-step windows, stream successors.

Rows are addressed as in :class:`~torchrl_ext.core.EpisodeIndex`: stream ``s``'s
ring of ``C`` slots is rows ``s * C .. s * C + C - 1``, and the row after slot
``C - 1`` is slot ``0`` of the same stream (the ring wraps).
"""
from __future__ import annotations

import numpy as np

from torchrl_ext.core.kernels import inlined, jit

__all__ = ["any_ring_end", "keep_transitions", "live_row", "ring_divmod", "window_lengths", "window_rows"]


@inlined
def ring_divmod(x: int, d: int) -> tuple[int, int]:
    """``(x // d, x % d)`` (floored, as Python's) with no integer division, for ``d >= 1`` and ``|x| < 2**62``.

    Every kernel's ring arithmetic (a row's stream and slot, an episode's
    table slot) goes through here. A 64-bit integer division costs tens of
    cycles on x86 server cores, and a row takes two to five: on this
    project's 2-CPU Xeon they were a third of a hindsight goal draw's kernel
    time (820 rows). The float estimate ``floor(x * (1 / d))`` (the
    reciprocal computed once per loop, lifted out of it once inlined) is at
    most one off for ``|x| < 2**53`` and is corrected here by whole steps of
    ``d``, so the result is exact; farther from zero it takes more steps.
    Outside the contract the result is undefined (``d <= 0`` never returns):
    callers pass ring and episode capacities (``C >= 2``) and rows, logical
    times and episode numbers.

    Examples:
        >>> ring_divmod(17, 5), ring_divmod(-1, 5)
        ((3, 2), (-1, 4))
    """
    q = int(np.floor(x * (1.0 / d)))
    r = x - q * d
    while r < 0:
        q -= 1
        r += d
    while r >= d:
        q += 1
        r -= d
    return q, r


@jit
def live_row(r: int, C: int, E: int, written: np.ndarray, row_episode: np.ndarray) -> tuple[int, int, int]:
    """``(stream, tau, episode)`` of live row ``r``: its stream, the logical time it holds, its episode's table slot.

    Row ``r`` is slot ``r % C`` of stream ``s = r // C``, whose latest logical
    time there is ``tau = last - (last - r % C) % C`` with ``last =
    written[s] - 1``; its episode (``row_episode[r]``, numbered per stream)
    sits at table slot ``s * E + episode % E`` (``E`` episodes per stream).

    Examples:
        >>> # one stream of 4 slots, 6 rows written: rows 0 and 1 hold tau 4 and 5 (episode 1)
        >>> live_row(1, 4, 4, np.array([6]), np.array([1, 1, 0, 0]))
        (0, 5, 1)
    """
    s, slot = ring_divmod(r, C)
    last = written[s] - 1
    return s, last - ring_divmod(last - slot, C)[1], s * E + ring_divmod(row_episode[r], E)[1]


@jit
def any_ring_end(rows: np.ndarray, C: int) -> bool:
    """Whether any of ``rows`` is the last slot of its stream's ring (its successor wraps).

    Examples:
        >>> bool(any_ring_end(np.array([0, 5, 2]), 3)), bool(any_ring_end(np.array([0, 4]), 3))
        (True, False)
    """
    for r in rows:
        if ring_divmod(r, C)[1] == C - 1:
            return True
    return False


@jit
def keep_transitions(
    drawn: np.ndarray, ends: np.ndarray, shift: np.ndarray, is_step: np.ndarray,
    out: np.ndarray, filled: int,
) -> int:
    """Append to ``out[filled:]`` the draws that are transitions, in order; return the new fill.

    ``drawn`` are uniform over the live rows: draw ``u`` in ``[ends - live,
    ends)[s]`` is stream ``s``'s, at physical row ``u + shift[s]`` (``shift``
    empty: every stream is full and ``u`` is the row). A row that is not a
    transition (``is_step`` unset: an episode's final or pending observation)
    is skipped, so the kept rows of i.i.d. uniform draws are i.i.d. uniform
    transitions (rejection sampling). Stops once ``out`` is full.

    Examples:
        >>> out = np.empty(3, np.int64)
        >>> is_step = np.array([True, False, True, True])
        >>> keep_transitions(np.array([1, 0, 3, 2]), np.empty(0, np.int64), np.empty(0, np.int64),
        ...                  is_step, out, 0), out.tolist()  # row 1 is no transition
        (3, [0, 3, 2])
    """
    n = out.shape[0]
    for u in drawn:
        if filled == n:
            break
        row = u
        if shift.shape[0]:
            row += shift[np.searchsorted(ends, u, side="right")]
        if is_step[row]:
            out[filled] = row
            filled += 1
    return filled


@jit
def window_lengths(rows: np.ndarray, is_step: np.ndarray, C: int, n: int, out: np.ndarray) -> None:
    """``out[i] = min(n, steps of its episode from rows[i] on)`` for live transitions ``rows``.

    An episode's steps are consecutive transition rows of its stream, followed
    by its final (or, while it runs, pending) observation row, which is no
    transition: a window grows while the next row is one.

    Examples:
        >>> is_step = np.array([True, True, True, False, True, False, False, False])
        >>> out = np.empty(4, np.int64)
        >>> window_lengths(np.array([0, 1, 2, 4]), is_step, 8, 3, out); out.tolist()
        [3, 2, 1, 1]
    """
    for i in range(rows.shape[0]):
        r = rows[i]
        slot = ring_divmod(r, C)[1]
        base = r - slot
        k = 1
        while k < n:
            s = slot + k
            if s >= C:
                s -= C
            if not is_step[base + s]:
                break
            k += 1
        out[i] = k


@jit
def window_rows(
    index: np.ndarray, C: int,
    window: np.ndarray, window_next: np.ndarray, after: np.ndarray, mask: np.ndarray,
) -> None:
    """The rows of windows given as ``index[i] = (row, k, ...)``: ``k`` steps from ``row``.

    For window ``i`` (``k <= W = window.shape[1]``): ``window[i, j]`` is the
    row of its step ``min(j, k - 1)`` (columns past the window repeat its last
    step, so column ``W - 1`` is every window's last step), ``window_next[i,
    j]`` the row after ``window[i, j]``, ``mask[i, j] = j < k``, and
    ``after[i]`` the row after the window's last step (its next observation).

    Examples:
        >>> window, nxt, mask = (np.empty((2, 3), d) for d in (np.int64, np.int64, bool))
        >>> after = np.empty(2, np.int64)
        >>> window_rows(np.array([[1, 3], [7, 2]]), 4, window, nxt, after, mask)
        >>> window.tolist(), after.tolist(), mask.tolist()  # row 7 wraps to row 4
        ([[1, 2, 3], [7, 4, 4]], [0, 5], [[True, True, True], [True, True, False]])
    """
    W = window.shape[1]
    for i in range(index.shape[0]):
        r = index[i, 0]
        k = index[i, 1]
        slot = ring_divmod(r, C)[1]
        base = r - slot
        for j in range(W):
            s = slot + min(j, k - 1)
            if s >= C:
                s -= C
            window[i, j] = base + s
            s += 1
            if s == C:
                s = 0
            window_next[i, j] = base + s
            mask[i, j] = j < k
        s = slot + k
        if s >= C:
            s -= C
        after[i] = base + s
