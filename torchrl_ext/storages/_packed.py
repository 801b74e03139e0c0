"""Rows packed as bytes: every entry of a row lies in one contiguous run of memory.

A gather is two ``index_select`` calls, one at the sampled rows and one at the
rows after them (for the next observation), instead of one advanced index per
entry; a random row costs one or two cache lines instead of one miss per entry.
Entries are typed views of the gathered bytes (no copy).

A row holds two spans: the observation entries (``obs``, also read at the next
row) and the step entries (``step``: action, ids and next-only entries such as
reward and done flags). Columns are ordered by itemsize so every typed view is
aligned, and spans and rows are padded to 8 bytes.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import LazyMemmapStorage

from torchrl_ext.core.schema import RowSchema, put_leaf
from torchrl_ext.storages._memory import gather_rows, move_together, reserve

__all__ = ["PackedRows"]

_ALIGN = 8
_FIRST_ROWS = 1024  # rows per stream first allocated on an accelerator, then doubled


@dataclass(frozen=True)
class _Column:
    key: tuple[str, ...]  # input key (obs role: the root key)
    dtype: torch.dtype
    shape: torch.Size
    lo: int  # byte range in the row
    hi: int
    width: int  # elements per row
    # a same-size integer dtype to see the entry as on the host, where numpy has
    # no such dtype (bfloat16...); None: numpy has it
    host_dtype: torch.dtype | None = None


def _place(keys, schema: RowSchema, offset: int) -> tuple[list[_Column], int]:
    specs = sorted(((k, schema.leaves[k]) for k in keys), key=lambda kv: -kv[1].dtype.itemsize)
    columns = []
    for key, spec in specs:
        nbytes = prod(spec.shape) * spec.dtype.itemsize
        columns.append(_Column(key, spec.dtype, spec.shape, offset, offset + nbytes,
                               prod(spec.shape), _host_dtype(spec.dtype)))
        offset += nbytes
    return columns, -(-offset // _ALIGN) * _ALIGN


# dtypes a CPU tensor's .numpy() keeps; others (bfloat16, float8...) are reinterpreted
_NUMPY_DTYPES = frozenset({
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
    torch.float32, torch.float64, torch.complex64, torch.complex128,
})


def _host_dtype(dtype: torch.dtype) -> torch.dtype | None:
    """``None`` if numpy has ``dtype``, else the same-size integer dtype to reinterpret it as."""
    if dtype in _NUMPY_DTYPES:
        return None
    return {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize]


class _Cut:
    """Typed views of ``columns`` in ``[n, width]`` blocks whose byte 0 is row byte ``shift``.

    One reinterpreting ``view`` and one ``split`` per dtype instead of a slice
    and a view per entry: the columns of a dtype start at multiples of its
    itemsize, so the bytes around them are whole elements of it.
    """

    def __init__(self, columns: list[_Column], shift: int, width: int) -> None:
        self.columns = columns
        self.runs: list[tuple[torch.dtype, list[int], list[int]]] = []  # dtype, sizes, picks
        self._order: list[int] = []  # column of each picked piece, run by run
        for dtype in dict.fromkeys(c.dtype for c in columns):
            sizes: list[int] = []
            picks: list[int] = []
            at = 0  # bytes covered so far
            for i, c in enumerate(columns):
                if c.dtype != dtype:
                    continue
                if c.lo - shift > at:
                    sizes.append((c.lo - shift - at) // dtype.itemsize)
                picks.append(len(sizes))
                self._order.append(i)
                sizes.append(c.width)
                at = c.hi - shift
            if width > at:
                sizes.append((width - at) // dtype.itemsize)
            self.runs.append((dtype, sizes, picks))
        self._flat = [c.shape == (c.width,) for c in columns]

    def pieces(self, block: torch.Tensor) -> list[torch.Tensor]:
        """Each column of ``block`` (``[*lead, width]`` bytes) as a ``[*lead, *shape]`` view."""
        out: list[Any] = [None] * len(self.columns)
        order = iter(self._order)
        for dtype, sizes, picks in self.runs:
            parts = block.view(dtype).split_with_sizes(sizes, -1)
            for p in picks:
                out[next(order)] = parts[p]
        lead = block.shape[:-1]
        for i, flat in enumerate(self._flat):
            if not flat:
                out[i] = out[i].view(*lead, *self.columns[i].shape)
        return out


class PackedRows:
    """``num_streams * stream_capacity`` rows of a :class:`~torchrl_ext.core.schema.RowSchema`, packed as bytes.

    Rows are addressed as in :class:`~torchrl_ext.core.EpisodeIndex`: row
    ``s * stream_capacity + slot``. Memory follows the rows written. In CPU
    memory the whole buffer is reserved and committed by the kernel as rows are
    written (:func:`~torchrl_ext.storages._memory.reserve`); on an accelerator,
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
        backend: ``"tensor"`` (memory: on CPU, shared and committed as rows are
            written, see :func:`~torchrl_ext.storages._memory.reserve`) or
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
        self.obs, obs_end = _place(schema.shared, schema, 0)
        self._obs_bytes = obs_end  # the observation span, padded to 8 bytes
        step_keys = schema.root_only + tuple(("next", *k) for k in schema.next_only)
        self.step, self.row_bytes = _place(step_keys, schema, obs_end)
        self.device = device
        if backend == "tensor":
            rows = reserve((num_streams * self.allocated, self.row_bytes), torch.uint8, device)
            self.buffers: TensorDictBase = TensorDict({"rows": rows}, [rows.shape[0]])
        else:
            # a sparse file; a directory of an earlier run is reused (its rows are then restored by loads)
            inner = LazyMemmapStorage(num_rows, scratch_dir=scratch_dir, existsok=True)
            inner._init(TensorDict({"rows": torch.zeros(self.row_bytes, dtype=torch.uint8)}, []))
            self.buffers = inner._storage
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
        # typed views of whole rows, observation spans and step spans
        self._cut_row = _Cut(self.obs + self.step, 0, self.row_bytes)
        self._cut_obs = _Cut(self.obs, 0, self._obs_bytes)
        self._cut_step = _Cut(self.step, self._step_lo, self.row_bytes - self._step_lo)
        # CPU indices address this buffer as they are: no mapping, no transfer
        self._slots_are_rows = (
            self._rows.device.type == "cpu" and self.allocated == self.stream_capacity
        )

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
        grown = reserve((S * size, width), torch.uint8, self.device)
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
    ) -> None:
        """Write ``n`` steps.

        Args:
            leaves: every input entry, flattened to ``[n, *shape]``.
            rows: ``[n]`` row of each step (step entries; observation if it starts).
            next_rows: ``[n]`` row of each step's next observation.
            start: ``[n]`` bool, the step opens an episode; ``None`` if none does.
        """
        n = rows.size
        self._fit(rows, next_rows)
        first_rows = None if start is None else rows[start]
        # rows in host memory take numpy row indices; on an accelerator the
        # indices go there in one transfer
        if self._host_words is None:
            at = self._on_device(*(None if r is None else torch.from_numpy(r)
                                   for r in (rows, next_rows, first_rows)))
        else:
            at = tuple(None if r is None else self._slots(r) for r in (rows, next_rows, first_rows))
        if self.step:
            step = _bytes(self.step, leaves, n, (), self.row_bytes - self._step_lo)
            self._store("step", at[0], step)
        if self.obs:
            self._store("obs", at[1], _bytes(self.obs, leaves, n, ("next",), self._obs_bytes))
            if start is not None:  # packed at the starts only
                starts = {c.key: _pick(leaves[c.key], start) for c in self.obs}
                first = _bytes(self.obs, starts, int(start.sum()), (), self._obs_bytes)
                self._store("obs", at[2], first)

    def _store(self, span: str, at: Any, packed: np.ndarray | torch.Tensor) -> None:
        """Copy ``packed`` (``[k, span bytes]``) into ``span`` of the buffer slots ``at``, as int64 words."""
        host = self._host_words
        if host is not None:  # numpy's fancy assignment: a fraction of index_copy_'s call cost
            words = packed if isinstance(packed, np.ndarray) else packed.cpu().numpy()
            host[span][at] = words.view(np.int64)
            return
        moved = torch.as_tensor(packed).view(torch.int64).to(self.device)
        self._words[span].index_copy_(0, at, moved)

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
        incoming = torch.as_tensor(_bytes(self.obs, picked, rows.size, (), self._obs_bytes))
        width = self.obs[-1].hi
        return (incoming.to(self.device)[:, :width] == stored[:, :width]).all(1).cpu().numpy()

    def _on_device(
        self, *indices: torch.Tensor | None, beside: tuple[torch.Tensor | None, ...] = ()
    ) -> tuple[Any, ...]:
        """Physical row ``indices`` as buffer slots on the rows' device, in one transfer.

        ``beside``: tensors a sampler computed on the CPU for the batch (window
        masks, lengths), moved in the same transfer and returned after the slots.
        See :func:`~torchrl_ext.storages._memory.move_together`.
        """
        if self._slots_are_rows:  # rows in host memory: nothing moves
            return (*indices, *beside)
        slots = tuple(None if i is None else self._slots(i) for i in indices)
        return move_together(slots + beside, self.device)

    # ------------------------------------------------------------------ reads
    def gather(self, rows: torch.Tensor, next_rows: torch.Tensor | None) -> TensorDictBase:
        """Transitions at ``rows`` (next observations from ``next_rows``), ``[B]``.

        ``next_rows=None``: without the observation entries (root and next),
        for a caller that reads them itself; only the step span is gathered.
        """
        batch = rows.shape
        root: dict[str, Any] = {}
        rows, next_rows = self._on_device(rows, next_rows)
        if next_rows is None:
            first = gather_rows(self._step_span, rows)
            _put_all(root, (), self._cut_step, first)
            return _tree(root, batch, self.device)
        # only the observation span is read at the next rows
        first, after = gather_rows(self._rows, rows), gather_rows(self._obs_span, next_rows)
        _put_all(root, (), self._cut_row, first)  # step keys of next-only entries start with "next"
        _put_all(root, ("next",), self._cut_obs, after)
        return _tree(root, batch, self.device)

    def gather_observations(self, rows: torch.Tensor) -> TensorDictBase:
        """The observation entries of ``rows`` (any shape), shaped as ``rows``: one read of the span."""
        batch = rows.shape
        root: dict[str, Any] = {}
        if not self.obs:
            return _tree(root, batch, self.device)
        (rows,) = self._on_device(rows)
        span = gather_rows(self._obs_span, rows.reshape(-1))
        for c, value in zip(self.obs, self._cut_obs.pieces(span)):
            put_leaf(root, c.key, value.view(*batch, *c.shape))
        return _tree(root, batch, self.device)

    def gather_sequences(self, rows: torch.Tensor) -> TensorDictBase:
        """Sequences of consecutive rows: ``[B, L]`` transitions from ``[B, L + 1]`` rows.

        Row ``j + 1`` of a sequence is the next row of row ``j`` (the caller
        checks), so one gather reads every observation once: step ``j``'s
        observation is row ``j`` and its next observation row ``j + 1``.
        Entries are strided views of the gathered block (no copy).
        """
        B, L1 = rows.shape
        (rows,) = self._on_device(rows)
        block = gather_rows(self._rows, rows.reshape(-1)).view(B, L1, self.row_bytes)
        root: dict[str, Any] = {}
        _put_all(root, (), self._cut_row, block[:, :-1])
        _put_all(root, ("next",), self._cut_obs, block[:, 1:, : self._obs_bytes])
        return _tree(root, torch.Size([B, L1 - 1]), self.device)

    def gather_windows(
        self,
        rows: torch.Tensor,
        window_rows: torch.Tensor,
        after_rows: torch.Tensor | None,
        goal_rows: torch.Tensor | None = None,
        window_next_rows: torch.Tensor | None = None,
        *,
        mask: torch.Tensor,
        lengths: torch.Tensor,
        relabel: torch.Tensor | None = None,
    ) -> TensorDictBase:
        """Windows of steps: ``[B]`` transitions from ``rows`` to ``after_rows``.

        Two gathers whatever the window: the step spans of every window step,
        and the observation spans of every other row read (first, after,
        goal and window-next rows, in one index).

        Args:
            rows: ``[B]`` first row of each window (its observation).
            window_rows: ``[B, W]`` rows of the window's steps, the first row
                first; padding repeats the window's last row (the caller masks
                it), so column ``W - 1`` is each window's last step.
            after_rows: ``[B]`` row after each window's last step (its observation
                is the window's next observation); ``None``: without the
                observation entries (root and next), for a caller that reads
                them itself (then only step spans are gathered).
            mask: ``[B, W]`` bool, the step is inside its window (``("n_step", "mask")``).
            lengths: ``[B]`` steps of each window (``"steps_to_next_obs"``, ``[B, 1]``).
            relabel: ``[B]`` bool, with ``goal_rows``: the row gets the goal
                (``("her", "relabel")``).

        Returns:
            a ``[B]`` TensorDict: observation entries at ``rows``, root-only
            entries (action...) of the first step, ``("next", obs)`` at
            ``after_rows``, the next-only entries (done flags...) of the last
            step under ``"next"``, and under ``"n_step"`` a ``[B, W]``
            TensorDict of the next-only entries of every window step. With
            ``goal_rows`` and ``window_next_rows`` (``[B, W]``, hindsight),
            also the observation entries at the goal rows under ``"her"``, and
            each window step's next observation entries in ``"n_step"`` (so
            rewards can be recomputed for a new goal).
        """
        B, W = window_rows.shape
        if goal_rows is not None and window_next_rows is None:
            raise ValueError("PackedRows.gather_windows: goal_rows need window_next_rows.")
        rows, window_rows, after_rows, goal_rows, window_next_rows, mask, lengths, relabel = (
            self._on_device(rows, window_rows, after_rows, goal_rows, window_next_rows,
                            beside=(mask, lengths, relabel))
        )
        # [B, W, step bytes]: step 0 holds the root-only entries, column W - 1 the last step's
        steps = gather_rows(self._step_span, window_rows.reshape(-1)).view(B, W, -1)
        root: dict[str, Any] = {}
        nxt: dict[str, Any] = {}
        window: dict[str, Any] = {}
        for c, values in zip(self.step, self._cut_step.pieces(steps)):
            if c.key[0] == "next":  # next-only entry: at the last step, and the whole window
                put_leaf(nxt, c.key[1:], values.select(1, W - 1))
                put_leaf(window, c.key[1:], values)
            else:
                put_leaf(root, c.key, values.select(1, 0))
        # observation spans, one gather: [rows; after] [2B], then [goals; window next] [B + B * W]
        parts = [] if after_rows is None else [rows, after_rows]
        if goal_rows is not None and window_next_rows is not None:
            parts += [goal_rows, window_next_rows.reshape(-1)]
        her: dict[str, Any] = {}
        if parts and self.obs:
            block = gather_rows(self._obs_span, torch.cat(parts))
            at = 0  # where the goal rows start in the block
            for c, value in zip(self.obs, self._cut_obs.pieces(block)):
                if after_rows is not None:
                    put_leaf(root, c.key, value[:B])
                    put_leaf(nxt, c.key, value[B : 2 * B])
                    at = 2 * B
                if goal_rows is not None:
                    put_leaf(her, c.key, value[at : at + B])
                    put_leaf(window, c.key, value[at + B :].view(B, W, *c.shape))
        if goal_rows is not None:
            if relabel is not None:
                her["relabel"] = relabel
            root["her"] = her
        window["mask"] = mask
        root["steps_to_next_obs"] = lengths.reshape(B, 1)
        root["next"] = nxt
        root["n_step"] = _tree(window, torch.Size([B, W]), self.device)
        return _tree(root, torch.Size([B]), self.device)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("_rows", "_obs_span", "_step_span", "_obs_words", "_step_words", "_words",
                     "_host_words", "_cut_row",
                     "_cut_obs", "_cut_step"):
            state.pop(name)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._bind()


