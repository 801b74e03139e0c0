"""Numpy views over an object's tensors: fast small-array arithmetic, shared memory kept."""
from __future__ import annotations

from typing import Any


class NumpyViews:
    """Keeps ``self._np[name]``, a numpy view of each tensor named in ``_VIEWED``.

    Numpy indexing of the small arrays a write or a sample touches costs a
    fraction of the torch op, and the views share memory with the tensors (also
    shared memory across processes). Views are not pickled: they are rebuilt
    from the tensors after unpickling, and by :meth:`_bind` after a move.

    Examples:
        >>> import torch
        >>> class Counts(NumpyViews):
        ...     _VIEWED = ("hits",)
        ...     def __init__(self):
        ...         self.hits = torch.zeros(3, dtype=torch.int64)
        ...         self._bind()
        >>> counts = Counts()
        >>> counts._np["hits"][1] += 2
        >>> counts.hits.tolist()
        [0, 2, 0]
    """

    _VIEWED: tuple[str, ...] = ()
    # attributes of this process alone (views, caches), rebuilt by _bind: never pickled
    _PER_PROCESS: tuple[str, ...] = ("_np",)

    def _bind(self) -> None:
        self._np = {name: getattr(self, name).numpy() for name in self._VIEWED}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in self._PER_PROCESS:
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._bind()
