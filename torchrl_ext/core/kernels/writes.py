"""Where a write's steps go, its publication in the episode index, and the copy of its bytes.

Rows are addressed as in :class:`~torchrl_ext.core.EpisodeIndex`: stream ``s``'s
ring of ``C`` slots is rows ``s * C .. s * C + C - 1``, and its logical time
``tau`` (rows ever written to the stream) lies at row ``s * C + tau % C``. A
write is ``T`` steps of each of ``K`` streams (``[K, T]`` arrays, time last).
The index state comes as the numpy views of its tensors (``EpisodeIndex._np``).

The entries a write copies (:func:`put_bytes`) and the done flags it reads
(:func:`any_set`) are the caller's tensors, read where they lie: a kernel gets
them as a *byte table*, int64 ``[k, 4]`` of (address, rows, bytes per row,
bytes from a row to the next) in host memory that the caller keeps alive
until the call returns (:func:`~torchrl_ext.storages._host.byte_table` makes
one). A row's bytes are contiguous, rows may lie apart (a step ``td[:, t]``
of a ``[envs, T]`` batch is read in place). A table costs a ``data_ptr`` per
tensor where a numpy view costs a ``Tensor.numpy`` call, and any number of
entries fit in one call of one signature.
"""
from __future__ import annotations

from typing import Any, Callable, cast

import numba
import numpy as np
from numba.core import types
from numba.core.extending import intrinsic

from torchrl_ext.core.kernels import jit
from torchrl_ext.core.kernels.rows import ring_divmod

__all__ = [
    "any_outside", "any_outside_each", "any_set", "commit_steps", "mark_rows", "owned_streams", "plan_steps", "put_bytes",
]


def _pointer_to_bytes(typingctx, address):  # type: ignore[no-untyped-def]
    """The int64 ``address`` of a byte table as a pointer to bytes, for ``numba.carray`` to view."""
    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.inttoptr(args[0], context.get_value_type(types.CPointer(types.uint8)))
    return types.CPointer(types.uint8)(types.int64), codegen


# called in a kernel with the address alone (numba passes the typing context)
_bytes_at = cast(Callable[[Any], Any], intrinsic(_pointer_to_bytes))


@jit
def any_outside(values: np.ndarray, lo: int, hi: int) -> bool:
    """Whether an integer of ``values`` (int64 ``[n]``) lies outside ``[lo, hi)`` (an index range).

    Examples:
        >>> bool(any_outside(np.array([0, 3]), 0, 4)), bool(any_outside(np.array([4]), 0, 4))
        (False, True)
    """
    for v in values:
        if v < lo or v >= hi:
            return True
    return False


@jit
def any_outside_each(values: np.ndarray, low: np.ndarray, high: np.ndarray) -> bool:
    """Whether a value of ``values`` (integers ``[n * k]``, rows of ``k``) lies outside its element's ``[low, high)``.

    ``low`` and ``high`` are int64 ``[k]``: a ``MultiDiscrete`` / ``MultiBinary``
    space's bounds, element by element.

    Examples:
        >>> low, high = np.zeros(2, np.int64), np.array([3, 4])
        >>> bool(any_outside_each(np.array([2, 3, 0, 1]), low, high)), bool(any_outside_each(np.array([3, 0]), low, high))
        (False, True)
    """
    k = low.shape[0]
    for i in range(values.shape[0]):
        j = i % k
        if values[i] < low[j] or values[i] >= high[j]:
            return True
    return False


@jit
def any_set(flags: np.ndarray, out: np.ndarray) -> None:
    """``out[j]``: step ``j``'s flag is set in any of ``flags``, the byte table of bool ``[n, 1]`` entries.

    A write's done entries (done, terminated, truncated), OR-ed in one pass.

    Examples:
        >>> out = np.empty(3, bool)
        >>> done, trunc = np.array([[True], [False], [False]]), np.array([[False], [False], [True]])
        >>> any_set(np.array([[done.ctypes.data, 3, 1, 1], [trunc.ctypes.data, 3, 1, 1]]), out)
        >>> out.tolist()
        [True, False, True]
    """
    out[:] = False
    for i in range(flags.shape[0]):
        flag = _table_rows(flags, i)
        for j in range(out.shape[0]):
            out[j] |= flag[j, 0] != 0


