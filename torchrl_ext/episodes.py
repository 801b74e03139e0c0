"""The episode index: which row belongs to which stream, episode and step.

Layout (owned here, used by the storage, the writer and every sampler):

* The storage has ``num_streams * stream_capacity`` rows. Stream ``s`` is a ring
  of ``stream_capacity`` rows; its logical time ``tau`` (rows ever written to the
  stream) maps to the physical row ``(tau % stream_capacity) * num_streams + s``
  (time-major, like TorchRL's ``ndim=2`` storages).
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

import torch
from tensordict import TensorDict

__all__ = ["EpisodeIndex"]


class EpisodeIndex:
    """Per-stream episode bookkeeping for an episode-aware storage.

    Updated by :class:`~torchrl_ext.writers.EpisodeWriter` in O(rows written);
    read by samplers in O(batch). Nothing here scans the storage.

    Args:
        num_streams (int): number of streams (envs) sharing the storage.
        stream_capacity (int): rows per stream ring, at least 2.

    Examples:
        >>> index = EpisodeIndex(num_streams=2, stream_capacity=4)
        >>> index.physical_rows(torch.tensor([0, 5]), torch.tensor([1, 0]))
        tensor([1, 2])
    """

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
        self.written = torch.zeros(S, dtype=torch.int64)  # rows ever written per stream
        self.is_open = torch.zeros(S, dtype=torch.bool)  # last episode still running
        self.episode_count = torch.zeros(S, dtype=torch.int64)  # episodes ever opened
        self.stream_traj = torch.full((S,), -1, dtype=torch.int64)  # traj id of last step
        self.row_episode = torch.full((S * C,), -1, dtype=torch.int64)
        self.episode_start = torch.zeros(S, E, dtype=torch.int64)  # tau of step 0
        self.episode_length = torch.zeros(S, E, dtype=torch.int64)  # steps written

    # ------------------------------------------------------------------ layout
    @property
    def num_rows(self) -> int:
        """Total number of physical rows."""
        return self.num_streams * self.stream_capacity

    def physical_rows(self, tau: torch.Tensor, stream: torch.Tensor) -> torch.Tensor:
        """Map logical time ``tau`` in ``stream`` to physical rows (ring wrap-around)."""
        return torch.remainder(tau, self.stream_capacity) * self.num_streams + stream

    def row_coordinates(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inverse of :meth:`physical_rows` for live rows: ``(tau, stream)``.

        A physical slot holds the most recent ``tau`` congruent to it below the
        stream's write cursor.
        """
        stream = torch.remainder(rows, self.num_streams)
        slot = torch.div(rows, self.num_streams, rounding_mode="floor")
        last = self.written[stream] - 1
        tau = last - torch.remainder(last - slot, self.stream_capacity)
        return tau, stream

    def live_start(self) -> torch.Tensor:
        """Oldest live ``tau`` per stream, ``[num_streams]``."""
        return (self.written - self.stream_capacity).clamp_min(0)

    # ----------------------------------------------------------------- queries
    def episode_slot(self, stream: torch.Tensor, episode: torch.Tensor) -> torch.Tensor:
        """Flat position of ``(stream, episode)`` in the episode tables."""
        return stream * self.episode_capacity + torch.remainder(
            episode, self.episode_capacity
        )

    def locate(
        self, tau: torch.Tensor, stream: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Episode facts of live rows.

        Returns:
            ``(episode, step, start, length)``: the row's per-stream episode
            number, its step in that episode, the episode's first ``tau`` and its
            number of steps written so far. The row is a transition iff
            ``step < length``.
        """
        episode = self.row_episode[self.physical_rows(tau, stream)]
        slot = self.episode_slot(stream, episode)
        start = self.episode_start.view(-1)[slot]
        length = self.episode_length.view(-1)[slot]
        return episode, tau - start, start, length

    def num_transitions(self) -> int:
        """Number of live transitions (rows with a live next row)."""
        live = self.written - self.live_start()  # [S]
        has = live > 0
        if not bool(has.any()):
            return 0
        streams = torch.arange(self.num_streams)[has]
        oldest = self.row_episode[self.physical_rows(self.live_start()[has], streams)]
        # each live episode has exactly one live observation-only row (its last)
        obs_rows = self.episode_count[has] - oldest
        return int((live[has] - obs_rows).sum())

    # ------------------------------------------------------------------ writes
    def plan(
        self,
        streams: torch.Tensor,
        done: torch.Tensor,
        traj: torch.Tensor | None,
    ) -> WritePlan:
        """Place ``T`` steps of each of ``K`` streams and update the index.

        Args:
            streams (torch.Tensor): ``[K]`` distinct stream ids.
            done (torch.Tensor): ``[K, T]`` bool, the step ends its episode.
            traj (torch.Tensor, optional): ``[K, T]`` trajectory ids; a change of
                id starts a new episode even without a done flag.

        Returns:
            the rows to write, see :class:`WritePlan`.

        Raises:
            ValueError: if a stream would overwrite rows of this same write.
        """
        K, T = done.shape
        was_open = self.is_open[streams]  # [K]
        start = torch.zeros(K, T, dtype=torch.bool)
        start[:, 0] = ~was_open
        start[:, 1:] = done[:, :-1]
        if traj is not None:
            start[:, 0] |= traj[:, 0] != self.stream_traj[streams]
            start[:, 1:] |= traj[:, 1:] != traj[:, :-1]
        # A start that follows a step written before it leaves that step's
        # observation row (final or pending) in place and opens on the next row.
        skip = start.clone()
        skip[:, 0] &= was_open
        base = self.written[streams] - was_open.long()  # [K]
        steps = torch.arange(T).expand(K, T)
        tau = base[:, None] + steps + skip.long().cumsum(1)  # [K, T]
        used = tau[:, -1] + 2 - base
        if bool((used > self.stream_capacity).any()):
            raise ValueError(
                f"a write of {T} steps needs up to {int(used.max())} rows in one stream, "
                f"but each stream holds {self.stream_capacity} rows; write smaller "
                "chunks or raise the storage max_size."
            )
        episode = (self.episode_count[streams] - 1)[:, None] + start.long().cumsum(1)
        stream_kt = streams[:, None].expand(K, T)
        slot = self.episode_slot(stream_kt, episode)
        flat_start = self.episode_start.view(-1)
        flat_start[slot[start]] = tau[start]
        # the last step of each episode in this write sets its length
        last = torch.ones(K, T, dtype=torch.bool)
        last[:, :-1] = start[:, 1:]
        self.episode_length.view(-1)[slot[last]] = (
            tau[last] - flat_start[slot[last]] + 1
        )
        rows = self.physical_rows(tau, stream_kt)
        next_rows = self.physical_rows(tau + 1, stream_kt)
        self.row_episode[rows.reshape(-1)] = episode.reshape(-1)
        self.row_episode[next_rows.reshape(-1)] = episode.reshape(-1)
        self.written[streams] = tau[:, -1] + 2
        self.is_open[streams] = ~done[:, -1]
        self.episode_count[streams] = episode[:, -1] + 1
        if traj is not None:
            self.stream_traj[streams] = traj[:, -1]
        return WritePlan(rows=rows, next_rows=next_rows, start=start)

    def reset(self) -> None:
        """Forget every row (``rb.empty()``)."""
        for name in ("written", "is_open", "episode_count", "episode_start", "episode_length"):
            getattr(self, name).zero_()
        self.stream_traj.fill_(-1)
        self.row_episode.fill_(-1)

    # ------------------------------------------------------- state and sharing
    def state(self) -> TensorDict:
        """All index tensors (shared with the data, checkpointed with it)."""
        return TensorDict(
            {
                "written": self.written,
                "is_open": self.is_open,
                "episode_count": self.episode_count,
                "stream_traj": self.stream_traj,
                "row_episode": self.row_episode,
                "episode_start": self.episode_start,
                "episode_length": self.episode_length,
            },
            batch_size=[],
        )

    def load_state(self, state: TensorDict) -> None:
        """Copy a :meth:`state` in place (keeps shared memory shared)."""
        self.state().update_(state)

    def share_memory_(self) -> EpisodeIndex:
        """Move every index tensor to shared memory, in place."""
        for name, tensor in self.state().items():
            setattr(self, name, tensor.share_memory_())
        return self


class WritePlan:
    """Where the steps of one write go.

    Attributes:
        rows: ``[K, T]`` physical row of each step (its observation, action and
            next-only entries).
        next_rows: ``[K, T]`` physical row of each step's next observation.
        start: ``[K, T]`` bool, the step opens an episode (its observation is
            written to ``rows``; otherwise that row already holds it).
    """

    __slots__ = ("rows", "next_rows", "start")

    def __init__(self, rows: torch.Tensor, next_rows: torch.Tensor, start: torch.Tensor):
        self.rows = rows
        self.next_rows = next_rows
        self.start = start
