"""The plug point for windows: a sample index that says how to read it.

A sampler that serves more than one row per sampled transition (an n-step
window, a hindsight goal, a frame stack, a sequence) returns a
:class:`SampleIndex`: an int64 tensor (``[B, k]``, one column per window
coordinate, the row of the transition first; or ``[B, L]`` rows of sequences)
that carries the :class:`WindowReader` that turns it into a batch. The storage
never decodes it: ``storage.get(index)`` calls ``index.reader.read(storage,
index)``, so a new kind of window is a new reader next to its sampler, and
``storages/`` does not change.

The index is a tensor (not a tuple) because TorchRL hands the sampler's index
to the storage through its own helpers, which rebuild tuples but pass tensors
through; it is also what ends up in the sample's ``"index"`` entry and what
``rb.update_priority`` receives back.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from tensordict import TensorDictBase

__all__ = ["RowReads", "SampleIndex", "WindowReader"]


@runtime_checkable
class WindowReader(Protocol):
    """Reads the batch of a :class:`SampleIndex` from a row store.

    A reader is a small immutable value (its configuration), built by the
    sampler at each sample; it is called by the storage under the buffer's
    lock, with the index it came with.

    Examples:
        >>> isinstance(RowReads(), WindowReader)  # the reader of plain rows is one
        True
    """

    def read(
        self, storage: Any, index: torch.Tensor, *, observations: bool = True
    ) -> TensorDictBase:
        """The sampled batch, in TorchRL's transition layout.

        ``observations=False``: without the observation entries (root and
        ``"next"``), which are then not gathered: for a reader that wraps this
        one and reads them itself (frame stacks).
        """
        ...

    def spans(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(rows, steps)``: each sampled transition's first row and the number
        of steps from it to its next observation (1 for plain transitions, the
        window length for n-step windows), shaped as the batch."""
        ...

    def rows_read(self, storage: Any, index: torch.Tensor) -> torch.Tensor:
        """Every physical row :meth:`read` reads (any shape, repeats allowed).

        :meth:`~torchrl_ext.storages.TransitionStorage.stale` checks them
        all: a batch is served only if no write touched any of its rows since
        the draw began.
        """
        ...


@dataclass(frozen=True)
class RowReads:
    """The reader of plain rows: ``index`` is ``[B]`` or ``[B, L]`` physical rows.

    Examples:
        >>> import torch
        >>> rows = SampleIndex.wrap(torch.tensor([3, 5]), RowReads())
        >>> RowReads().spans(rows)
        (tensor([3, 5]), tensor([1, 1]))
    """

    def read(
        self, storage: Any, index: torch.Tensor, *, observations: bool = True
    ) -> TensorDictBase:
        rows = index.plain if isinstance(index, SampleIndex) else index.as_subclass(torch.Tensor)
        if not observations:
            return storage.packed.gather_steps(rows)
        # [B] rows a sampler drew on the CPU, read under the storage's get (which checked the
        # storage is ready): the gather itself. get's index dispatch again (and its test of
        # attached TorchRL samplers, which no other window read runs) cost ~4 µs of a ~90 µs
        # HER facade sample; [B, L] rows, or rows elsewhere, still go through it.
        return storage.packed.gather(rows) if rows.ndim == 1 and rows.is_cpu else storage.get(rows)

    def spans(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = index.as_subclass(torch.Tensor)
        return rows, torch.ones_like(rows)

    def rows_read(self, storage: Any, index: torch.Tensor) -> torch.Tensor:
        rows = index.as_subclass(torch.Tensor).reshape(-1).numpy()
        return torch.from_numpy(np.concatenate([rows, storage.next_rows(rows)]))


class SampleIndex(torch.Tensor):
    """An int64 index tensor with the :class:`WindowReader` that reads it.

    Operations on it return plain tensors (slices, arithmetic): only the index
    a sampler returns carries a reader. Build one with :meth:`wrap`.

    Attributes:
        reader (WindowReader): how the storage turns the index into a batch.
        plain (torch.Tensor): the same index as a plain tensor (the sample's
            ``"index"`` entry), made once.

    Examples:
        >>> import torch
        >>> index = SampleIndex.wrap(torch.tensor([[4, 2], [7, 1]]), RowReads())
        >>> isinstance(index, torch.Tensor), index.reader
        (True, RowReads())
        >>> type(index[:, 0]) is torch.Tensor  # derived tensors are plain
        True
    """

    reader: WindowReader
    plain: torch.Tensor
    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    @classmethod
    def wrap(cls, index: torch.Tensor, reader: WindowReader) -> SampleIndex:
        """``index`` (int64, any shape) with ``reader`` attached (no copy)."""
        if index.dtype != torch.int64:
            raise TypeError(f"SampleIndex: index dtype {index.dtype}, expected torch.int64.")
        out = index.as_subclass(cls)  # the same tensor, seen as a SampleIndex
        out.reader = reader
        if isinstance(index, SampleIndex):  # another reader's index, read through this one
            out.plain = index.plain
        else:
            out.plain = index if type(index) is torch.Tensor else index.as_subclass(torch.Tensor)
        return out

    def read(self, storage: Any) -> TensorDictBase:
        """The batch: ``self.reader.read(storage, self)``."""
        return self.reader.read(storage, self)


_ROWS = RowReads()  # the reader of every plain index (immutable: one serves all)


def reader_of(index: Any) -> WindowReader:
    """The reader of a sampler's index: its own, or :class:`RowReads` for plain rows.

    Examples:
        >>> import torch
        >>> reader_of(torch.tensor([1, 2]))
        RowReads()
    """
    return index.reader if isinstance(index, SampleIndex) else _ROWS


def splice(index: Any, positions: torch.Tensor, other: Any) -> Any:
    """``index`` with entries ``positions`` (along the batch) taken from ``other``.

    Both come from the same sampler (same reader, same columns).

    Examples:
        >>> import torch
        >>> splice(torch.tensor([1, 2, 3]), torch.tensor([0, 2]), torch.tensor([8, 9])).tolist()
        [8, 2, 9]
    """
    plain = index.as_subclass(torch.Tensor).clone()
    plain[positions] = other.as_subclass(torch.Tensor)
    return SampleIndex.wrap(plain, index.reader) if isinstance(index, SampleIndex) else plain
