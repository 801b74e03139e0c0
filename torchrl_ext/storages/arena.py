"""Compressed frames of one observation entry: codecs and a shared pool of per-row blobs.

Why per frame (measured on ALE frames, 84x84, 1000 steps of a random policy):
zstd level 1 gave blobs of 0.02 to 0.15 of the raw frame (Pong, Breakout,
MsPacman), decoding in 3.5 to 15 us; lz4 at LZ4 HC level 6 0.03 to 0.17,
decoding in 1 to 3.5 us (zstd's negative levels gained ~10% in speed for 5-40%
larger blobs; lz4's fast mode gave 0.25 on MsPacman, and decoded slower).
Chunks of 4 frames compress 2-3x better, but frames are sampled at random and
each read would decode its 3 neighbours too; per-frame blobs already stay
under a quarter of the raw bytes.

Reads decode each distinct row once, straight into the batch (lz4's
``LZ4_decompress_safe`` called through ``ctypes``; python-zstandard's output
copied in once). With lz4 the Python work left per frame (one ``ctypes`` call
with two ``byref`` pointers, about 0.3 us) is a fifth to a quarter of the
decode; before, a ``bytes`` object per frame and its copy into the batch cost as
much as the decode. Where a sample's time goes (MsPacman, grayscale, 4-frame
stacks, batch 256: 2,048 frames read, 1,227 distinct): decoding, about 1.1 us a
frame plus 0.34 us of ``ctypes`` call (``argtypes`` with integer addresses, one
reused ``c_void_p`` or ``map`` loops were no cheaper); copying the 821 repeats,
0.7-1 us each, bound by memory whatever copies them (numpy's fancy index, a row
loop, ``ctypes.memmove``, or a compact decode then one ``index_select`` of all
2,048 measured the same), where the uncompressed buffer gathers all 2,048 in
about 750 us. That case stays near 0.5x the uncompressed rate (0.49x in the quiet full run).

Layout of an arena (the blobs are of variable size; readers are other processes):
a *pool* file mapped shared (``/dev/shm`` for ``backend="tensor"``, the scratch
directory for ``"memmap"``), sized for the worst case (every frame incompressible)
but sparse: only pages written take memory. The pool is cut in segments; each
stream appends its blobs to a segment of its own, and a segment goes back to a
free list when the last blob in it was overwritten (rows of a stream are
overwritten oldest first, so its segments empty in order). Resident memory is
the live blobs plus about two segments per stream. Per row, the blob's
``offset`` and ``length`` live in shared tensors, which readers index.
A frame that does not compress is stored raw (``length`` = frame bytes).
"""

from __future__ import annotations

import ctypes
import importlib
import os
import tempfile
import uuid
import weakref
from ctypes import byref
from enum import StrEnum
from functools import partial
from math import ceil, prod
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torch.utils.data import get_worker_info

from torchrl_ext.core.schema import LeafSpec, as_key, key_str
from torchrl_ext.storages._memory import empty_rows

__all__ = ["FrameArena", "FrameCodec", "check_compress"]

_PAGE = 4096


class FrameCodec(StrEnum):
    """Codecs of :class:`FrameArena`, one blob per frame.

    * ``ZSTD`` (``"zstd"``): the ``zstandard`` package, level 1: the smaller
      blobs (0.02-0.15x of an ALE frame), 3.5-15 us a frame to decode.
    * ``LZ4`` (``"lz4"``): the ``lz4`` package (block format, LZ4 HC level 6):
      blobs 0.03-0.17x, decoded 3-4x faster. The recommended codec: a batch
      of 256 samples at 0.49-0.86x of the uncompressed rate (zstd: 0.13-0.27x),
      at under a fifth of the memory.

    Examples:
        >>> FrameCodec("lz4") is FrameCodec.LZ4, [c.value for c in FrameCodec]
        (True, ['zstd', 'lz4'])
    """

    ZSTD = "zstd"
    LZ4 = "lz4"


def _module(name: str, codec: FrameCodec) -> Any:
    """The package ``name`` of ``codec``, or an ImportError naming the extra."""
    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise ImportError(
            f"the {codec.value} codec needs the {name.split('.')[0]} package, installed with "
            "the compress extra: pip install 'torchrl_ext[compress]'."
        ) from err


#: LZ4 HC level of lz4 blobs. On ALE frames (MsPacman, the busiest measured) HC gives
#: 0.16-0.19x of the raw frame where lz4's fast mode gives 0.25x, decoded 30-37% faster
#: (fewer, longer matches; as fast on sparse Breakout frames). Measured on MsPacman
#: 84x84 (grayscale / RGB): level 3 0.178x / 0.174x, level 6 0.163x / 0.159x and a
#: sample 3-5% faster (decoding is most of a compressed sample), level 9 0.160x /
#: 0.156x and 5-8% faster. Encoding a frame costs about 27 / 54 / 130 us (grayscale)
#: and 80 / 145 / 400 us (RGB) at levels 3 / 6 / 9: level 9's would slow a writer
#: more than its sample gain is worth. Blobs of any level (and of fast mode) read the same
_LZ4_LEVEL = 6


