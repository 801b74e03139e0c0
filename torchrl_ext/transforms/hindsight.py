"""Sample-time hindsight relabelling of the goals chosen by HindsightSampler."""
from __future__ import annotations

from typing import Any, Callable

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey
from torchrl.envs.transforms import Transform

from torchrl_ext.core.schema import (
    EntryKeyError, as_key, get_unchecked, missing_entry, pop_unchecked, set_unchecked,
)
from torchrl_ext.transforms.functional import (
    call_reward_fn,
    goal_fn_result,
    stack_frames,
    step_rewards,
    window_rewards,
)

__all__ = ["HindsightTransform"]


class HindsightTransform(Transform):
    """Write the hindsight goals into the relabelled rows and recompute their rewards.

    Reads what :class:`~torchrl_ext.samplers.HindsightSampler` makes the
    storage return (``"her"``: the observation entries at each goal row and
    the ``"relabel"`` mask; an empty ``"her"`` when no goal was drawn, as with
    ``num_goals=0``: the batch is passed on). For relabelled rows, ``goal = her[achieved_goal_key]``
    (the achieved goal after the goal step) is written to ``goal_key`` and
    ``("next", goal_key)`` (in every frame, where frame stacks hold the
    goal entries), and the reward of every window step (under ``"n_step"``;
    a batch of one-step windows comes as transitions: each step's ``"next"``
    entries) is ``reward_fn(achieved goal after that step, goal, infos)``. Real rows are
    left as stored. The goals are written into the batch's goal entries in
    place (a sampled batch owns the rows it gathered), the rewards into a new
    tensor. Put it before
    :class:`~torchrl_ext.transforms.NStepTransform`, which then sums the
    recomputed rewards (``make_her_replay_buffer`` does). One-step windows
    come as windows under frame stacks (for each step's own next achieved
    goal); they leave this transform as transitions, each reward under
    ``reward_key``, with or without an ``NStepTransform`` after it.

    Args:
        reward_fn (callable): batched ``reward_fn(achieved_goal, desired_goal, infos)``
            returning ``(n,)`` or ``(n, 1)``; ``infos`` is the ``info_key``
            TensorDict of the relabelled steps, or ``None``.

    Keyword Args:
        goal_key (NestedKey): the desired goal. Defaults to ``"desired_goal"``.
        achieved_goal_key (NestedKey): defaults to ``"achieved_goal"``.
        reward_key (NestedKey): defaults to ``("next", "reward")``.
        terminated_key (NestedKey): the termination entry ``terminated_fn``
            recomputes. Defaults to ``("next", "terminated")``.
        terminated_fn (callable, optional): ``terminated_fn(achieved_goal,
            desired_goal, infos) -> (n,)`` bool (or ``(n, 1)``; numbers must be
            0 / 1), recomputing ``terminated_key``
            (and ``done``) of relabelled one-step transitions; without it they
            keep their stored flags (as in SB3).
        info_key (NestedKey, optional): next-only entry holding per-step infos
            to pass to ``reward_fn``; where the buffer stores no such entry
            (e.g. a HER facade whose envs report no numeric info),
            ``reward_fn`` gets ``infos=None``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import make_her_replay_buffer
        >>> reward = lambda a, d, info: -(torch.linalg.norm(a - d, dim=-1) > 0.05).float()
        >>> rb = make_her_replay_buffer(64, reward, strategy="final", num_goals=1, batch_size=4, seed=0)
        >>> T = 4
        >>> achieved = torch.arange(T + 1.0).view(1, T + 1, 1).expand(1, T + 1, 2)
        >>> desired = torch.full((1, T, 2), 9.0)
        >>> done = torch.tensor([[False, False, False, True]]).unsqueeze(-1)
        >>> _ = rb.extend(TensorDict({
        ...     "observation": torch.zeros(1, T, 1), "achieved_goal": achieved[:, :-1],
        ...     "desired_goal": desired, "action": torch.zeros(1, T, 1),
        ...     "next": {"observation": torch.zeros(1, T, 1), "achieved_goal": achieved[:, 1:],
        ...              "desired_goal": desired, "reward": -torch.ones(1, T, 1),
        ...              "done": done, "terminated": done.clone()}}, [1, T]))
        >>> batch = rb.sample()  # rows 2, 3 relabelled with the final achieved goal (4, 4)
        >>> batch["desired_goal"][2:].tolist(), batch["next", "reward"].view(-1)[:2].tolist()
        ([[4.0, 4.0], [4.0, 4.0]], [-1.0, -1.0])
    """

    _sample_time_only = True

    def __init__(
        self,
        reward_fn: Callable[..., Any],
        *,
        goal_key: NestedKey = "desired_goal",
        achieved_goal_key: NestedKey = "achieved_goal",
        reward_key: NestedKey = ("next", "reward"),
        terminated_key: NestedKey = ("next", "terminated"),
        terminated_fn: Callable[..., Any] | None = None,
        info_key: NestedKey | None = None,
    ) -> None:
        super().__init__()
        if not callable(reward_fn):
            raise TypeError(
                f"HindsightTransform: reward_fn is {type(reward_fn).__name__}, expected a "
                "callable reward_fn(achieved_goal, desired_goal, infos)."
            )
        if terminated_fn is not None and not callable(terminated_fn):
            raise TypeError(
                f"HindsightTransform: terminated_fn is {type(terminated_fn).__name__}, expected a "
                "callable terminated_fn(achieved_goal, desired_goal, infos), or None."
            )
        self.reward_fn = reward_fn
        self.terminated_fn = terminated_fn
        self.goal_key = as_key(goal_key, "goal_key", "HindsightTransform")
        self.achieved_goal_key = as_key(achieved_goal_key, "achieved_goal_key", "HindsightTransform")
        self.reward_key = as_key(reward_key, "reward_key", "HindsightTransform")
        self.terminated_key = as_key(terminated_key, "terminated_key", "HindsightTransform")
        self.info_key = None if info_key is None else as_key(info_key, "info_key", "HindsightTransform")

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._relabel(tensordict)
        window = get_unchecked(tensordict, "n_step")
        if window is not None and window.batch_size[1] == 1:
            # one-step windows, read as windows for each step's own next observation
            # entries (frame stacks hold stacks under "next"): a batch of transitions,
            # with each step's reward (relabelled or not) as its own, and no window
            pop_unchecked(tensordict, "n_step")
            rewards = window_rewards(window, self.reward_key, "HindsightTransform")
            set_unchecked(tensordict, self.reward_key, rewards.squeeze(1))
        return tensordict

    def _relabel(self, tensordict: TensorDictBase) -> None:
        """Write the goals of the rows the sampler relabelled, and their rewards, in place."""
        # (entries read and dropped without TensorDict's layers: see get_unchecked)
        her = pop_unchecked(tensordict, "her")
        if her is None:
            raise EntryKeyError(
                "HindsightTransform: the batch has no 'her' goals; sample with "
                "torchrl_ext.samplers.HindsightSampler (make_her_replay_buffer)."
            )
        relabel = get_unchecked(her, "relabel")  # [B] bool
        if relabel is None:  # no goal drawn (HindsightSampler(num_goals=0)): every row real
            return
        reached = get_unchecked(her, self.achieved_goal_key)  # [B, *goal]: at the goal rows
        for name, key, value in (("goal_key", self.goal_key, get_unchecked(her, self.goal_key)),
                                 ("achieved_goal_key", self.achieved_goal_key, reached)):
            if value is None:  # "her" holds every observation entry
                held = [k for k in her.keys(True, True) if k != "relabel"]
                raise missing_entry("HindsightTransform", name, key, held,
                                    "sampled observation entries")
        idx = relabel.nonzero().view(-1)  # [V] the relabelled rows
        if not idx.numel():
            return
        goal = reached.index_select(0, idx)  # [V, *goal]
        # the goal entries, root and next, written in place at the relabelled rows
        # only: the sampled batch owns its gathered rows (no second copy of them)
        # (each tensor call counts, ~10 µs in a training loop: none that changes nothing)
        for key in (self.goal_key, ("next", *self.goal_key)):
            value = get_unchecked(tensordict, key)  # an observation entry: root and next
            # as the entry's dtype: e.g. int8 achieved, int64 desired goals
            put = _in_every_frame(goal, value)
            value.index_copy_(0, idx, put if put.dtype == value.dtype else put.to(value.dtype))
        # each window step's next entries: [B, W, ...] under "n_step"; a batch of one-step
        # windows comes as transitions, each step's own under "next" ([B, ...]), used as they are
        window = get_unchecked(tensordict, "n_step")
        steps = get_unchecked(tensordict, "next") if window is None else window
        achieved = get_unchecked(steps, self.achieved_goal_key).index_select(0, idx)  # [V, (W,) *goal]
        V, W = goal.shape[0], 1 if window is None else achieved.shape[1]
        goals, flat_achieved = goal, achieved  # [V * W, *goal]
        if window is not None:
            goals = goal.unsqueeze(1).expand(V, W, *goal.shape[1:]).reshape(V * W, *goal.shape[1:])
            flat_achieved = achieved.reshape(V * W, *goal.shape[1:])
        infos = None
        stored = None if self.info_key is None else get_unchecked(steps, self.info_key[1:])
        if stored is not None:  # a buffer that stores no such entry passes infos=None
            infos = stored[idx].reshape(V * W)
        if window is None:  # [B, *reward]
            rewards = step_rewards(tensordict, self.reward_key, "HindsightTransform")
        else:  # [B, W, *reward]
            rewards = window_rewards(window, self.reward_key, "HindsightTransform")
        new = call_reward_fn(self.reward_fn, flat_achieved, goals, infos,
                             owner="HindsightTransform").view(V, *rewards.shape[1:])
        # a new tensor: a window's rewards share their bytes with its last step's ("next", reward)
        rewards = rewards.index_copy(0, idx, new if new.dtype == rewards.dtype else new.to(rewards.dtype))
        set_unchecked(steps, self.reward_key[1:], rewards)
        if self.terminated_fn is not None:
            self._recompute_terminated(
                self.terminated_fn, tensordict, idx, flat_achieved, goals, infos, W
            )

    def _recompute_terminated(
        self, terminated_fn: Callable[..., Any], td, idx, achieved, goals, infos, width
    ) -> None:
        if width != 1:
            raise ValueError(
                "HindsightTransform: terminated_fn needs one-step transitions; with "
                f"n-step windows (width {width}) a new termination would cut the window."
            )
        term = goal_fn_result("HindsightTransform", "terminated_fn", terminated_fn(achieved, goals, infos),
                              achieved.shape[0], achieved.device)  # [V, 1]
        if term.dtype is not torch.bool:  # numbers: 0 / 1 only, not read by truthiness (0.5)
            if not ((term == 0) | (term == 1)).all():
                off = term[(term != 0) & (term != 1)][0].item()
                raise ValueError(
                    f"HindsightTransform: terminated_fn returned {off!r} (dtype {term.dtype}), expected "
                    "bools (or numbers 0 / 1): one termination flag per (achieved_goal, desired_goal) pair."
                )
            term = term.bool()
        truncated = td.get(("next", "truncated"), None)
        done = term if truncated is None else term | truncated[idx]
        for key, new in ((self.terminated_key, term), (("next", "done"), done)):
            value = td.get(key, None)
            if value is not None:
                value = value.clone()
                value[idx] = new
                td.set(key, value)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict


