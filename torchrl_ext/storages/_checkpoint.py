"""The checkpoints of :class:`~torchrl_ext.storages.TransitionStorage`: ``state_dict`` and ``dumps``, and their loads."""
from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl_ext._atomic import atomic_dir, reading
from torchrl_ext.core.episodes import EpisodeIndex
from torchrl_ext.core.schema import RowSchema
from torchrl_ext.storages._packed import PackedRows
from torchrl_ext.storages.compressed import CompressedRows

__all__ = ["StorageCheckpoints"]


class StorageCheckpoints:
    """Checkpoints of a transition storage (a mixin of ``TransitionStorage``).

    A checkpoint holds the schema, the rows each stream has used (not the whole
    capacity: its size follows the data) and the episode index, plus the frame
    table of a compressed storage. :meth:`dumps` writes one atomically
    (:func:`~torchrl_ext._atomic.atomic_dir`); every load refuses a checkpoint
    of another size, schema, stream count or compression before it changes
    anything, and holds the writers' lock while it puts the rows back.

    Examples:
        >>> import tempfile
        >>> from torchrl_ext import make_replay_buffer
        >>> from torchrl_ext.storages import TransitionStorage
        >>> issubclass(TransitionStorage, StorageCheckpoints)
        True
        >>> rb = make_replay_buffer(10)
        >>> path = tempfile.mkdtemp() + "/storage"
        >>> rb.storage.dumps(path)  # before any write: an empty checkpoint
        >>> rb.storage.loads(path)
        >>> len(rb.storage)
        0
    """

    if TYPE_CHECKING:  # TransitionStorage's, for type checkers
        max_size: int
        schema: RowSchema | None
        index: EpisodeIndex | None
        packed: PackedRows | CompressedRows
        compress: dict[Any, Any]
        _rows_lock: threading.RLock
        _storage: Any

        def writing(self) -> contextlib.AbstractContextManager[Any]: ...
        def initialize(self, schema: RowSchema, num_streams: int) -> None: ...
        def _ready(self, where: str) -> tuple[RowSchema, EpisodeIndex, TensorDictBase]: ...
        def _empty(self) -> None: ...
        def _used(self, written: torch.Tensor) -> np.ndarray: ...

    def _meta(self) -> dict[str, Any]:
        schema, index, _ = self._ready("_meta")
        return {
            "max_size": self.max_size,
            "num_streams": index.num_streams,
            **schema.to_meta(),
            "compress": [[list(k), str(v)] for k, v in self.compress.items()],
        }

    def _restore_meta(self, meta: dict[str, Any]) -> None:
        compress = [[list(k), str(v)] for k, v in self.compress.items()]
        if meta.get("compress", []) != compress:
            raise ValueError(
                f"TransitionStorage: checkpoint has compress={meta.get('compress', [])}, "
                f"this storage {compress}; build the buffer with the same compress=."
            )
        if meta["max_size"] != self.max_size:
            raise ValueError(
                f"TransitionStorage: checkpoint has max_size={meta['max_size']}, "
                f"this storage {self.max_size}; build the buffer with the same size."
            )
        schema = RowSchema.from_meta(meta)
        if self.schema is None or self.index is None:
            self.initialize(schema, meta["num_streams"])
        elif self.schema != schema or self.index.num_streams != meta["num_streams"]:
            raise ValueError(
                "TransitionStorage: the checkpoint's entries or stream count differ from "
                "this storage's; load into a new, empty buffer."
            )

    def _rows_in_use(self, written: torch.Tensor) -> torch.Tensor:
        """Physical rows ever written, given the index's ``written`` cursors (``[num_streams]``).

        Stream ``s`` has used its first ``min(written[s], stream_capacity)``
        rows; a checkpoint holds those and no others, so its size (and the
        memory a reload commits) follows the data, not the capacity.
        """
        index = self._ready("_rows_in_use")[1]
        used = self._used(written)  # [S]
        first = np.arange(index.num_streams) * index.stream_capacity  # [S] row 0 of each ring
        before = np.cumsum(used) - used  # [S] rows of the earlier streams
        # entry j of the result lies in stream s: first[s] + (j - before[s])
        rows = np.arange(int(used.sum())) + np.repeat(first - before, used)
        return torch.from_numpy(rows)

    def _put_rows(self, written: torch.Tensor, saved: TensorDictBase) -> None:
        """Write the checkpointed rows ``saved`` back in place (any device in, this device out)."""
        with self._rows_lock:
            self.packed.put(self._rows_in_use(written), saved.get("rows"))
            self._storage = self.packed.buffers

    def state_dict(self) -> dict[str, Any]:
        if self.schema is None:
            return {"meta": None}
        index = self._ready("state_dict")[1]
        index_state = index.state().clone()
        rows = self.packed.take(self._rows_in_use(index_state.get("written")))
        out = {"meta": self._meta(), "rows": rows, "index": index_state}
        if isinstance(self.packed, CompressedRows):
            out["frames"] = self.packed.state()
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict["meta"] is None:
            self._empty()
            return
        self._restore_meta(state_dict["meta"])
        index = self._ready("load_state_dict")[1]
        with self.writing(), index.rewriting():  # a worker's draw across the load is stale
            self._put_rows(state_dict["index"]["written"].cpu(), state_dict["rows"])
            index.load_state(state_dict["index"])
            if isinstance(self.packed, CompressedRows):
                self.packed.load_state(state_dict["frames"])

    def dumps(self, path: str | Path) -> None:
        """Write the rows in use, the episode index and the schema under ``path``, atomically."""
        meta = None if self.schema is None else self._meta()
        with atomic_dir(path) as tmp:  # a crash leaves the previous complete snapshot
            (tmp / "meta.json").write_text(json.dumps(meta))
            if meta is not None:
                index = self._ready("dumps")[1]
                self.packed.take(self._rows_in_use(index.written)).cpu().memmap(tmp / "rows")
                index.state().memmap(tmp / "index")
                if isinstance(self.packed, CompressedRows):
                    self.packed.state().memmap(tmp / "frames")

    def loads(self, path: str | Path) -> None:
        """Restore what :meth:`dumps` wrote, in place."""
        with reading(path) as path:  # a save of path in another process finishes first
            self._loads(path)

    def _loads(self, path: Path) -> None:
        try:
            meta = json.loads((path / "meta.json").read_text())
        except (OSError, ValueError) as error:
            raise ValueError(
                f"TransitionStorage.loads: {path} holds no complete snapshot ({error}); "
                "reopen from a directory written by dumps()."
            ) from error
        if meta is None:
            self._empty()
            return
        self._restore_meta(meta)
        index = self._ready("loads")[1]
        saved_index = TensorDict.load_memmap(path / "index")
        with self.writing(), index.rewriting():
            self._put_rows(saved_index.get("written").clone(), TensorDict.load_memmap(path / "rows"))
            index.load_state(saved_index)
            if isinstance(self.packed, CompressedRows):
                self.packed.load_state(TensorDict.load_memmap(path / "frames"))
