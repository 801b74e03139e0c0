"""Pure tensor functions for sample-time return computations."""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from torchrl_ext.core.checks import check_count
from torchrl_ext.core.schema import as_key, get_unchecked, missing_entry

__all__ = [
    "ReturnWeights", "call_reward_fn", "discount_powers", "goal_fn_result", "nstep_return", "return_weights",
    "stack_frames", "step_rewards", "window_rewards",
]


def discount_powers(
    gamma: float, n: int, *, dtype: torch.dtype = torch.float32, device: torch.device | None = None
) -> torch.Tensor:
    """``[gamma**0, ..., gamma**n]``, ``[n + 1]``: the weights :func:`nstep_return` reads.

    Each power is computed in double precision, then cast to ``dtype``.

    Raises:
        TypeError / ValueError: ``n`` is not an int >= 0.

    Examples:
        >>> discount_powers(0.5, 3).tolist()
        [1.0, 0.5, 0.25, 0.125]
    """
    n = check_count("discount_powers", "n", n, minimum=0)
    return torch.tensor([gamma**i for i in range(n + 1)], dtype=dtype, device=device)


class ReturnWeights(NamedTuple):
    """The tensors :func:`nstep_return` reads for windows of up to ``n`` steps of one ``gamma``.

    Made once by :func:`return_weights` for a caller that samples again and
    again: in a training loop each tensor operation costs ~10 µs (the
    dispatcher's code and data are out of the caches by then), a view or a
    Python scalar taken into an operation included.

    Attributes:
        powers (torch.Tensor): ``[n + 1]`` :func:`discount_powers`, the
            bootstrap discounts ``gamma**k``.
        column (torch.Tensor): ``[n, 1]``, the weights ``gamma**i`` of the
            window steps' rewards.
        zero (torch.Tensor): a 0-d zero: the weight of steps past a window,
            the discount of a terminated one.
        gamma (torch.Tensor): a 0-d ``gamma``: the discount of a one-step window.

    Examples:
        >>> weights = return_weights(0.9, 3)
        >>> r, mask = torch.ones(2, 3), torch.tensor([[True, True, True], [True, False, False]])
        >>> ret, _ = nstep_return(r, mask, torch.tensor([False, False]), 0.9, weights=weights)
        >>> [round(x, 2) for x in ret.view(-1).tolist()]
        [2.71, 1.0]
    """

    powers: torch.Tensor
    column: torch.Tensor
    zero: torch.Tensor
    gamma: torch.Tensor


def return_weights(
    gamma: float, n: int, *, dtype: torch.dtype = torch.float32, device: torch.device | None = None
) -> ReturnWeights:
    """The :class:`ReturnWeights` of ``gamma`` for windows of up to ``n >= 1`` steps.

    Raises:
        TypeError / ValueError: ``n`` is not an int >= 1.

    Examples:
        >>> weights = return_weights(0.5, 3)
        >>> weights.column.view(-1).tolist(), weights.powers.tolist()
        ([1.0, 0.5, 0.25], [1.0, 0.5, 0.25, 0.125])
    """
    n = check_count("return_weights", "n", n, minimum=1)
    powers = discount_powers(gamma, n, dtype=dtype, device=device)
    return ReturnWeights(powers, powers[:n, None], powers.new_zeros(()), powers[1])


