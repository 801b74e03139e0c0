"""Row buffers that cost memory only for the rows written.

A replay buffer is sized for its capacity (rllte's default is a million rows,
85 GB of ``3x84x84`` float frames) but holds what it was given. On CPU a
buffer is *reserved*: mapped at its full size but not committed, so the kernel
gives it a page when a row is first written. Memory then grows with the rows
written, and reading an unwritten row reads zeros, as from ``torch.zeros``.

Two kinds of reservation (Linux):

* :func:`reserve_private`: this process's anonymous memory, on transparent
  huge pages (2 MB) where the kernel gives them (``madvise``, as numpy asks
  for its large arrays). A sample reads rows at random across the buffer; on
  4 KB pages nearly every row read is also a TLB miss. Measured on this
  project's VM, random gathers from huge pages take 15-20% less time (W2's
  512 frames of 21 KB: 965 -> 808 µs; W1's 256 transitions, after a cache
  flush: 48 -> 39 µs).
* :func:`reserve`: an anonymous shared-memory file (``memfd``), shared with
  forked and spawned worker processes as any torch shared tensor is (its file
  descriptor is passed), so workers see rows written after they started.
  Shared memory gets no huge pages unless the system enables them for shmem
  (off by default).

A storage's rows start private and move to shared memory once, before the
first worker process would need them (see
:meth:`~torchrl_ext.storages.TransitionStorage.share_memory_`).

Measured (``tests/storages/test_growth.py``): rllte's defaults with ``3x84x84``
float observations grow by about 0.1 MB a step, where allocating the full
buffer up front failed. Where ``memfd`` is missing (not Linux) the buffer is
allocated in full shared memory, as before.

On an accelerator, where memory has no such lazy commitment, a buffer is
allocated as asked; :class:`~torchrl_ext.storages._packed.PackedRows` grows
its device buffers instead (doubling each stream's part).
"""
from __future__ import annotations

import mmap
import os
import sys
from math import prod

import numpy as np
import torch

__all__ = ["empty_rows", "gather_rows", "move_together", "reserve", "reserve_private"]

#: a CPU gather at least this large is written to memory numpy allocates (see gather_rows)
_LARGE = 1 << 20
_NUMPY = {torch.uint8: np.uint8, torch.int64: np.int64, torch.float32: np.float32}
# mmap's flag on Linux (the module names it from Python 3.13 on)
_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000 if sys.platform.startswith("linux") else 0)


def reserve(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A zero tensor of ``shape`` on ``device``; on CPU in shared memory, committed as written.

    Examples:
        >>> rows = reserve((1_000_000, 84 * 84 * 3 * 4), torch.uint8, torch.device("cpu"))
        >>> rows.shape, rows.is_shared(), int(rows[123_456].sum())  # 85 GB, none committed
        (torch.Size([1000000, 84672]), True, 0)
    """
    if device.type != "cpu":
        return torch.zeros(shape, dtype=dtype, device=device)
    nbytes = prod(shape) * dtype.itemsize
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is None or nbytes == 0:
        return torch.zeros(shape, dtype=dtype).share_memory_()
    fd = memfd_create("torchrl_ext_rows", getattr(os, "MFD_CLOEXEC", 0))
    try:
        os.ftruncate(fd, nbytes)  # sparse: no page is committed yet
        # torch keeps its own copy of fd, and passes it to worker processes
        storage = torch.UntypedStorage._new_shared_fd_cpu(fd, nbytes)  # type: ignore[attr-defined]
    finally:
        os.close(fd)
    # a contiguous [*shape] view of the storage's bytes
    return torch.empty(0, dtype=dtype).set_(storage).view(shape)


def reserve_private(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A zero CPU tensor of ``shape`` in this process's memory, committed as written, on huge pages.

    An anonymous private mapping of the full size, advised to the kernel for
    transparent huge pages (see the module's notes). Other processes do not
    see it: a forked child sees a copy-on-write snapshot. Where the platform
    has no such advice (not Linux), the rows are shared from the start
    (:func:`reserve`).

    Examples:
        >>> rows = reserve_private((1_000_000, 84 * 84 * 3 * 4), torch.uint8)
        >>> rows.shape, int(rows[123_456].sum())  # 85 GB, none committed
        (torch.Size([1000000, 84672]), 0)
    """
    nbytes = prod(shape) * dtype.itemsize
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is None or nbytes == 0:
        return reserve(shape, dtype, torch.device("cpu"))
    try:
        # no swap reserved up front (as for reserve's file): the kernel's overcommit
        # heuristic would refuse a capacity larger than the machine's memory
        block = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE)
    except OSError:  # strict overcommit accounting (vm.overcommit_memory=2): shared, as reserve's
        return reserve(shape, dtype, torch.device("cpu"))
    try:
        block.madvise(advice)
    except OSError:  # a kernel without transparent huge pages: 4 KB pages, as reserve's
        pass
    # the tensor keeps the mapping alive (torch.frombuffer holds a reference to it)
    return torch.frombuffer(block, dtype=torch.uint8).view(dtype).view(shape)


