"""The d3rlpy 1.0 facade's mini-batch (``TransitionMiniBatch``'s fields) and whole episodes."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDictBase

from torchrl_ext.facades._tensorclass import TensorclassBatch, documented_tensorclass

__all__ = ["BatchReplayBatch", "Episode"]


def _field_alias(field: str) -> property:
    """A read-only attribute giving the field ``field``, under d3rlpy ``Transition``'s singular name.

    Examples:
        >>> class Pair:
        ...     observations = 3
        ...     observation = _field_alias("observations")
        >>> Pair().observation
        3
    """
    return property(lambda self: getattr(self, field), doc=f"``{field}`` (d3rlpy ``Transition``'s name).")


@documented_tensorclass
class BatchReplayBatch(TensorclassBatch):
    """A mini-batch with the fields of d3rlpy's ``TransitionMiniBatch``.

    ``y = next_rewards + gamma ** n_steps * (1 - terminals) * Q'(next_observations)``.

    Attributes:
        observations: ``o_t``, ``(B, *obs_shape)``: uint8 images, float32
            otherwise. With ``n_frames = F > 1``: images ``(B, F * C, H, W)``,
            vectors ``(B, F, *obs_shape)``; frames before the episode's first
            observation repeat it.
        actions: ``a_t``: ``(B,)`` int32 (discrete) or ``(B, action_size)`` float32.
        rewards: ``(B, 1)`` float32, the **arrival** reward ``r_t`` (received on
            reaching ``o_t``), *not* the TD reward: see ``td_rewards`` (D9).
        next_observations: ``o_{t+k}``, stacked as ``observations``.
        next_actions: the action appended with ``o_{t+k}``.
        next_rewards: ``(B, 1)`` float32, ``sum_{i<k} gamma**i r(o_{t+i}, a_{t+i})``.
        td_rewards: the same tensor as ``next_rewards``, under a name that says
            what it is (D9).
        terminals: ``(B, 1)`` float32, transition ``t+k-1`` reached a terminal state.
        n_steps: ``(B, 1)`` float32, ``k = min(n_steps, transitions left in the chain)``.
        mask: ``(B, mask_size)`` bool bootstrap bits, or None without ``create_mask``.

    ``masks`` is d3rlpy's layout of ``mask``: ``(mask_size, B, 1)`` float32.

    Examples:
        >>> import torch
        >>> z = torch.zeros(2, 1)
        >>> batch = BatchReplayBatch(observations=torch.zeros(2, 3), actions=torch.zeros(2, dtype=torch.int32),
        ...     rewards=z, next_observations=torch.zeros(2, 3), next_actions=torch.zeros(2, dtype=torch.int32),
        ...     next_rewards=z + 1, td_rewards=z + 1, terminals=z, n_steps=z + 1,
        ...     mask=torch.tensor([[True, False], [True, True]]), batch_size=[2])
        >>> batch.masks.shape, batch.masks[1].view(-1).tolist()
        (torch.Size([2, 2, 1]), [0.0, 1.0])
    """

    observations: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_observations: torch.Tensor
    next_actions: torch.Tensor
    next_rewards: torch.Tensor
    td_rewards: torch.Tensor
    terminals: torch.Tensor
    n_steps: torch.Tensor
    mask: torch.Tensor | None = None

    if TYPE_CHECKING:  # the constructor tensorclass generates, for type checkers

        def __init__(
            self,
            *,
            observations: torch.Tensor,
            actions: torch.Tensor,
            rewards: torch.Tensor,
            next_observations: torch.Tensor,
            next_actions: torch.Tensor,
            next_rewards: torch.Tensor,
            td_rewards: torch.Tensor,
            terminals: torch.Tensor,
            n_steps: torch.Tensor,
            mask: torch.Tensor | None = None,
            batch_size: Sequence[int] | torch.Size,
            device: torch.device | str | None = None,
        ) -> None: ...

        def __len__(self) -> int: ...

        @classmethod
        def from_tensordict(
            cls, tensordict: TensorDictBase, non_tensordict: dict[str, Any] | None = None
        ) -> BatchReplayBatch: ...

    # d3rlpy ``Transition``'s attribute names, for the items of
    # BatchReplayBuffer.transitions (``for t in buffer.transitions: t.observation``)
    observation = _field_alias("observations")
    action = _field_alias("actions")
    reward = _field_alias("rewards")
    next_observation = _field_alias("next_observations")
    next_action = _field_alias("next_actions")
    next_reward = _field_alias("next_rewards")
    terminal = _field_alias("terminals")

    @property
    def masks(self) -> torch.Tensor | None:
        """d3rlpy's ``(mask_size, B, 1)`` float32 masks, or None."""
        mask = self.mask
        return None if mask is None else mask.T.unsqueeze(-1).float()

    def size(self) -> int:
        """Number of transitions (d3rlpy's ``size()``)."""
        return int(self.batch_size[0])


@dataclass(frozen=True)
class Episode:
    """A whole episode in d3rlpy 1.0's convention, for :meth:`BatchReplayBuffer.append_episode`.

    ``rewards[i]`` is the arrival reward of ``observations[i]`` (``rewards[0]``
    is usually 0); the episode's transitions are ``i -> i + 1`` for
    ``i < len - 1``, with TD reward ``rewards[i + 1]``; the last one is terminal
    iff ``terminal``. Any object with these four attributes (such as d3rlpy
    1.0's ``Episode``) is accepted too.

    Examples:
        >>> import numpy as np
        >>> ep = Episode(np.zeros((4, 2), np.float32), np.zeros(4, np.int64), np.arange(4.0), True)
        >>> len(ep)  # transitions
        3
    """

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminal: bool = True

    def __len__(self) -> int:
        return len(self.observations) - 1