@jit
def _table_rows(table: np.ndarray, i: int) -> np.ndarray:
    """Entry ``i`` of a byte table as uint8 ``[rows, row stride]``: each row's bytes first, then the gap.

    (The last row's gap lies past the entry and is never read.)
    """
    return numba.carray(_bytes_at(table[i, 0]), (table[i, 1], table[i, 3]))


@jit
def owned_streams(stream_writer: np.ndarray, writer: int, out: np.ndarray) -> int:
    """Fill ``out`` with the streams whose owner is ``writer``, in order; return how many.

    Examples:
        >>> out = np.empty(4, np.int64)
        >>> count = owned_streams(np.array([3, -1, 3, 5]), 3, out)
        >>> out[:count].tolist()
        [0, 2]
    """
    count = 0
    for s in range(stream_writer.shape[0]):
        if stream_writer[s] == writer:
            out[count] = s
            count += 1
    return count


@jit
def plan_steps(
    streams: np.ndarray, done: np.ndarray, traj: np.ndarray,
    written: np.ndarray, is_open: np.ndarray, episode_count: np.ndarray, stream_traj: np.ndarray,
    C: int, tau: np.ndarray, start: np.ndarray, episode: np.ndarray,
    rows: np.ndarray, next_rows: np.ndarray,
) -> tuple[int, int]:
    """Place ``[K, T]`` steps; fill ``tau``, ``start``, ``episode``, ``rows``, ``next_rows``; changes no state.

    Step ``t`` of stream ``s = streams[k]`` opens an episode (``start``) if
    the stream's last episode has ended (``t = 0``), the step before it is
    done (``done[k, t - 1]``), or its trajectory id differs from the one
    before it (``traj``; an empty array: no ids). A step continuing an episode
    goes to the row holding its observation (the previous step's next
    observation: at ``t = 0``, the stream's pending row ``written - 1``); a
    start after a step written before it leaves that step's observation row
    in place and opens on the next row. ``next_rows`` is the row after each
    step's row. ``episode`` numbers the stream's episodes from 0.

    Returns:
        ``(most, opened)``: the most rows one stream's steps and their next
        observations span (the caller refuses a write spanning more than
        its ring), and the number of episodes opened.

    Examples:
        >>> K, T = 1, 3
        >>> tau, episode, rows, next_rows = (np.empty((K, T), np.int64) for _ in range(4))
        >>> start = np.empty((K, T), bool)
        >>> done = np.array([[False, True, False]])  # an episode of 2 steps, then one of 1
        >>> state = [np.zeros(1, np.int64), np.zeros(1, bool), np.zeros(1, np.int64),
        ...          np.full(1, -1, np.int64)]  # written, is_open, episode_count, stream_traj
        >>> plan_steps(np.array([0]), done, np.empty((0, 0), np.int64), *state, 8,
        ...            tau, start, episode, rows, next_rows)  # rows 0-1, final obs 2, rows 3-4
        (5, 2)
        >>> rows.tolist(), next_rows.tolist(), episode.tolist()
        ([[0, 1, 3]], [[1, 2, 4]], [[0, 0, 1]])
    """
    K, T = done.shape
    has_traj = traj.shape[0] > 0
    most = 0
    opened = 0
    for k in range(K):
        s = streams[k]
        was_open = is_open[s]
        base = written[s] - was_open  # the pending row if the episode runs
        ep = episode_count[s] - 1
        at = base
        for t in range(T):
            if t == 0:
                opens = not was_open
                if has_traj and traj[k, 0] != stream_traj[s]:
                    opens = True
                skip = opens and was_open  # the pending row stays the old episode's last
            else:
                opens = done[k, t - 1]
                if has_traj and traj[k, t] != traj[k, t - 1]:
                    opens = True
                skip = opens
            if skip:
                at += 1
            ep += opens
            opened += opens
            tau[k, t] = at
            start[k, t] = opens
            episode[k, t] = ep
            rows[k, t] = s * C + ring_divmod(at, C)[1]
            next_rows[k, t] = s * C + ring_divmod(at + 1, C)[1]
            at += 1
        most = max(most, at + 1 - base)
    return most, opened


