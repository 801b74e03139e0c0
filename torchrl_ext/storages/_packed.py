"""Rows packed as bytes: every entry of a row lies in one contiguous run of memory.

A transition is one ``index_select``: its row's bytes and then its successor's
observation span (the next observation), read together through an overlapping
strided view of the rows (see :meth:`PackedRows.gather`), instead of one
advanced index per entry; a random row costs one or two cache lines instead of
one miss per entry. Entries are typed views of the gathered bytes (no copy).

A row holds two spans: the observation entries (``obs``, also read at the next
row) and the step entries (``step``: action, ids and next-only entries such as
reward and done flags). Columns are ordered by itemsize so every typed view is
aligned, and spans and rows are padded to 8 bytes.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import LazyMemmapStorage

from torchrl_ext.core.kernels.rows import any_ring_end
from torchrl_ext.core.kernels.sequences import wrapped_runs
from torchrl_ext.core.kernels.writes import put_bytes
from torchrl_ext.core.schema import RowSchema, get_unchecked, put_leaf, tensordict_of
from torchrl_ext.storages._columns import Layout, copy_plan, pack, place
from torchrl_ext.storages._host import byte_table
from torchrl_ext.storages._memory import gather_rows, move_together, reserve, reserve_private

__all__ = ["PackedRows"]

_FIRST_ROWS = 1024  # rows per stream first allocated on an accelerator, then doubled
_NO_START = np.empty(0, dtype=bool)  # a write opening no episode
_IN_ORDER = np.empty(0, dtype=np.int64)  # a write's steps are its entries' rows, in order


class PackedRows:
    """``num_streams * stream_capacity`` rows of a :class:`~torchrl_ext.core.schema.RowSchema`, packed as bytes.

    Rows are addressed as in :class:`~torchrl_ext.core.EpisodeIndex`: row
    ``s * stream_capacity + slot``. Memory follows the rows written. In CPU
    memory the whole buffer is reserved and committed by the kernel as rows are
    written, on huge pages until :meth:`share` moves it to shared memory
    (:func:`~torchrl_ext.storages._memory.reserve_private`); on an accelerator,
    where nothing is committed lazily, each stream's part *grows*: the buffer
    holds ``allocated`` slots per stream (``[num_streams, allocated]`` rows),
    doubled (one copy, amortised O(1) a row) when a write reaches past them,
    up to ``stream_capacity``; row indices are mapped to the buffer on the CPU
    before their one transfer. Only this process sees a grown buffer, which is
    why shared (CPU) buffers are reserved instead.

    Args:
        schema: what a row holds.
        num_streams: number of stream rings.
        stream_capacity: rows per ring.
        backend: ``"tensor"`` (memory: on CPU, committed as rows are written,
            private until :meth:`share`, see :mod:`~torchrl_ext.storages._memory`) or
            ``"memmap"`` (a sparse file on disk, CPU only).
        scratch_dir: memmap directory (``None``: a temporary one).
        device: where the rows live. Row indices given to the gathers may be
            CPU tensors: each gather moves its indices in one transfer.
        grow: grow the buffer (as on an accelerator) rather than reserve it;
            ``None``: on accelerators only.
    """

    def __init__(
        self,
        schema: RowSchema,
        num_streams: int,
        stream_capacity: int,
        backend: str,
        scratch_dir: str | None,
        device: torch.device = torch.device("cpu"),
        grow: bool | None = None,
    ) -> None:
        self.num_streams, self.stream_capacity = num_streams, stream_capacity
        num_rows = num_streams * stream_capacity
        grow = device.type != "cpu" if grow is None else grow
        growing = grow and backend == "tensor"
        self.allocated = min(stream_capacity, _FIRST_ROWS) if growing else stream_capacity
        self.obs, obs_end = place(schema.shared, schema.leaves, 0)
        self._obs_bytes = obs_end  # the observation span, padded to 8 bytes
        step_keys = schema.root_only + tuple(("next", *k) for k in schema.next_only)
        self.step, self.row_bytes = place(step_keys, schema.leaves, obs_end)
        # what a write to host rows copies (put_bytes), by whether a step opens an episode:
        # the (key, bytes per row) of each entry and its [byte, target] (0: the step's row,
        # 1: its next row, 2: its row if it opens an episode)
        copies = [(c.key, c, 0) for c in self.step] + [(("next", *c.key), c, 1) for c in self.obs]
        every = copies + [(c.key, c, 2) for c in self.obs]
        self._copies = (copy_plan(copies), copy_plan(every))
        # the entries whose view may hold other bytes than its values: a negative view (the .imag
        # of a conj()) of any number, a conjugate view of a complex one (is_complex)
        self._signed = [(key, c.dtype.is_complex) for key, c, _ in every if c.dtype is not torch.bool]
        self.device = device
        # host rows start in this process's memory, on huge pages (see share); a file and
        # an accelerator's rows are what they are
        self.shared = backend != "tensor" or device.type != "cpu"
        if backend == "tensor":
            rows = self._reserve(num_streams * self.allocated)
            self.buffers: TensorDictBase = TensorDict({"rows": rows}, [rows.shape[0]])
        else:
            # a sparse file; a directory of an earlier run is reused (its rows are then restored by loads)
            inner = LazyMemmapStorage(num_rows, scratch_dir=scratch_dir, existsok=True)
            inner._init(TensorDict({"rows": torch.zeros(self.row_bytes, dtype=torch.uint8)}, []))
            self.buffers = inner._storage
        self._bind()

    def _reserve(self, n: int) -> torch.Tensor:
        """``n`` zero rows, committed as written: private host memory until :meth:`share`."""
        if self.shared:
            return reserve((n, self.row_bytes), torch.uint8, self.device)
        return reserve_private((n, self.row_bytes), torch.uint8)

    def share(self, live: np.ndarray | None = None) -> None:
        """Move host rows to shared memory, where other processes see them and every later write.

        Rows start in this process's memory, on huge pages (random reads
        15-20% faster, see :mod:`~torchrl_ext.storages._memory`), which a
        worker process cannot see. Before the first one would need them (a
        fork, or pickling for a spawned process), the rows in use are copied
        once to a shared reservation and the views are bound to it. The caller
        keeps writes out meanwhile. No-op once shared (and for files and
        accelerators).

        Args:
            live: ``[num_streams]`` rows in use at the start of each stream's
                ring (the rest are never read, and are not copied: memory
                still follows the data); ``None``: every row.
        """
        if self.shared:
            return
        S, A, W = self.num_streams, self.allocated, self.row_bytes
        rows = reserve((S * A, W), torch.uint8, self.device)
        new, old = rows.view(S, A, W), self._rows.view(S, A, W)
        used = [A] * S if live is None else np.minimum(live, A).tolist()
        for s, n in enumerate(used):
            if n:
                new[s, :n] = old[s, :n]
        self.shared = True
        self.buffers = TensorDict({"rows": rows}, [S * A])
        self._bind()

    def _bind(self) -> None:
        self._rows = self.buffers.get("rows")
        # the padded observation span: its width is a multiple of every itemsize
        self._obs_span = self._rows[:, : self._obs_bytes]
        self._step_span = self._rows[:, self._step_lo :]  # the padded step span, likewise
        # writes copy whole padded spans as int64 words: the copy kernel then moves
        # 8 bytes at a time, not 1 (spans start and end at multiples of 8 bytes)
        self._obs_words = self._obs_span.view(torch.int64) if self.obs else None
        self._step_words = self._step_span.view(torch.int64) if self.step else None
        self._words = {
            span: words
            for span, words in (("obs", self._obs_words), ("step", self._step_words))
            if words is not None
        }
        # rows in host memory are written through numpy views of those words
        self._host_words: dict[str, np.ndarray] | None = None
        if self._rows.device.type == "cpu":
            self._host_words = {span: words.numpy() for span, words in self._words.items()}
        # each row's bytes and then its successor's observation span, in one run:
        # a transition is one gather (see _pairs); overlapping views, no copy
        W, O = self.row_bytes, self._obs_bytes
        self._pair_view = self._rows.as_strided((max(self._rows.shape[0] - 1, 0), W + O), (W, 1))
        self._bind_layouts()
        # CPU indices address this buffer as they are: no mapping, no transfer
        self._slots_are_rows = (
            self._rows.device.type == "cpu" and self.allocated == self.stream_capacity
        )
        self._moved: tuple[Any, Any] | None = None  # (host rows, device copy): see moved_index

    def _bind_layouts(self) -> None:
        """The :class:`~torchrl_ext.storages._columns.Layout` of each kind of read."""
        W, S, lo = self.row_bytes, self.row_bytes - self._step_lo, self._step_lo
        row = [(0, c.key, c, c.lo) for c in self.obs + self.step]
        obs_next = [(0, ("next", *c.key), c, W + c.lo) for c in self.obs]
        # a transition (or a step of a sequence): its row, then its successor's observation span
        self._pair_layout = Layout(row + obs_next, [W + self._obs_bytes])
        self._obs_layout = Layout([(0, c.key, c, c.lo) for c in self.obs], [self._obs_bytes])
        self._step_layout = Layout([(0, c.key, c, c.lo - lo) for c in self.step], [S])

    @property
    def _step_lo(self) -> int:
        """Where the step span starts in a row."""
        return self.step[0].lo if self.step else self.row_bytes

    # ----------------------------------------------------------------- growth
    def _fit(self, *rows: torch.Tensor | np.ndarray) -> None:
        """Grow the buffer to hold physical ``rows`` (``[k]`` on the CPU), doubling each stream's part."""
        if self.allocated == self.stream_capacity:
            return
        C = self.stream_capacity
        need = max((int((r % C).max()) + 1 for r in rows if len(r)), default=0)
        if need <= self.allocated:
            return
        S, old, width = self.num_streams, self.allocated, self.row_bytes
        size = min(C, max(need, 2 * old))
        grown = self._reserve(S * size)
        grown.view(S, size, width)[:, :old] = self._rows.view(S, old, width)
        self.allocated = size
        self.buffers = TensorDict({"rows": grown}, [S * size])
        self._bind()

    def _slots(self, rows: Any) -> Any:
        """Where physical ``rows`` (a tensor or an array) lie in the buffer: ``s * allocated + slot``.

        As is if not grown.
        """
        if self.allocated == self.stream_capacity:
            return rows
        return rows + rows // self.stream_capacity * (self.allocated - self.stream_capacity)

    def take(self, rows: torch.Tensor) -> TensorDictBase:
        """The bytes of physical ``rows`` (``[k]``), as ``{"rows": [k, row bytes]}`` (checkpoints)."""
        (at,) = self._on_device(rows)
        return TensorDict({"rows": gather_rows(self._rows, at)}, [rows.numel()])

    def put(self, rows: torch.Tensor, data: torch.Tensor) -> None:
        """Write the bytes ``data`` (``[k, row bytes]``, any device) to physical ``rows`` (checkpoints)."""
        self._fit(rows)
        (at,) = self._on_device(rows)
        words = data.to(self.device).contiguous().view(torch.int64)
        self._rows.view(torch.int64).index_copy_(0, at, words)

    # ----------------------------------------------------------------- writes
    def write(
        self,
        leaves: dict[tuple[str, ...], torch.Tensor],
        rows: np.ndarray,
        next_rows: np.ndarray,
        start: np.ndarray | None,
        at: np.ndarray | None = None,
    ) -> None:
        """Write ``n`` steps.

        Rows in host memory take each entry's bytes where they lie, in one
        compiled pass (:func:`~torchrl_ext.core.kernels.writes.put_bytes`; a
        numpy copy per entry costs several times more on the small blocks of
        a step); rows on an accelerator get each span packed there, by torch,
        and copied in one ``index_copy_`` (row indices moved there once).

        Args:
            leaves: every input entry, flattened to ``[m, *shape]``.
            rows: ``[n]`` row of each step (step entries; observation if it starts).
            next_rows: ``[n]`` row of each step's next observation.
            start: ``[n]`` bool, the step opens an episode; ``None`` if none does.
            at: ``[n]`` where each step lies in ``leaves``; ``None``: step ``j``
                at ``j`` (``m == n``).
        """
        self._fit(rows, next_rows)
        words = self._host_words
        if words is None:
            if at is not None:
                leaves = _select(leaves, at)
            self._write_on_device(leaves, rows, next_rows, start)
            return
        dst = words.get("rows")
        if dst is None:  # the rows' bytes (a view, made at the first write after each bind)
            dst = words["rows"] = self._rows.numpy()
        if self.allocated != self.stream_capacity:  # a grown buffer (growth on the CPU: tests)
            rows, next_rows = self._slots(rows), self._slots(next_rows)
        opens = _NO_START if start is None else start
        steps = _IN_ORDER if at is None else at
        for key, is_complex in self._signed:  # a view whose bytes are not its values: resolved
            value = leaves[key]
            if value.is_neg() or is_complex and value.is_conj():
                leaves = {**leaves, key: value.resolve_neg().resolve_conj()}
        entries, columns = self._copies[start is not None]
        sources, kept = byte_table([(leaves[key], width) for key, width in entries])
        put_bytes(dst, rows, next_rows, opens, sources, columns, steps)
        del kept  # the host tensors the table points into: alive until the copy is done

    def _write_on_device(
        self,
        leaves: dict[tuple[str, ...], torch.Tensor],
        rows: np.ndarray,
        next_rows: np.ndarray,
        start: np.ndarray | None,
    ) -> None:
        """:meth:`write` to rows on an accelerator: each span packed there (row indices moved once)."""
        n = rows.size
        first_rows = None if start is None else rows[start]
        at = self._on_device(*(None if r is None else torch.from_numpy(r)
                               for r in (rows, next_rows, first_rows)))
        if self.step:
            self._store("step", at[0], pack(self.step, leaves, n, (), self.row_bytes - self._step_lo))
        if self.obs:
            self._store("obs", at[1], pack(self.obs, leaves, n, ("next",), self._obs_bytes))
            if start is not None:  # packed at the starts only
                starts = {c.key: _pick(leaves[c.key], start) for c in self.obs}
                first = pack(self.obs, starts, int(start.sum()), (), self._obs_bytes)
                self._store("obs", at[2], first)

    def _store(self, span: str, at: torch.Tensor, packed: torch.Tensor) -> None:
        """Copy ``packed`` (``[k, span bytes]``) into ``span`` of the device slots ``at``, as int64 words."""
        self._words[span].index_copy_(0, at, packed.view(torch.int64).to(self.device))

    def same_observation(
        self,
        leaves: dict[tuple[str, ...], torch.Tensor],
        positions: np.ndarray,
        rows: np.ndarray,
    ) -> np.ndarray:
        """Whether steps ``positions`` of ``leaves`` observe what ``rows`` hold, bytewise.

        A step that continues an episode is not stored with its observation:
        that is the row holding the previous step's next observation. This
        compares the two (bytes, so NaNs compare equal to themselves) on the
        rows' device; ``[k]`` bool.
        """
        if not self.obs:
            return np.ones(rows.size, dtype=bool)
        (at,) = self._on_device(torch.from_numpy(rows))
        stored = gather_rows(self._rows, at)  # [k, row bytes]
        where = torch.from_numpy(positions).to(_leaves_device(leaves))
        picked = {c.key: leaves[c.key].index_select(0, where) for c in self.obs}
        incoming = pack(self.obs, picked, rows.size, (), self._obs_bytes)
        width = self.obs[-1].hi
        return (incoming.to(self.device)[:, :width] == stored[:, :width]).all(1).cpu().numpy()

    def _on_device(
        self,
        *indices: torch.Tensor | None,
        beside: tuple[torch.Tensor | None, ...] = (),
        index: torch.Tensor | None = None,
    ) -> tuple[Any, ...]:
        """Physical row ``indices`` as buffer slots on the rows' device, in one transfer.

        ``beside``: tensors a sampler computed on the CPU for the batch (window
        masks, lengths), moved in the same transfer and returned after the slots.
        ``index``: the sample's index as drawn (not returned): moved in the
        same transfer, unless it is the first slots themselves, and kept for
        :meth:`moved_index`. See :func:`~torchrl_ext.storages._memory.move_together`.
        """
        if self._slots_are_rows:  # rows in host memory: nothing moves
            return (*indices, *beside)
        slots = tuple(None if i is None else self._slots(i) for i in indices)
        rides = index is not None and not (slots and slots[0] is index)
        moved = move_together(slots + beside + ((index,) if rides else ()), self.device)
        if index is not None:
            self._moved = (index, moved[-1] if rides else moved[0])
        return moved[:-1] if rides else moved

    def moved_index(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The sample's index the last read moved (``index=`` of its read), with its device copy; taken once.

        The sample's ``"index"`` entry reuses this copy instead of making
        another transfer.
        """
        moved, self._moved = self._moved, None
        return moved

    # ------------------------------------------------------------------ reads
    def gather(self, rows: torch.Tensor) -> TensorDictBase:
        """Transitions at ``rows`` (``[B]``, CPU int64): one gather.

        Each row's entries, and under ``"next"`` the observation entries of
        its successor in its stream (the step's next observation).
        """
        return self._pair_layout([self._pairs(rows)], rows.shape, self.device)

    def _pairs(self, rows: torch.Tensor) -> torch.Tensor:
        """``[k, row bytes + observation bytes]``: each of ``rows``, then its successor's observation span.

        A row's successor is the next row (read with it through the
        overlapping pair view), except at the end of its stream's ring, where
        it is the ring's first slot: those rows, one in ``stream_capacity``,
        are read again, apart.
        """
        C, W = self.stream_capacity, self.row_bytes
        host = rows.numpy()
        # the rows a sampler drew are the sample's "index": on a device, moved once (moved_index)
        if not any_ring_end(host, C):
            (at,) = self._on_device(rows, index=rows)
            return gather_rows(self._pair_view, at)
        ring_end = host % C == C - 1
        ends = torch.from_numpy(host[ring_end])
        at, ends, firsts, where = self._on_device(
            torch.from_numpy(np.where(ring_end, 0, host)), ends, ends - (C - 1),
            beside=(torch.from_numpy(np.flatnonzero(ring_end)),),  # positions: no mask on the device
            index=rows,
        )
        block = gather_rows(self._pair_view, at)
        block[where, :W] = gather_rows(self._rows, ends)
        block[where, W:] = gather_rows(self._obs_span, firsts)
        return block

    def next_rows(self, rows: np.ndarray) -> np.ndarray:
        """The row following each of ``rows`` in its stream's ring (the ring's first slot after its last)."""
        C = self.stream_capacity
        nxt = rows + 1
        nxt[nxt % C == 0] -= C
        return nxt

    def gather_steps(self, rows: torch.Tensor) -> TensorDictBase:
        """The step entries of ``rows`` (any shape), shaped as ``rows``: no observation entry.

        For a caller that reads the observations itself (frame stacks): one
        read of the step span.
        """
        batch = rows.shape
        (at,) = self._on_device(rows.reshape(-1))
        span = gather_rows(self._step_span, at)
        return self._step_layout([span.view(*batch, span.shape[-1])], batch, self.device)

    def gather_observations(self, rows: torch.Tensor) -> TensorDictBase:
        """The observation entries of ``rows`` (any shape), shaped as ``rows``: one read of the span."""
        batch = rows.shape
        if not self.obs:
            return tensordict_of({}, batch, self.device)
        (at,) = self._on_device(rows.reshape(-1))
        span = gather_rows(self._obs_span, at).view(*batch, self._obs_bytes)
        return self._obs_layout([span], batch, self.device)

    def observations_in(self, batch: TensorDictBase) -> TensorDictBase:
        """The observation entries of ``batch`` (transitions from :meth:`gather`), laid out
        as :meth:`gather_observations` of their rows: the batch's own tensors, no read."""
        layout = self._obs_layout
        values = [get_unchecked(batch, key) for key in layout.keys]
        return tensordict_of(layout.tree(values), batch.batch_size, self.device)

    def gather_sequences(self, rows: torch.Tensor) -> TensorDictBase:
        """Sequences of consecutive rows: ``[B, L]`` transitions from ``[B, L + 1]`` rows.

        Row ``j + 1`` of a sequence is the next row of row ``j`` (the caller
        checks), so one gather reads every observation once: step ``j``'s
        observation is row ``j`` and its next observation row ``j + 1``.
        A sequence's rows are one run of memory (see :meth:`_runs`).
        Entries are strided views of the gathered block (no copy).
        """
        B, L1 = rows.shape
        W = self.row_bytes
        block = self._runs(rows)  # [B, L1 * W]
        # step j of a sequence: its row, then the next row's observation span, read as one
        # transition of a pair read (overlapping views, no copy)
        pairs = block.as_strided((B, L1 - 1, W + self._obs_bytes), (L1 * W, W, 1))  # from block's offset
        return self._pair_layout([pairs], torch.Size([B, L1 - 1]), self.device)

    def _runs(self, rows: torch.Tensor) -> torch.Tensor:
        """``[B, L1 * row bytes]``: the bytes of each run of ``L1`` consecutive ``rows`` (``[B, L1]``).

        A run that stays inside its stream's ring is ``L1`` adjacent rows of
        the buffer, read as one item of an overlapping view (one copy of
        ``L1 * row bytes`` per run, not one per row); a run that wraps at the
        ring's end, at most one start in ``stream_capacity / L1``, is read
        again, row by row.
        """
        B, L1 = rows.shape
        host = rows.numpy()
        wraps = np.empty(B, dtype=bool)  # the run crosses its ring's end
        W, n = self.row_bytes, self._rows.shape[0]
        runs = self._rows.as_strided((n - L1 + 1, L1 * W), (W, 1))  # item i: rows i .. i + L1 - 1
        if not wrapped_runs(host, wraps):
            # each run's first row (a strided view of numpy's column: a tensor's [:, 0] costs more)
            (at,) = self._on_device(torch.from_numpy(host[:, 0]))
            return gather_rows(runs, at)
        wrapped = torch.from_numpy(host[wraps])
        at, wrapped, where = self._on_device(
            torch.from_numpy(np.where(wraps, 0, host[:, 0])), wrapped.reshape(-1),
            beside=(torch.from_numpy(np.flatnonzero(wraps)),),  # positions: no mask on the device
        )
        block = gather_rows(runs, at)
        block[where] = gather_rows(self._rows, wrapped).view(-1, L1 * W)
        return block

    def gather_windows(
        self,
        window_rows: torch.Tensor,
        obs_rows: torch.Tensor | None,
        *,
        mask: torch.Tensor,
        lengths: torch.Tensor,
        observations: bool = True,
        relabel: torch.Tensor | None = None,
        index: torch.Tensor | None = None,
    ) -> TensorDictBase:
        """Windows of steps: ``[B]`` transitions, each from its window's first step to the row after its last.

        Two gathers whatever the window: the step spans of every window step,
        and the observation spans of every other row read, in one index.

        Args:
            window_rows: ``[B, W]`` rows of the window's steps, the first row
                first; padding repeats the window's last row (the caller masks
                it), so column ``W - 1`` is each window's last step.
            obs_rows: the rows whose observation entries are read, in this
                order: with ``observations``, each window's first row (its
                observation) and the row after its last step (its next
                observation), interleaved, ``[2B]`` (``[first_0, after_0,
                first_1, ...]``: each window's two reads lie close); with
                ``relabel`` (hindsight), then
                each transition's goal row ``[B]`` and the row after each
                window step ``[B * W]`` (row-major). ``None`` if none.
            mask: ``[B, W]`` bool, the step is inside its window (``("n_step", "mask")``).
            lengths: ``[B]`` steps of each window (``"steps_to_next_obs"``, ``[B, 1]``).
            observations: read the observation entries (root and next);
                ``False`` for a caller that reads them itself.
            relabel: ``[B]`` bool, the row gets the goal (``("her", "relabel")``);
                ``None``: no hindsight goals.
            index: the sample's index as drawn (on the CPU): on an accelerator,
                it rides in the read's one transfer (see :meth:`moved_index`).

        Returns:
            a ``[B]`` TensorDict: observation entries of each first row,
            root-only entries (action...) of the first step, the next
            observation, the next-only entries (done flags...) of the last
            step under ``"next"``, and under ``"n_step"`` a ``[B, W]``
            TensorDict of the next-only entries of every window step. With
            ``relabel``, also the observation entries at the goal rows under
            ``"her"``, and each window step's next observation entries in
            ``"n_step"`` (so rewards can be recomputed for a new goal).
        """
        B, W = window_rows.shape
        hindsight = relabel is not None
        window_rows, obs_rows, mask, lengths, relabel = self._on_device(
            window_rows, obs_rows, beside=(mask, lengths, relabel), index=index
        )
        # [B, W, step bytes]: step 0 holds the root-only entries, column W - 1 the last step's
        steps = gather_rows(self._step_span, window_rows.reshape(-1)).view(B, W, -1)
        root: dict[str, Any] = {}
        nxt: dict[str, Any] = {}
        window: dict[str, Any] = {}
        for key, values in zip(self._step_layout.keys, self._step_layout.pieces([steps])):
            if key[0] == "next":  # next-only entry: at the last step, and the whole window
                put_leaf(nxt, key[1:], values[:, W - 1])
                put_leaf(window, key[1:], values)
            else:
                put_leaf(root, key, values[:, 0])
        her: dict[str, Any] = {}
        if obs_rows is not None and self.obs:
            block = gather_rows(self._obs_span, obs_rows)
            at = 2 * B if observations else 0  # where the goal rows start in the block
            for key, value in zip(self._obs_layout.keys, self._obs_layout.pieces([block])):
                if observations:
                    put_leaf(root, key, value[0:at:2])
                    put_leaf(nxt, key, value[1:at:2])
                if hindsight:
                    put_leaf(her, key, value[at : at + B])
                    put_leaf(window, key, value[at + B :].view(B, W, *value.shape[1:]))
        if hindsight:
            her["relabel"] = relabel
            root["her"] = her
        window["mask"] = mask
        root["steps_to_next_obs"] = lengths.view(B, 1)
        root["next"] = nxt
        root["n_step"] = tensordict_of(window, torch.Size([B, W]), self.device)
        return tensordict_of(root, torch.Size([B]), self.device)

    def __getstate__(self) -> dict[str, Any]:
        # another process gets the rows by their shared memory (torch's own move would
        # leave this object's views on the old rows); TransitionStorage shares first,
        # copying only the rows in use
        self.share()
        state = dict(self.__dict__)
        for name in ("_rows", "_obs_span", "_step_span", "_obs_words", "_step_words", "_words",
                     "_host_words", "_pair_view", "_moved",
                     "_pair_layout", "_obs_layout", "_step_layout"):
            state.pop(name)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._bind()


def _leaves_device(leaves: dict[tuple[str, ...], torch.Tensor]) -> torch.device:
    """The device of written data (its first entry's; the writer checks they agree)."""
    return next(iter(leaves.values())).device


def _select(leaves: dict[tuple[str, ...], torch.Tensor], at: np.ndarray) -> dict[tuple[str, ...], torch.Tensor]:
    """Rows ``at`` of every entry, on the entry's device."""
    index = torch.from_numpy(at)
    return {key: value.index_select(0, index.to(value.device)) for key, value in leaves.items()}


def _pick(value: torch.Tensor, mask: np.ndarray) -> torch.Tensor:
    """The ``[k, ...]`` steps of ``value`` where the ``[n]`` host mask ``mask`` is set, on ``value``'s device."""
    return value.index_select(0, torch.from_numpy(np.flatnonzero(mask)).to(value.device))
