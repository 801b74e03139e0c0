"""Dynamics-model regression pairs ``(obs, action) -> (next_obs - obs, reward)``."""
from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey
from torchrl.envs.transforms import Transform

from torchrl_ext.core.checks import check_count
from torchrl_ext.core.schema import EntryKeyError, as_key, key_str

__all__ = ["ModelPairTransform", "encode_actions", "model_pairs"]


def _features(x: torch.Tensor, batch_dims: int) -> torch.Tensor:
    """``[*batch, ...]`` -> ``[*batch, features]`` (a view where ``reshape`` allows one)."""
    # the width is spelled out: reshape(*batch, -1) cannot infer it for a batch of 0 rows
    return x.reshape(*x.shape[:batch_dims], math.prod(x.shape[batch_dims:]))


def encode_actions(
    action: torch.Tensor, num_actions: int | None, batch_dims: int, name: str = "'action'"
) -> torch.Tensor:
    """Actions as float32 model-input features, ``[*batch, features]``.

    With ``num_actions = n``: discrete actions (integer, bool or integral
    floats; shape ``[*batch]`` or ``[*batch, 1]``) become one-hot vectors of the
    fixed width ``n``, whatever actions the batch happens to hold. Otherwise
    the trailing dims are flattened (continuous ``Box`` actions, as they are).

    Raises:
        ValueError: a discrete action is not an integer in ``[0, n)``, or has
            more than one value per step.

    Examples:
        >>> import torch
        >>> encode_actions(torch.tensor([[0], [2]]), 3, batch_dims=1).tolist()
        [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
        >>> encode_actions(torch.ones(2, 2, 3), None, batch_dims=1).shape
        torch.Size([2, 6])
    """
    batch = action.shape[:batch_dims]
    if num_actions is None:
        return _features(action, batch_dims).float()
    if action.shape[batch_dims:] not in ((), (1,)):
        raise ValueError(
            f"{name} has shape {tuple(action.shape)}; discrete actions (num_actions="
            f"{num_actions}) need one value per step, {tuple(batch)} or {tuple(batch) + (1,)}."
        )
    index = action.reshape(batch)
    if index.is_floating_point():
        if not bool((index == index.round()).all()):
            raise ValueError(f"{name} holds non-integer values; expected action indices.")
    index = index.long()
    if index.numel() and not bool(((index >= 0) & (index < num_actions)).all()):
        raise ValueError(
            f"{name} holds values in [{int(index.min())}, {int(index.max())}], expected "
            f"indices in [0, {num_actions}) (num_actions={num_actions})."
        )
    return torch.nn.functional.one_hot(index, num_actions).float()


