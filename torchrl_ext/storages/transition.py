"""Episode-aware storage: per-stream rings, each observation stored once."""
from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from tensordict import TensorDictBase
from torchrl.data import RandomSampler, Storage, TensorStorage

from torchrl_ext.core.checks import check_count
from torchrl_ext.core.schema import RowSchema
from torchrl_ext.core.episodes import EpisodeIndex, WritePlan
from torchrl_ext.core.process import FileLock, guard_forks
from torchrl_ext.core.kernels.sequences import sequence_span
from torchrl_ext.sample_index import SampleIndex, reader_of
from torchrl_ext.storages._checkpoint import StorageCheckpoints
from torchrl_ext.storages._memory import move_together
from torchrl_ext.storages._packed import PackedRows
from torchrl_ext.storages.arena import check_compress
from torchrl_ext.storages.compressed import CompressedRows

__all__ = ["TransitionStorage"]

_CPU = torch.device("cpu")  # (a device string is parsed again at each call)

Backend = Literal["tensor", "memmap"]


class TransitionStorage(StorageCheckpoints, TensorStorage):
    """Rows of transitions in per-stream rings, with the episode index beside them.

    Each row holds one observation (every key present both at the root and under
    ``"next"``), the root-only entries (action, ...) and the next-only entries
    (reward, done flags) of its step. A step's next observation is the next row
    of its stream; the true final observation of an episode gets a row of its
    own. Frames are therefore stored once, whatever their size. See
    :class:`~torchrl_ext.core.EpisodeIndex` for the layout.

    The bytes live in memory (``backend="tensor"``) or in a memory-mapped file
    (``backend="memmap"``, disk-backed, through TorchRL's
    :class:`~torchrl.data.LazyMemmapStorage`). Either grows with the rows
    written, not the capacity: in CPU memory the buffer is reserved and each
    page committed when first written (shared memory, visible to forked and
    spawned workers, also for rows written after they started), and the file
    is sparse. A million rows of ``3x84x84`` frames cost what the rows written
    cost. On an accelerator (``device="cuda"``) the rows live on the device,
    every read stays there, and the buffer grows (each stream's part doubled
    when full, up to its capacity). The schema and the number of
    streams are fixed by the first write, done by
    :class:`~torchrl_ext.writers.TransitionWriter`.

    :meth:`get` returns TorchRL transitions for *row* indices, as drawn by the
    samplers of :mod:`torchrl_ext.samplers`. TorchRL's own contract holds too:
    ``storage[i]`` / ``rb[i]`` (ints, slices, index tensors) and
    ``iter(rb.storage)`` see the ``len(storage)`` live transitions by position,
    never a row pair that spans two episodes, and TorchRL's stock
    ``RandomSampler`` draws uniformly over transitions. TorchRL's other stock
    samplers (``SamplerWithoutReplacement``, ``PrioritizedSampler``,
    ``SliceSampler``...) would read row positions as transitions: a buffer
    that pairs one with this storage raises a TypeError naming the
    replacement from :mod:`torchrl_ext.samplers`.

    Args:
        max_size (int): number of rows. Each stream gets ``max_size // num_streams``
            rows; an episode of ``L`` steps uses ``L + 1`` of them.

    Keyword Args:
        backend (str): ``"tensor"`` (shared memory, default) or ``"memmap"``.
        scratch_dir (str or Path, optional): directory of the memmap files.
        device (torch.device or str, optional): where the rows live (``"cpu"``,
            ``"cuda"``, ...; ``backend="tensor"`` only). Data written from any
            device goes there; samples come out there, with no copy of the rows
            through host memory (the episode index stays on the CPU; each
            batch moves its row indices to the device once). Defaults to CPU.
        compress (dict, optional): observation entries to keep compressed in
            memory, and their codec: ``{"pixels": "lz4"}`` (decodes 3-4x
            faster) or ``{"pixels": "zstd"}`` (smaller). Each frame is
            compressed once when written and decoded, bit-exact, when sampled
            (see :mod:`torchrl_ext.storages.compressed`). Needs the
            ``compress`` extra (``zstandard``, ``lz4``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import TensorDictReplayBuffer
        >>> from torchrl_ext.storages import TransitionStorage
        >>> from torchrl_ext.writers import TransitionWriter
        >>> from torchrl_ext.samplers import UniformTransitionSampler
        >>> rb = TensorDictReplayBuffer(storage=TransitionStorage(100),
        ...     writer=TransitionWriter(), sampler=UniformTransitionSampler(), batch_size=2)
        >>> step = TensorDict({"observation": torch.zeros(2, 3), "action": torch.zeros(2, 1),
        ...     "next": {"observation": torch.ones(2, 3), "reward": torch.ones(2, 1),
        ...              "done": torch.zeros(2, 1, dtype=torch.bool)}}, batch_size=[2])
        >>> _ = rb.extend(step)  # one step of 2 envs: two streams
        >>> len(rb)
        2
        >>> rb.sample()["next", "observation"].shape
        torch.Size([2, 3])
    """

    def __init__(
        self,
        max_size: int,
        *,
        backend: Backend = "tensor",
        scratch_dir: str | Path | None = None,
        device: torch.device | str | None = None,
        compress: dict[Any, str] | None = None,
    ) -> None:
        if backend not in ("tensor", "memmap"):
            raise ValueError(
                f"TransitionStorage: backend={backend!r}, expected 'tensor' or 'memmap'."
            )
        device = torch.device("cpu" if device is None else device)
        if backend == "memmap" and device.type != "cpu":
            raise ValueError(
                f"TransitionStorage: backend='memmap' keeps rows in a file on disk, not on "
                f"device={str(device)!r}; use backend='tensor' for device rows, or "
                "device='cpu' for a memmap."
            )
        if compress and device.type != "cpu":
            raise ValueError(
                f"TransitionStorage: compress={compress!r} keeps frames compressed in host "
                f"memory, not on device={str(device)!r}; drop compress= for device rows, or "
                "keep the storage on the CPU and move batches."
            )
        max_size = check_count("TransitionStorage", "max_size", max_size, 2)
        Storage.__init__(self, max_size)  # TensorStorage's init expects its own layout
        self.ndim = 1
        self.device = device
        self.backend = backend
        self.scratch_dir = None if scratch_dir is None else str(scratch_dir)
        self.compress = check_compress(compress)
        self.schema: RowSchema | None = None
        self.index: EpisodeIndex | None = None
        self._storage: TensorDictBase | None = None
        self._last_cursor = None
        self._live_cache: tuple[Any, torch.Tensor] | None = None  # see _transition_rows
        self._rows_lock = threading.RLock()  # a write, or the rows' move to shared memory
        guard_forks(self, level=1)  # rows shared before a fork, which waits for a write under way
        self._writes_lock: Any = None  # the writers' lock of every process: see writing()
        self.__dict__["_storage_keys"] = None

    # ----------------------------------------------------------------- set-up
    @property
    def initialized(self) -> bool:  # type: ignore[override]
        """Whether the first write has fixed the schema and allocated the rows."""
        return self.schema is not None

    @initialized.setter
    def initialized(self, value: bool) -> None:  # TensorStorage assigns it
        pass

    @property
    def num_streams(self) -> int | None:
        """Number of streams, fixed by the first write."""
        return None if self.index is None else self.index.num_streams

    def initialize(self, schema: RowSchema, num_streams: int) -> None:
        """Allocate ``max_size`` rows for ``schema`` split in ``num_streams`` rings."""
        stream_capacity = self.max_size // num_streams
        if stream_capacity < 2:
            raise ValueError(
                f"TransitionStorage: max_size={self.max_size} gives {stream_capacity} rows to "
                f"each of {num_streams} streams; need at least 2 per stream."
            )
        index = EpisodeIndex(num_streams, stream_capacity).share_memory_()
        self.packed: PackedRows | CompressedRows
        if self.compress:
            self.packed = CompressedRows(schema, num_streams, stream_capacity, self.compress,
                                         self.backend, self.scratch_dir)
        else:
            self.packed = PackedRows(
                schema, num_streams, stream_capacity, self.backend, self.scratch_dir, self.device
            )
        self.schema, self.index, self._storage = schema, index, self.packed.buffers

    def share_memory_(self) -> TransitionStorage:
        """Keep the rows in shared memory from now on, where worker processes see every write.

        Rows start in this process's memory, on huge pages, which sample
        faster (see :mod:`~torchrl_ext.storages._memory`). They move to shared
        memory once, by themselves, before anything could need it: before
        this process forks (a DataLoader's workers, a collector's), and when
        the storage is pickled for another process. Call this to move them
        earlier, e.g. before timing. The rows in use are copied once.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> from torchrl_ext import make_replay_buffer
            >>> rb = make_replay_buffer(100)
            >>> _ = rb.extend(TensorDict({"observation": torch.zeros(2, 3), "action": torch.zeros(2, 1),
            ...     "next": {"observation": torch.ones(2, 3), "reward": torch.ones(2, 1),
            ...              "done": torch.ones(2, 1, dtype=torch.bool)}}, [2]))
            >>> rb.storage.share_memory_().packed.shared, len(rb)
            (True, 2)
        """
        with self._rows_lock:
            self._share_rows()
        return self

    def _share_rows(self) -> None:
        # (the caller holds the rows lock)
        if self.index is None:
            return
        if self._writes_lock is None:  # other processes may write from now on: the lock of them all
            self._writes_lock = FileLock()
        if self.packed.shared:  # (files and device rows are from the start)
            return
        self.packed.share(self._used(self.index.written))
        self._storage = self.packed.buffers

    def _fork_locks(self) -> tuple[Any, ...]:
        """The locks :func:`~torchrl_ext.core.process.guard_forks` holds across a fork, in a write's order."""
        lock = self._writes_lock
        return (self._rows_lock,) if lock is None else (lock._thread, self._rows_lock)

    _before_fork = _share_rows  # a forked child sees the rows written after the fork

    def writing(self) -> contextlib.AbstractContextManager[Any]:
        """Held by every change of the rows or the episode index, in every process sharing them.

        Writers in several processes (a multi-process collector's workers, each
        with a copy of the buffer, and the process that built it) share the
        index: without this lock two of them could claim the same free stream
        (their episodes would be stitched together) or open writes at once
        (the write sequence number that readers check would lose counts). A
        write holds it from the claim of its streams to its publication.
        It is a :class:`~torchrl_ext.core.process.FileLock`: reentrant, it
        reaches every process the storage goes to, and a process killed while
        holding it (a worker killed mid-write) leaves it free. It exists, and
        is taken, once the storage has gone to another process (before a
        fork, or when it is pickled): until then no other process can write. Do not write through the
        buffer inside it from several threads (a write takes the buffer's own
        locks first).

        Examples:
            >>> storage = TransitionStorage(64)
            >>> with storage.writing():  # before the first write: nothing shared, no lock to take
            ...     storage.index is None
            True
        """
        lock = self._writes_lock
        return contextlib.nullcontext() if lock is None else lock  # none: no other process has the rows

    # ----------------------------------------------------------------- writes
    def write(
        self,
        plan: WritePlan,
        leaves: dict[tuple[str, ...], torch.Tensor],
        *,
        positions: np.ndarray | None = None,
        time_major: bool = False,
    ) -> None:
        """Write the ``[K, T]`` steps of ``plan``, then publish them in the index.

        Args:
            plan: rows from :meth:`EpisodeIndex.plan`.
            leaves: every entry of the steps, ``[m, *shape]``.
            positions: ``[K, T]`` where each step of the plan lies in ``leaves``
                (steps are read in place); ``None``: ``leaves`` hold the plan's
                steps in order, step ``t`` of stream ``k`` at ``k * T + t``
                (``t * K + k`` with ``time_major``).
            time_major: the steps lie time step by time step in ``leaves`` (a
                time-first batch): they are copied in that order, which reads
                the entries front to back.
        """
        index = plan.index
        order: Literal["C", "F"] = "F" if time_major else "C"  # [K, T] -> [K * T] in the copy order
        # the rows stay where they are until the write is published
        with self.writing(), self._rows_lock:
            index.begin_write(plan)
            self.packed.write(
                leaves, plan.rows.reshape(-1, order=order), plan.next_rows.reshape(-1, order=order),
                plan.start.reshape(-1, order=order) if plan.opened else None,
                # (a [K, 1] slice of positions flattens to a strided view: the kernels take C order)
                None if positions is None else np.ascontiguousarray(positions.reshape(-1, order=order)),
            )
            index.commit(plan)
            index.end_write()
            self._storage = self.packed.buffers  # a new buffer if the rows grew (accelerators)

    def read_token(self) -> int:
        """Taken before a draw; :meth:`stale` then tells the rows rewritten since (see below)."""
        return -1 if self.index is None else self.index.read_token()

    def stale(self, index: Any, token: int) -> bool:
        """Whether a write touched the rows drawn as ``index`` since ``token`` was taken.

        Readers in other processes (DataLoader workers) draw and gather
        without the buffer's lock while the writer goes on; at the ring seam
        a row they drew can be rewritten while they read it. If none of the rows
        the batch was read from (its reader's ``rows_read``: windows, next
        observations, goals, frames) was touched since, the batch is whole.
        Otherwise the caller draws again. Costs one gather of the versions of
        those rows when a write began since the token, nothing otherwise.
        """
        if self.index is None:
            return False
        if token == self.index.read_token() and not token & 1:
            return False  # no write began since the token (the usual case): no gather
        if isinstance(index, tuple):
            rows = index[0]
        else:  # every row the batch was read from
            rows = reader_of(index).rows_read(self, index)
        return bool(self.index.touched_since(np.asarray(rows).reshape(-1), token).any())

    def set(self, cursor: Any, data: Any, *, set_cursor: bool = True) -> None:
        """Not supported: rows are placed by :class:`~torchrl_ext.writers.TransitionWriter`."""
        raise TypeError(
            "TransitionStorage is written through torchrl_ext.writers.TransitionWriter "
            "(rb.extend / rb.add), which places each step in its episode; "
            "direct assignment (rb[index] = data, RoundRobinWriter) is not supported."
        )

    # ------------------------------------------------------------------ reads
    def next_rows(self, rows: np.ndarray) -> np.ndarray:
        """Physical row following ``rows`` in their streams (ring wrap-around)."""
        self._ready("next_rows")
        return self.packed.next_rows(rows)

    def get(self, index: Any) -> TensorDictBase:
        """Transitions starting at physical ``index`` rows, in TorchRL layout.

        ``index`` is a LongTensor (or numpy array) of rows as drawn by the
        samplers (``[B]``, or ``[B, L]`` consecutive rows of sequences), an
        int, ``slice(None)`` for every live transition, or a
        :class:`~torchrl_ext.sample_index.SampleIndex` (windows: n-step,
        hindsight goals, frame stacks...), which reads itself through this
        storage's row reads (:meth:`get`, :meth:`get_observations`, and
        ``packed``, the :class:`~torchrl_ext.storages._packed.PackedRows`
        gathers); the storage never decodes a window kind.
        """
        self._check_ready("get")
        if isinstance(index, SampleIndex):
            return index.read(self)
        self._check_samplers()
        return self._rows(index)

    def on_device(self, values: list[Any], device: torch.device) -> list[Any]:
        """A sample's entries (its index, the sampler's info) on ``device`` (the batch's), in one transfer.

        The index the read just moved to the device as it was drawn is not
        moved again (:meth:`PackedRows.moved_index
        <torchrl_ext.storages._packed.PackedRows.moved_index>`).

        Examples:
            >>> import torch
            >>> from torchrl_ext import make_replay_buffer
            >>> storage = make_replay_buffer(100).storage
            >>> index, weights = torch.tensor([0, 1]), torch.ones(2)
            >>> moved = storage.on_device([index, weights], torch.device("cpu"))
            >>> moved[0] is index, moved[1] is weights  # already there: untouched
            (True, True)
        """
        packed = getattr(self, "packed", None)  # none before the first write
        moved = packed.moved_index() if isinstance(packed, PackedRows) else None
        if moved is not None:
            host, there = moved
            values = [there if value is host else value for value in values]
        return list(move_together(tuple(values), device))

    def _rows(self, index: Any) -> TensorDictBase:
        if isinstance(index, slice):
            if index != slice(None):
                raise ValueError(f"TransitionStorage.get: slice {index} unsupported; use [:].")
            index = self.live_transition_rows()
        rows = index  # a sampler's rows as they are: as_tensor's argument parsing costs more than this test
        if type(rows) is not torch.Tensor or rows.dtype is not torch.int64 or not rows.is_cpu:
            rows = torch.as_tensor(index, dtype=torch.int64, device=_CPU)  # index arithmetic: CPU
        if rows.ndim == 1:  # drawn transitions (the usual case)
            return self.packed.gather(rows)
        if rows.ndim == 2 and rows.shape[1] > 1:
            # runs of consecutive rows of one stream (unpadded sequences): one gather
            span = np.empty((rows.shape[0], rows.shape[1] + 1), dtype=np.int64)  # and the rows after
            if sequence_span(rows.numpy(), self.episode_index.stream_capacity, span):
                return self.packed.gather_sequences(torch.from_numpy(span))
        return self.packed.gather(rows.reshape(-1)).reshape(rows.shape)

    def __getitem__(self, item: Any) -> TensorDictBase:
        """Live transitions by position ``0 .. len(self) - 1``, as TorchRL indexes a storage.

        ``rb[i]``, ``rb[:k]``, ``rb[k:]``, ``rb[tensor]`` and ``iter(rb.storage)``
        read through here: position ``i`` is the ``i``-th live transition
        (stream by stream, oldest first), never a row pair spanning an
        episode boundary. Out-of-range positions raise IndexError.
        """
        self._check_ready("__getitem__")
        return self._rows(self._transition_rows()[item])

    def _rand_given_ndim(self, batch_size: int) -> torch.Tensor:
        """Rows of ``batch_size`` transitions, uniform: TorchRL's ``RandomSampler`` draws here.

        The index's own draw (O(batch)), as :class:`~torchrl_ext.samplers.UniformTransitionSampler`'s.
        """
        index = self._ready("_rand_given_ndim")[1]
        return torch.from_numpy(index.draw_rows(batch_size, self._rng))

    def _transition_rows(self) -> torch.Tensor:
        """:meth:`live_transition_rows`, cached until the next write or reset."""
        index = self._ready("_transition_rows")[1]
        key = (id(index), index.read_token(), tuple(index.written.tolist()))
        if self._live_cache is None or self._live_cache[0] != key:
            self._live_cache = (key, self.live_transition_rows())
        return self._live_cache[1]

    def _check_samplers(self) -> None:
        """Refuse TorchRL's stock samplers that read row positions as transitions."""
        for reader in self._attached_entities:
            sampler = getattr(reader, "_sampler", None)
            module = type(sampler).__module__
            if module.startswith("torchrl.") and not isinstance(sampler, RandomSampler):
                raise TypeError(
                    f"TransitionStorage: torchrl's {type(sampler).__name__} draws positions "
                    "0 .. len(storage) - 1 and reads them as rows, but this storage's rows "
                    "also hold each episode's final observation, so it would return "
                    "transitions spanning two episodes. Use the samplers of "
                    "torchrl_ext.samplers instead: EpochSampler (without replacement), "
                    "PrioritizedTransitionSampler, SequenceSampler, UniformTransitionSampler "
                    "(RandomSampler works as is)."
                )

    def get_observations(self, rows: torch.Tensor) -> TensorDictBase:
        """The observation entries (root keys) of physical ``rows``, any shape.

        One gather of the observation span: a frame stack, a goal or any
        other per-row observation read costs one cache line per row.
        """
        self._check_ready("get_observations")
        return self.packed.gather_observations(torch.as_tensor(rows, dtype=torch.int64))

    def live_transition_rows(self) -> torch.Tensor:
        """Physical rows of every live transition, stream by stream (O(capacity))."""
        index = self._ready("live_transition_rows")[1]
        lo, written = index.live_start(), index.written.numpy()
        parts = []
        for s in range(index.num_streams):
            tau = np.arange(lo[s], written[s])
            stream = np.full_like(tau, s)
            _, step, _, length = index.locate(tau, stream)
            parts.append(index.physical_rows(tau[step < length], stream[step < length]))
        return torch.from_numpy(np.concatenate(parts))

    def __len__(self) -> int:
        return 0 if self.index is None else self.index.num_transitions()

    @property
    def episode_index(self) -> EpisodeIndex:
        """The episode index, which exists from the first write on.

        Raises:
            RuntimeError: nothing was written yet.
        """
        return self._ready("episode_index")[1]

    def _check_ready(self, where: str) -> None:
        self._ready(where)

    def _ready(self, where: str) -> tuple[RowSchema, EpisodeIndex, TensorDictBase]:
        """Schema, episode index and rows, which exist from the first write on."""
        if self.schema is None or self.index is None or self._storage is None:
            raise RuntimeError(
                f"TransitionStorage.{where}: the storage is empty (nothing was written yet)."
            )
        return self.schema, self.index, self._storage

    def contains(self, item: Any) -> bool:
        """Whether physical row ``item`` starts a live transition."""
        if self.index is None:
            return False
        tau, stream = self.index.row_coordinates(np.asarray(item))
        live = (tau >= self.index.live_start()[stream]) & (tau >= 0)
        _, step, _, length = self.index.locate(np.maximum(tau, 0), stream)
        return bool((live & (step < length)).all())

    # ---------------------------------------------------- state and persistence
    def _empty(self) -> None:
        if self.index is not None:
            with self.writing(), self.index.rewriting():  # a worker's draw across it is stale
                self.index.reset()
        # torchrl >= 0.14 caches metadata per storage revision; 0.13 has none
        bump = getattr(self, "_bump_mutation_revision", None)
        if bump is not None:
            bump()

    def _used(self, written: torch.Tensor) -> np.ndarray:
        """``[num_streams]`` rows each stream has used, from the front of its ring (see :meth:`_rows_in_use`)."""
        return np.minimum(written.numpy(), self._ready("_used")[1].stream_capacity)

    def __getstate__(self) -> dict[str, Any]:
        self.share_memory_()  # another process gets the rows by their shared memory
        state = Storage.__getstate__(self)  # with the buffers it tells of its writes
        state.pop("_rows_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        restore = getattr(Storage, "__setstate__", None)  # torchrl 0.13 has none
        if restore is None:
            self.__dict__.update(state)
        else:
            restore(self, state)
        self._rows_lock = threading.RLock()
        guard_forks(self, level=1)
        if self.__dict__.get("_writes_lock") is None and self.schema is not None:  # pickled before it
            self._writes_lock = FileLock()  # (a pickled storage was shared first)

    def __repr__(self) -> str:
        streams = "?" if self.index is None else self.index.num_streams
        return (
            f"{type(self).__name__}(max_size={self.max_size}, backend={self.backend!r}, "
            f"device={str(self.device)!r}, num_streams={streams}, transitions={len(self)})"
        )