def move_together(
    tensors: tuple[torch.Tensor | None, ...], device: torch.device
) -> tuple[torch.Tensor | None, ...]:
    """``tensors`` on ``device``, those elsewhere moved in one transfer; ``None`` stays ``None``.

    A batch's row indices, masks and window lengths are computed on the CPU
    (the episode index lives there); on an accelerator, one transfer of their
    bytes costs one launch and one synchronisation instead of one per tensor.
    Their bytes are laid out widest dtype first, so every typed view is aligned.

    Examples:
        >>> rows, mask = torch.arange(3), torch.tensor([True, False, True])
        >>> moved = move_together((rows, None, mask), torch.device("cpu"))
        >>> moved[0] is rows, moved[1], moved[2].tolist()  # already there: untouched
        (True, None, [True, False, True])
    """
    # "cuda" (no index: the current GPU) holds a tensor on "cuda:0" already
    anywhere = device.index is None
    todo = [(i, t) for i, t in enumerate(tensors) if t is not None and (
        t.device.type != device.type or not anywhere and t.device.index != device.index)]
    if not todo:
        return tensors
    if len(todo) == 1:  # one tensor: its own copy, no concatenation to split again
        (i, t), = todo
        out = list(tensors)
        out[i] = t.to(device, non_blocking=device.type != "cpu")
        return tuple(out)
    todo.sort(key=lambda it: -it[1].element_size())
    parts = [t.contiguous().view(-1).view(torch.uint8) for _, t in todo]  # a strided view too
    # to an accelerator: queued (staging in page-locked memory first was measured on an
    # H200: it cost more than it saved); to the CPU: blocking, the values are read next
    moved = torch.cat(parts).to(device, non_blocking=device.type != "cpu").split(
        [p.numel() for p in parts])
    out = list(tensors)
    for (i, t), raw in zip(todo, moved):
        out[i] = raw.view(t.dtype).view(t.shape)
    return tuple(out)


def empty_rows(n: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised CPU ``[n, *shape]`` batch; a large one in memory numpy allocated.

    torch's CPU allocator gives a large freed block back to the kernel, and the
    next batch of the same size is faulted in again page by page: measured on
    this project's 2-core VM, a 14 MB batch of 256 frame stacks cost about 500
    page faults per sample, 1-8 ms depending on the machine's memory pressure,
    more than the gather itself. numpy keeps such blocks (and asks the kernel
    for huge pages for them): the next batch then faults nothing. The result
    is an ordinary tensor owning its memory.

    Examples:
        >>> empty_rows(4, (3,), torch.uint8).shape
        torch.Size([4, 3])
    """
    numpy_dtype = _NUMPY.get(dtype)
    if numpy_dtype is None or n * prod(shape) * dtype.itemsize < _LARGE:
        return torch.empty(n, *shape, dtype=dtype)
    return torch.from_numpy(np.empty((n, *shape), numpy_dtype))


def gather_rows(source: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``source.index_select(0, index)``, a large CPU result in an :func:`empty_rows` batch.

    Examples:
        >>> rows = torch.arange(12, dtype=torch.int64).view(4, 3)
        >>> gather_rows(rows, torch.tensor([3, 0])).tolist()
        [[9, 10, 11], [0, 1, 2]]
    """
    # (is_cpu: .device.type makes a device object and a string, about 6x is_cpu's cost)
    if not source.is_cpu or index.numel() * prod(source.shape[1:]) * source.element_size() < _LARGE:
        return torch.index_select(source, 0, index)  # small: torch's allocator keeps the block
    out = empty_rows(index.numel(), tuple(source.shape[1:]), source.dtype)
    return torch.index_select(source, 0, index, out=out)