def _coders(codec: FrameCodec) -> tuple[Any, Any]:
    """``(compress, decode)``: ``compress(frame) -> blob`` and ``decode(src, dst, size, capacity)``.

    ``decode`` has the contract of lz4's ``LZ4_decompress_safe``: it reads the
    ``size`` bytes at pointer ``src``, writes at most ``capacity`` bytes at
    pointer ``dst`` (both ``ctypes.byref`` pointers) and returns how many it
    wrote, or a negative number on a blob it cannot read (one torn under a
    DataLoader worker: see :meth:`FrameArena._decode`).
    """
    if codec is FrameCodec.ZSTD:
        zstd = _module("zstandard", codec)
        decompress = zstd.ZstdDecompressor().decompress

        def decode(src: Any, dst: Any, size: int, capacity: int) -> int:
            # python-zstandard decodes into new bytes only: one copy into the batch
            try:
                frame = decompress(ctypes.string_at(src, size))
            except zstd.ZstdError:
                return -1
            if len(frame) != capacity:
                return -1
            ctypes.memmove(dst, frame, capacity)
            return capacity

        return zstd.ZstdCompressor(level=1).compress, decode
    block = _module("lz4.block", codec)
    # python-lz4 has no decode into a buffer; its extension module carries the
    # lz4 library, whose LZ4_decompress_safe (stable public API) does, and never
    # reads or writes past the sizes it is given, whatever the blob holds
    try:
        decode = ctypes.CDLL(block._block.__file__).LZ4_decompress_safe
    except (AttributeError, OSError) as err:  # pragma: no cover - every lz4 wheel has it
        raise ImportError(
            f"compress=...: codec 'lz4' decodes with LZ4_decompress_safe, which this build of "
            f"the lz4 package ({block._block.__file__}) does not expose; use codec 'zstd'."
        ) from err
    # no argtypes: callers pass byref() pointers and ints, which ctypes takes as they are
    decode.restype = ctypes.c_int
    return partial(block.compress, store_size=False, mode="high_compression",
                   compression=_LZ4_LEVEL), decode


def check_compress(compress: Any) -> dict[tuple[str, ...], FrameCodec]:
    """``compress`` as ``{key: FrameCodec}``; raises on an unknown codec or a missing package.

    Examples:
        >>> check_compress({"pixels": "zstd"})
        {('pixels',): <FrameCodec.ZSTD: 'zstd'>}
    """
    if compress is None:
        return {}
    if not isinstance(compress, dict):
        raise TypeError(
            f"compress={compress!r}: expected a dict of observation key to codec, "
            "e.g. compress={'pixels': 'zstd'}."
        )
    out: dict[tuple[str, ...], FrameCodec] = {}
    given: dict[tuple[str, ...], Any] = {}
    for key, codec in compress.items():
        if not (isinstance(key, str) or isinstance(key, tuple) and key
                and all(isinstance(k, str) for k in key)):
            raise TypeError(
                f"compress has the key {key!r} ({type(key).__name__}), expected an observation "
                "key: a str or a tuple of str, e.g. compress={'pixels': 'zstd'}."
            )
        if as_key(key) in given:
            raise ValueError(
                f"compress names {key_str(key)} twice ({given[as_key(key)]!r} and {key!r}); "
                "give each entry one codec."
            )
        given[as_key(key)] = key
        if codec not in tuple(FrameCodec):
            raise ValueError(
                f"compress[{key_str(key)}]={codec!r}: unknown codec; expected one of "
                f"{[c.value for c in FrameCodec]}."
            )
        out[as_key(key)] = FrameCodec(codec)
        try:  # a missing package fails here, not at the first write
            _coders(out[as_key(key)])
        except ImportError as err:
            raise ImportError(f"compress[{key_str(key)}]={codec!r}: {err}") from err
    return out


