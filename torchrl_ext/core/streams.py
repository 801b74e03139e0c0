"""Stream ownership: which writer owns which stream of an :class:`~torchrl_ext.core.episodes.EpisodeIndex`.

Each writer (an env group, a worker) claims its own streams, so steps of
different writers never interleave within a stream. The owner of stream ``s``
is ``stream_writer[s]`` (``-1``: free), a tensor of the index's state, so
ownership is checkpointed and shared with the data. Beside it,
``stream_pid[s]`` is the process that claimed the stream (the one writing to
the shared rows: a collector's worker, or a Ray actor for its clients); when
streams run short, those of processes that exited are freed, as a release
would (a collector's workers after ``shutdown()``, so the next collector finds
their streams free).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from torchrl_ext.core.kernels.writes import owned_streams
from torchrl_ext.core.process import current_pid, process_exited

__all__ = ["COPIES", "EXITED", "StreamOwnership"]

#: writer ids from here on are copies of a buffer or handle in another process (their
#: ids hold a process id: see TransitionWriter and WriterHandle)
COPIES = 1 << 32
#: ``stream_pid`` of a stream whose writer's process is known gone (a copy's, after a restore)
EXITED = -2


class StreamOwnership:
    """Claim, list and release streams per writer id (a mixin of ``EpisodeIndex``).

    Expects ``self._np`` to hold numpy views ``stream_writer``, ``stream_pid``,
    ``is_open`` and ``stream_traj`` (as :class:`~torchrl_ext.core.views.NumpyViews`
    binds them). The caller holds the writers' lock of every process sharing
    them (:meth:`~torchrl_ext.storages.TransitionStorage.writing`).

    Examples:
        >>> from torchrl_ext.core.episodes import EpisodeIndex
        >>> index = EpisodeIndex(num_streams=2, stream_capacity=4)
        >>> index.claim_streams(3, 1).tolist(), index.writers().tolist()
        ([0], [3])
    """

    _np: dict[str, Any]

    def owned_streams(self, writer: int) -> np.ndarray:
        """Streams owned by ``writer``, in the order it claimed them.

        Examples:
            >>> from torchrl_ext.core.episodes import EpisodeIndex
            >>> index = EpisodeIndex(num_streams=4, stream_capacity=4)
            >>> index.claim_streams(7, 2).tolist(), index.owned_streams(7).tolist()
            ([0, 1], [0, 1])
        """
        owners = self._np["stream_writer"]
        out = np.empty(owners.shape[0], dtype=np.int64)
        return out[: owned_streams(owners, writer, out)]

    def claim_streams(self, writer: int, count: int) -> np.ndarray | None:
        """Give ``count`` free streams to ``writer`` (the lowest ids); ``None`` if too few are free.

        The streams are this process's (``stream_pid``). With too few free,
        the streams of processes that exited are released first
        (:meth:`release_exited`).

        Examples:
            >>> from torchrl_ext.core.episodes import EpisodeIndex
            >>> index = EpisodeIndex(num_streams=3, stream_capacity=4)
            >>> index.claim_streams(1, 2).tolist(), index.claim_streams(2, 2)
            ([0, 1], None)
        """
        owners = self._np["stream_writer"]
        if int((owners < 0).sum()) < count and not self.release_exited().size:
            return None
        free = np.flatnonzero(owners < 0)[:count]
        if free.size < count:
            return None
        owners[free] = writer
        self._np["stream_pid"][free] = current_pid()
        return free

    def release_exited(self) -> np.ndarray:
        """Release the streams claimed by processes that exited (:meth:`release_streams`); returns them.

        Their running episodes end at their last written step. A process
        still there, or not known to have exited, keeps its streams.

        Examples:
            >>> from torchrl_ext.core.episodes import EpisodeIndex
            >>> index = EpisodeIndex(num_streams=2, stream_capacity=4)
            >>> _ = index.claim_streams(7, 2)
            >>> index.release_exited().tolist()  # this process runs: nothing is freed
            []
        """
        owners, pids = self._np["stream_writer"], self._np["stream_pid"]
        here = current_pid()
        gone = [pid for pid in np.unique(pids[owners >= 0]).tolist()
                if pid == EXITED or (pid >= 0 and pid != here and process_exited(pid))]
        streams = np.flatnonzero((owners >= 0) & np.isin(pids, gone))
        self.end_episodes(streams)
        owners[streams] = -1
        pids[streams] = -1
        return streams

    def trajectory_stream(self, writer: int, traj: int, batch_trajs: np.ndarray) -> int | None:
        """The stream of ``writer`` that trajectory ``traj`` (of a batch of fragments ``batch_trajs``) writes to.

        The stream that holds it; else one of the writer's whose episode
        ended; else one whose trajectory the batch does not continue (it
        ended without a done flag: an env reset, a collector's
        ``reset_at_each_iter``; the new one cuts it there, as in a
        ``[num_envs, T]`` batch, instead of leaving it open on a stream of
        its own); else a free stream, claimed. ``None`` if there is none.

        Examples:
            >>> import numpy as np
            >>> from torchrl_ext.core.episodes import EpisodeIndex
            >>> index = EpisodeIndex(num_streams=2, stream_capacity=4)
            >>> index.trajectory_stream(0, 5, np.array([5]))  # a free stream, claimed
            0
        """
        owned = self.owned_streams(writer)
        held = self._np["stream_traj"][owned]
        for candidates in (owned[held == traj], owned[~self._np["is_open"][owned]],
                           owned[~np.isin(held, batch_trajs)]):
            if candidates.size:
                return int(candidates[0])
        claimed = self.claim_streams(writer, 1)
        return None if claimed is None else int(claimed[0])

    def release_streams(self, writer: int) -> np.ndarray:
        """Free ``writer``'s streams; their running episodes end at their last written step.

        An ended episode keeps its rows: its last step's next observation is
        the pending row, as for an episode cut by a new trajectory id.

        Examples:
            >>> import numpy as np
            >>> from torchrl_ext.core.episodes import EpisodeIndex
            >>> index = EpisodeIndex(num_streams=2, stream_capacity=8)
            >>> streams = index.claim_streams(1, 2)
            >>> index.plan(streams, np.zeros((2, 3), bool), None).commit()  # 2 running episodes
            >>> index.release_streams(1).tolist(), index.is_open.tolist(), index.writers().tolist()
            ([0, 1], [False, False], [])
        """
        streams = self.owned_streams(writer)
        self.end_episodes(streams)
        self._np["stream_writer"][streams] = -1
        self._np["stream_pid"][streams] = -1
        return streams

    def end_episodes(self, streams: np.ndarray) -> None:
        """End the running episodes of ``streams`` at their last written step; owners stay.

        Examples:
            >>> import numpy as np
            >>> from torchrl_ext.core.episodes import EpisodeIndex
            >>> index = EpisodeIndex(num_streams=2, stream_capacity=8)
            >>> index.plan(np.arange(2), np.zeros((2, 3), bool), None).commit()
            >>> index.end_episodes(np.array([1])); index.is_open.tolist()
            [True, False]
        """
        self._np["is_open"][streams] = False

    def writers(self) -> np.ndarray:
        """Ids of the writers owning at least one stream, sorted.

        Examples:
            >>> from torchrl_ext.core.episodes import EpisodeIndex
            >>> index = EpisodeIndex(num_streams=3, stream_capacity=4)
            >>> _ = index.claim_streams(5, 1), index.claim_streams(2, 1)
            >>> index.writers().tolist()
            [2, 5]
        """
        owners = self._np["stream_writer"]
        return np.unique(owners[owners >= 0])
