"""Goal functions written for rllte's ``HerReplayStorage``, called with what rllte gives them."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

__all__ = ["NumpyGoalFn", "rllte_goal_fn"]


@dataclass(frozen=True)
class NumpyGoalFn:
    """``fn(achieved_goal, desired_goal, infos)`` as rllte calls its ``reward_fn``, for the components.

    :class:`~torchrl_ext.transforms.HindsightTransform` calls goal functions
    with tensors (on the rows' device) and the stored infos as a TensorDict (or
    ``None`` when none are stored). rllte calls them with numpy arrays in the
    stored dtypes and one dict per row: a numpy object array of the rows'
    stored infos (``copy_info_dict``), else a list of empty dicts. So a
    function written for rllte (``np.linalg.norm(a - d, axis=-1)``,
    ``x.astype(...)``, ``len(infos)``) runs unchanged. Its result, a numpy
    array or a tensor, is read as the components read any (``(n,)`` or
    ``(n, 1)``).

    Args:
        fn (callable): the user's goal function.

    Examples:
        >>> import numpy as np
        >>> reward = NumpyGoalFn(lambda a, d, infos: -(np.abs(a - d).max(axis=-1) > 0.05).astype(np.float32))
        >>> reward(torch.zeros(2, 3), torch.tensor([[0.0, 0, 0], [1, 0, 0]]), None)
        array([-0., -1.], dtype=float32)
    """

    fn: Callable[..., Any]

    def __call__(self, achieved: torch.Tensor, desired: torch.Tensor, infos: TensorDictBase | None) -> Any:
        n = achieved.shape[0]
        rows: Any = [{} for _ in range(n)]
        if infos is not None:  # one dict per row, numpy values (nested dicts for nested entries)
            _fill_rows(rows, infos)
            table = np.empty(n, dtype=object)  # as rllte's copy of its infos table
            table[:] = rows
            rows = table
        return self.fn(achieved.cpu().numpy(), desired.cpu().numpy(), rows)


def rllte_goal_fn(fn: Any, native: bool) -> Any:
    """A user's goal function for the components: called as rllte calls it (:class:`NumpyGoalFn`) unless ``native``.

    ``None`` stays ``None``, and what is not callable goes as it is, for the
    components' error naming it.

    Examples:
        >>> type(rllte_goal_fn(len, native=False)).__name__, rllte_goal_fn(len, native=True)
        ('NumpyGoalFn', <built-in function len>)
    """
    return NumpyGoalFn(fn) if callable(fn) and not native else fn


def _fill_rows(rows: list[dict[str, Any]], infos: TensorDictBase) -> None:
    """Put row ``i`` of every entry of ``infos`` in ``rows[i]``, nested as the entries are."""
    for key, value in infos.items():
        if isinstance(value, TensorDictBase):
            inner: list[dict[str, Any]] = [{} for _ in rows]
            _fill_rows(inner, value)
            for row, sub in zip(rows, inner):
                row[key] = sub
        else:
            for row, item in zip(rows, value.cpu().numpy()):
                row[key] = item