class FrameArena:
    """Compressed frames of one entry, one blob per row, in a shared sparse pool.

    Args:
        codec: the codec of the blobs.
        spec: shape and dtype of a frame.
        num_rows: rows of the storage.
        stream_capacity: rows per stream (row ``r`` is in stream ``r // stream_capacity``).
        directory: where the pool file lives.

    Examples:
        >>> import torch
        >>> from torchrl_ext.core.schema import LeafSpec
        >>> arena = FrameArena("zstd", LeafSpec(torch.Size([2, 8]), torch.uint8), 4, 2, None)
        >>> frames = torch.zeros(2, 2, 8, dtype=torch.uint8)
        >>> frames[1, 0, 3] = 7
        >>> arena.write(frames, torch.tensor([0, 2]))
        >>> torch.equal(arena.read(torch.tensor([2, 0, 2])), frames[[1, 0, 1]])
        True
    """

    def __init__(
        self,
        codec: FrameCodec | str,
        spec: LeafSpec,
        num_rows: int,
        stream_capacity: int,
        directory: str | None,
    ) -> None:
        self.codec, self.spec = FrameCodec(codec), spec
        self.frame_bytes = prod(spec.shape) * spec.dtype.itemsize
        self.stream_capacity = stream_capacity
        num_streams = -(-num_rows // stream_capacity)
        # a segment holds several frames; no blob crosses a segment's end
        self.segment_bytes = -(-max(1 << 16, 8 * self.frame_bytes) // _PAGE) * _PAGE
        per_segment = self.segment_bytes // max(self.frame_bytes, 1)
        num_segments = num_streams * (ceil(stream_capacity / per_segment) + 2)
        self.offset = torch.zeros(num_rows, dtype=torch.int64).share_memory_()
        self.length = torch.zeros(num_rows, dtype=torch.int32).share_memory_()
        # writer-side allocation state (the main process only; checkpointed as blobs)
        self._live = np.zeros(num_segments, np.int64)  # live blobs per segment
        self._open = np.full(num_streams, -1, np.int64)  # each stream's open segment
        self._fill = np.zeros(num_streams, np.int64)  # bytes used in it
        self._free: list[int] = []
        self._top = 0  # segments ever handed out
        if directory is None:
            directory = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        self.path = os.path.join(directory, f"torchrl_ext-frames-{uuid.uuid4().hex}.bin")
        with open(self.path, "wb") as f:  # sparse: pages take memory when written
            f.truncate(num_segments * self.segment_bytes)
        # copies in other processes (workers, forked or spawned) map the file by its path;
        # only this process removes it
        weakref.finalize(self, _unlink, self.path, os.getpid())
        self._bind()

    def _bind(self) -> None:
        size = os.path.getsize(self.path)
        self._pool = torch.from_file(self.path, shared=True, size=size, dtype=torch.uint8).numpy()
        self._pool_bytes = (ctypes.c_char * self._pool.size).from_buffer(self._pool.data)  # for byref
        self._offset, self._length = self.offset.numpy(), self.length.numpy()
        self._codec: Any = None

    def _coders(self) -> tuple[Any, Any]:
        if self._codec is None:  # codec objects are not picklable: made per process
            self._codec = _coders(self.codec)
        return self._codec

    @property
    def resident_bytes(self) -> int:
        """Memory the pool takes now (its pages written), plus the row tables."""
        return os.stat(self.path).st_blocks * 512 + self.offset.nbytes + self.length.nbytes

    # ----------------------------------------------------------------- writes
    def write(self, frames: torch.Tensor, rows: torch.Tensor) -> None:
        """Compress ``frames`` (``[n, *shape]``) into ``rows`` (``[n]``), in order."""
        compress = self._coders()[0]
        flat = frames.reshape(frames.shape[0], -1).contiguous().view(torch.uint8).numpy()
        for frame, row in zip(flat, rows.tolist()):
            blob = compress(frame)
            data = frame if len(blob) >= self.frame_bytes else np.frombuffer(blob, np.uint8)
            self._release(row)
            at = self._allocate(row // self.stream_capacity, data.size)
            self._pool[at : at + data.size] = data
            self._offset[row], self._length[row] = at, data.size

    def _release(self, row: int) -> None:
        """The blob ``row`` held is dead: free its segment if it held no other."""
        if self._length[row] == 0:
            return
        segment = int(self._offset[row]) // self.segment_bytes
        self._live[segment] -= 1
        if self._live[segment] == 0 and segment not in self._open:
            self._free.append(segment)

    def _allocate(self, stream: int, size: int) -> int:
        """Byte offset of ``size`` free bytes in ``stream``'s open segment (a new one if full)."""
        segment = int(self._open[stream])
        if segment < 0 or self._fill[stream] + size > self.segment_bytes:
            if segment >= 0 and self._live[segment] == 0:
                self._free.append(segment)
            if self._free:
                segment = self._free.pop()
            else:
                segment, self._top = self._top, self._top + 1
            self._open[stream], self._fill[stream] = segment, 0
        at = segment * self.segment_bytes + int(self._fill[stream])
        self._fill[stream] += size
        self._live[segment] += 1
        return at

    # ------------------------------------------------------------------ reads
    def read(self, rows: torch.Tensor) -> torch.Tensor:
        """The frames of ``rows`` (any shape), ``[*rows.shape, *shape]``; each row decoded once."""
        flat = rows.reshape(-1).numpy()
        out = empty_rows(flat.size, (self.frame_bytes,), torch.uint8)
        block = out.numpy()
        # positions grouped by row, a row's first position first (a stable sort:
        # cheaper than np.unique's, which sorts again for the inverse)
        order = np.argsort(flat, kind="stable")
        ordered = flat[order]
        first = np.ones(flat.size, bool)  # [n] whether order[i] is its row's first position
        np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
        self._decode(ordered[first], block, order[first])
        if not first.all():  # windows that share rows: copy each repeat from the decoded one
            source = order[first][np.cumsum(first) - 1]  # [n] first position of order[i]'s row
            block[order[~first]] = block[source[~first]]
        return out.view(self.spec.dtype).view(*rows.shape, *self.spec.shape)

    def _decode(self, rows: np.ndarray, out: np.ndarray, positions: np.ndarray) -> None:
        """Decode the frames of ``rows`` into ``out[positions]`` (``[k]``; ``out`` C-contiguous)."""
        raw, decode = self.frame_bytes, self._coders()[1]
        at, size = self._offset[rows], self._length[rows].astype(np.int64)
        # a DataLoader worker reads offset and length while the main process may
        # rewrite them: a pair torn between two blobs must still address the pool
        size[(size > raw) | (at < 0) | (at + size > self._pool.size)] = 0
        to = positions.astype(np.int64) * raw  # [k] byte offsets of the frames in out
        # pointers as byref(array, offset): a third cheaper per call than converted addresses
        pool, batch = self._pool_bytes, (ctypes.c_char * out.nbytes).from_buffer(out.data)
        stored = size == raw  # frames that did not compress, stored raw
        for s, d in zip(at[stored].tolist(), to[stored].tolist()):
            ctypes.memmove(byref(batch, d), byref(pool, s), raw)
        coded = ~stored
        failed = [d for s, n, d in zip(at[coded].tolist(), size[coded].tolist(), to[coded].tolist())
                  if decode(byref(pool, s), byref(batch, d), n, raw) != raw]
        if not failed:
            return
        # in a DataLoader worker a blob rewritten under it fails to decode, and
        # the draw is found stale and drawn again (TransitionStorage.stale); in
        # this process the buffer's lock keeps writes out, so a failure is corruption
        if get_worker_info() is None:
            bad = rows[np.isin(to, failed)].tolist()
            raise RuntimeError(
                f"FrameArena.read: the {self.codec.value} blobs of rows {bad} do not decode to "
                f"{raw}-byte frames: the frame pool is corrupt; restore the buffer from a "
                f"checkpoint (load_state_dict)."
            )
        for d in failed:
            ctypes.memset(byref(batch, d), 0, raw)

    def equal(self, frames: torch.Tensor, rows: np.ndarray) -> np.ndarray:
        """Whether ``frames`` (``[k, *shape]``) equal the stored frames of ``rows``, bytewise."""
        stored = np.empty((rows.size, self.frame_bytes), np.uint8)
        self._decode(rows, stored, np.arange(rows.size))
        flat = frames.reshape(frames.shape[0], -1).contiguous().view(torch.uint8).numpy()
        return (flat == stored).all(1)

    # ---------------------------------------------------- state and persistence
    def state(self) -> TensorDict:
        """``lengths`` per row and the live ``blobs``, concatenated in row order."""
        lengths = self._length.copy()
        parts = [self._pool[a : a + n] for a, n in zip(self._offset.tolist(), lengths.tolist())]
        blobs = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
        return TensorDict(
            {"lengths": torch.from_numpy(lengths), "blobs": torch.from_numpy(blobs)}, []
        )

    def load_state(self, state: TensorDictBase) -> None:
        """Restore what :meth:`state` gave (the pool is rewritten, compactly)."""
        lengths = state["lengths"].numpy()
        blobs = state["blobs"].numpy()
        self._live[:] = 0
        self._open[:] = -1
        self._fill[:] = 0
        self._free, self._top = [], 0
        self._length[:] = 0
        ends = np.cumsum(lengths)
        for row in np.flatnonzero(lengths).tolist():
            size = int(lengths[row])
            at = self._allocate(row // self.stream_capacity, size)
            self._pool[at : at + size] = blobs[ends[row] - size : ends[row]]
            self._offset[row], self._length[row] = at, size

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("_pool", "_pool_bytes", "_offset", "_length", "_codec"):
            state.pop(name)
        return state  # the pool by its path: a copy in another process maps the same file

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._bind()


def _unlink(path: str, owner: int) -> None:
    if os.getpid() != owner:  # a forked copy going away: the creator still uses the file
        return
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
