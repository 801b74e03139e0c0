"""The episode index: which row belongs to which stream, episode and step.

Layout (owned here, used by the storage, the writer and every sampler):

* The storage has ``num_streams * stream_capacity`` rows. Stream ``s`` is a ring
  of ``stream_capacity`` rows; its logical time ``tau`` (rows ever written to the
  stream) maps to the physical row ``s * stream_capacity + tau % stream_capacity``
  (stream-major: a stream's consecutive steps are adjacent rows, so a step and
  its next observation, an n-step window or a sequence are one contiguous
  read, wrap-around aside).
* Each row holds one observation. Row ``tau`` of an episode's step also holds the
  step's action and next-only entries (reward, done flags); the next observation
  of that step is the observation of row ``tau + 1``. The row after an episode's
  last step holds its true final observation (or, while the episode runs, the
  pending next observation). An episode of ``L`` steps therefore spans ``L + 1``
  rows, and a row is a *transition* iff its step in the episode is ``< L``.
* Episodes are numbered per stream (``0, 1, ...``). Their table is a ring of
  ``stream_capacity // 2 + 2`` entries per stream: every live episode spans at
  least two rows, so live episodes never share an entry.

All state is in tensors (``state`` / ``load_state``) so it is checkpointed and
shared with worker processes together with the data.
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch
from tensordict import TensorDict

from torchrl_ext.core.checks import EMPTY_BUFFER, EmptyBufferError, check_count
from torchrl_ext.core.draws import uniform_below
from torchrl_ext.core.kernels.frames import frame_rows
from torchrl_ext.core.kernels.goals import goal_rows
from torchrl_ext.core.kernels.rows import keep_transitions, window_lengths
from torchrl_ext.core.kernels.sequences import candidate_steps, episode_runs
from torchrl_ext.core.plan import WritePlan
from torchrl_ext.core.process import current_pid
from torchrl_ext.core.streams import COPIES, EXITED, StreamOwnership
from torchrl_ext.core.views import NumpyViews
from torchrl_ext.core.writes import IndexWrites

__all__ = ["EMPTY_BUFFER", "EmptyBufferError", "EpisodeIndex", "WritePlan"]

_MAX_ROUNDS = 64  # redraw rounds of draw_transitions before giving up
_FULL = np.empty(0, dtype=np.int64)  # the draw shift once every stream is full: none


class EpisodeIndex(IndexWrites, StreamOwnership, NumpyViews):
    """Per-stream episode bookkeeping for an episode-aware storage.

    Updated by :class:`~torchrl_ext.writers.TransitionWriter` in O(rows written);
    read by samplers in O(batch). Nothing here scans the storage.

    The state is a set of torch tensors (shared memory, checkpointed); the
    arithmetic runs on numpy views of them, which cost a fraction of a torch op
    on the small arrays a write or a sample handles. Methods take and return
    numpy int64 arrays (torch CPU tensors are accepted as input).

    Args:
        num_streams (int): number of streams (envs) sharing the storage.
        stream_capacity (int): rows per stream ring, at least 2.

    Examples:
        >>> import numpy as np
        >>> index = EpisodeIndex(num_streams=2, stream_capacity=4)
        >>> index.physical_rows(np.array([0, 5]), np.array([1, 0]))  # step 5 wraps to slot 1
        array([4, 1])
    """

    _TENSORS = (
        "written",  # [S] rows ever written per stream
        "is_open",  # [S] the stream's last episode still runs
        "episode_count",  # [S] episodes ever opened per stream
        "stream_traj",  # [S] trajectory id of the stream's last step (-1: none)
        "stream_writer",  # [S] id of the writer owning the stream (-1: free)
        "write_seq",  # [1] odd while a write is under way, +2 per write (seqlock)
        "row_version",  # [S * C] write_seq of the last write touching the row
        "row_episode",  # [S * C] per-stream episode number of each row (-1: unwritten)
        "row_is_step",  # [S * C] the row holds a published transition (1 byte a row)
        "episode_start",  # [S, E] tau of each episode's step 0
        "episode_length",  # [S, E] steps written per episode
    )
    # and, not checkpointed (a process of this run): [S] the process writing to the
    # stream, whose exit frees it (-1: free)
    _VIEWED = (*_TENSORS, "stream_pid")

    def __init__(self, num_streams: int, stream_capacity: int) -> None:
        if stream_capacity < 2:
            raise ValueError(
                f"stream_capacity={stream_capacity}: each stream needs at least 2 rows "
                "(a step and its next observation); raise the storage max_size."
            )
        self.num_streams = int(num_streams)
        self.stream_capacity = int(stream_capacity)
        self.episode_capacity = self.stream_capacity // 2 + 2
        S, C, E = self.num_streams, self.stream_capacity, self.episode_capacity
        self.written = torch.zeros(S, dtype=torch.int64)
        self.is_open = torch.zeros(S, dtype=torch.bool)
        self.episode_count = torch.zeros(S, dtype=torch.int64)
        self.stream_traj = torch.full((S,), -1, dtype=torch.int64)
        self.stream_writer = torch.full((S,), -1, dtype=torch.int64)
        self.stream_pid = torch.full((S,), -1, dtype=torch.int64)
        self.write_seq = torch.zeros(1, dtype=torch.int64)
        self.row_version = torch.zeros(S * C, dtype=torch.int64)
        self.row_episode = torch.full((S * C,), -1, dtype=torch.int64)
        # the sampler's validity test reads this, not the 8x larger row_episode
        self.row_is_step = torch.zeros(S * C, dtype=torch.bool)
        self.episode_start = torch.zeros(S, E, dtype=torch.int64)
        self.episode_length = torch.zeros(S, E, dtype=torch.int64)
        self._bind()

    _PER_PROCESS = ("_np", "_live")

    def _bind(self) -> None:
        super()._bind()
        # (write cursors, live rows, live-row geometry) of the last draw (see _live_rows)
        self._live: tuple[bytes, bytes, tuple[int, np.ndarray, np.ndarray]] | None = None
        self._np["episode_start_flat"] = self._np["episode_start"].reshape(-1)
        self._np["episode_length_flat"] = self._np["episode_length"].reshape(-1)
        self._stream_base = np.arange(self.num_streams) * self.stream_capacity

    # ------------------------------------------------------------------ layout
    @property
    def num_rows(self) -> int:
        """Total number of physical rows."""
        return self.num_streams * self.stream_capacity

    def physical_rows(self, tau: npt.ArrayLike, stream: npt.ArrayLike) -> np.ndarray:
        """Map logical time ``tau`` in ``stream`` to physical rows (ring wrap-around)."""
        return np.asarray(stream) * self.stream_capacity + np.asarray(tau) % self.stream_capacity

    def row_coordinates(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Inverse of :meth:`physical_rows` for live rows: ``(tau, stream)``.

        A physical slot holds the most recent ``tau`` congruent to it below the
        stream's write cursor.
        """
        rows = np.asarray(rows)
        stream = rows // self.stream_capacity
        slot = rows - stream * self.stream_capacity
        last = self._np["written"][stream] - 1
        return last - (last - slot) % self.stream_capacity, stream

    def live_start(self) -> np.ndarray:
        """Oldest live ``tau`` per stream, ``[num_streams]``."""
        return np.maximum(self._np["written"] - self.stream_capacity, 0)

    # ----------------------------------------------------------------- queries
    def episode_slot(self, stream: np.ndarray, episode: np.ndarray) -> np.ndarray:
        """Flat position of ``(stream, episode)`` in the episode tables."""
        return stream * self.episode_capacity + episode % self.episode_capacity

    def locate(
        self, tau: np.ndarray, stream: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Episode facts of live rows.

        Returns:
            ``(episode, step, start, length)``: the row's per-stream episode
            number, its step in that episode, the episode's first ``tau`` and its
            number of steps written so far. The row is a transition iff
            ``step < length``.
        """
        tau, stream = np.asarray(tau), np.asarray(stream)
        episode = self._np["row_episode"][self.physical_rows(tau, stream)]
        slot = self.episode_slot(stream, episode)
        start = self._np["episode_start_flat"][slot]
        return episode, tau - start, start, self._np["episode_length_flat"][slot]

    def goal_rows(self, rows: np.ndarray, u: np.ndarray, strategy: int) -> np.ndarray:
        """Rows of hindsight goals: ``("next", achieved_goal)`` of a later step of each row's episode.

        ``strategy`` is :data:`~torchrl_ext.core.kernels.goals.FUTURE`,
        ``FINAL`` or ``EPISODE``, and ``u`` (``[V]`` float64, uniform in
        ``[0, 1)``) picks the step; see
        :func:`~torchrl_ext.core.kernels.goals.goal_rows`. ``rows`` are live transitions.

        Examples:
            >>> import numpy as np
            >>> from torchrl_ext.core.kernels.goals import FINAL
            >>> index = EpisodeIndex(num_streams=1, stream_capacity=8)
            >>> index.plan(np.array([0]), np.array([[False, False, True]]), None).commit()
            >>> index.goal_rows(np.array([0, 1]), np.zeros(2), FINAL).tolist()  # after step 2
            [3, 3]
        """
        out = np.empty(rows.shape[0], dtype=np.int64)
        goal_rows(np.ascontiguousarray(rows), np.ascontiguousarray(u), strategy,
                  self.stream_capacity, self.episode_capacity, self._np["written"],
                  self._np["row_episode"], self._np["episode_start_flat"],
                  self._np["episode_length_flat"], out)
        return out

    def frame_rows(
        self, rows: np.ndarray, steps: np.ndarray, n_frames: int
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Rows of the ``n_frames`` stacked frames of transitions ``rows`` and of their next observations.

        ``steps``: how many steps after each row its next observation is
        (window lengths). Returns ``(frames, lost)``: ``[*rows.shape, 2,
        n_frames]`` rows (each transition's observation frames, then its next
        observation's; see :func:`~torchrl_ext.samplers.frame_steps` for which
        frames), and ``[*rows.shape]`` bool, the observation's stack needs a
        frame the ring overwrote, or ``None`` when no stack does (the usual
        case: a caller then reads nothing more). One compiled pass
        (:func:`~torchrl_ext.core.kernels.frames.frame_rows`).

        Examples:
            >>> import numpy as np
            >>> index = EpisodeIndex(num_streams=1, stream_capacity=8)
            >>> index.plan(np.array([0]), np.array([[False, False, True]]), None).commit()
            >>> frames, lost = index.frame_rows(np.array([0, 2]), np.array([1, 1]), 2)
            >>> frames.tolist(), lost  # every frame is held
            ([[[0, 0], [0, 1]], [[1, 2], [2, 3]]], None)
        """
        flat = np.ascontiguousarray(rows, dtype=np.int64).reshape(-1)
        out = np.empty((flat.size, 2, n_frames), dtype=np.int64)
        lost = np.empty(flat.size, dtype=bool)
        n_lost = frame_rows(flat, np.ascontiguousarray(steps, dtype=np.int64).reshape(-1), n_frames,
                            self.stream_capacity, self.episode_capacity, self._np["written"],
                            self._np["row_episode"], self._np["episode_start_flat"], out, lost)
        shape = np.shape(rows)
        return out.reshape(*shape, 2, n_frames), lost.reshape(shape) if n_lost else None

    def num_transitions(self) -> int:
        """Number of live transitions (rows with a live next row)."""
        written = self._np["written"]
        lo = self.live_start()
        streams = np.flatnonzero(written > lo)
        if not streams.size:
            return 0
        oldest = self._np["row_episode"][self.physical_rows(lo[streams], streams)]
        # each live episode has exactly one live observation-only row (its last)
        obs_rows = self._np["episode_count"][streams] - oldest
        return int((written[streams] - lo[streams] - obs_rows).sum())

    def is_empty(self) -> bool:
        """No row was written since the index was created or reset.

        Examples:
            >>> import numpy as np
            >>> index = EpisodeIndex(num_streams=2, stream_capacity=4)
            >>> index.is_empty()
            True
            >>> index.plan(np.array([0]), np.array([[True]]), None).commit()
            >>> index.is_empty()
            False
        """
        return not np.count_nonzero(self._np["written"])  # a Python bool (ndarray.any() costs 4x more)

    def live_rows(self) -> np.ndarray:
        """Live rows per stream, ``[num_streams]`` (observation-only rows included).

        Examples:
            >>> import numpy as np
            >>> index = EpisodeIndex(num_streams=2, stream_capacity=4)
            >>> index.plan(np.array([1]), np.array([[False, True]]), None).commit()
            >>> index.live_rows().tolist()  # 2 steps and the final observation
            [0, 3]
        """
        return self._np["written"] - self.live_start()

    def is_transition(self, rows: npt.ArrayLike) -> np.ndarray:
        """Whether each physical row holds a published transition (bool, shaped as ``rows``).

        An episode's final (or pending) observation row is live but is not a
        transition; neither is an unwritten row.

        Examples:
            >>> import numpy as np
            >>> index = EpisodeIndex(num_streams=1, stream_capacity=4)
            >>> index.plan(np.array([0]), np.array([[False, True]]), None).commit()
            >>> index.is_transition(np.arange(4)).tolist()
            [True, True, False, False]
        """
        return self._np["row_is_step"][rows]

    def window_lengths(self, rows: np.ndarray, n: int) -> np.ndarray:
        """``min(n, steps of its episode from the row on)`` for live transitions ``rows`` (``[B]``).

        An episode's steps are consecutive transition rows of its stream,
        followed by its final (or, while it runs, pending) observation row,
        which is not a transition: a window grows while the next row is one.
        This reads the ``n - 1`` transition flags after each row, next to the
        flag the draw just read, instead of locating the row's episode.

        Examples:
            >>> import numpy as np
            >>> index = EpisodeIndex(num_streams=1, stream_capacity=8)
            >>> index.plan(np.array([0]), np.array([[False, False, True, False]]), None).commit()
            >>> index.window_lengths(np.array([0, 1, 2, 4]), 3).tolist()  # episode of 3, then 1 step
            [3, 2, 1, 1]
        """
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        length = np.empty(rows.shape, dtype=np.int64)
        window_lengths(rows.reshape(-1), self._np["row_is_step"], self.stream_capacity, n,
                       length.reshape(-1))
        return length

    def draw_rows(self, count: int, generator: torch.Generator | None) -> np.ndarray:
        """``count`` live transitions, uniform, with replacement: their physical rows.

        The live rows of stream ``s`` are its slots ``0 .. min(written, C) - 1``
        (the ring's first pass, or all of it), so the ``u``-th live row overall
        is one offset away from ``u`` (none once every stream is full). A row
        that holds only an observation (an episode's final or pending one) is
        rejected: a round draws a few more rows than needed and keeps the first
        transitions among them (exact rejection sampling); such rows are one
        per episode, so one round usually does. O(count + num_streams). Callers check
        ``count >= 1`` (see :func:`torchrl_ext.samplers.draw_transitions`).

        Raises:
            ValueError: the index holds no transition.
            RuntimeError: no transition found after many rounds (an inconsistent index).

        Examples:
            >>> import numpy as np, torch
            >>> index = EpisodeIndex(num_streams=2, stream_capacity=8)
            >>> index.plan(np.array([1]), np.array([[False, True]]), None).commit()
            >>> rows = index.draw_rows(6, torch.Generator().manual_seed(0))
            >>> sorted(set(rows.tolist()))  # stream 1's steps, never its final observation (row 10)
            [8, 9]
        """
        total, shift, ends = self._live_rows()
        rows = np.empty(count, dtype=np.int64)
        filled = 0
        for _ in range(_MAX_ROUNDS):
            todo = count - filled
            # a margin for the observation-only rows, so that one round usually does
            drawn = uniform_below(total, todo + todo // 16 + 4, generator)
            filled = keep_transitions(drawn, ends, shift, self._np["row_is_step"], rows, filled)
            if filled == count:
                return rows
        raise RuntimeError("draw_rows: too many redraws; the episode index is inconsistent.")

    def _live_rows(self) -> tuple[int, np.ndarray, np.ndarray]:
        """``(total, shift, ends)``: how :meth:`draw_rows` maps a draw to a live row.

        ``total`` live rows; stream ``s``'s are the draws ``u`` in ``[ends -
        live, ends)[s]``, at physical row ``u + shift[s]`` (``shift`` is
        empty once every stream is full: ``u`` is the row). They are a function
        of the streams' live rows (``min(written, C)``) alone, so they are kept
        for the cursors (``written``) they were computed from, and for the live
        rows: every commit, reset or load moves the cursors, with or without
        the write token (a plain ``plan().commit()`` leaves the token as it is),
        and once every stream is full a write moves the cursors but not the
        live rows (the geometry is kept, not recomputed).

        Raises:
            EmptyBufferError: the index holds no transition.
        """
        cursors = self._np["written"].tobytes()  # [S] int64, one snapshot of the shared cursors
        cached = self._live
        if cached is not None and cached[0] == cursors:
            return cached[2]
        written = np.frombuffer(cursors, dtype=np.int64)
        live = np.minimum(written, self.stream_capacity)  # [S] live rows
        rows = live.tobytes()
        if cached is not None and cached[1] == rows:
            self._live = (cursors, rows, cached[2])
            return cached[2]
        ends = live.cumsum()
        total = int(ends[-1])
        if (total - self.num_streams) // 2 < 1:
            # (rows - S) / 2 bounds the transitions from below: count only near it,
            # and keep the geometry for these cursors only (the count may change)
            if not self.num_transitions():
                raise EmptyBufferError(EMPTY_BUFFER)
            rows = b""
        shift = _FULL if total == self.num_rows else self._stream_base - ends + live
        self._live = (cursors, rows, (total, shift, ends))
        return total, shift, ends

    def draw_transitions(
        self, count: int, generator: torch.Generator | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`draw_rows` as ``(tau, stream)``.

        Examples:
            >>> import numpy as np, torch
            >>> index = EpisodeIndex(num_streams=1, stream_capacity=8)
            >>> index.plan(np.array([0]), np.array([[False, True]]), None).commit()
            >>> tau, stream = index.draw_transitions(6, torch.Generator().manual_seed(0))
            >>> sorted(set(tau.tolist())), set(stream.tolist())  # never the final observation (tau 2)
            ([0, 1], {0})
        """
        return self.row_coordinates(self.draw_rows(count, generator))

    def episode_at(self, slots: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(stream, start, length)`` of the episodes at table ``slots`` (:meth:`episode_slot`).

        ``start`` is the episode's first ``tau``, ``length`` its steps written so far.

        Examples:
            >>> import numpy as np
            >>> index = EpisodeIndex(num_streams=2, stream_capacity=8)
            >>> index.plan(np.array([1]), np.array([[False, True, True]]), None).commit()
            >>> stream, start, length = index.episode_at(index.episode_slot(np.array([1, 1]), np.array([0, 1])))
            >>> stream.tolist(), start.tolist(), length.tolist()  # episodes of 2 and 1 steps
            ([1, 1], [0, 3], [2, 1])
        """
        slots = np.asarray(slots)
        return (
            slots // self.episode_capacity,
            self._np["episode_start_flat"][slots],
            self._np["episode_length_flat"][slots],
        )

    def live_episodes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every episode with a live row: ``(slot, length, first live step)``.

        O(live episodes). The oldest episode of a stream may have lost its first
        rows to the ring (``first live step > 0``); an episode still being
        written is included with the steps written so far.

        Examples:
            >>> import numpy as np
            >>> index = EpisodeIndex(num_streams=1, stream_capacity=4)
            >>> index.plan(np.array([0]), np.array([[False, False, True]]), None).commit()
            >>> slot, length, first = index.live_episodes()  # 3 steps, 4 rows kept of its 4
            >>> length.tolist(), first.tolist()
            ([3], [0])
        """
        v = self._np
        lo = self.live_start()
        parts = []
        for s in np.flatnonzero(v["written"] > lo):
            oldest = v["row_episode"][self.physical_rows(lo[s], s)]
            episodes = np.arange(oldest, v["episode_count"][s])
            slot = self.episode_slot(np.full_like(episodes, s), episodes)
            start = v["episode_start_flat"][slot]
            parts.append((slot, v["episode_length_flat"][slot], np.maximum(lo[s] - start, 0)))
        if not parts:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty, empty
        slot, length, first = (np.concatenate(column) for column in zip(*parts))
        return slot, length, first

    def complete_episodes(self) -> tuple[np.ndarray, np.ndarray]:
        """Per stream, the complete episodes whose rows are all live: ``(first, count)``.

        An episode is complete once its last step is written (done or a new
        trajectory); episode numbers ``first[s], ..., first[s] + count[s] - 1`` of
        stream ``s`` qualify. O(num_streams).

        Examples:
            >>> import numpy as np
            >>> index = EpisodeIndex(num_streams=1, stream_capacity=8)
            >>> index.plan(np.array([0]), np.array([[False, True, False]]), None).commit()
            >>> first, count = index.complete_episodes()  # episode 1 still runs
            >>> first.tolist(), count.tolist()
            ([0], [1])
        """
        v = self._np
        lo = self.live_start()
        streams = np.arange(self.num_streams)
        has_rows = v["written"] > lo
        oldest = np.where(has_rows, v["row_episode"][self.physical_rows(lo, streams)], 0)
        cut = v["episode_start_flat"][self.episode_slot(streams, oldest)] < lo
        first = oldest + (has_rows & cut)
        last = v["episode_count"] - 1 - v["is_open"]  # last complete episode
        return first, np.where(has_rows, np.maximum(last - first + 1, 0), 0)

    def window_candidates(
        self, count: int, generator: torch.Generator | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``count`` live transitions as window starts: ``(slot, step, length)`` of each.

        The :class:`~torchrl_ext.core.WindowSource` side of the index
        (see :func:`~torchrl_ext.core.draw_windows`): uniform over live
        transitions, each with its episode's table slot, its step in the
        episode and the episode's length so far.

        Examples:
            >>> import numpy as np, torch
            >>> index = EpisodeIndex(num_streams=1, stream_capacity=8)
            >>> index.plan(np.array([0]), np.array([[False, False, True]]), None).commit()
            >>> slot, step, length = index.window_candidates(5, torch.Generator().manual_seed(0))
            >>> sorted(set(step.tolist())) <= [0, 1, 2], set(length.tolist())
            (True, {3})
        """
        rows = self.draw_rows(count, generator)
        v = self._np
        slot, step, length = np.empty((3, count), dtype=np.int64)
        candidate_steps(rows, self.stream_capacity, self.episode_capacity, v["written"],
                        v["row_episode"], v["episode_start_flat"], v["episode_length_flat"],
                        slot, step, length)
        return slot, step, length

    def window_rows(self, slot: np.ndarray, step: np.ndarray, real: np.ndarray, width: int) -> np.ndarray:
        """``[B, width]`` physical rows of windows; padding repeats each window's last real step.

        Window ``i`` holds ``real[i]`` steps from step ``step[i]`` of the
        episode at table ``slot[i]`` (:meth:`episode_slot`), as
        :func:`~torchrl_ext.core.draw_windows` draws them: consecutive rows
        of its stream, across the ring's seam.

        Examples:
            >>> import numpy as np
            >>> index = EpisodeIndex(num_streams=1, stream_capacity=4)
            >>> index.plan(np.array([0]), np.array([[True, False]]), None).commit()
            >>> index.plan(np.array([0]), np.array([[False, False]]), None).commit()
            >>> slot = index.episode_slot(np.array([0, 0]), np.array([1, 1]))  # steps at tau 2, 3, 4
            >>> index.window_rows(slot, np.array([1, 0]), np.array([2, 3]), 3).tolist()  # tau 4: row 0
            [[3, 0, 0], [2, 3, 0]]
        """
        out = np.empty((len(slot), width), dtype=np.int64)
        episode_runs(slot, step, real, self.episode_capacity, self.stream_capacity,
                     self._np["episode_start_flat"], out)
        return out

    def reset(self) -> None:
        """Forget every row (``rb.empty()``)."""
        for name in ("written", "is_open", "episode_count", "episode_start", "episode_length"):
            getattr(self, name).zero_()
        self.row_is_step.zero_()
        self.stream_traj.fill_(-1)
        self.stream_writer.fill_(-1)
        self.stream_pid.fill_(-1)
        self.row_episode.fill_(-1)

    def backdate(self, stream: int, steps: int) -> None:
        """The episode of ``stream``'s oldest live row began ``steps`` steps before that row.

        For a reload of an episode whose first rows a ring had overwritten:
        its rows keep their step numbers, and no window reaches before them.

        Examples:
            >>> import numpy as np
            >>> index = EpisodeIndex(num_streams=1, stream_capacity=8)
            >>> index.plan(np.array([0]), np.zeros((1, 3), bool), None).commit()
            >>> index.backdate(0, 5)
            >>> index.locate(np.array([0]), np.array([0]))[1:]  # (step, start, length)
            (array([5]), array([-5]), array([8]))

        Raises:
            ValueError: ``stream`` is not one of the index's streams or holds no
                row yet; ``steps`` is not an int >= 0 (TypeError for a float).
        """
        steps = check_count("EpisodeIndex.backdate", "steps", steps, minimum=0)
        if isinstance(stream, bool) or not isinstance(stream, (int, np.integer)) or not (
            0 <= stream < self.num_streams and self._np["written"][stream] > 0
        ):
            raise ValueError(
                f"EpisodeIndex.backdate: stream={stream!r}, expected a stream in "
                f"[0, {self.num_streams}) that holds rows."
            )
        episode = self._np["row_episode"][self.physical_rows(self.live_start()[stream], stream)]
        slot = self.episode_slot(np.asarray(stream), episode)
        self._np["episode_start_flat"][slot] -= steps
        self._np["episode_length_flat"][slot] += steps

    # ------------------------------------------------------- state and sharing
    def state(self) -> TensorDict:
        """All index tensors (shared with the data, checkpointed with it)."""
        return TensorDict({name: getattr(self, name) for name in self._TENSORS}, batch_size=[])

    def load_state(self, state: TensorDict) -> None:
        """Copy a :meth:`state` in place (keeps shared memory shared).

        The write sequence and row versions are this index's own, not the
        checkpoint's: they order writes for readers in other processes, and go
        on from here (the caller marks the load, see :meth:`rewriting`).
        """
        self.state().exclude("write_seq", "row_version").update_(state.exclude("write_seq", "row_version"))
        # the checkpoint's writers go on from this process (see claim_streams), but for the
        # copies in other processes (ids from 2**32 on, drawn from a process id of the
        # saving run): no writer has those ids now, and their streams are free to claim
        owners = self._np["stream_writer"]
        self._np["stream_pid"][:] = np.where(owners < 0, -1, np.where(owners >= COPIES, EXITED, current_pid()))

    def share_memory_(self) -> EpisodeIndex:
        """Move every index tensor to shared memory, in place."""
        for name in self._VIEWED:
            getattr(self, name).share_memory_()
        self._bind()
        return self
