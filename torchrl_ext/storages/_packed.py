"""Rows packed into one 2-D buffer per (role, dtype), so a gather is a few
``index_select`` calls instead of one advanced index per entry.

Two roles: ``obs`` holds the observation entries (read at a row and at the row
after it, for the next observation); ``step`` holds the action and the next-only
entries (reward, done flags) of the step stored in the row.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import LazyMemmapStorage, LazyTensorStorage

from torchrl_ext._schema import RowSchema

__all__ = ["PackedRows"]


@dataclass(frozen=True)
class _Column:
    key: tuple[str, ...]  # input / output key (obs role: the root key)
    shape: torch.Size
    width: int

    @property
    def reshape(self) -> bool:
        """A ``[B, width]`` slice must be viewed as ``[B, *shape]``."""
        return tuple(self.shape) != (self.width,)


@dataclass(frozen=True)
class _Group:
    name: str
    role: str  # "obs" or "step"
    dtype: torch.dtype
    columns: tuple[_Column, ...]
    spans: tuple[tuple[int, int], ...]  # column range of each entry

    @classmethod
    def of(cls, role: str, dtype: torch.dtype, columns: list[_Column]) -> _Group:
        edges = [0]
        for column in columns:
            edges.append(edges[-1] + column.width)
        name = f"{role}_{str(dtype).removeprefix('torch.')}"
        return cls(name, role, dtype, tuple(columns), tuple(zip(edges[:-1], edges[1:])))

    @property
    def width(self) -> int:
        return self.spans[-1][1]

    @property
    def single(self) -> bool:
        return len(self.columns) == 1


def _groups(schema: RowSchema) -> tuple[_Group, ...]:
    by: dict[tuple[str, torch.dtype], list[_Column]] = {}
    step_keys = schema.root_only + tuple(("next", *k) for k in schema.next_only)
    for role, keys in (("obs", schema.shared), ("step", step_keys)):
        for key in keys:
            spec = schema.leaves[key]
            column = _Column(key, spec.shape, prod(spec.shape))
            by.setdefault((role, spec.dtype), []).append(column)
    return tuple(_Group.of(role, dtype, cols) for (role, dtype), cols in by.items())


class PackedRows:
    """``num_rows`` rows of a :class:`~torchrl_ext._schema.RowSchema`, packed.

    Args:
        schema: what a row holds.
        num_rows: number of rows.
        backend: ``"tensor"`` (shared memory) or ``"memmap"``.
        scratch_dir: memmap directory (``None``: a temporary one).
    """

    def __init__(
        self, schema: RowSchema, num_rows: int, backend: str, scratch_dir: str | None
    ) -> None:
        self.groups = _groups(schema)
        template = TensorDict(
            {g.name: torch.zeros(g.width, dtype=g.dtype) for g in self.groups}, batch_size=[]
        )
        if backend == "tensor":
            inner: Any = LazyTensorStorage(num_rows)
        else:
            inner = LazyMemmapStorage(num_rows, scratch_dir=scratch_dir)
        inner._init(template)  # TorchRL allocates the [num_rows, width] buffers
        self.buffers: TensorDictBase = inner._storage
        if backend == "tensor":
            self.buffers.share_memory_()
        self._bind()

    def _bind(self) -> None:
        self._buffer = [self.buffers.get(g.name) for g in self.groups]

    # ----------------------------------------------------------------- writes
    def write(
        self,
        leaves: dict[tuple[str, ...], torch.Tensor],
        rows: torch.Tensor,
        next_rows: torch.Tensor,
        start: torch.Tensor | None,
    ) -> None:
        """Write ``n`` steps.

        Args:
            leaves: every input entry, flattened to ``[n, *shape]``.
            rows: ``[n]`` row of each step (step entries; observation if it starts).
            next_rows: ``[n]`` row of each step's next observation.
            start: ``[n]`` bool, the step opens an episode; ``None`` if none does.
        """
        n = rows.numel()
        for group, buffer in zip(self.groups, self._buffer):
            if group.role == "step":
                buffer.index_copy_(0, rows, _pack(group, leaves, n, "step"))
                continue
            buffer.index_copy_(0, next_rows, _pack(group, leaves, n, "next"))
            if start is not None:
                buffer.index_copy_(0, rows[start], _pack(group, leaves, n, "root")[start])

    # ------------------------------------------------------------------ reads
    def gather(self, rows: torch.Tensor, next_rows: torch.Tensor) -> TensorDictBase:
        """Transitions at ``rows`` (next observations from ``next_rows``), ``[B]``."""
        batch = rows.shape
        flat: dict[tuple[str, ...], torch.Tensor] = {}
        for group, buffer in zip(self.groups, self._buffer):
            _unpack(group, buffer.index_select(0, rows), flat, ())
            if group.role == "obs":
                _unpack(group, buffer.index_select(0, next_rows), flat, ("next",))
        return _nest(flat, batch)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_buffer")
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._bind()


def _pack(
    group: _Group, leaves: dict[tuple[str, ...], torch.Tensor], n: int, source: str
) -> torch.Tensor:
    # obs role: "next" reads the ("next", *key) entry, "root" the key itself
    parts = []
    for c in group.columns:
        value = leaves[("next", *c.key) if source == "next" else c.key]
        parts.append(value.reshape(n, c.width) if c.reshape else value)
    return parts[0] if len(parts) == 1 else torch.cat(parts, 1)


def _unpack(
    group: _Group,
    block: torch.Tensor,
    out: dict[tuple[str, ...], torch.Tensor],
    prefix: tuple[str, ...],
) -> None:
    batch = block.shape[0]
    for column, (lo, hi) in zip(group.columns, group.spans):
        piece = block if group.single else block[:, lo:hi]
        if column.reshape:
            piece = piece.view(batch, *column.shape)
        out[prefix + column.key] = piece


def _nest(flat: dict[tuple[str, ...], torch.Tensor], batch: torch.Size) -> TensorDictBase:
    tree: dict[str, Any] = {}
    for key, value in flat.items():
        node = tree
        for part in key[:-1]:
            node = node.setdefault(part, {})
        node[key[-1]] = value

    def build(node: dict[str, Any]) -> TensorDictBase:
        # the entries are fresh tensors of the right batch size: skip the checks
        return TensorDict._new_unsafe(
            {k: build(v) if isinstance(v, dict) else v for k, v in node.items()},
            batch_size=batch,
        )

    return build(tree)
