"""``tensorclass`` that keeps the class docstring (for the API docs and doctests)."""
from __future__ import annotations

from typing import TypeVar

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