def nstep_return(
    rewards: torch.Tensor,
    mask: torch.Tensor | None,
    terminated: torch.Tensor,
    gamma: float,
    *,
    weights: ReturnWeights | None = None,
    steps: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """n-step return and bootstrap discount of windows cut at episode ends.

    For a window of ``k`` steps starting at step ``t`` (``k = min(n, steps left
    in the episode)``, the steps with ``mask`` set):

    * ``return = sum_{i<k} gamma**i * r_{t+i}``
    * ``discount = gamma**k * (1 - terminated_{t+k-1})``

    so that ``target = return + discount * V(o_{t+k})``, where ``o_{t+k}`` is
    the observation after the window's last step (the true final observation
    when the window reaches its episode's end). A terminated window does not
    bootstrap; a truncated one does. A window of one step is the usual TD(0)
    target.

    Args:
        rewards (torch.Tensor): ``[B, W]`` (or ``[B, W, 1]``) rewards of each window step.
        mask (torch.Tensor, optional): ``[B, W]`` bool, the step is inside its window; the
            set entries of a row are a prefix (``k`` leading steps, ``k >= 1``).
            Rewards of the other steps are ignored, whatever they hold.
            ``None`` for one-step windows (``W = 1``) given ``steps``.
        terminated (torch.Tensor): ``[B]`` (or ``[B, 1]``) bool, the window's last
            step terminated its episode.
        gamma (float): discount factor.

    Keyword Args:
        weights (ReturnWeights, optional): :func:`return_weights` of ``gamma``
            for windows of at least ``W`` steps, in the dtype of the returns and
            on their device; for a caller that samples again and again (built
            here if ``None``).
        steps (torch.Tensor, optional): ``[B, 1]`` (or ``[B]``) int64, each
            window's ``k`` (the set entries of its ``mask`` row), for a caller
            that has them (``"steps_to_next_obs"``); counted from ``mask`` if ``None``.

    Raises:
        ValueError: ``mask=None`` for windows wider than one step, or without
            ``steps``; ``weights`` for narrower windows than these.
        TypeError: ``weights`` is not a :class:`ReturnWeights`.

    Returns:
        ``(return, discount)``, both ``[B, 1]`` with the dtype of ``rewards``.
        For one-step windows (``W = 1``) the return is ``rewards`` itself, as
        ``[B, 1]`` (a view of it, not a copy).

    Examples:
        >>> r = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 7.0]])  # 7.0: past the window
        >>> mask = torch.tensor([[True, True, True], [True, True, False]])
        >>> ret, disc = nstep_return(r, mask, torch.tensor([False, True]), gamma=0.5)
        >>> ret.view(-1).tolist(), disc.view(-1).tolist()
        ([1.75, 1.5], [0.125, 0.0])
    """
    if rewards.dim() == 3:
        rewards = rewards.squeeze(-1)
    if not rewards.dtype.is_floating_point:  # integer rewards: returns in the default dtype
        rewards = rewards.to(torch.get_default_dtype())
    W = rewards.shape[-1]
    if weights is None:
        weights = return_weights(gamma, W, dtype=rewards.dtype, device=rewards.device)
    elif not isinstance(weights, ReturnWeights):
        raise TypeError(
            f"nstep_return: weights is {type(weights).__name__}, expected ReturnWeights "
            "(made by return_weights(gamma, n))."
        )
    # few tensor operations, each costs ~10 µs in a training loop (the dispatcher's
    # code and data are out of the caches by then), more than its arithmetic
    # a terminated window does not bootstrap
    ended = terminated if terminated.dim() == 2 else terminated.reshape(-1, 1)
    if W == 1:  # one-step windows (k = 1): the return is the reward, [B, 1] as it is
        if mask is None and steps is None:
            raise ValueError("nstep_return: mask=None needs steps= (the windows' lengths).")
        return rewards, torch.where(ended, weights.zero, weights.gamma)
    if mask is None:
        raise ValueError(f"nstep_return: mask=None is for one-step windows; these are {W} wide.")
    n = weights.column.shape[0]
    if n < W:
        raise ValueError(
            f"nstep_return: weights for windows of up to {n} steps; these are "
            f"{W} wide (return_weights(gamma, n) with n >= {W})."
        )
    column = weights.column if n == W else weights.powers[:W, None]  # wider weights: their first W
    ret = torch.where(mask, rewards, weights.zero).matmul(column)  # [B, W] @ [W, 1]: steps past the window weigh 0
    if steps is None:
        steps = mask.sum(-1, keepdim=True)  # [B, 1] k, the steps in each window
    discount = weights.powers.take(steps if steps.dim() == 2 else steps.reshape(-1, 1))  # [B, 1] gamma ** k
    return ret, torch.where(ended, weights.zero, discount)


def call_reward_fn(
    reward_fn: Callable[..., Any],
    achieved_goal: torch.Tensor,
    desired_goal: torch.Tensor,
    infos: Any,
    *,
    owner: str = "call_reward_fn",
) -> torch.Tensor:
    """``reward_fn(achieved_goal, desired_goal, infos)`` on a batch, as ``[n, 1]``.

    ``reward_fn`` is batched: ``achieved_goal`` and ``desired_goal`` are
    ``[n, *goal_shape]``; ``(n,)`` and ``(n, 1)`` results (tensor or numpy) are
    both accepted. ``owner`` names the caller in the errors.

    Raises:
        TypeError: the result is not a tensor or array (``None``).
        ValueError: the result has another number of elements.

    Examples:
        >>> reward = lambda a, d, info: -(torch.linalg.norm(a - d, dim=-1) > 0.05).float()
        >>> call_reward_fn(reward, torch.zeros(2, 3), torch.tensor([[0.0, 0, 0], [1, 0, 0]]), None)
        tensor([[-0.],
                [-1.]])
        >>> call_reward_fn(lambda a, d, info: None, torch.zeros(2, 3), torch.zeros(2, 3), None)
        Traceback (most recent call last):
        ...
        TypeError: call_reward_fn: reward_fn returned None (NoneType), expected a float tensor (or numpy array) of shape (2,) or (2, 1): one reward per (achieved_goal, desired_goal) pair.
    """
    out = goal_fn_result(owner, "reward_fn", reward_fn(achieved_goal, desired_goal, infos),
                         achieved_goal.shape[0], achieved_goal.device)
    return out if out.dtype is torch.float32 else out.to(torch.float32)


def goal_fn_result(owner: str, name: str, result: Any, n: int, device: torch.device) -> torch.Tensor:
    """The ``result`` of a batched goal function of ``n`` pairs (``reward_fn``, ``terminated_fn``) as ``[n, 1]``.

    Checked once per call (a sampled batch), not per value: any type
    ``torch.as_tensor`` takes, of shape ``(n,)`` or ``(n, 1)``.

    Raises:
        TypeError: ``torch.as_tensor`` does not take it (``None``, strings).
        ValueError: another shape.

    Examples:
        >>> goal_fn_result("Her", "terminated_fn", torch.ones(3, dtype=torch.bool), 2, torch.device("cpu"))
        Traceback (most recent call last):
        ...
        ValueError: Her: terminated_fn returned shape (3,) for 2 goals; expected (2,) or (2, 1): one flag per (achieved_goal, desired_goal) pair.
    """
    what = ("reward", "a float") if name == "reward_fn" else ("flag", "a bool")
    expected = f"({n},) or ({n}, 1): one {what[0]} per (achieved_goal, desired_goal) pair."
    if isinstance(result, np.ndarray) and not (result.flags.c_contiguous and result.flags.writeable):
        result = np.array(result)  # a reversed or broadcast view, a read-only array: torch takes a copy
    try:
        out = torch.as_tensor(result, device=device)
    except (TypeError, ValueError, RuntimeError) as err:  # None, strings, ragged lists
        shown = repr(result)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise TypeError(f"{owner}: {name} returned {shown} ({type(result).__name__}), expected "
                        f"{what[1]} tensor (or numpy array) of shape {expected}") from err
    if out.numel() != n or out.dim() > 2 or (out.dim() == 2 and out.shape[1] != 1):
        raise ValueError(f"{owner}: {name} returned shape {tuple(out.shape)} for {n} goals; expected {expected}")
    return out if out.dim() == 2 else out.reshape(n, 1)  # (each call counts: see nstep_return)


def stack_frames(frames: torch.Tensor, batch_dims: int) -> torch.Tensor:
    """Stack ``F`` frames of one observation entry, oldest first.

    Args:
        frames (torch.Tensor): ``[*batch, F, *shape]``, frame ``0`` the oldest.
        batch_dims (int): number of batch dims before the frame axis.

    Returns:
        for a 3-d entry ``shape = (C, H, W)`` (a channel-first image), the
        frames concatenated along channels, ``[*batch, F * C, H, W]`` (the
        newest frame in the last ``C`` channels); for any other entry the
        frames as they come, ``[*batch, F, *shape]`` (a frame axis right after
        the batch dims).

    Examples:
        >>> pixels = torch.arange(2 * 3 * 1 * 2 * 2).view(2, 3, 1, 2, 2)  # B=2, F=3, (1, 2, 2)
        >>> stack_frames(pixels, 1).shape
        torch.Size([2, 3, 2, 2])
        >>> stack_frames(torch.zeros(2, 3, 5), 1).shape  # vectors keep the frame axis
        torch.Size([2, 3, 5])
    """
    if frames.ndim - batch_dims - 1 == 3:
        return frames.flatten(batch_dims, batch_dims + 1)
    return frames


def step_rewards(batch: TensorDictBase, reward_key: NestedKey, owner: str) -> torch.Tensor:
    """The ``[B, *reward]`` rewards at ``reward_key`` of a batch of transitions (one-step windows).

    Raises:
        KeyError: the batch holds no such entry; the error names ``owner``'s
            ``reward_key=`` argument and the entries the batch holds.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> batch = TensorDict({"next": {"reward": torch.ones(2, 1)}}, [2])
        >>> step_rewards(batch, ("next", "reward"), "T").shape
        torch.Size([2, 1])
    """
    rewards = get_unchecked(batch, reward_key)
    if rewards is None:
        raise missing_entry(owner, "reward_key", as_key(reward_key), list(batch.keys(True, True)),
                            "sampled transitions")
    return rewards


def window_rewards(window: TensorDictBase, reward_key: NestedKey, owner: str) -> torch.Tensor:
    """The ``[B, W, *reward]`` rewards of ``"n_step"`` windows at ``reward_key`` (under ``"next"``).

    ``window`` is the batch's ``"n_step"`` TensorDict. A batch of one-step
    windows, read as transitions, has none: its rewards are its own
    (:func:`step_rewards`).

    Raises:
        KeyError: the windows hold no such entry; the error names ``owner``'s
            ``reward_key=`` argument and the per-step entries they hold.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> window = TensorDict({"reward": torch.ones(2, 3, 1), "mask": torch.ones(2, 3, dtype=torch.bool)}, [2, 3])
        >>> window_rewards(window, ("next", "reward"), "T").shape
        torch.Size([2, 3, 1])
        >>> window_rewards(window, ("next", "r"), "T")
        Traceback (most recent call last):
        ...
        torchrl_ext.core.schema.EntryKeyError: T: reward_key=('next', 'r') is not among the 'n_step' windows (held: ('next', 'reward')); pass reward_key= one of them.
    """
    key = as_key(reward_key)
    rewards = get_unchecked(window, key[1:])
    if rewards is None:
        held = [("next", *as_key(k)) for k in window.keys(True, True) if k != "mask"]
        raise missing_entry(owner, "reward_key", key, held, "'n_step' windows")
    return rewards