def _leaves_device(leaves: dict[tuple[str, ...], torch.Tensor]) -> torch.device:
    """The device of written data (its first entry's; the writer checks they agree)."""
    return next(iter(leaves.values())).device


def _bytes(
    columns: list[_Column],
    leaves: dict[tuple[str, ...], torch.Tensor],
    n: int,
    prefix: tuple[str, ...],
    width: int,
) -> np.ndarray | torch.Tensor:
    """The ``[n, width]`` bytes of ``columns`` from ``leaves`` (keys under ``prefix``), where they are.

    ``width``: the span's bytes, padded to 8 (zero padding after the columns).
    Data in CPU memory is packed by numpy (its calls cost a fraction of
    torch's on the small blocks of a step) into an array; data on an
    accelerator is packed there, into a tensor.
    """
    values = [leaves[prefix + c.key] for c in columns]
    lo = columns[0].lo
    if values[0].device.type == "cpu":
        out = np.empty((n, width), np.uint8)
        if columns[-1].hi - lo < width:  # zero the padding: the last word, before the columns fill it
            out[:, -_ALIGN:].view(np.int64)[...] = 0
        for value, c in zip(values, columns):
            if c.host_dtype is not None:
                value = value.view(c.host_dtype)
            if value.requires_grad:  # an action straight from a policy
                value = value.detach()
            host = value.numpy().reshape(n, c.width)
            # copied as elements of the entry's dtype, not byte by byte
            out[:, c.lo - lo : c.hi - lo].view(host.dtype)[...] = host
        return out
    pad = width - (columns[-1].hi - lo)
    tensors = []
    for value, c in zip(values, columns):
        if value.dim() != 2 or not value.is_contiguous():
            value = value.reshape(n, c.width).contiguous()
        if value.stride(-1) != 1:  # a size-1 dim may carry any stride, e.g. numpy's x[:, None]
            value = value.clone(memory_format=torch.contiguous_format)
        tensors.append(value.view(torch.uint8))
    if pad:
        tensors.append(torch.zeros(n, pad, dtype=torch.uint8, device=tensors[0].device))
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors, 1)


def _pick(value: torch.Tensor, mask: np.ndarray) -> torch.Tensor:
    """The ``[k, ...]`` steps of ``value`` where the ``[n]`` host mask ``mask`` is set, on ``value``'s device."""
    return value.index_select(0, torch.from_numpy(np.flatnonzero(mask)).to(value.device))


def _put_all(tree: dict[str, Any], prefix: tuple[str, ...], cut: _Cut, block: torch.Tensor) -> None:
    """Every column of ``cut`` from ``block`` into ``tree``, under ``prefix``."""
    for c, value in zip(cut.columns, cut.pieces(block)):
        put_leaf(tree, prefix + c.key, value)


def _tree(tree: dict[str, Any], batch: torch.Size, device: torch.device | None = None) -> TensorDictBase:
    """Nested dicts of fresh tensors on ``device`` to a TensorDict (sub-dicts share ``batch``), unchecked.

    The TensorDict carries ``device``, so entries a sampler or transform adds
    later (masks, window lengths) are put there too.
    """
    return TensorDict._new_unsafe(tree, batch_size=batch, device=device)
