"""Where each entry lies in a packed row, and how gathered bytes become a TensorDict.

A row is a run of bytes holding every entry of a step (see
:mod:`~torchrl_ext.storages._packed`). :func:`place` decides where each entry
goes; :func:`pack` and :func:`copy_plan` put entries there (on an accelerator,
and in host memory); a :class:`Layout`, planned once per kind of read, turns
gathered byte blocks back into typed views of those entries, nested by key.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from torchrl_ext.core.schema import LeafSpec, tensordict_of

__all__ = ["ALIGN", "Column", "Layout", "copy_plan", "pack", "place"]

ALIGN = 8  # spans and rows are padded to 8 bytes, so every typed view is aligned

@dataclass(frozen=True)
class Column:
    """An entry's place in a row: bytes ``[lo, hi)``, ``width`` elements of ``dtype``.

    Examples:
        >>> c = Column(("action",), torch.float32, torch.Size([6]), 72, 96, 6)
        >>> c.hi - c.lo == c.width * c.dtype.itemsize
        True
    """

    key: tuple[str, ...]  # input key (observation entries: the root key)
    dtype: torch.dtype
    shape: torch.Size
    lo: int  # byte range in the row
    hi: int
    width: int  # elements per row


def place(
    keys: Iterable[tuple[str, ...]], leaves: Mapping[tuple[str, ...], LeafSpec], offset: int
) -> tuple[list[Column], int]:
    """Columns of ``keys`` (their specs in ``leaves``) from byte ``offset`` on, widest dtype first; and the padded end.

    Ordered by itemsize, every column starts at a multiple of its own itemsize.

    Examples:
        >>> from torchrl_ext.core.schema import LeafSpec
        >>> leaves = {("a",): LeafSpec(torch.Size([1]), torch.bool), ("b",): LeafSpec(torch.Size([2]), torch.float32)}
        >>> columns, end = place([("a",), ("b",)], leaves, 0)
        >>> [(c.key, c.lo, c.hi) for c in columns], end
        ([(('b',), 0, 8), (('a',), 8, 9)], 16)
    """
    specs = sorted(((k, leaves[k]) for k in keys), key=lambda kv: -kv[1].dtype.itemsize)
    columns = []
    for key, spec in specs:
        nbytes = prod(spec.shape) * spec.dtype.itemsize
        columns.append(Column(key, spec.dtype, spec.shape, offset, offset + nbytes, prod(spec.shape)))
        offset += nbytes
    return columns, -(-offset // ALIGN) * ALIGN


def pack(
    columns: list[Column],
    leaves: Mapping[tuple[str, ...], torch.Tensor],
    n: int,
    prefix: tuple[str, ...],
    width: int,
) -> torch.Tensor:
    """The ``[n, width]`` bytes of ``columns`` from ``leaves`` (keys under ``prefix``), packed where they are.

    ``width``: the span's bytes, padded to 8 (zero padding after the columns).

    Examples:
        >>> from torchrl_ext.core.schema import LeafSpec
        >>> columns, width = place([("x",)], {("x",): LeafSpec(torch.Size([1]), torch.int16)}, 0)
        >>> pack(columns, {("next", "x"): torch.tensor([[1], [2]], dtype=torch.int16)}, 2, ("next",), width).tolist()
        [[1, 0, 0, 0, 0, 0, 0, 0], [2, 0, 0, 0, 0, 0, 0, 0]]
    """
    lo = columns[0].lo
    pad = width - (columns[-1].hi - lo)
    tensors = []
    for c in columns:
        value = leaves[prefix + c.key]
        if value.dim() != 2 or not value.is_contiguous():
            value = value.reshape(n, c.width).contiguous()
        if value.stride(-1) != 1:  # a size-1 dim may carry any stride, e.g. numpy's x[:, None]
            value = value.clone(memory_format=torch.contiguous_format)
        tensors.append(value.view(torch.uint8))
    if pad:
        tensors.append(torch.zeros(n, pad, dtype=torch.uint8, device=tensors[0].device))
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors, 1)


def copy_plan(
    copies: list[tuple[tuple[str, ...], Column, int]],
) -> tuple[list[tuple[tuple[str, ...], int]], np.ndarray]:
    """``copies`` (key, column, target) as a :func:`~torchrl_ext.core.kernels.writes.put_bytes` call.

    Returns ``([(key, bytes per row)], [k, 2] int64 (byte in the row, target))``.

    Examples:
        >>> c = Column(("action",), torch.float32, torch.Size([2]), 8, 16, 2)
        >>> entries, columns = copy_plan([(("action",), c, 0)])
        >>> entries, columns.tolist()
        ([(('action',), 8)], [[8, 0]])
    """
    entries = [(key, c.hi - c.lo) for key, c, _ in copies]
    return entries, np.array([[c.lo, target] for _, c, target in copies], dtype=np.int64).reshape(-1, 2)


class Layout:
    """Gathered byte blocks as a TensorDict of typed views (no copy), planned once.

    Each read of a row store gathers one or more byte blocks (``[*batch,
    width]``, uint8) and serves every entry as a view of them. A layout is
    built once per kind of read; at each read it costs one reinterpreting
    ``view`` and one ``split_with_sizes`` per block and dtype (the columns of
    a dtype start at multiples of its itemsize, so the bytes around them are
    whole elements of it; no split for a block that is one entry of its
    dtype, and no view either when that dtype is uint8, as a frame's), a
    ``view`` per entry of more than one dim, and the
    TensorDict (unchecked: the views have the batch's leading dims by
    construction).

    Args:
        parts: ``(block, key, column, at)``: ``column``'s bytes start at byte
            ``at`` of block number ``block``, and go to ``key`` of the result.
        widths: the bytes of each block's last dim (multiples of every itemsize).

    Examples:
        >>> from torchrl_ext.core.schema import RowSchema
        >>> schema = RowSchema.infer({("x",): torch.zeros(2), ("done",): torch.zeros(1, dtype=torch.bool)},
        ...                          batch_dims=0)
        >>> columns, width = place([("x",), ("done",)], schema.leaves, 0)
        >>> layout = Layout([(0, ("next", *c.key), c, c.lo) for c in columns], [width])
        >>> block = torch.zeros(3, width, dtype=torch.uint8)
        >>> td = layout([block], torch.Size([3]))
        >>> td["next", "x"].shape, td["next", "done"].dtype
        (torch.Size([3, 2]), torch.bool)
    """

    def __init__(
        self, parts: Sequence[tuple[int, tuple[str, ...], Column, int]], widths: Sequence[int]
    ) -> None:
        self.keys: list[tuple[str, ...]] = []  # of each leaf, in the order the splits give them
        self._shapes: list[torch.Size | None] = []  # None: a flat entry, the split piece as is
        # (block, dtype, split sizes, [(piece, leaf)]): the pieces of a split that are entries
        self._splits: list[tuple[int, torch.dtype, list[int], list[tuple[int, int]]]] = []
        for b, width in enumerate(widths):
            mine = sorted((p for p in parts if p[0] == b), key=lambda p: p[3])
            for dtype in dict.fromkeys(p[2].dtype for p in mine):
                sizes: list[int] = []
                picks: list[tuple[int, int]] = []
                at = 0  # bytes of the block covered so far
                for _, key, c, lo in mine:
                    if c.dtype != dtype:
                        continue
                    if lo > at:
                        sizes.append((lo - at) // dtype.itemsize)
                    picks.append((len(sizes), len(self.keys)))
                    self.keys.append(key)
                    self._shapes.append(None if c.shape == (c.width,) else c.shape)
                    sizes.append(c.width)
                    at = lo + c.hi - c.lo
                if width > at:
                    sizes.append((width - at) // dtype.itemsize)
                self._splits.append((b, dtype, sizes, picks))
        # the result's nested dicts, their entries in the order of ``parts`` (a sub-dict where
        # its first entry is): (dict, name, leaf) puts a leaf, (dict, name, -1 - d) links dict d
        leaf_of = {key: leaf for leaf, key in enumerate(self.keys)}
        groups: dict[tuple[str, ...], int] = {(): 0}
        self._puts: list[tuple[int, str, int]] = []
        for _, key, _, _ in parts:
            for depth in range(1, len(key)):
                if key[:depth] not in groups:
                    groups[key[:depth]] = len(groups)
                    self._puts.append((groups[key[:depth - 1]], key[depth - 1], -1 - groups[key[:depth]]))
            self._puts.append((groups[key[:-1]], key[-1], leaf_of[key]))
        self._groups = len(groups)

    def pieces(self, blocks: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Every leaf's view (in :attr:`keys` order), ``[*lead, *shape]`` of its block's lead dims."""
        values: list[Any] = [None] * len(self.keys)
        for b, dtype, sizes, picks in self._splits:
            block = blocks[b]
            if block.dtype is not dtype:
                block = block.view(dtype)
            if len(sizes) == 1:  # one entry spans the block (a frame...): the block, no split
                values[picks[0][1]] = block
                continue
            split = block.split_with_sizes(sizes, -1)
            for piece, leaf in picks:
                values[leaf] = split[piece]
        for leaf, shape in enumerate(self._shapes):
            if shape is not None:
                value = values[leaf]
                values[leaf] = value.view(*value.shape[:-1], *shape)
        return values

    def tree(self, values: Sequence[Any]) -> dict[str, Any]:
        """Nested dicts of ``values`` (one per leaf, :attr:`keys` order) by key, keys in the order of ``parts``."""
        dicts: list[dict[str, Any]] = [{} for _ in range(self._groups)]
        for group, name, leaf in self._puts:
            dicts[group][name] = values[leaf] if leaf >= 0 else dicts[-1 - leaf]
        return dicts[0]

    def __call__(
        self, blocks: Sequence[torch.Tensor], batch: torch.Size, device: torch.device | None = None
    ) -> TensorDictBase:
        """The TensorDict of ``blocks``, ``batch``-shaped, on ``device``."""
        return tensordict_of(self.tree(self.pieces(blocks)), batch, device)
