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
from typing import TYPE_CHECKING, Any

import numpy as np

from torchrl_ext.core.plan import WritePlan

__all__ = ["IndexWrites"]


class IndexWrites:
    """Plan, publish and version the writes of an episode index (a mixin of ``EpisodeIndex``).

    Expects the index's numpy views in ``self._np`` (see
    :class:`~torchrl_ext.core.views.NumpyViews`), its ring sizes and
    :meth:`~torchrl_ext.core.episodes.EpisodeIndex.episode_slot`.

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

    if TYPE_CHECKING:  # EpisodeIndex's, for type checkers

        def episode_slot(self, stream: np.ndarray, episode: np.ndarray) -> np.ndarray: ...

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
        K, T = done.shape
        if T == 1:
            return self._plan_one_step(streams, done[:, 0], None if traj is None else traj[:, 0])
        was_open = v["is_open"][streams]  # [K]
        start = np.empty((K, T), dtype=bool)
        start[:, 0] = ~was_open
        start[:, 1:] = done[:, :-1]
        if traj is not None:
            start[:, 0] |= traj[:, 0] != v["stream_traj"][streams]
            start[:, 1:] |= traj[:, 1:] != traj[:, :-1]
        # A start that follows a step written before it leaves that step's
        # observation row (final or pending) in place and opens on the next row.
        skip = start.copy()
        skip[:, 0] &= was_open
        base = v["written"][streams] - was_open  # [K]
        tau = base[:, None] + np.arange(T) + skip.cumsum(1)  # [K, T]
        used = tau[:, -1] + 2 - base
        if (used > self.stream_capacity).any():
            raise ValueError(
                f"a write of {T} steps needs up to {int(used.max())} rows in one stream, "
                f"but each stream holds {self.stream_capacity} rows; write smaller "
                "chunks or raise the storage max_size."
            )
        episode = (v["episode_count"][streams] - 1)[:, None] + start.cumsum(1)
        # the last step of each episode in this write sets its length
        last = np.ones((K, T), dtype=bool)
        last[:, :-1] = start[:, 1:]
        # episode slots and first tau, at the (few) starts and last steps only
        start_slots = self.episode_slot(streams[np.nonzero(start)[0]], episode[start])
        length_slots = self.episode_slot(streams[np.nonzero(last)[0]], episode[last])
        # first tau of each last step's episode: opened in this write, or already known
        opened = np.maximum.accumulate(np.where(start, tau, -1), axis=1)[last]
        first = np.where(opened >= 0, opened, v["episode_start_flat"][length_slots])
        base_rows = (streams * self.stream_capacity)[:, None]  # [K, 1] row 0 of each ring
        return WritePlan(
            index=self,
            streams=streams,
            rows=base_rows + tau % self.stream_capacity,
            next_rows=base_rows + (tau + 1) % self.stream_capacity,
            start=start,
            episode=episode,
            start_slots=start_slots,
            start_tau=tau[start],
            length_slots=length_slots,
            lengths=tau[last] - first + 1,
            written=tau[:, -1] + 2,
            is_open=~done[:, -1],
            traj=None if traj is None else traj[:, -1],
        )

    def _plan_one_step(
        self, streams: np.ndarray, done: np.ndarray, traj: np.ndarray | None
    ) -> WritePlan:
        # plan() for T == 1 (a vector-env step), with [K] arrays: the hot path
        # (each numpy op here is a sizeable part of a step's write).
        v = self._np
        was_open = v["is_open"][streams]
        start = ~was_open
        if traj is not None:
            start |= traj != v["stream_traj"][streams]
            # open stream: the step goes to the pending row (written - 1), unless a new
            # trajectory starts, which leaves that row as the old episode's last.
            tau = v["written"][streams] - (was_open & ~start)
        else:
            tau = v["written"][streams] - was_open
        episode = v["episode_count"][streams] - 1 + start
        slot = streams * self.episode_capacity + episode % self.episode_capacity
        # an opened episode has length 1; a continued one runs from its start
        lengths = np.where(start, 1, tau + 1 - v["episode_start_flat"][slot])
        base = streams * self.stream_capacity
        rows = base + tau % self.stream_capacity
        return WritePlan(
            index=self,
            streams=streams,
            rows=rows[:, None],
            next_rows=(base + (tau + 1) % self.stream_capacity)[:, None],
            start=start[:, None],
            episode=episode[:, None],
            start_slots=slot[start],
            start_tau=tau[start],
            length_slots=slot,
            lengths=lengths,
            written=tau + 2,
            is_open=~done,
            traj=traj,
        )

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
        seq = self._np["write_seq"]
        seq[0] += 1
        # the rows whose bytes a reader may read change: the next rows, and the
        # first rows of new episodes; a row continuing an episode keeps its
        # observation (it is the previous step's next observation) and gets its
        # step entries, which no reader reads before the commit makes it a step
        self._np["row_version"][plan.rows[plan.start]] = seq[0]
        self._np["row_version"][plan.next_rows] = seq[0]

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
        v["episode_start_flat"][plan.start_slots] = plan.start_tau
        v["episode_length_flat"][plan.length_slots] = plan.lengths
        v["row_episode"][plan.rows] = plan.episode
        v["row_episode"][plan.next_rows] = plan.episode
        # next rows first: a step's next row is the following step's row when
        # the episode continues, and then it is a transition
        v["row_is_step"][plan.next_rows] = False
        v["row_is_step"][plan.rows] = True
        v["episode_count"][plan.streams] = plan.episode[:, -1] + 1
        if plan.traj is not None:
            v["stream_traj"][plan.streams] = plan.traj
        v["is_open"][plan.streams] = plan.is_open
        v["written"][plan.streams] = plan.written
