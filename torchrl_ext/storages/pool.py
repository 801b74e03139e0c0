"""Whole episodes of arbitrary entries in a pool of rows, evictable in any order."""
from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from torchrl_ext.core.draws import uniform_below
from torchrl_ext.core.kernels.sequences import pool_steps, table_runs
from torchrl_ext.core.process import FileLock, guard_forks
from torchrl_ext.core.schema import LeafSpec, as_key, tensordict_of
from torchrl_ext.core.views import NumpyViews
from torchrl_ext.core.windows import draw_windows
from torchrl_ext.storages._columns import Layout, place
from torchrl_ext.storages._memory import gather_rows, reserve

__all__ = ["EpisodePool"]

_COUNTERS = ("free_top", "slot_top", "row_high", "slot_high", "table_head")
_TORN_TIMEOUT_S = 60.0  # a reader gives up after meeting writes under way this long
_HALF_MAX = float(torch.finfo(torch.float16).max)  # 65504: beyond it float16 holds inf


class _Torn(Exception):
    """A read met a write of the pool under way: read again."""


class EpisodePool(NumpyViews):
    """Episodes of step entries stored row by row, with eviction in any order.

    Not a TorchRL ``Storage`` (no buffer writes to it): a store of whole
    episodes that its owner appends and evicts, and samples windows from (a
    :class:`~torchrl_ext.core.WindowSource`). The storage behind the episodic datasets
    (:class:`~torchrl_ext.facades.episodic.EpisodeDataset`). Unlike the
    per-stream rings of :class:`~torchrl_ext.storages.TransitionStorage`, whose
    eviction is FIFO by construction, any stored episode can be evicted here,
    and its rows are reused by the next episodes, so an evictor can pick
    the oldest, a random or the lowest-value episode. An episode of ``L``
    steps uses exactly ``L`` rows; entries are whatever the steps hold (no
    observation / next-observation convention).

    * Rows: ``packed``, ``[capacity, row bytes]``, every entry of a step in
      one row (each at a byte offset of its dtype's size), so a sample reads
      each row once whatever the entries; ``rows`` is a ``[capacity]``
      TensorDict of typed views of it, one per entry. Free rows are a stack;
      an episode takes any ``L`` of them.
    * ``table``: the rows of each episode in step order, one contiguous run
      per episode in a ``[2 * capacity]`` array, so step ``t`` of episode
      ``e`` is ``table[offset[e] + t]`` (O(1), no search). Runs of evicted
      episodes are dropped by compacting the table when it fills up: O(capacity)
      once per ``capacity`` written steps.
    * Per row its episode slot and step; per slot the table offset and length.

    Memory grows with the rows used, not the capacity (on CPU the rows are
    reserved and committed as written; a checkpoint holds the rows below the
    high-water mark). Everything is in tensors, in shared memory on CPU, so
    DataLoader workers (fork or spawn) sample the whole pool, including
    episodes stored after they started. Writers (:meth:`append`,
    :meth:`evict`, :meth:`clear`) hold :attr:`lock` and make ``version`` odd
    while they change anything; readers (:meth:`sample`) take no lock: they
    read ``version`` before and after drawing and gathering, and read again
    when a write came in between (a seqlock), so a row is never served while
    it is being replaced, and a reader killed mid-sample (``kill -9`` of a
    worker) leaves nothing held.

    Args:
        capacity (int): number of rows (steps).
        spec (TensorDictBase): one step (no batch dims) giving the entries'
            shapes and dtypes.

    Keyword Args:
        device (torch.device or str): where the rows live. Defaults to CPU.
        half_precision (bool): store float32 entries as float16; :meth:`gather`
            returns them as float32. :meth:`append` refuses finite values beyond
            float16's range (:meth:`check_range`).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> pool = EpisodePool(8, TensorDict({"obs": torch.zeros(2)}, []))
        >>> a = pool.append(TensorDict({"obs": torch.ones(5, 2)}, [5]))
        >>> b = pool.append(TensorDict({"obs": torch.zeros(3, 2)}, [3]))
        >>> pool.evict(a)  # not the newest: any episode can go
        >>> c = pool.append(TensorDict({"obs": torch.full((4, 2), 2.0)}, [4]))
        >>> pool.episode_rows(c).shape, pool.num_free
        (torch.Size([4]), 1)
    """

    def __init__(
        self,
        capacity: int,
        spec: TensorDictBase,
        *,
        device: torch.device | str = "cpu",
        half_precision: bool = False,
    ) -> None:
        C = int(capacity)
        self.capacity = C
        self.device = torch.device(device)
        self.half_precision = bool(half_precision)
        # entries stored as float16 that samples return as float32
        self._halved = [
            key for key, x in spec.items(include_nested=True, leaves_only=True)
            if self.half_precision and x.dtype == torch.float32
        ]
        # every entry of a step in one packed row (see _bind): a gather of any number
        # of entries is one read per row. Committed as written (rows are taken from 0
        # up, freed ones first)
        leaves = {
            as_key(key): LeafSpec(x.shape, self._stored(x.dtype))
            for key, x in spec.items(include_nested=True, leaves_only=True)
        }
        columns, width = place(leaves, leaves, 0)
        placed = {c.key: c for c in columns}  # samples list the entries in the spec's order
        self._layout = Layout([(0, key, placed[key], placed[key].lo) for key in leaves], [width])
        # where the float16-stored entries come in a gather's pieces
        halved = {as_key(key) for key in self._halved}
        self._halved_at = [i for i, key in enumerate(self._layout.keys) if key in halved]
        self.packed = reserve((C, width), torch.uint8, self.device)
        self.row_slot = torch.full((C,), -1, dtype=torch.int64)
        self.row_step = torch.zeros(C, dtype=torch.int64)
        self.free = torch.arange(C - 1, -1, -1, dtype=torch.int64)  # pop from the end: 0 first
        self.slot_free = torch.arange(C - 1, -1, -1, dtype=torch.int64)
        self.offset = torch.zeros(C, dtype=torch.int64)
        self.length = torch.zeros(C, dtype=torch.int64)  # 0: free slot
        self.table = torch.zeros(2 * C, dtype=torch.int64)
        self.counters = torch.tensor([C, C, 0, 0, 0], dtype=torch.int64)
        self.version = torch.zeros(1, dtype=torch.int64)  # odd while a write is under way
        if self.device.type == "cpu":  # the rows are in shared memory already
            for name in self._VIEWED:
                getattr(self, name).share_memory_()
        self.lock = FileLock()  # writers only, in every process (freed if its holder dies)
        self._bind()

    _INDEX = ("row_slot", "row_step", "free", "slot_free", "offset", "length", "table", "counters")
    _VIEWED = (*_INDEX, "version")
    _PER_PROCESS = ("_np", "rows")

    def _bind(self) -> None:
        super()._bind()
        # each entry as a [capacity, *shape] typed view of the packed rows: what
        # appends write (and checkpoints read) entry by entry
        self.rows = self._layout([self.packed], torch.Size([self.capacity]), self.device)
        # a fork waits for a write under way (a child would inherit the writers' thread
        # lock held by a thread it does not have: its first write would hang)
        guard_forks(self, level=1)

    def _fork_locks(self) -> tuple[Any, ...]:
        """The lock :func:`~torchrl_ext.core.process.guard_forks` holds across a fork: the writers' thread lock."""
        return (self.lock._thread,)

    def _before_fork(self) -> None:
        """Nothing to move: the pool's tensors are in shared memory from the start (on the CPU)."""

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Hold the writers' lock, ``version`` odd for the write (see the class notes)."""
        with self.lock:
            version = self._np["version"]
            version[0] += 1
            try:
                yield
            finally:
                version[0] += 1

    def _stored(self, dtype: torch.dtype) -> torch.dtype:
        return torch.float16 if self.half_precision and dtype == torch.float32 else dtype

    def _counter(self, name: str) -> int:
        return int(self._np["counters"][_COUNTERS.index(name)])

    def _set_counter(self, name: str, value: int) -> None:
        self._np["counters"][_COUNTERS.index(name)] = value

    # ------------------------------------------------------------------ state
    @property
    def num_free(self) -> int:
        """Rows not held by any episode."""
        return self._counter("free_top")

    def episode_rows(self, slot: int) -> torch.Tensor:
        """Rows of the episode in ``slot``, in step order.

        Raises:
            KeyError: ``slot`` holds no episode.
        """
        if not 0 <= slot < self.capacity or not self._np["length"][slot]:
            raise KeyError(f"EpisodePool.episode_rows: slot {slot} holds no episode.")
        off, n = int(self._np["offset"][slot]), int(self._np["length"][slot])
        return self.table[off : off + n].clone()

    def live_slots(self) -> np.ndarray:
        """Slots holding an episode (O(slots in use))."""
        high = self._counter("slot_high")
        return np.flatnonzero(self._np["length"][:high] > 0)

    # ----------------------------------------------------------------- writes
    def append(self, episode: TensorDictBase, *, range_checked: bool = False) -> int:
        """Store ``episode`` (``[L]`` steps) in free rows; returns its slot.

        Args:
            episode: ``[L]`` steps.
            range_checked: the caller ran :meth:`check_range` on it already
                (before evicting room for it): not checked again.

        Raises:
            ValueError: the episode has no step, fewer than ``L`` rows are
                free (evict first), or it holds values half precision cannot.
        """
        L = int(episode.shape[0]) if episode.ndim else 0
        if L < 1:
            raise ValueError(
                f"EpisodePool.append: an episode needs batch size [length >= 1], got "
                f"{list(episode.batch_size)}."
            )
        if not range_checked:
            self.check_range(episode)
        with self._writing():
            top = self._counter("free_top")
            if L > top:
                raise ValueError(
                    f"EpisodePool.append: an episode of {L} steps needs {L} free rows, "
                    f"{top} are free; evict episodes first."
                )
            v = self._np
            rows_np = v["free"][top - L : top][::-1].copy()
            rows = torch.from_numpy(rows_np).to(self.device)
            # entry by entry, cast to the stored dtype (float16 for half precision): a
            # fraction of TensorDict's indexed assignment, which casts alike
            for key, value in episode.items(include_nested=True, leaves_only=True):
                stored = self.rows.get(key)
                if value.shape[1:] != stored.shape[1:]:  # (before anything is committed: rows stay free)
                    raise ValueError(
                        f"EpisodePool.append: entry {key!r} has steps of shape {tuple(value.shape[1:])}, "
                        f"the pool's rows hold {tuple(stored.shape[1:])} (fixed by the first episode)."
                    )
                stored.index_copy_(0, rows, value.to(stored.device, stored.dtype))
            slot_top = self._counter("slot_top")
            slot = int(v["slot_free"][slot_top - 1])
            head = self._counter("table_head")
            if head + L > self.table.numel():
                head = self._compact()
            v["table"][head : head + L] = rows_np
            v["row_slot"][rows_np] = slot
            v["row_step"][rows_np] = np.arange(L)
            v["offset"][slot] = head
            v["length"][slot] = L
            self._set_counter("table_head", head + L)
            self._set_counter("free_top", top - L)
            self._set_counter("slot_top", slot_top - 1)
            self._set_counter("row_high", max(self._counter("row_high"), int(rows_np.max()) + 1))
            self._set_counter("slot_high", max(self._counter("slot_high"), slot + 1))
        return slot

    def check_range(self, episode: TensorDictBase, owner: str = "EpisodePool") -> None:
        """Refuse finite values that float16 rows (``half_precision``) would store as inf.

        One pass (``aminmax``) over each entry stored in half precision; none without.

        Raises:
            ValueError: such an entry holds a finite value beyond float16's +-65504.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> pool = EpisodePool(4, TensorDict({"x": torch.zeros(())}, []), half_precision=True)
            >>> pool.check_range(TensorDict({"x": torch.tensor([1.0, 1e5])}, [2]))
            Traceback (most recent call last):
            ...
            ValueError: add_episode: field 'x' holds 100000, beyond the float16 range (+-65504) of EpisodePool(half_precision=True), where it would be stored as inf; scale it, or store it without half_precision.
        """
        for key in self._halved:
            x = episode.get(key)
            if not x.numel():
                continue
            low, high = torch.aminmax(x)
            if float(torch.maximum(-low, high)) <= _HALF_MAX:
                continue
            finite = x[torch.isfinite(x)]  # an infinite value is stored as it came
            worst = float(finite[finite.abs().argmax()]) if finite.numel() else 0.0
            if abs(worst) > _HALF_MAX:
                raise ValueError(
                    f"add_episode: field {key!r} holds {worst:g}, beyond the float16 range "
                    f"(+-{_HALF_MAX:g}) of {owner}(half_precision=True), where it would be "
                    "stored as inf; scale it, or store it without half_precision."
                )

    def evict(self, slot: int) -> None:
        """Free the rows and the slot of the episode in ``slot``."""
        with self._writing():
            v = self._np
            n = int(v["length"][slot]) if 0 <= slot < self.capacity else 0
            if n == 0:
                raise KeyError(f"EpisodePool.evict: slot {slot} holds no episode.")
            off = int(v["offset"][slot])
            rows = v["table"][off : off + n]
            v["row_slot"][rows] = -1
            top = self._counter("free_top")
            v["free"][top : top + n] = rows[::-1]
            v["length"][slot] = 0
            slot_top = self._counter("slot_top")
            v["slot_free"][slot_top] = slot
            self._set_counter("free_top", top + n)
            self._set_counter("slot_top", slot_top + 1)

    def _compact(self) -> int:
        # Move every live run to the front of the table, in offset order.
        v = self._np
        slots = self.live_slots()
        slots = slots[np.argsort(v["offset"][slots], kind="stable")]
        lengths = v["length"][slots]
        new_offset = np.concatenate([[0], lengths.cumsum()[:-1]]).astype(np.int64)
        total = int(lengths.sum())
        source = np.repeat(v["offset"][slots] - new_offset, lengths) + np.arange(total)
        v["table"][:total] = v["table"][source]
        v["offset"][slots] = new_offset
        return total

    def clear(self) -> None:
        """Forget every episode."""
        with self._writing():
            C = self.capacity
            self.row_slot.fill_(-1)
            self.length.zero_()
            self.free.copy_(torch.arange(C - 1, -1, -1))
            self.slot_free.copy_(torch.arange(C - 1, -1, -1))
            self.counters.copy_(torch.tensor([C, C, 0, 0, 0]))

    # ------------------------------------------------------------------ reads
    def window_candidates(
        self, count: int, generator: torch.Generator | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``count`` rows drawn uniformly as window starts: ``(slot, step, length)``.

        The :class:`~torchrl_ext.core.WindowSource` side of the pool:
        rows are drawn in ``[0, highest used row]``; a free row has slot ``-1``.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> pool = EpisodePool(4, TensorDict({"x": torch.zeros(())}, []))
            >>> slot = pool.append(TensorDict({"x": torch.zeros(2)}, [2]))
            >>> slots, steps, lengths = pool.window_candidates(4, torch.Generator().manual_seed(0))
            >>> set(slots.tolist()), set(lengths.tolist())
            ({0}, {2})
        """
        v = self._np
        high = self._counter("row_high")
        if not high:
            none = np.full(count, -1, dtype=np.int64)
            return none, none, none
        r = uniform_below(high, count, generator)
        slot, step, length = np.empty((3, count), dtype=np.int64)
        pool_steps(r, v["row_slot"], v["row_step"], v["length"], slot, step, length)
        return slot, step, length

    def live_episodes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(slot, length, first live step)`` of every stored episode (all steps live).

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> pool = EpisodePool(8, TensorDict({"x": torch.zeros(())}, []))
            >>> a, b = (pool.append(TensorDict({"x": torch.zeros(n)}, [n])) for n in (3, 2))
            >>> [x.tolist() for x in pool.live_episodes()]
            [[0, 1], [3, 2], [0, 0]]
        """
        slots = self.live_slots()
        return slots, self._np["length"][slots], np.zeros_like(slots)

    def draw_windows(
        self, count: int, width: int, pad: bool, generator: torch.Generator | None,
        max_rounds: int = 16,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``count`` windows of ``width`` steps, uniform over valid windows.

        :func:`~torchrl_ext.core.draw_windows` over this pool: O(batch) rejection sampling of rows, exact counting per
        episode when valid windows are rare.

        Returns:
            ``(slot, step, real)``: episode slot and first step of each window,
            and its number of real steps (``width``, or less when padded).

        Raises:
            ValueError: no stored episode has a valid window.
        """
        return draw_windows(self, count, width, pad, generator, max_rounds)

    def draw_episodes(
        self, count: int, generator: torch.Generator | None, version: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``count`` stored episodes, uniform over episodes: ``(slot, length)``.

        Slots are drawn in ``[0, highest used slot]`` and redrawn while empty;
        evicted slots are reused first, so they are mostly full. ``version``:
        the pool's ``version`` when the caller started reading; the redraws
        stop once a write changed it (the caller reads again).
        """
        v = self._np
        high = self._counter("slot_high")
        if self._counter("slot_top") == self.capacity:
            raise ValueError("cannot sample: no episode is stored.")
        slot = np.empty(count, dtype=np.int64)
        todo = np.arange(count)
        while todo.size:
            if version is not None and int(v["version"][0]) != version:
                raise _Torn
            s = uniform_below(high, todo.size, generator)
            ok = v["length"][s] > 0
            slot[todo[ok]] = s[ok]
            todo = todo[~ok]
        return slot, v["length"][slot]

    def window_rows(self, slot: np.ndarray, step: np.ndarray, real: np.ndarray, width: int) -> np.ndarray:
        """``[B, width]`` rows of windows; padding repeats each window's last real step.

        Raises:
            IndexError: a window reaches outside the episode table: ``slot``,
                ``step`` and ``real`` were read across a write (:meth:`sample`
                then reads again).

        Examples:
            >>> import numpy as np, torch
            >>> from tensordict import TensorDict
            >>> pool = EpisodePool(8, TensorDict({"x": torch.zeros(())}, []))
            >>> slot = pool.append(TensorDict({"x": torch.zeros(3)}, [3]))
            >>> pool.window_rows(np.array([slot]), np.array([1]), np.array([2]), 3).tolist()
            [[1, 2, 2]]
        """
        out = np.empty((slot.size, width), dtype=np.int64)
        if not table_runs(self._np["table"], self._np["offset"], slot, step, real, out):
            # sample() reads without the writers' lock: this read met a write, and reads again
            raise IndexError(
                "EpisodePool.window_rows: a window reaches outside the episode table (its "
                "slot's offset and length were read across a write); read again."
            )
        return out

    def gather(self, rows: np.ndarray) -> TensorDictBase:
        """Entries at ``rows`` (any shape), float16-stored entries back in float32.

        Examples:
            >>> import numpy as np, torch
            >>> from tensordict import TensorDict
            >>> pool = EpisodePool(8, TensorDict({"x": torch.zeros(())}, []))
            >>> slot = pool.append(TensorDict({"x": torch.arange(3.0)}, [3]))
            >>> pool.gather(np.array([[2, 0]]))["x"].tolist()
            [[2.0, 0.0]]
        """
        return tensordict_of(self._entries(rows), torch.Size(rows.shape), self.rows.device)

    def _entries(self, rows: np.ndarray) -> dict[str, Any]:
        """The nested dict of every entry at ``rows`` (one gather of whole rows), shaped as ``rows``."""
        flat = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.int64).reshape(-1)).to(self.device)
        block = gather_rows(self.packed, flat)
        values = self._layout.pieces([block.view(*rows.shape, block.shape[-1])])
        for i in self._halved_at:
            values[i] = values[i].float()
        return self._layout.tree(values)

    def sample(
        self,
        count: int,
        sequence_length: int | None,
        *,
        pad: bool = False,
        generator: torch.Generator | None = None,
        max_rounds: int = 16,
        mask_key: str = "mask",
    ) -> TensorDictBase:
        """``count`` sequences: windows of ``sequence_length`` steps, or whole episodes.

        Windows are uniform over every valid window (:meth:`draw_windows`);
        whole episodes (``sequence_length=None``) are uniform over episodes and
        padded to the longest of the batch. Padded results (whole episodes, or
        ``pad``) carry ``mask_key``, ``[count, width]`` bool, True on real steps;
        padding repeats a sequence's last step.

        Returns:
            a ``[count, width]`` TensorDict of the stored entries.

        Raises:
            ValueError: nothing to sample (no episode, or none long enough).
        """
        version = self._np["version"]
        deadline = time.monotonic() + _TORN_TIMEOUT_S
        for attempt in itertools.count():
            seen = int(version[0])
            try:
                if seen & 1:  # a write is under way
                    raise _Torn
                if sequence_length is None:
                    slot, real = self.draw_episodes(count, generator, seen)
                    step, width = np.zeros_like(slot), int(real.max())
                else:
                    width = int(sequence_length)
                    slot, step, real = self.draw_windows(count, width, pad, generator, max_rounds)
                rows = self.window_rows(slot, step, real, width)
                entries = self._entries(rows)
            except (_Torn, IndexError, ValueError, RuntimeError):
                if int(version[0]) == seen and not seen & 1:
                    raise  # nothing was written meanwhile: a real error
            else:
                if int(version[0]) == seen:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"EpisodePool.sample: every read for {_TORN_TIMEOUT_S:.0f} s met a write "
                    "under way (a writer died mid-write, or writes never pause)."
                )
            time.sleep(0 if attempt < 100 else 1e-3)
        if sequence_length is None or pad:
            mask = torch.from_numpy(np.arange(width) < real[:, None])
            entries[mask_key] = mask.to(self.device)
        return tensordict_of(entries, torch.Size(rows.shape), self.rows.device)

    # ------------------------------------------------------- state and sharing
    def state_dict(self) -> dict[str, Any]:
        """Rows ever used (below the high-water mark) and index, copied."""
        return {
            "rows": self.rows[: self._counter("row_high")].clone(),
            **{name: getattr(self, name).clone() for name in self._INDEX},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` in place (shared memory stays shared)."""
        with self._writing():
            self.rows[: state["rows"].shape[0]] = state["rows"].to(self.device)
            for name in self._INDEX:
                getattr(self, name).copy_(state[name])

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(capacity={self.capacity}, episodes={self.live_slots().size}, "
            f"free_rows={self.num_free}, device={self.device})"
        )
