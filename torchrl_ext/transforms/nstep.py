"""Sample-time n-step transform over windows read by NStepSampler."""
from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey
from torchrl.envs.transforms import Transform

from torchrl_ext.core.checks import check_number
from torchrl_ext.core.schema import (
    EntryKeyError, as_key, get_unchecked, key_str, pop_unchecked, set_unchecked,
)
from torchrl_ext.transforms.functional import (
    ReturnWeights,
    nstep_return,
    return_weights,
    step_rewards,
    window_rewards,
)

__all__ = ["NStepTransform"]


class NStepTransform(Transform):
    """Turn sampled windows into n-step transitions in TorchRL's layout.

    Reads what :class:`~torchrl_ext.samplers.NStepSampler` makes the storage
    return: the ``"n_step"`` ``[B, W]`` entries of each window step and its
    ``"mask"`` (a batch of one-step windows only comes as transitions, with
    ``"steps_to_next_obs"`` and no ``"n_step"``: each reward is its step's),
    and writes

    * ``("next", "reward")``: ``sum_{i<k} gamma**i r_{t+i}`` (see
      :func:`~torchrl_ext.transforms.functional.nstep_return`);
    * ``discount_key`` (default ``"discount"``): ``gamma**k * (1 - terminated)``,

    and drops the windows. The other next-only entries (``("next",
    "terminated")``, ``"truncated"``, ``"done"``...) already hold their value at
    the window's last step.

    ``("next", obs)`` already is the observation after the window and
    ``"steps_to_next_obs"`` its length ``k``, which TorchRL's value estimators
    and ``DQNLoss`` read to discount the bootstrap by ``gamma**k``. ``gamma``
    is an attribute, so it can change between samples.

    Args:
        gamma (float): discount factor.

    Keyword Args:
        reward_key (NestedKey): defaults to ``("next", "reward")``.
        terminated_key (NestedKey): defaults to ``("next", "terminated")``. A
            batch without it is an error: a termination must not bootstrap.
        discount_key (NestedKey, optional): where to write the bootstrap
            discount; ``None`` to skip. Defaults to ``"discount"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import make_replay_buffer
        >>> rb = make_replay_buffer(64, batch_size=4, n_step=3, gamma=0.5, seed=0)
        >>> r = torch.ones(1, 4, 1)
        >>> term = torch.tensor([[False, False, False, True]]).unsqueeze(-1)
        >>> _ = rb.extend(TensorDict({"observation": torch.arange(4.).view(1, 4, 1),
        ...     "action": torch.zeros(1, 4, 1),
        ...     "next": {"observation": torch.arange(1., 5.).view(1, 4, 1), "reward": r,
        ...              "terminated": term, "done": term.clone()}}, [1, 4]))
        >>> seen = {}  # step -> (n-step return, bootstrap discount)
        >>> for _ in range(20):
        ...     b = rb.sample(4)
        ...     seen.update(zip(b["observation"].view(-1).tolist(),
        ...                     zip(b["next", "reward"].view(-1).tolist(), b["discount"].view(-1).tolist())))
        >>> [seen[t] for t in (0.0, 1.0, 2.0, 3.0)]  # the terminal at step 3 cuts the bootstrap
        [(1.75, 0.125), (1.75, 0.0), (1.5, 0.0), (1.0, 0.0)]
    """

    _sample_time_only = True  # no inverse: TransitionReplayBuffer.extend skips it
    # the kept weights and what they were made for (see _return_weights); None: none kept
    # (a class default, so that a transform pickled before this record rebuilds them)
    _kept: tuple[tuple[torch.dtype, int, torch.device | None], ReturnWeights] | None = None

    def __init__(
        self,
        gamma: float,
        *,
        reward_key: NestedKey = ("next", "reward"),
        terminated_key: NestedKey = ("next", "terminated"),
        discount_key: NestedKey | None = "discount",
    ) -> None:
        super().__init__()
        self.gamma = gamma
        keys = []
        for name, key in (("reward_key", reward_key), ("terminated_key", terminated_key)):
            keys.append(as_key(key, name, "NStepTransform"))
            if keys[-1][0] != "next" or len(keys[-1]) < 2:
                raise ValueError(
                    f"NStepTransform: {name}={key!r}, expected a key under 'next' "
                    "(a per-step entry such as ('next', 'reward'))."
                )
        self.reward_key, self.terminated_key = keys
        self.discount_key = None if discount_key is None else as_key(discount_key, "discount_key", "NStepTransform")

    @property
    def gamma(self) -> float:
        """The discount factor; may be set between samples (checked as in the constructor)."""
        return self._gamma

    @gamma.setter
    def gamma(self, value: float) -> None:
        self._gamma = check_number("NStepTransform", "gamma", value, 0.0, 1.0)
        self._kept = None  # weights of the old gamma

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        # (entries read and dropped without TensorDict's layers: see get_unchecked)
        window = pop_unchecked(tensordict, "n_step")  # the windows are dropped from the batch
        steps = get_unchecked(tensordict, "steps_to_next_obs")  # [B, 1] window lengths, from the reader
        if window is None and steps is None:
            raise EntryKeyError(
                "NStepTransform: the batch has no 'n_step' windows; sample with "
                "torchrl_ext.samplers.NStepSampler (make_replay_buffer(..., n_step=n))."
            )
        # the storage already put the last step's done flags under "next"
        terminated = get_unchecked(tensordict, self.terminated_key)
        if terminated is None:  # [B, 1]: without it, a terminal would be bootstrapped
            raise EntryKeyError(
                f"NStepTransform: the termination entry {key_str(self.terminated_key)} is not "
                f"in the sampled batch (entries under 'next': "
                f"{', '.join(sorted(map(key_str, tensordict.get('next').keys(True, True))))}); "
                "a window "
                "cannot tell a termination (no bootstrap) from a truncation without it. "
                "Store it, or pass terminated_key= the entry that marks terminations "
                "(make_replay_buffer(terminated_key=...))."
            )
        if window is None:  # one-step windows, read as transitions: each reward is its step's
            mask, rewards = None, step_rewards(tensordict, self.reward_key, "NStepTransform")
            shape = rewards.shape  # [B, *reward]: as [B, W = 1] (a [B, 1] reward is that already)
            if rewards.dim() != 2:
                rewards = rewards.reshape(shape[0], 1)
            width = 1
        else:
            mask = get_unchecked(window, "mask")
            rewards = window_rewards(window, self.reward_key, "NStepTransform")  # [B, W, *reward]
            shape = rewards.shape[:1] + rewards.shape[2:]
            width = rewards.shape[1]
        weights = self._return_weights(width, rewards)
        ret, discount = nstep_return(rewards, mask, terminated, self._gamma, weights=weights, steps=steps)
        # [B, *reward_shape] and [B, 1], on the batch's device: set without TensorDict's checks
        # (each tensor op counts: ~10 µs a sample in a loop); a one-step window's
        # return is its reward, already in the batch
        if ret is not rewards:
            set_unchecked(tensordict, self.reward_key, ret if ret.shape == shape else ret.view(shape))
        if self.discount_key is not None:
            set_unchecked(tensordict, self.discount_key, discount)
        return tensordict

    def _return_weights(self, width: int, rewards: torch.Tensor) -> ReturnWeights:
        """:func:`return_weights` for windows of ``width`` steps, kept between samples.

        Building them costs as much as the rest of the return (a tensor from a
        Python list); they change only with ``gamma`` (whose setter drops
        them), the returns' dtype and device, or a wider window. They are kept
        with the dtype, device and width they were made for, as Python values:
        each read of a tensor's attribute counts (see nstep_return), and a
        tensor's ``device`` is a new object at each read, which only an
        accelerator's batch reads here.
        """
        dtype = rewards.dtype
        if not dtype.is_floating_point:  # integer rewards: returns in the default dtype
            dtype = torch.get_default_dtype()
        kept = self._kept
        if kept is not None:
            (made_dtype, made_width, made_device), weights = kept
            if made_dtype is dtype and made_width >= width and (
                rewards.is_cpu if made_device is None else rewards.device == made_device
            ):
                return weights
        weights = return_weights(self._gamma, width, dtype=dtype, device=rewards.device)
        self._kept = ((dtype, width, None if rewards.is_cpu else rewards.device), weights)
        return weights

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict

    def __repr__(self) -> str:
        return f"{type(self).__name__}(gamma={self.gamma})"