@jit
def mark_rows(
    write_seq: np.ndarray, row_version: np.ndarray,
    rows: np.ndarray, next_rows: np.ndarray, start: np.ndarray,
) -> None:
    """Open a write (``write_seq`` odd) and stamp the rows whose bytes it changes.

    Those are the next rows, and the rows of steps that open an episode (a
    continuing step's row keeps its observation and gets step entries that no
    reader reads before the commit makes it a step). See
    :meth:`~torchrl_ext.core.writes.IndexWrites.begin_write`.

    Examples:
        >>> seq, version = np.zeros(1, np.int64), np.zeros(6, np.int64)
        >>> mark_rows(seq, version, np.array([[0, 1]]), np.array([[1, 2]]), np.array([[True, False]]))
        >>> seq.tolist(), version.tolist()
        ([1], [1, 1, 1, 0, 0, 0])
    """
    write_seq[0] += 1
    seq = write_seq[0]
    K, T = rows.shape
    for k in range(K):
        for t in range(T):
            if start[k, t]:
                row_version[rows[k, t]] = seq
            row_version[next_rows[k, t]] = seq


@jit
def commit_steps(
    streams: np.ndarray, done: np.ndarray, traj: np.ndarray,
    tau: np.ndarray, start: np.ndarray, episode: np.ndarray,
    rows: np.ndarray, next_rows: np.ndarray, E: int,
    episode_start: np.ndarray, episode_length: np.ndarray,
    row_episode: np.ndarray, row_is_step: np.ndarray,
    episode_count: np.ndarray, stream_traj: np.ndarray, is_open: np.ndarray, written: np.ndarray,
) -> None:
    """Publish a write planned by :func:`plan_steps` whose rows are stored.

    In this order, so that a reader in another process that sees a row as a
    transition also sees its episode's start and length: the episode tables
    (``episode_start``, ``episode_length``, flat ``[S * E]``: each opened
    episode's first ``tau``, and each episode's length at its last step in
    the write), then each row's episode and transition flag (next rows first:
    a next row is the following step's row when the episode continues), then
    the stream cursors (``traj``: an empty array if no ids).

    Examples:
        >>> from torchrl_ext.core import EpisodeIndex
        >>> index = EpisodeIndex(num_streams=1, stream_capacity=8)
        >>> plan, v = index.plan(np.array([0]), np.array([[False, True]]), None), index._np
        >>> commit_steps(plan.streams, plan.done, plan.traj, plan.tau, plan.start, plan.episode,
        ...     plan.rows, plan.next_rows, index.episode_capacity, v["episode_start_flat"],
        ...     v["episode_length_flat"], v["row_episode"], v["row_is_step"], v["episode_count"],
        ...     v["stream_traj"], v["is_open"], v["written"])
        >>> index.episode_length[0, 0].item(), index.row_is_step[:4].tolist(), index.written.tolist()
        (2, [True, True, False, False], [3])
    """
    K, T = done.shape
    if not T:
        return
    for k in range(K):
        base = streams[k] * E
        for t in range(T):
            slot = base + ring_divmod(episode[k, t], E)[1]
            if start[k, t]:
                episode_start[slot] = tau[k, t]
            if t == T - 1 or start[k, t + 1]:  # the episode's last step in this write
                episode_length[slot] = tau[k, t] - episode_start[slot] + 1
    for k in range(K):
        for t in range(T):
            row_episode[rows[k, t]] = episode[k, t]
            row_episode[next_rows[k, t]] = episode[k, t]
            row_is_step[next_rows[k, t]] = False
        for t in range(T):
            row_is_step[rows[k, t]] = True
    for k in range(K):
        s = streams[k]
        episode_count[s] = episode[k, T - 1] + 1
        if traj.shape[0] > 0:
            stream_traj[s] = traj[k, T - 1]
        is_open[s] = not done[k, T - 1]
        written[s] = tau[k, T - 1] + 2


