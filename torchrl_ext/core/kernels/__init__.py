"""Compiled index arithmetic: the per-row loops of draws, windows and write plans.

A batch's index arithmetic (which rows to read, how long each window is, where
each step of a write goes) is a loop over the batch with a few branches per
row. As numpy it is a dozen small array operations, each costing more call
overhead than arithmetic; compiled, it is one call. What is compiled is index
arithmetic on numpy int / bool arrays, and one byte copy: a write's packed
bytes scattered into rows in host memory (:func:`~torchrl_ext.core.kernels.writes.put_bytes`,
no arithmetic on the values; rows on an accelerator take ``index_copy_``).
Gathers and every computation on data (returns, relabelling, stacking) stay
torch operations, which run wherever the rows are.

Kernels are compiled by numba at their first call and cached on disk, so a
new process (a spawned DataLoader worker, a Ray actor) loads them instead of
compiling them again. Callers give each kernel C-contiguous arrays of one
dtype per argument (a write's entries: a byte table of their addresses, see
:mod:`~torchrl_ext.core.kernels.writes`), so a kernel has one compiled
signature (two processes compiling two signatures of one kernel at once
could leave numba's cache index and files disagreeing). A kernel's cache is
checked against its own file only: after editing a helper it calls from
another file (:func:`~torchrl_ext.core.kernels.rows.ring_divmod`,
``live_row``), delete the ``*.nbi`` / ``*.nbc`` files under
``torchrl_ext/core/kernels/__pycache__`` (a clean clone has none). Each
kernel's docstring states its contract; the modules here are private to
the package (no kernel is public API).
"""
from __future__ import annotations

from typing import Any, Callable, TypeVar, cast

import numba

__all__ = ["inlined", "jit"]

F = TypeVar("F", bound=Callable[..., Any])


def jit(function: F) -> F:
    """Compile ``function`` with numba: no Python objects, no GIL held, cached on disk.

    Where no cache location is writable (a read-only install without a
    writable home), each process compiles it at its first call instead.

    Examples:
        >>> import numpy as np
        >>> from torchrl_ext.core.kernels.rows import any_ring_end  # a kernel made with jit
        >>> bool(any_ring_end(np.array([3, 7]), 4)), bool(any_ring_end(np.array([3, 6]), 8))
        (True, False)
    """
    return _compiled(function)


def inlined(function: F) -> F:
    """:func:`jit` for a small helper of other kernels, inlined into each caller's loop.

    Inlined by numba (``inline="always"``), so the compiler sees the helper's
    work inside the caller's loop and can lift its loop-invariant part out of
    it (:func:`~torchrl_ext.core.kernels.rows.ring_divmod`'s reciprocal).

    Examples:
        >>> from torchrl_ext.core.kernels.rows import ring_divmod  # a helper made with inlined
        >>> ring_divmod(7, 3)
        (2, 1)
    """
    return _compiled(function, inline="always")


def _compiled(function: F, **options: Any) -> F:
    """``function`` as a numba dispatcher (called as the function it compiles), cached where possible."""
    try:
        return cast(F, numba.njit(cache=True, nogil=True, **options)(function))
    except RuntimeError:  # numba found nowhere to write its cache
        return cast(F, numba.njit(nogil=True, **options)(function))
