"""Episode-aware writer: splits incoming data into env streams and places each step."""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Sequence, cast

import numpy as np

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey
from torchrl.data.replay_buffers.writers import Writer

from torchrl_ext.core.checks import check_count
from torchrl_ext.core.kernels.writes import any_set
from torchrl_ext.core.process import current_pid
from torchrl_ext.core.streams import COPIES
from torchrl_ext.core.schema import RowSchema, as_key, key_str
from torchrl_ext.writers._first import check_first_batch, first_batch_streams
from torchrl_ext.writers._layout import _entries, _Layout, _select_steps
from torchrl_ext.writers.handle import handle_of_copy
from torchrl_ext.storages._memory import move_together
from torchrl_ext.storages._host import byte_table, host_array
from torchrl_ext.storages.transition import TransitionStorage

__all__ = ["TransitionWriter", "DEFAULT_DONE_KEYS"]

# writer ids of writer copies in other processes: this offset plus the process id
logger = logging.getLogger(__name__)

DEFAULT_DONE_KEYS: tuple[NestedKey, ...] = (
    ("next", "done"),
    ("next", "terminated"),
    ("next", "truncated"),
)


class TransitionWriter(Writer):
    """Writes transitions into an :class:`~torchrl_ext.storages.TransitionStorage`.

    Every env is a stream and streams never mix. The batch layout says which
    dims are envs and which is time:

    ===================================  =========================================
    batch shape                           meaning
    ===================================  =========================================
    ``[]``                                one transition of a single env
    ``[N]``                               one step of ``N`` envs (env ``i``: the writer's stream ``i``)
    ``[N, T]``                            ``T`` steps of ``N`` envs, time last (collectors)
    ``[T, N]`` named ``("time", None)``   ``T`` steps of ``N`` envs, time first (read in place)
    ``[T]`` named ``"time"``              ``T`` steps of a single env
    ``[B]`` with ``traj_key``             flat trajectory fragments (needs ``num_streams``)
    ===================================  =========================================

    An episode ends at a step whose done entries (``done_keys``, OR-ed) are set,
    or where ``traj_key`` changes. Terminated and truncated flags are stored as
    they came; the next observation under ``"next"`` is kept as the episode's
    true final observation. The first write fixes the stored entries and the
    number of streams; later writes must match (errors name the entry).

    **Several writers.** Collectors, threads or loops feeding one buffer are
    told apart by a writer id, the ``writer_key`` entry of their data (one id
    per write, not stored; ``0`` when absent). :meth:`TransitionReplayBuffer.writer_handle
    <torchrl_ext.TransitionReplayBuffer.writer_handle>` hands out handles that
    set it. A writer's first write claims as many free streams as it has envs
    (its env ``i`` then always writes to its ``i``-th stream; flat trajectory
    batches claim streams as trajectories start), so two writers never share a
    stream, whatever their trajectory ids: collectors number theirs from 0
    each. With several writers, give ``num_streams`` = the env count of all of
    them; a writer that finds too few free streams gets a ``ValueError``
    naming that fix. A step that continues a trajectory (same ``traj_key`` id)
    but does not observe its last next observation (two collectors writing as
    one writer, or a collector restarted with the same ids) is refused with a
    ``ValueError``: collector data is never stitched onto another writer's episode.
    :meth:`release` frees a finished writer's streams.

    Keyword Args:
        num_streams (int, optional): number of streams, shared by all writers.
            Inferred from the first ``[N]`` / ``[N, T]`` write (one writer);
            required for flat trajectory batches.
        done_keys (sequence of NestedKey): entries that end an episode. Defaults to
            ``("next", "done")``, ``("next", "terminated")``, ``("next", "truncated")``
            (those present are used; at least one must be).
        reward_key (NestedKey): reward entry, checked to be ``[..., 1]``.
            Defaults to ``("next", "reward")``.
        traj_key (NestedKey): trajectory-id entry. Defaults to
            ``("collector", "traj_ids")``.
        mask_key (NestedKey): validity entry; steps where it is False are not
            transitions (padding, gymnasium's reset step) and are skipped, not
            stored. Defaults to ``("collector", "mask")``.
        writer_key (NestedKey): writer-id entry (an integer >= 0, the same for
            the whole batch), read and not stored. Defaults to
            ``("collector", "writer_id")``.
        check_continuation (bool): refuse a step that continues a trajectory
            but does not observe its last next observation (see above).
            A producer that already cuts its trajectories wherever a step does
            not follow on (:class:`~torchrl_ext.MBReplayBuffer` does) may turn
            it off: the check compares each continuing stream's observation
            with its stored row once per write. Defaults to ``True``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import TensorDictReplayBuffer
        >>> from torchrl_ext.storages import TransitionStorage
        >>> from torchrl_ext.writers import TransitionWriter
        >>> from torchrl_ext.samplers import UniformTransitionSampler
        >>> rb = TensorDictReplayBuffer(storage=TransitionStorage(64), writer=TransitionWriter(),
        ...     sampler=UniformTransitionSampler())
        >>> done = torch.tensor([[False, True, False]]).unsqueeze(-1)  # [1 env, 3 steps, 1]
        >>> steps = TensorDict({"observation": torch.arange(3.).view(1, 3, 1),
        ...     "action": torch.zeros(1, 3, 1),
        ...     "next": {"observation": torch.arange(1., 4.).view(1, 3, 1),
        ...              "reward": torch.ones(1, 3, 1), "done": done}}, batch_size=[1, 3])
        >>> rb.extend(steps)  # physical rows of the three steps
        tensor([[0, 1, 3]])
        >>> rb.storage.index.episode_count  # two episodes in stream 0
        tensor([2])
    """

    def __init__(
        self,
        *,
        num_streams: int | None = None,
        done_keys: Sequence[NestedKey] = DEFAULT_DONE_KEYS,
        reward_key: NestedKey = ("next", "reward"),
        traj_key: NestedKey = ("collector", "traj_ids"),
        mask_key: NestedKey = ("collector", "mask"),
        writer_key: NestedKey = ("collector", "writer_id"),
        check_continuation: bool = True,
    ) -> None:
        super().__init__()
        if num_streams is not None:
            num_streams = check_count("TransitionWriter", "num_streams", num_streams)
        self.num_streams = num_streams
        if isinstance(done_keys, str):  # one key, not the sequence of its characters
            done_keys = [done_keys]
        self.done_keys = tuple(as_key(k, f"done_keys[{i}]", "TransitionWriter") for i, k in enumerate(done_keys))
        self.reward_key = as_key(reward_key, "reward_key", "TransitionWriter")
        self.traj_key = as_key(traj_key, "traj_key", "TransitionWriter")
        self.mask_key = as_key(mask_key, "mask_key", "TransitionWriter")
        self.writer_key = as_key(writer_key, "writer_key", "TransitionWriter")
        if not isinstance(check_continuation, bool):
            raise TypeError(
                f"TransitionWriter: check_continuation={check_continuation!r} "
                f"({type(check_continuation).__name__}), expected True or False."
            )
        self.check_continuation = check_continuation
        # [steps written, writer ids handed out (1, 2, ...)] by every process holding
        # this writer (the workers of a shared buffer, forked or spawned): shared
        # memory, as TorchRL keeps its writers' count in a multiprocessing.Value, so
        # rb.write_count is the buffer's and no two processes hand out one id
        self._counts = torch.zeros(2, dtype=torch.int64).share_memory_()
        self._counts_np = self._counts.numpy()  # its view: a fraction of a tensor op's cost
        # writes without a writer_key entry: writer 0 in this process; a copy
        # unpickled in another process (a multi-process collector's worker, a
        # Ray actor) is a writer of its own, see __setstate__
        self._default_writer = 0
        self._home_pid = os.getpid()
        self._layouts: dict[tuple[tuple[int, ...], bool], _Layout] = {}  # see _layout_of

    def register_storage(self, storage: Any) -> None:
        if not isinstance(storage, TransitionStorage):
            raise TypeError(
                f"TransitionWriter needs an TransitionStorage, got {type(storage).__name__}; "
                "build the buffer with storage=torchrl_ext.storages.TransitionStorage(max_size)."
            )
        super().register_storage(storage)

    # ---------------------------------------------------------------- writing
    def add(self, data: TensorDictBase) -> int | torch.Tensor:
        """Write one transition of a single-env buffer (``rb.add``)."""
        return self._write(data, "TransitionWriter.add")

    def extend(self, data: TensorDictBase) -> torch.Tensor:
        """Write a batch of steps; returns their physical rows, shaped like the batch."""
        return self._write(data, "TransitionWriter.extend")

    def _write(self, data: TensorDictBase, where: str) -> torch.Tensor:
        # (where: the caller, for messages; a plain TensorDict is told apart without the ABC check)
        if type(data) is not TensorDict and not isinstance(data, TensorDictBase):
            raise TypeError(f"{where}: expected a TensorDict, got {type(data).__name__}.")
        storage: TransitionStorage = self._storage
        leaves = _entries(data)
        mask = leaves.pop(self.mask_key, None)
        writer = self._writer_of(leaves.pop(self.writer_key, None), where)
        batch = tuple(data.shape)
        flat = len(batch) == 1 and self.traj_key in leaves
        layout = None if flat else self._layout_of(data, batch)
        if storage.schema is None:
            self._first_write(leaves, batch, where, layout)
        else:
            storage.schema.validate(leaves, batch, where)
        if writer is None:
            writer = self._writer_here()
        if storage.device.type == "cpu" and not next(iter(leaves.values())).is_cpu:
            # entries on an accelerator into host rows: one transfer for them all, not one per entry
            moved = cast(tuple[torch.Tensor, ...], move_together(tuple(leaves.values()), storage.device))
            leaves = dict(zip(leaves, moved))
        if layout is not None:
            if not layout.flat:
                leaves = {k: layout.flatten(v) for k, v in leaves.items()}
            keep = None if mask is None else (
                layout.grid(host_array(layout.flatten(mask.reshape(batch))).reshape(-1))
            )
        with storage.writing():  # from the claim of streams to the count: no other process writes
            if layout is None:
                placed = self._write_fragments(leaves, mask, writer, where)
            else:
                streams = self._streams_of(writer, layout.streams, batch, where)
                placed = self._write_streams(streams, leaves, layout, keep, where)
            # skipped (masked) steps are -1
            self._counts_np[0] += placed.size if mask is None else int((placed >= 0).sum())  # _write_count
        rows = torch.from_numpy(placed) if layout is None else layout.restore(placed)
        self._mark_update_entities(rows)
        return rows

    def _layout_of(self, data: TensorDictBase, batch: tuple[int, ...]) -> _Layout:
        """The :class:`_Layout` of ``data`` (batch shape ``batch``), made once per shape and dim names."""
        # a plain TensorDict's names only where it has some (its names property builds a list
        # each call); other kinds (lazy stacks...) report no names there: read them
        time_first = bool(batch) and (type(data) is not TensorDict or data._has_names()) \
            and data.names[0] == "time"
        layout = self._layouts.get((batch, time_first))
        if layout is None:
            layout = _Layout(batch, time_first)
            if len(self._layouts) >= 64:  # [N, T] writes of many lengths: keep the recent ones
                self._layouts.clear()
            self._layouts[batch, time_first] = layout
        return layout

    # ---------------------------------------------------------------- writers
    def _writer_of(self, value: torch.Tensor | None, where: str) -> int | None:
        """The writer id a write carries under ``writer_key`` (``None`` without the entry)."""
        if value is None:
            return None
        ids = value.reshape(-1)
        writer = int(ids[0]) if ids.numel() else 0
        if ids.numel() and (writer < 0 or not bool((ids == writer).all())):
            raise ValueError(
                f"{where}: {key_str(self.writer_key)} holds {ids.unique().tolist()}, expected "
                "one id >= 0 for the whole batch (a write comes from one writer); split "
                "the batch per writer, or write through rb.writer_handle()."
            )
        return writer

    def _streams_of(self, writer: int, count: int, batch: tuple, where: str) -> np.ndarray:
        """The ``count`` streams of ``writer``, claimed at its first write."""
        index = self._storage.index
        streams = index.owned_streams(writer)
        if not streams.size:
            claimed = index.claim_streams(writer, count)
            if claimed is None:
                raise ValueError(
                    f"{where}: writer {writer} writes {count} envs (batch {batch}), but only "
                    f"{self._free_streams()} of the buffer's {index.num_streams} streams are "
                    f"free (writers {index.writers().tolist()} own the others). Build the "
                    "writer with num_streams= the total env count of all writers, e.g. "
                    f"make_replay_buffer(..., num_streams={index.num_streams + count}), or "
                    "release the streams of a finished writer (handle.release()); those of "
                    "processes that exited are freed by themselves."
                )
            return claimed
        if streams.size != count:
            raise ValueError(
                f"{where}: writer {writer} writes {count} envs (batch {batch}), but its "
                f"first write had {streams.size}; a writer's env count cannot change. "
                "Write the other envs through their own rb.writer_handle()."
            )
        return streams

    def _free_streams(self) -> int:
        return int((self._storage.index.stream_writer < 0).sum())

    def new_writer_id(self) -> int:
        """An id for a new writer of this buffer, never handed out before (1, 2, ...).

        Used by :meth:`TransitionReplayBuffer.writer_handle
        <torchrl_ext.TransitionReplayBuffer.writer_handle>`; the count is
        checkpointed with the writer, and skips ids that own streams.
        """
        index = self._storage.index
        owners = np.zeros(0, dtype=np.int64) if index is None else index.writers()
        self._writers_issued = max([self._writers_issued, *owners[owners < COPIES].tolist()]) + 1
        return self._writers_issued

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.setdefault("check_continuation", True)  # pickled before the option existed
        state.setdefault("_layouts", {})
        self.__dict__.update(state)
        self._counts_np = self._counts.numpy()
        self._writer_here()

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()  # TorchRL's: without the buffer's generator
        del state["_counts_np"]  # a view of _counts, made again on arrival
        return state

    def _writer_here(self) -> int:
        """The writer id of data without a ``writer_key`` entry, in this process.

        A copy in another process (a multi-process collector's worker, a
        process forked with the buffer, which inherits it without unpickling)
        is a writer of its own: its id comes from its process, as no other
        writer of this buffer runs there.
        """
        pid = current_pid()  # no system call: this runs on every write
        if self._home_pid != pid:
            self._home_pid = pid
            self._default_writer = COPIES + self._home_pid
        return self._default_writer

    def release(self, writer: int | None = None) -> None:
        """End ``writer``'s running episodes and free its streams for other writers.

        Its episodes stay in the buffer; each running one ends at its last
        written step (the step's next observation is kept), as when a
        trajectory is cut. Call it when a writer is done, or before a writer
        restarts its envs (e.g. a new collector after ``rb.loads``).

        Args:
            writer (int, optional): the writer id (``handle.writer_id``; a
                handle's id also frees the streams of its copies in other
                processes). Defaults to the writer of data without a
                ``writer_key`` entry in this process (``0`` in the process that
                built the buffer; a process copy's own).
        """
        index = self._storage.index
        if index is None:
            return
        writer = self._writer_here() if writer is None else int(writer)
        with self._storage.writing():
            index.release_streams(writer)
            for copy in index.writers().tolist():  # a handle's copies in other processes too
                if handle_of_copy(copy) == writer:
                    index.release_streams(copy)

    def end_episodes(self, envs: Any, writer: int | None = None) -> None:
        """End the running episodes of ``writer``'s envs ``envs`` at their last written step.

        For an env reset without a done flag (``env.reset()`` mid-episode): its
        next step opens a new episode instead of continuing the old one, which
        ends like a cut trajectory (its last next observation is kept; no done).

        Args:
            envs: env positions in ``writer``'s batches (ints or a ``[num_envs]`` bool mask).
            writer (int, optional): the writer id. Defaults as in :meth:`release`.
        """
        index = self._storage.index
        if index is None:
            return
        with self._storage.writing():
            streams = index.owned_streams(self._writer_here() if writer is None else int(writer))
            if streams.size:  # (none: nothing written since rb.empty(), no episode runs)
                index.end_episodes(streams[np.asarray(envs)])

    # ---------------------------------------------------------------- writing
    def _write_streams(
        self,
        streams: np.ndarray,
        leaves: dict[tuple[str, ...], torch.Tensor],
        layout: _Layout,
        mask: np.ndarray | None,
        where: str,
    ) -> np.ndarray:
        # leaves are [K * T, ...]: step t of env k at layout.positions(k, t) (env k's
        # steps k*T .. k*T+T-1, or every K-th from k for time-first batches), written
        # to streams[k]; steps where mask ([K, T]) is False are skipped. Steps are
        # read where they lie (positions), never gathered into a copy first.
        K, T = layout.shape
        done, traj = self._done(leaves, layout), self._traj(leaves, layout)
        time_major = layout.time_major
        if mask is None or mask.all():
            return self._write_block(streams, done, traj, leaves, where, None, time_major)
        rows = np.full((K, T), -1, dtype=np.int64)
        # envs with the same number of kept steps share one write: each env's kept
        # steps, in time order, become a row of a [k, n] block (a gymnasium reset
        # step in every env's chunk, at different times, is still one write)
        kept = mask.sum(1)  # [K]
        for n in np.unique(kept[kept > 0]).tolist():
            envs = np.flatnonzero(kept == n)
            keep = mask[envs]  # [k, T], n True per row
            at = layout.positions(envs[:, None], np.arange(T))[keep].reshape(-1, n)  # [k, n]
            sub_traj = None if traj is None else traj[envs][keep].reshape(-1, n)
            sub_done = done[envs][keep].reshape(-1, n)
            placed = self._write_block(streams[envs], sub_done, sub_traj, leaves, where, at,
                                       time_major)
            block = np.full(keep.shape, -1, dtype=np.int64)
            block[keep] = placed.reshape(-1)  # row-major, as at was taken
            rows[envs] = block
        return rows

    def _write_fragments(
        self,
        leaves: dict[tuple[str, ...], torch.Tensor],
        mask: torch.Tensor | None,
        writer: int,
        where: str,
    ) -> np.ndarray:
        # A flat batch is a sequence of trajectory fragments, each in time order.
        # A trajectory continues in the writer's stream holding its id; a new one
        # takes a stream of the writer whose episode has ended, else a free one.
        index = self._storage.episode_index
        B = next(iter(leaves.values())).shape[0]
        rows = np.full(B, -1, dtype=np.int64)
        if mask is not None:
            kept = torch.nonzero(mask.reshape(B).cpu()).view(-1)
            leaves = _select_steps(leaves, kept)
        else:
            kept = torch.arange(B)
        kept_np = kept.numpy()
        n = kept.numel()
        if not n:
            return rows
        traj = leaves[self.traj_key].reshape(n).long().cpu().numpy()  # fragments carry ids
        done = self._done(leaves, _Layout((n,), time_first=True))[0]
        cuts = np.flatnonzero(traj[1:] != traj[:-1]) + 1
        bounds = [0, *cuts.tolist(), n]
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            tid = int(traj[lo])
            stream = index.trajectory_stream(writer, tid, traj)
            if stream is None:
                raise ValueError(
                    f"{where}: trajectory {key_str(self.traj_key)}={tid} of writer "
                    f"{writer} starts while its {index.owned_streams(writer).size} streams hold running "
                    f"episodes and none of the {index.num_streams} streams is free; raise "
                    "TransitionWriter(num_streams=...) to the number of envs of all "
                    "writers, or end episodes with a done flag before a new trajectory id."
                )
            part = {k: v[lo:hi] for k, v in leaves.items()}
            placed = self._write_block(
                np.array([stream]), done[None, lo:hi], traj[None, lo:hi], part, where
            )
            rows[kept_np[lo:hi]] = placed[0]
        return rows

    def _write_block(
        self,
        streams: np.ndarray,
        done: np.ndarray,
        traj: np.ndarray | None,
        leaves: dict[tuple[str, ...], torch.Tensor],
        where: str,
        positions: np.ndarray | None = None,
        time_major: bool = False,
    ) -> np.ndarray:
        """Plan and write ``[K, T]`` steps; returns their rows.

        ``positions`` (``[K, T]``): where each step lies in ``leaves``; ``None``:
        leaves are ``[K * T, ...]``, step ``t`` of stream ``k`` at ``k * T + t``
        (``t * K + k`` with ``time_major``). ``time_major``: see
        :meth:`TransitionStorage.write`.

        A stream's ring holds ``stream_capacity`` rows and ``c`` steps need at most
        ``2c + 1`` of them (each step may open an episode on a row of its own, and
        a new trajectory leaves the running episode's pending row in place), so
        longer writes go in time chunks of ``(stream_capacity - 1) // 2`` steps:
        the ring then keeps the newest rows, as any FIFO would.
        """
        storage: TransitionStorage = self._storage
        index = storage.episode_index
        K, T = done.shape
        chunk = max(1, (index.stream_capacity - 1) // 2)
        if T <= chunk:
            plan = index.plan(streams, done, traj)
            if traj is not None and self.check_continuation:
                self._check_continuation(plan, leaves, positions, where, time_major)
            storage.write(plan, leaves, positions=positions, time_major=time_major)
            return plan.rows
        if positions is None:
            positions = np.arange(K * T).reshape(T, K).T if time_major else np.arange(K * T).reshape(K, T)
        rows = np.empty((K, T), dtype=np.int64)
        for lo in range(0, T, chunk):
            hi = min(T, lo + chunk)
            plan = index.plan(
                streams, done[:, lo:hi], None if traj is None else traj[:, lo:hi]
            )
            if traj is not None and self.check_continuation and not lo:
                self._check_continuation(plan, leaves, positions[:, lo:hi], where, time_major)
            storage.write(plan, leaves, positions=positions[:, lo:hi], time_major=time_major)
            rows[:, lo:hi] = plan.rows
        return rows

    def _check_continuation(
        self, plan: Any, leaves: dict[tuple[str, ...], torch.Tensor], positions: np.ndarray | None,
        where: str, time_major: bool,
    ) -> None:
        """A step continuing a trajectory must observe that trajectory's last next observation.

        Its observation is not stored again (the row holding the previous
        step's next observation is its observation), so a step of another
        writer or of a restarted env reusing the trajectory id would be
        stitched onto the episode silently: refuse it instead. Checked for
        data with trajectory ids, whose producers (TorchRL collectors) promise
        that continuity; other data (a facade's ``add``) may hold any
        observations and is trusted.
        """
        going_on = np.flatnonzero(~plan.start[:, 0])  # [k] envs continuing an episode
        if not going_on.size:
            return
        storage: TransitionStorage = self._storage
        # where those steps (time 0) lie in leaves ([K * T, ...] in order without positions)
        if positions is not None:
            first = positions[going_on, 0]
        else:
            first = going_on if time_major else going_on * plan.rows.shape[1]
        same = storage.packed.same_observation(leaves, first, plan.rows[going_on, 0])
        if same.all():
            return
        stream = int(plan.streams[going_on[np.flatnonzero(~same)[0]]])
        owner = int(storage.episode_index.stream_writer[stream])
        raise ValueError(
            f"{where}: the step written to stream {stream} (writer {owner}) continues its "
            "running episode, but its observation differs from that episode's last next "
            "observation: the data does not follow on. Two writers (collectors, threads, "
            "loops) are writing as one: give each its own rb.writer_handle() (or its own "
            f"{key_str(self.writer_key)} entry). If the env was reset without a done flag "
            "(a restarted collector), call rb.writer.release(writer) first, or give the "
            f"new trajectory a new {key_str(self.traj_key)}."
        )

    def _first_write(
        self,
        leaves: dict[tuple[str, ...], torch.Tensor],
        batch: tuple[int, ...],
        where: str,
        layout: _Layout | None,
    ) -> None:
        check_first_batch(leaves, batch, where, self.done_keys, self.reward_key)
        schema = RowSchema.infer(leaves, len(batch))
        num_streams = first_batch_streams(
            self.num_streams, None if layout is None else layout.streams, batch, where, self.traj_key
        )
        self._storage.initialize(schema, num_streams)
        rows = self._storage.max_size
        logger.info(
            "TransitionWriter: %d stream(s) fixed by the first write (batch %s): each "
            "gets %d of the %d rows%s.",
            num_streams, batch, rows // num_streams, rows,
            f" ({rows % num_streams} left unused)" if rows % num_streams else "",
        )

    def _done(self, leaves: dict, layout: _Layout) -> np.ndarray:
        # the flags (rows stay where they are) OR-ed in one compiled pass, read in place
        flags, kept = byte_table([(leaves[key], 1) for key in self.done_keys if key in leaves])  # bool [K * T, 1]
        done = np.empty(flags[0, 1], dtype=bool)
        any_set(flags, done)
        del kept  # the host tensors the table points into: alive until the pass is done
        return layout.grid(done)

    def _traj(self, leaves: dict, layout: _Layout) -> np.ndarray | None:
        value = leaves.get(self.traj_key)
        return None if value is None else layout.grid(host_array(value.long()))  # long(): no copy if int64

    # -------------------------------------------------- TorchRL writer contract
    # steps written (rb.write_count) and writer ids handed out (new_writer_id),
    # by every process sharing this writer
    _write_count = property(lambda self: int(self._counts_np[0]),
                            lambda self, value: self._counts_np.__setitem__(0, value))
    _writers_issued = property(lambda self: int(self._counts_np[1]),
                               lambda self, value: self._counts_np.__setitem__(1, value))

    def _mark_update_entities(self, index: torch.Tensor) -> None:
        for entity in self._storage._attached_entities_iter():
            entity.mark_update(index)

    def _empty(self, empty_write_count: bool = True) -> None:
        if empty_write_count:
            self._write_count = 0

    def state_dict(self) -> dict[str, Any]:
        return {"_write_count": self._write_count, "_writers_issued": self._writers_issued}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._write_count = int(state_dict["_write_count"])
        self._writers_issued = int(state_dict.get("_writers_issued", 0))

    def dumps(self, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / "metadata.json").write_text(json.dumps(self.state_dict()))

    def loads(self, path: str | Path) -> None:
        self.load_state_dict(json.loads((Path(path) / "metadata.json").read_text()))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_streams={self.num_streams}, "
            f"done_keys={self.done_keys}, write_count={self._write_count})"
        )