@jit
def put_bytes(
    dst: np.ndarray, rows: np.ndarray, next_rows: np.ndarray, start: np.ndarray,
    sources: np.ndarray, columns: np.ndarray, at: np.ndarray,
) -> None:
    """Copy the bytes of a write's entries (the byte table ``sources``) into its rows.

    Index arithmetic and a byte copy, no math on the values (host memory
    only; rows on an accelerator are written by torch). Step ``j``'s bytes
    are row ``at[j]`` of every source (``at`` empty: row ``j``). Source
    ``i`` (``sources[i]``: ``m`` rows of ``width`` bytes) goes to bytes ``columns[i, 0]``
    on of the ``dst`` rows (uint8 ``[rows, row bytes]``) given by ``columns[i, 1]``:
    ``0`` each step's row, ``1`` its next row, ``2`` its row where the step
    opens an episode (``start``). Copied 8, 4 or 2 bytes at a time where the
    entry's width, place, address and row stride allow.

    Examples:
        >>> dst = np.zeros((4, 3), np.uint8)
        >>> obs, reward = np.array([[7], [8]], np.uint8), np.array([[1], [2]], np.uint8)
        >>> next_obs = obs + 10
        >>> sources = np.array([[a.ctypes.data, 2, 1, 1] for a in (obs, next_obs, reward)])
        >>> columns = np.array([[0, 2], [0, 1], [2, 0]])  # obs at starts, next obs, reward
        >>> put_bytes(dst, np.array([0, 1]), np.array([1, 2]), np.array([True, False]),
        ...           sources, columns, np.empty(0, np.int64))
        >>> dst.tolist()
        [[7, 0, 1], [17, 0, 2], [18, 0, 0], [0, 0, 0]]
    """

    def put(d: np.ndarray, s: np.ndarray, width: int, lo: int, into: np.ndarray, only_starts: bool) -> None:
        # d[into[j], lo:lo + width] = s[at[j], :width] (s[j] without at), in words of d's dtype
        gather = at.shape[0] > 0
        for j in range(into.shape[0]):
            if only_starts and not start[j]:
                continue
            row = into[j]
            p = at[j] if gather else j
            for b in range(width):
                d[row, lo + b] = s[p, b]

    for i in range(sources.shape[0]):
        src = _table_rows(sources, i)
        width, stride = sources[i, 2], sources[i, 3]
        lo = columns[i, 0]
        into = next_rows if columns[i, 1] == 1 else rows
        only_starts = columns[i, 1] == 2
        # the widest unit dividing the entry's width, its place, the row and the source's
        # address and row stride
        unit = 8
        while width % unit or lo % unit or dst.shape[1] % unit or stride % unit or sources[i, 0] % unit:
            unit //= 2
        if unit == 8:
            put(dst.view(np.uint64), src.view(np.uint64), width // 8, lo // 8, into, only_starts)
        elif unit == 4:
            put(dst.view(np.uint32), src.view(np.uint32), width // 4, lo // 4, into, only_starts)
        elif unit == 2:
            put(dst.view(np.uint16), src.view(np.uint16), width // 2, lo // 2, into, only_starts)
        else:
            put(dst, src, width, lo, into, only_starts)