def model_pairs(
    observations: Sequence[torch.Tensor],
    next_observations: Sequence[torch.Tensor],
    actions: torch.Tensor,
    reward: torch.Tensor | None,
    batch_dims: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets of a dynamics model, the pure math.

    ``inputs = concat(o^1, ..., o^k, a)`` and
    ``targets = concat(o'^1 - o^1, ..., o'^k - o^k[, r])`` where ``o^i`` /
    ``o'^i`` are the observation entries of a transition and of its *true*
    next observation, each flattened after the batch dims and cast to float32,
    ``a`` the encoded actions (:func:`encode_actions`) and ``r`` the reward.
    An episode's last step (terminated or truncated) is a transition like any
    other: its next observation is the true final one. A final observation and
    the next episode's reset observation never form a pair; the storage never
    serves one.

    Args:
        observations: ``[*batch, ...]`` entries of ``o_t``.
        next_observations: the same entries of ``o_{t+1}``, in the same order.
        actions: ``[*batch, features]`` float32 encoded actions.
        reward: ``[*batch, 1]`` (or ``[*batch]``) reward, or ``None`` to leave
            it out of the targets (a known reward function).
        batch_dims: number of leading batch dims.

    Returns:
        ``(inputs [*batch, obs_dim + act_dim], targets [*batch, obs_dim (+ 1)])``.

    Examples:
        >>> import torch
        >>> obs, nxt = torch.tensor([[1.0, 2.0]]), torch.tensor([[1.5, 1.0]])
        >>> inputs, targets = model_pairs([obs], [nxt], torch.tensor([[0.3]]), torch.tensor([[-1.0]]))
        >>> inputs.tolist(), targets.tolist()
        ([[1.0, 2.0, 0.30000001192092896]], [[0.5, -1.0, -1.0]])
    """
    batch = actions.shape[:batch_dims]
    obs = [_features(o, batch_dims) for o in observations]  # views of gathered rows: no copy
    nxt = [_features(n, batch_dims) for n in next_observations]
    rew = None if reward is None else _features(reward, batch_dims)
    obs_dim = sum(o.shape[-1] for o in obs)
    target_dim = obs_dim + (0 if rew is None else rew.shape[-1])
    # each feature is written once, straight into the outputs (no concatenated temporaries)
    inputs = torch.empty(*batch, obs_dim + actions.shape[-1], device=actions.device)
    targets = torch.empty(*batch, target_dim, device=actions.device)
    lo = 0
    for o, n in zip(obs, nxt):
        hi = lo + o.shape[-1]
        inputs[..., lo:hi] = o
        torch.sub(n.float(), inputs[..., lo:hi], out=targets[..., lo:hi])
        lo = hi
    inputs[..., lo:] = actions
    if rew is not None:
        targets[..., lo:] = rew
    return inputs, targets


class ModelPairTransform(Transform):
    """Add dynamics-model inputs and targets to sampled TorchRL transitions.

    Writes ``inputs_key`` = ``concat(observation entries, action)`` and
    ``targets_key`` = ``concat(next observation entries - observation entries,
    reward)`` (see :func:`model_pairs`); discrete actions are one-hot encoded
    with the fixed width ``num_actions`` (pytorchrl's M3 took the width from
    the largest action seen). Works on ``[B]`` and ``[E, B]`` batches (ensembles
    from :class:`~torchrl_ext.samplers.EpochSampler`).

    With a ``scaler`` (an object with pytorchrl's ``transform(inputs, targets)``,
    e.g. :class:`~torchrl_ext.transforms.StandardScaler`), the pairs are
    normalised with its current statistics; the transform never fits it.

    Keyword Args:
        observation_keys (sequence of NestedKey): observation entries, in the
            order they are concatenated. Defaults to ``("observation",)``.
        action_key (NestedKey): defaults to ``"action"``.
        reward_key (NestedKey, optional): defaults to ``("next", "reward")``;
            ``None`` leaves the reward out of the targets.
        num_actions (int, optional): one-hot width of discrete actions;
            ``None`` for continuous actions.
        scaler (optional): normalises the pairs.
        inputs_key (NestedKey): defaults to ``"model_input"``.
        targets_key (NestedKey): defaults to ``"model_target"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"observation": torch.zeros(2, 3), "action": torch.tensor([[1], [0]]),
        ...     "next": {"observation": torch.ones(2, 3), "reward": torch.ones(2, 1)}}, [2])
        >>> out = ModelPairTransform(num_actions=2)(td)
        >>> out["model_input"].tolist(), out["model_target"].shape
        ([[0.0, 0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0, 0.0]], torch.Size([2, 4]))
    """

    _sample_time_only = True  # no inverse: TransitionReplayBuffer.extend skips it

    def __init__(
        self,
        *,
        observation_keys: Sequence[NestedKey] = ("observation",),
        action_key: NestedKey = "action",
        reward_key: NestedKey | None = ("next", "reward"),
        num_actions: int | None = None,
        scaler: Any = None,
        inputs_key: NestedKey = "model_input",
        targets_key: NestedKey = "model_target",
    ) -> None:
        super().__init__()
        if isinstance(observation_keys, str) or not observation_keys:
            raise ValueError(
                f"ModelPairTransform: observation_keys={observation_keys!r}, expected a "
                "non-empty sequence of keys such as ('observation',)."
            )
        if num_actions is not None:
            num_actions = check_count("ModelPairTransform", "num_actions", num_actions)
        if scaler is not None and not callable(getattr(scaler, "transform", None)):
            raise TypeError(
                f"ModelPairTransform: scaler is {type(scaler).__name__} without a "
                "transform(inputs, targets) method."
            )
        self.observation_keys = tuple(as_key(k, f"observation_keys[{i}]", "ModelPairTransform")
                                      for i, k in enumerate(observation_keys))
        self.action_key = as_key(action_key, "action_key", "ModelPairTransform")
        self.reward_key = None if reward_key is None else as_key(reward_key, "reward_key", "ModelPairTransform")
        self.num_actions = num_actions
        self.scaler = scaler
        self.inputs_key = as_key(inputs_key, "inputs_key", "ModelPairTransform")
        self.targets_key = as_key(targets_key, "targets_key", "ModelPairTransform")

    def pairs(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        """``(inputs, targets)`` of ``tensordict``'s transitions, not normalised."""
        nb = tensordict.ndim
        obs = [self._get(tensordict, k) for k in self.observation_keys]
        nxt = [self._get(tensordict, ("next", *k)) for k in self.observation_keys]
        action = encode_actions(
            self._get(tensordict, self.action_key), self.num_actions, nb, key_str(self.action_key)
        )
        reward = None if self.reward_key is None else self._get(tensordict, self.reward_key)
        return model_pairs(obs, nxt, action, reward, nb)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        inputs, targets = self.pairs(tensordict)
        if self.scaler is not None:
            inputs, targets = self.scaler.transform(inputs, targets)
        tensordict.set(self.inputs_key, inputs)
        tensordict.set(self.targets_key, targets)
        return tensordict

    def _get(self, tensordict: TensorDictBase, key: tuple[str, ...]) -> torch.Tensor:
        value = tensordict.get(key, None)
        if value is None:
            raise EntryKeyError(
                f"ModelPairTransform: the batch has no entry {key_str(key)} (entries: "
                f"{sorted(map(key_str, tensordict.keys(True, True)))}); pass "
                "observation_keys= / action_key= / reward_key= to name yours."
            )
        return value

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(observation_keys={self.observation_keys}, "
            f"num_actions={self.num_actions}, reward={self.reward_key is not None})"
        )
