"""Tensors' bytes in host memory, as the write kernels read them.

A write copies its entries' bytes into packed rows with a compiled pass
(:func:`~torchrl_ext.core.kernels.writes.put_bytes`). The pass reads each
entry where it lies, through a *byte table* of addresses (:func:`byte_table`);
:func:`host_array` gives the numpy view the index kernels take.
"""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["byte_table", "host_array"]

# dtypes a CPU tensor's .numpy() keeps (others: bfloat16, float8...)
_NUMPY_DTYPES = frozenset({
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
    torch.float32, torch.float64, torch.complex64, torch.complex128,
})


def host_array(value: torch.Tensor) -> np.ndarray:
    """``value`` as a C-ordered numpy array in host memory: a view of a CPU tensor in C order.

    Examples:
        >>> host_array(torch.arange(6).view(2, 3).T).tolist()  # a transposed view: copied
        [[0, 3], [1, 4], [2, 5]]
    """
    if value.requires_grad or not value.is_cpu:
        value = value.detach().cpu()  # an action straight from a policy, an accelerator's tensor
    if value.is_contiguous():
        return value.numpy()
    # another layout (a step of a [envs, T] batch): numpy's copy costs a third of torch's
    return np.ascontiguousarray(value.numpy())


def byte_table(
    entries: list[tuple[torch.Tensor, int]],
) -> tuple[np.ndarray, list[torch.Tensor]]:
    """The byte table of ``entries`` (``(tensor [m, ...], bytes per row)``) for the write kernels.

    int64 ``[k, 4]``: each tensor's (address, rows, bytes per row, bytes from
    one row to the next) in host memory (see :mod:`torchrl_ext.core.kernels.writes`).
    A tensor there whose rows are each contiguous and apart is read in place,
    strided along its first dim or not (a step ``td[:, t]`` of a ``[envs, T]``
    batch); any other (on an accelerator, with a row's elements apart, or
    rows that overlap) is copied there first. Conjugate and negative views
    must be resolved before (their bytes are not their values; see
    :meth:`~torchrl_ext.storages._packed.PackedRows.write`). Returns the
    table and the tensors it points into: keep them until the kernel returns.

    Examples:
        >>> x = torch.arange(12, dtype=torch.int16).view(3, 4)
        >>> table, kept = byte_table([(x, 8), (x[:, :2], 4), (x[:, ::2], 4)])
        >>> table[:2].tolist() == [[x.data_ptr(), 3, 8, 8], [x.data_ptr(), 3, 4, 8]]  # in place
        True
        >>> table[2, 2:].tolist(), kept[2].tolist()  # every other element of a row: copied
        ([4, 4], [[0, 2], [4, 6], [8, 10]])
    """
    kept = []
    flat: list[int] = []
    for value, width in entries:
        stride = width if value.is_contiguous() else _row_stride(value)
        if stride is None or stride < width or not value.is_cpu:  # (< width: rows overlap, expanded)
            value, stride = _host_copy(value), width
        kept.append(value)
        flat += (value.data_ptr(), value.shape[0], width, stride)
    return np.array(flat, dtype=np.int64).reshape(-1, 4), kept


def _row_stride(value: torch.Tensor) -> int | None:
    """Bytes from one row (first dim) of ``value`` to the next if each row's elements are contiguous, else ``None``."""
    strides, shape = value.stride(), value.shape
    step = 1  # a C-ordered row's stride at dim d, from the last
    for d in range(len(strides) - 1, 0, -1):
        if strides[d] != step and shape[d] != 1:
            return None
        step *= shape[d]
    return strides[0] * value.element_size()


def _host_copy(value: torch.Tensor) -> torch.Tensor:
    """A C-ordered copy of ``value`` in host memory."""
    if value.dtype in _NUMPY_DTYPES:  # numpy's copy of a strided view costs a third of torch's
        return torch.from_numpy(host_array(value))
    return value.detach().cpu().contiguous()
