"""Uniform integer draws for the samplers, without a fresh tensor per batch.

Every sampler draws its batch's rows (or windows, episodes, slots) as
``count`` uniform integers below a total from the buffer's
``torch.Generator``. :func:`uniform_below` gives exactly the values
``torch.randint(total, (count,), generator=generator)`` gives (the same
generator stream, so seeds and checkpoints replay the same batches), drawn
in place into a buffer kept per thread and per count: ``randint`` allocates
its result at every call (a W1 ``rb.sample()`` took 0.96x the time without
that allocation, in an in-process A/B on a 2-CPU Xeon).
"""
from __future__ import annotations

import threading

import numpy as np
import torch

from torchrl_ext.core.checks import check_count

__all__ = ["uniform_below"]

_MAX_SIZES = 8  # counts whose buffer a thread keeps (a sampler draws one or two sizes)
_local = threading.local()


def uniform_below(total: int, count: int, generator: torch.Generator | None) -> np.ndarray:
    """``count`` i.i.d. uniform integers in ``[0, total)``: ``torch.randint``'s values, as int64 numpy.

    The result is this thread's buffer for ``count``: read it (or copy it)
    before the thread's next draw of as many values.

    Raises:
        TypeError: ``total`` or ``count`` is not an int (numpy's ints are).
        ValueError: ``total < 1`` (nothing to draw from) or ``count < 0``.

    Examples:
        >>> a = uniform_below(10, 5, torch.Generator().manual_seed(0))
        >>> a.tolist() == torch.randint(10, (5,), generator=torch.Generator().manual_seed(0)).tolist()
        True
    """
    if type(total) is not int or total < 1:  # (the usual call: two type tests)
        total = check_count("uniform_below", "total", total)
    if type(count) is not int or count < 0:
        count = check_count("uniform_below", "count", count, minimum=0)
    buffers: dict[int, tuple[torch.Tensor, np.ndarray]] | None = getattr(_local, "buffers", None)
    if buffers is None:
        buffers = _local.buffers = {}
    pair = buffers.get(count)
    if pair is None:
        if len(buffers) >= _MAX_SIZES:
            buffers.clear()
        drawn = torch.empty(count, dtype=torch.int64)
        pair = buffers[count] = (drawn, drawn.numpy())
    pair[0].random_(0, total, generator=generator)
    return pair[1]
