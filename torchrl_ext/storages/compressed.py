"""Image observations kept compressed in memory, one blob (zstd frame, lz4 block) per stored row.

:class:`~torchrl_ext.storages.TransitionStorage` ``(..., compress={"pixels": "zstd"})``
keeps the named observation entries out of the packed rows: each row's frame is
compressed on write into a frame arena and decompressed at sample time,
bit for bit. A frame is stored once (the row that holds an observation is also
the previous step's next observation), so every window a sampler draws (n-step,
hindsight goals, frame stacks, sequences) reads the same blobs, each decoded
once per batch however many windows share it.

The frames live in :class:`~torchrl_ext.storages.arena.FrameArena` (its codecs,
its shared pool and why frames are compressed one by one: see
:mod:`torchrl_ext.storages.arena`); :class:`CompressedRows` serves the packed
rows' reads with them.
"""
from __future__ import annotations

import os

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl_ext.core.schema import EntryKeyError, RowSchema, key_str
from torchrl_ext.storages._packed import PackedRows
from torchrl_ext.storages.arena import FrameArena, FrameCodec

__all__ = ["CompressedRows"]


class CompressedRows:
    """:class:`~torchrl_ext.storages._packed.PackedRows` with some observation entries compressed.

    The packed rows hold every other entry; each compressed entry lives in a
    :class:`~torchrl_ext.storages.arena.FrameArena` (the packed row holds no
    bytes of it). Every gather of :class:`PackedRows` is served, with the
    compressed entries decoded at the rows it reads.

    Args:
        schema: what a row holds.
        num_streams: streams of the storage.
        stream_capacity: rows per stream.
        compress: ``{key: codec}`` of observation entries to compress.
        backend: ``"tensor"`` or ``"memmap"`` (see :class:`PackedRows`).
        scratch_dir: memmap directory; also where the pools live with ``"memmap"``.

    Raises:
        KeyError: a key of ``compress`` is not an observation entry (a key
            present at the root and under ``"next"``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import make_replay_buffer
        >>> rb = make_replay_buffer(16, compress={"pixels": "lz4"}, seed=0)
        >>> frames = torch.zeros(1, 3, 1, 8, 8, dtype=torch.uint8)
        >>> _ = rb.extend(TensorDict({"pixels": frames, "action": torch.zeros(1, 3, 1),
        ...     "next": {"pixels": frames + 1, "reward": torch.ones(1, 3, 1),
        ...              "done": torch.zeros(1, 3, 1, dtype=torch.bool)}}, [1, 3]))
        >>> type(rb.storage.packed).__name__, rb.sample(2)["next", "pixels"].shape
        ('CompressedRows', torch.Size([2, 1, 8, 8]))
    """

    def __init__(
        self,
        schema: RowSchema,
        num_streams: int,
        stream_capacity: int,
        compress: dict[tuple[str, ...], FrameCodec],
        backend: str,
        scratch_dir: str | None,
    ) -> None:
        num_rows = num_streams * stream_capacity
        for key in compress:
            if key not in schema.shared:
                raise EntryKeyError(
                    f"TransitionStorage: compress has {key_str(key)}, which is not an "
                    f"observation entry of the data (observation entries, present at the root "
                    f"and under 'next': {[key_str(k) for k in schema.shared]}); compress one of those."
                )
        # a compressed key leaves the rows at the root and under "next" only: ("wrist",
        # "pixels") is another entry than "pixels"
        dropped = {*compress, *(("next", *k) for k in compress)}
        kept = {k: v for k, v in schema.leaves.items() if k not in dropped}
        inner = RowSchema(
            shared=tuple(k for k in schema.shared if k not in compress),
            root_only=schema.root_only,
            next_only=schema.next_only,
            leaves=kept,
        )
        self.packed = PackedRows(inner, num_streams, stream_capacity, backend, scratch_dir)
        directory = scratch_dir if backend == "memmap" else None
        if directory is not None:
            os.makedirs(directory, exist_ok=True)
        self.arenas = {
            key: FrameArena(codec, schema.leaves[key], num_rows, stream_capacity, directory)
            for key, codec in compress.items()
        }

    @property
    def shared(self) -> bool:
        """Whether the packed rows are in shared memory yet (the arenas' frames always are)."""
        return self.packed.shared

    def share(self, live: np.ndarray | None = None) -> None:
        """See :meth:`PackedRows.share` (the arenas are shared files from the start)."""
        self.packed.share(live)

    @property
    def buffers(self) -> TensorDictBase:
        """The packed rows' TorchRL buffers (the entries not compressed)."""
        return self.packed.buffers

    def take(self, rows: torch.Tensor) -> TensorDictBase:
        """See :meth:`PackedRows.take` (the packed entries; frames are in :meth:`state`)."""
        return self.packed.take(rows)

    def put(self, rows: torch.Tensor, data: torch.Tensor) -> None:
        """See :meth:`PackedRows.put`."""
        self.packed.put(rows, data)

    @property
    def resident_bytes(self) -> int:
        """Memory of the packed rows and of every arena."""
        rows = self.buffers.get("rows")
        return rows.numel() + sum(a.resident_bytes for a in self.arenas.values())

    def write(
        self,
        leaves: dict[tuple[str, ...], torch.Tensor],
        rows: np.ndarray,
        next_rows: np.ndarray,
        start: np.ndarray | None,
        at: np.ndarray | None = None,
    ) -> None:
        """See :meth:`PackedRows.write`; each frame is compressed once."""
        self.packed.write(leaves, rows, next_rows, start, at)
        steps = torch.from_numpy(np.arange(rows.size) if at is None else at)  # each step's place in leaves
        for key, arena in self.arenas.items():
            if start is not None:  # the first observation of an episode, at its row
                arena.write(leaves[key][steps[torch.from_numpy(start)]], torch.from_numpy(rows[start]))
            arena.write(leaves[("next", *key)][steps], torch.from_numpy(next_rows))

    def same_observation(
        self, leaves: dict[tuple[str, ...], torch.Tensor], positions: np.ndarray, rows: np.ndarray
    ) -> np.ndarray:
        """See :meth:`PackedRows.same_observation`."""
        same = self.packed.same_observation(leaves, positions, rows)
        for key, arena in self.arenas.items():
            same &= arena.equal(leaves[key][torch.from_numpy(positions)], rows)
        return same

    def _put(self, out: TensorDictBase, prefix: tuple[str, ...], rows: torch.Tensor) -> None:
        for key, arena in self.arenas.items():
            out.set((*prefix, *key), arena.read(rows))

    def gather(self, rows: torch.Tensor) -> TensorDictBase:
        """See :meth:`PackedRows.gather`."""
        out = self.packed.gather(rows)
        self._put_transitions(out, rows, torch.from_numpy(self.packed.next_rows(rows.numpy())))
        return out

    def next_rows(self, rows: np.ndarray) -> np.ndarray:
        """See :meth:`PackedRows.next_rows`."""
        return self.packed.next_rows(rows)

    def gather_steps(self, rows: torch.Tensor) -> TensorDictBase:
        """See :meth:`PackedRows.gather_steps` (no frame is decoded)."""
        return self.packed.gather_steps(rows)

    def _put_transitions(self, out: TensorDictBase, rows: torch.Tensor, after: torch.Tensor) -> None:
        """Set each key at ``rows`` and ``("next", key)`` at ``after``: one read, shared rows decoded once."""
        pair = torch.stack([rows, after])
        for key, arena in self.arenas.items():
            obs, nxt = arena.read(pair).unbind(0)
            out.set(key, obs)
            out.set(("next", *key), nxt)

    def gather_observations(self, rows: torch.Tensor) -> TensorDictBase:
        """See :meth:`PackedRows.gather_observations`."""
        out = self.packed.gather_observations(rows)
        self._put(out, (), rows)
        return out

    def observations_in(self, batch: TensorDictBase) -> TensorDictBase:
        """See :meth:`PackedRows.observations_in` (no frame is decoded)."""
        out = self.packed.observations_in(batch)
        for key in self.arenas:
            out.set(key, batch.get(key))
        return out

    def gather_sequences(self, rows: torch.Tensor) -> TensorDictBase:
        """See :meth:`PackedRows.gather_sequences`; each row of a sequence is decoded once."""
        out = self.packed.gather_sequences(rows)
        for key, arena in self.arenas.items():
            frames = arena.read(rows)  # [B, L + 1, *shape]
            out.set(key, frames[:, :-1])
            out.set(("next", *key), frames[:, 1:])
        return out

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
        """See :meth:`PackedRows.gather_windows`."""
        out = self.packed.gather_windows(
            window_rows, obs_rows, mask=mask, lengths=lengths, observations=observations,
            relabel=relabel, index=index,
        )
        if obs_rows is None:
            return out
        B, W = window_rows.shape
        at = 0  # where the goal rows start in obs_rows
        if observations:  # first and after rows interleaved (see PackedRows.gather_windows)
            at = 2 * B
            self._put_transitions(out, obs_rows[0:at:2], obs_rows[1:at:2])
        if relabel is not None:
            self._put(out, ("her",), obs_rows[at : at + B])
            self._put(out, ("n_step",), obs_rows[at + B :].view(B, W))
        return out

    # ---------------------------------------------------- state and persistence
    def state(self) -> TensorDict:
        """Every arena's :meth:`~torchrl_ext.storages.arena.FrameArena.state`, by key."""
        return TensorDict({key: arena.state() for key, arena in self.arenas.items()}, [])

    def load_state(self, state: TensorDictBase) -> None:
        """Restore what :meth:`state` gave."""
        for key, arena in self.arenas.items():
            arena.load_state(state.get(key))
