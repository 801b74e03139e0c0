"""``tensorclass`` that keeps the class docstring (for the API docs and doctests)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self, TypeVar

import torch
from tensordict import tensorclass

T = TypeVar("T", bound=type)


def documented_tensorclass(cls: T) -> T:
    """:func:`tensordict.tensorclass`, keeping ``cls``'s own docstring.

    ``tensorclass`` replaces the docstring with the generated signature, which
    hides the documented fields and examples from Sphinx and from doctests.

    Examples:
        >>> import torch
        >>> @documented_tensorclass
        ... class Pair:
        ...     '''Two tensors.'''
        ...     a: torch.Tensor
        ...     b: torch.Tensor
        >>> Pair.__doc__
        'Two tensors.'
        >>> Pair(a=torch.zeros(2), b=torch.ones(2), batch_size=[2]).b.tolist()
        [1.0, 1.0]
    """
    doc = cls.__doc__
    out = tensorclass(cls)
    out.__doc__ = doc
    return out


class TensorclassBatch:
    """Base of the facades' batch classes: what ``tensorclass`` adds, for type checkers.

    Empty at run time; a type checker sees the ``batch_size``, ``to`` and
    indexing that :func:`documented_tensorclass` generates. Each batch class
    declares its own ``__init__`` signature (its fields) under ``TYPE_CHECKING``.

    Examples:
        >>> @documented_tensorclass
        ... class Rewards(TensorclassBatch):
        ...     rewards: torch.Tensor
        >>> Rewards(rewards=torch.ones(3, 1), batch_size=[3])[:2].rewards.shape
        torch.Size([2, 1])
    """

    if TYPE_CHECKING:
        batch_size: torch.Size

        def to(self, device: torch.device | str) -> Self: ...

        def __getitem__(self, index: Any) -> Self: ...
