"""Writes to the episode index: where a write's steps go, and their publication.

:class:`IndexWrites` is a mixin of :class:`~torchrl_ext.core.episodes.EpisodeIndex`:
:meth:`~IndexWrites.plan` places the steps of a write (changing nothing),
the storage writes their rows, then :meth:`~IndexWrites.commit` publishes
them. Readers in other processes (DataLoader workers) read without the
buffer's lock; a sequence number (a seqlock) tells them which rows a write
touched while they read.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from torchrl_ext.core.kernels.writes import commit_steps, mark_rows, plan_steps
from torchrl_ext.core.plan import WritePlan

__all__ = ["IndexWrites"]

_NO_TRAJ = np.empty((0, 0), dtype=np.int64)  # a write without trajectory ids


class IndexWrites:
    """Plan, publish and version the writes of an episode index (a mixin of ``EpisodeIndex``).

    Expects the index's numpy views in ``self._np`` (see
    :class:`~torchrl_ext.core.views.NumpyViews`) and its ring sizes. The
    index arithmetic is compiled (:mod:`torchrl_ext.core.kernels.writes`).

    Examples:
        >>> import numpy as np
        >>> from torchrl_ext.core.episodes import EpisodeIndex
        >>> index = EpisodeIndex(num_streams=1, stream_capacity=8)
        >>> plan = index.plan(np.array([0]), np.array([[False, True]]), None)
        >>> plan.rows.tolist(), plan.next_rows.tolist()  # two steps, then the final observation
        ([[0, 1]], [[1, 2]])
    """

    _np: dict[str, Any]
    num_streams: int
    stream_capacity: int
    episode_capacity: int

    # ------------------------------------------------------------------ writes
    def plan(
        self,
        streams: np.ndarray,
        done: np.ndarray,
        traj: np.ndarray | None,
    ) -> WritePlan:
        """Place ``T`` steps of each of ``K`` streams; changes nothing yet.

        The caller stores the rows, then calls ``plan.commit()`` to publish them,
        so readers in other processes never see an index entry before its row.
        One compiled pass (:func:`~torchrl_ext.core.kernels.writes.plan_steps`),
        whatever ``K`` and ``T``.

        Args:
            streams (np.ndarray): ``[K]`` distinct stream ids.
            done (np.ndarray): ``[K, T]`` bool, the step ends its episode.
            traj (np.ndarray, optional): ``[K, T]`` trajectory ids; a change of
                id starts a new episode even without a done flag.

        Returns:
            the rows to write and the index update, see :class:`WritePlan`.

        Raises:
            ValueError: if a stream would overwrite rows of this same write.
        """
        v = self._np
        # C-contiguous, one dtype each: the kernels' one compiled signature (see core.kernels)
        streams = np.ascontiguousarray(streams, dtype=np.int64)
        done = np.ascontiguousarray(done, dtype=bool)
        ids = _NO_TRAJ if traj is None else np.ascontiguousarray(traj, dtype=np.int64)
        K, T = done.shape
        tau, episode = np.empty((K, T), dtype=np.int64), np.empty((K, T), dtype=np.int64)
        rows, next_rows = np.empty((K, T), dtype=np.int64), np.empty((K, T), dtype=np.int64)
        start = np.empty((K, T), dtype=bool)
        used, opened = plan_steps(streams, done, ids, v["written"], v["is_open"], v["episode_count"],
                          v["stream_traj"], self.stream_capacity, tau, start, episode, rows, next_rows)
        if used > self.stream_capacity:
            raise ValueError(
                f"a write of {T} steps needs up to {used} rows in one stream, "
                f"but each stream holds {self.stream_capacity} rows; write smaller "
                "chunks or raise the storage max_size."
            )
        return WritePlan(self, streams, done, ids, tau, start, episode, rows, next_rows, opened)

    # ------------------------------------------------ readers in other processes
    # A reader in another process (a DataLoader worker) draws and gathers
    # without the buffer's lock. Rows are only ever rewritten at the ring seam,
    # oldest first, so a drawn row whose version is older than the sequence
    # number read before the draw was not touched while the reader drew and
    # gathered it, and neither was any row after it in its episode (its
    # window, its goals): the read is whole. See TransitionStorage.stale.
    def read_token(self) -> int:
        """The write sequence number, read before drawing (see :meth:`touched_since`).

        Examples:
            >>> import numpy as np
            >>> from torchrl_ext.core.episodes import EpisodeIndex
            >>> index = EpisodeIndex(num_streams=1, stream_capacity=8)
            >>> token = index.read_token()  # a reader starts drawing
            >>> plan = index.plan(np.array([0]), np.array([[False, True]]), None)
            >>> index.begin_write(plan); plan.commit(); index.end_write()
            >>> index.touched_since(np.array([0, 1, 5]), token).tolist()  # rows 0-2 written since
            [True, True, False]
            >>> index.touched_since(np.array([0, 1]), index.read_token()).tolist()
            [False, False]
        """
        return int(self._np["write_seq"][0])

    def touched_since(self, rows: np.ndarray, token: int) -> np.ndarray:
        """Which ``rows`` a write touched since ``token`` was read (or was under way then).

        See :meth:`read_token` for an example.
        """
        # a write that began after the token has an odd sequence above it; one
        # under way when it was read (odd token) has the token itself
        return self._np["row_version"][rows] >= token + 1 - (token & 1)

    def begin_write(self, plan: WritePlan) -> None:
        """Mark the rows ``plan`` touches before their bytes change (seqlock, odd).

        See :meth:`read_token` for an example.
        """
        # the rows whose bytes a reader may read change: the next rows, and the
        # first rows of new episodes; a row continuing an episode keeps its
        # observation (it is the previous step's next observation) and gets its
        # step entries, which no reader reads before the commit makes it a step
        v = self._np
        mark_rows(v["write_seq"], v["row_version"], plan.rows, plan.next_rows, plan.start)

    @contextlib.contextmanager
    def rewriting(self) -> Iterator[None]:
        """One write touching every row, around a change of them all in place.

        A checkpoint loaded in place or an emptied buffer comes after every
        write before it: a reader that took its token before sees its draw
        stale, whatever write count a checkpoint was saved at.

        Examples:
            >>> from torchrl_ext.core.episodes import EpisodeIndex
            >>> index = EpisodeIndex(num_streams=1, stream_capacity=8)
            >>> token = index.read_token()
            >>> with index.rewriting():
            ...     index.reset()
            >>> bool(index.touched_since(np.arange(8), token).all())
            True
        """
        seq = self._np["write_seq"]
        seq[0] += 1
        self._np["row_version"][:] = seq[0]
        try:
            yield
        finally:
            self.end_write()

    def end_write(self) -> None:
        """Close the write opened by :meth:`begin_write` (even again).

        See :meth:`read_token` for an example.
        """
        self._np["write_seq"][0] += 1

    def commit(self, plan: WritePlan) -> None:
        """Publish a write whose rows are in storage.

        Episode tables first, then the rows' episodes and transition flags,
        cursors last: a reader in another process that sees a row as a
        transition (``row_is_step``) also sees its data and its episode's
        start and length, so its windows and goals stay inside rows already
        written. (Rows being *overwritten* at the ring seam are another matter:
        they are live until this commit, see the storage's notes.)
        """
        v = self._np
        commit_steps(plan.streams, plan.done, plan.traj, plan.tau, plan.start, plan.episode,
                     plan.rows, plan.next_rows, self.episode_capacity,
                     v["episode_start_flat"], v["episode_length_flat"], v["row_episode"],
                     v["row_is_step"], v["episode_count"], v["stream_traj"], v["is_open"],
                     v["written"])
