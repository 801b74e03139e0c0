"""``tensorclass`` that keeps the class docstring, and the float32 conversion of rllte batches."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self, TypeVar

import torch
from tensordict import TensorDictBase, tensorclass

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


def as_float32(value: Any, device: torch.device | None = None) -> Any:
    """``value`` as rllte returned it: float32 on ``device``; a TensorDict becomes a dict.

    Each tensor moves in its stored dtype (uint8 pixels cross to an accelerator
    at a quarter of float32's bytes), then is cast there: one copy on the CPU,
    none when it already is float32 on ``device``. Stored data keeps its dtype.
    ``device=None``: the caller knows the values are where they are wanted
    (a facade on the CPU, whose batches are all there): cast only, without a
    device test per tensor.

    Examples:
        >>> from tensordict import TensorDict
        >>> as_float32(torch.tensor([[0, 255]], dtype=torch.uint8), torch.device("cpu"))
        tensor([[  0., 255.]])
        >>> goals = TensorDict({"goal": torch.ones(2, 1, dtype=torch.int8)}, [2])
        >>> as_float32(goals)["goal"].dtype
        torch.float32
    """
    # (a plain tensor, the usual case, is told by its type: a fraction of the isinstance)
    if type(value) is not torch.Tensor and isinstance(value, TensorDictBase):
        return {key: as_float32(item, device) for key, item in value.items()}
    if device is not None and value.device != device:
        value = value.to(device)
    # .float(): the cast of .to(torch.float32), at two thirds of its call's cost
    return value if value.dtype is torch.float32 else value.float()