def _in_every_frame(goal: torch.Tensor, stored: torch.Tensor) -> torch.Tensor:
    """``goal`` (``[V, *goal]``) laid out as the ``stored`` goal entry (``[B, ...]``).

    A goal entry served in frame stacks
    (:class:`~torchrl_ext.samplers.FrameStackSampler`) holds the goal of
    each of ``F`` steps, stacked by :func:`stack_frames`: ``[B, F, *goal]``,
    or ``[B, F * C, H, W]`` for a ``(C, H, W)`` goal. The relabelled goal
    stands for the whole episode, so every frame gets it.

    Examples:
        >>> goal = torch.tensor([[1.0, 2.0]])
        >>> _in_every_frame(goal, torch.zeros(4, 3, 2)).tolist()  # a stack of 3 frames
        [[[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]]]
        >>> _in_every_frame(torch.ones(1, 1, 2, 2), torch.zeros(4, 3, 2, 2)).shape  # channels
        torch.Size([1, 3, 2, 2])
    """
    if stored.shape[1:] == goal.shape[1:]:  # not stacked
        return goal
    frames = stored.shape[1] if stored.dim() == goal.dim() + 1 else stored.shape[1] // goal.shape[1]
    return stack_frames(goal.unsqueeze(1).expand(goal.shape[0], frames, *goal.shape[1:]), 1)
