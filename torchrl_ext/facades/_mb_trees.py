"""Nested dicts of pytorchrl values (observation dicts, slices) and a stored layout as JSON."""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
from tensordict import TensorDictBase

from torchrl_ext.facades._convert import to_numpy

__all__ = ["numpy_tree", "specs_json", "specs_of_json", "tail", "tree_leaves", "tree_map"]


def tree_map(fn: Callable[[Any], Any], value: Any) -> Any:
    """``fn`` applied to every leaf of nested dicts.

    Examples:
        >>> tree_map(lambda x: x * 2, {"a": 1, "b": {"c": 2}})
        {'a': 2, 'b': {'c': 4}}
    """
    if isinstance(value, Mapping):
        return {k: tree_map(fn, v) for k, v in value.items()}
    return fn(value)


def tree_leaves(value: Any, prefix: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], np.ndarray]]:
    """Each leaf of nested dicts as ``(key under prefix, numpy array)``.

    Examples:
        >>> [(k, v.tolist()) for k, v in tree_leaves({"h": [1, 2], "c": {"x": 3}}, ("rhs",))]
        [(('rhs', 'h'), [1, 2]), (('rhs', 'c', 'x'), 3)]
    """
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from tree_leaves(v, prefix + (str(k),))
    else:
        yield prefix, to_numpy(value)


def specs_json(specs: dict[tuple[str, ...], tuple[tuple[int, ...], np.dtype]] | None) -> list | None:
    """A layout (``PytorchrlSteps.specs``: stored key to shape and dtype) as JSON-ready lists, in order.

    Examples:
        >>> rows = specs_json({("observation",): ((3,), np.dtype(np.float32))})
        >>> rows, specs_of_json(rows) == {("observation",): ((3,), np.dtype(np.float32))}
        ([[['observation'], [3], '<f4']], True)
    """
    return None if specs is None else [[list(k), list(shape), dtype.str] for k, (shape, dtype) in specs.items()]


def specs_of_json(rows: list | None) -> dict[tuple[str, ...], tuple[tuple[int, ...], np.dtype]] | None:
    """:func:`specs_json`'s layout back."""
    return None if rows is None else {tuple(k): (tuple(shape), np.dtype(dtype)) for k, shape, dtype in rows}


def tail(data: dict[str, Any], keep: int) -> dict[str, Any]:
    """The newest ``keep`` steps of a :meth:`MBReplayBuffer.get_all_buffer_data` result.

    Examples:
        >>> tail({"Observation": np.arange(4), "Reward": None, "Dict": {"x": np.arange(4)}}, 2)
        {'Observation': array([2, 3]), 'Reward': None, 'Dict': {'x': array([2, 3])}}
    """
    return {k: None if v is None else tree_map(lambda x: x[-keep:], v) for k, v in data.items()}


def numpy_tree(td: TensorDictBase) -> dict[str, Any]:
    """A TensorDict as nested dicts of numpy copies (pytorchrl's slice values).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> numpy_tree(TensorDict({"a": torch.zeros(2), "b": {"c": torch.ones(2)}}, [2]))
        {'a': array([0., 0.], dtype=float32), 'b': {'c': array([1., 1.], dtype=float32)}}
    """
    return {k: numpy_tree(v) if isinstance(v, TensorDictBase) else v.numpy().copy()
            for k, v in td.items()}
