"""A writer handle: one collector, thread or loop writing into a shared buffer."""
from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from torchrl_ext.core.process import current_pid
from torchrl_ext.core.schema import as_key

__all__ = ["WriterHandle", "copy_writer_id", "handle_of_copy"]

# ids of a handle's copies in other processes: above every handle id and every
# process copy's own id (2**32 + pid); a pid is below 2**22 (Linux's largest pid_max)
COPY_IDS, _PID_BITS = 1 << 33, 22


def copy_writer_id(writer_id: int, pid: int) -> int:
    """The writer id of a copy of handle ``writer_id`` writing in process ``pid``.

    Examples:
        >>> copy_writer_id(1, 4321) == COPY_IDS + (1 << 22) + 4321
        True
    """
    return COPY_IDS + (writer_id << _PID_BITS) + pid


def handle_of_copy(writer: int) -> int | None:
    """The handle id whose copy writes as ``writer`` (:func:`copy_writer_id`); ``None`` for any other writer.

    Examples:
        >>> handle_of_copy(copy_writer_id(3, 4321)), handle_of_copy(3), handle_of_copy(2**32 + 4321)
        (3, None, None)
    """
    return (writer - COPY_IDS) >> _PID_BITS if writer >= COPY_IDS else None


class WriterHandle:
    """Writes into a replay buffer as one writer, with streams of its own.

    Every ``extend`` / ``add`` goes to the buffer with the handle's writer id
    in the ``writer_key`` entry; :class:`~torchrl_ext.writers.TransitionWriter`
    gives each writer id its own streams, so episodes of different handles
    never mix, even when their trajectory ids coincide (two collectors both
    number theirs from 0). Everything else (``write_count``, ``sample``,
    ``len``...) is the buffer's, so a handle goes wherever a buffer does: a
    collector's ``replay_buffer=``, a thread, a gymnasium loop. Handles pickle
    (with the buffer, or with a Ray client of it: see
    :func:`~torchrl_ext.make_replay_buffer`'s ``service_backend``). A copy
    in another process (each worker of a multi-process collector given the
    handle, or a forked process) writes as a writer of its own,
    :func:`copy_writer_id` of the handle's id and its process, so two
    processes never share streams; :meth:`release` in the handle's own
    process frees its copies' streams too.

    Get handles from :meth:`TransitionReplayBuffer.writer_handle
    <torchrl_ext.TransitionReplayBuffer.writer_handle>` (fresh ids), or build
    one with an id of your choosing (e.g. to continue a writer's streams
    after a restore).

    Args:
        rb: the buffer, or a client of a remote one (anything with ``extend``).
        writer_id (int): the writer id, ``>= 0``.

    Keyword Args:
        writer_key (NestedKey): the entry carrying the id; must match the
            buffer's writer. Defaults to ``("collector", "writer_id")``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import make_replay_buffer
        >>> rb = make_replay_buffer(100, num_streams=4, seed=0)
        >>> first, second = rb.writer_handle(), rb.writer_handle()
        >>> def step(v):  # one step of 2 envs ([envs, time]), trajectory ids 0 and 1
        ...     return TensorDict({"observation": torch.full((2, 1, 1), v), "action": torch.zeros(2, 1, 1),
        ...         "next": {"observation": torch.full((2, 1, 1), v + 1.0), "reward": torch.ones(2, 1, 1),
        ...                  "done": torch.zeros(2, 1, 1, dtype=torch.bool)},
        ...         "collector": {"traj_ids": torch.arange(2).view(2, 1)}}, [2, 1])
        >>> _ = first.extend(step(0.0)); _ = second.extend(step(10.0))
        >>> rb.storage.index.owned_streams(first.writer_id), rb.storage.index.owned_streams(second.writer_id)
        (array([0, 1]), array([2, 3]))
        >>> first.release()  # done writing: its streams are free again
        >>> rb.storage.index.owned_streams(first.writer_id)
        array([], dtype=int64)
    """

    def __init__(
        self, rb: Any, writer_id: int, *, writer_key: NestedKey = ("collector", "writer_id")
    ) -> None:
        if isinstance(writer_id, bool) or not isinstance(writer_id, int) or writer_id < 0:
            raise ValueError(f"WriterHandle: writer_id={writer_id!r}, expected an int >= 0.")
        self.rb = rb
        self._writer_id = writer_id
        self._home = current_pid()  # the process the handle was made in
        self.writer_key = as_key(writer_key, "writer_key", "WriterHandle")

    @property
    def writer_id(self) -> int:
        """The id this handle writes as in this process: its own, or its copy's (:func:`copy_writer_id`)."""
        pid = current_pid()
        return self._writer_id if pid == self._home else copy_writer_id(self._writer_id, pid)

    def _tagged(self, data: TensorDictBase) -> TensorDictBase:
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"WriterHandle: expected a TensorDict, got {type(data).__name__}.")
        out = data.copy()  # shallow: the caller's TensorDict is left as it was
        out.set(self.writer_key, torch.tensor(self.writer_id).expand(data.shape))
        return out

    def extend(self, data: TensorDictBase, **kwargs: Any) -> Any:
        """``rb.extend(data)`` as this writer."""
        return self.rb.extend(self._tagged(data), **kwargs)

    def add(self, data: TensorDictBase) -> Any:
        """``rb.add(data)`` as this writer."""
        return self.rb.add(self._tagged(data))

    def release(self) -> None:
        """End this writer's running episodes and free its streams (``rb.release_writer``)."""
        self.rb.release_writer(self.writer_id)

    def end_episodes(self, envs: Any) -> None:
        """End the running episodes of this writer's envs ``envs`` (``rb.end_episodes``)."""
        self.rb.end_episodes(envs, self.writer_id)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or "rb" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.rb, name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(writer_id={self.writer_id}, rb={type(self.rb).__name__})"
