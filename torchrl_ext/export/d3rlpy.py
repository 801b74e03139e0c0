"""Export to a d3rlpy 2.x ``MDPDataset`` (optional extra ``d3rlpy``)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from tensordict.utils import NestedKey

from torchrl_ext.core.schema import EntryKeyError, as_key, key_str
from torchrl_ext.export.episodes import action_indices, nonempty_episodes_of, observations_of, require

__all__ = ["to_d3rlpy"]


def _observation_entries(
    rb: Any, observation_key: NestedKey | Sequence[NestedKey] | None, action_key: NestedKey
) -> list[tuple[str, ...]]:
    """The observation entries to export: ``observation_key`` (one or several), or the buffer's only one.

    The buffer's observation entries are those stored once per row (at the root
    and under ``"next"``), less the action and one-element bool flags (TorchRL
    keeps root copies of ``done``, ``terminated``, ``is_init``...).

    Raises:
        KeyError: a key that is not an observation entry (or is a dict of
            them), or, with ``observation_key=None``, a buffer holding several.
    """
    schema = getattr(rb, "storage", rb).schema
    action = as_key(action_key, "action_key", "to_d3rlpy")
    held = [k for k in schema.shared if k[: len(action)] != action
            and not (schema.leaves[k].dtype == torch.bool and schema.leaves[k].shape.numel() == 1)]
    listed = ", ".join(key_str(k) for k in held)
    if observation_key is None:
        if len(held) == 1:
            return held
        raise EntryKeyError(
            f"to_d3rlpy: the buffer holds the observation entries {listed}; pass observation_key= "
            "the entry to export, or a list of entries to export them as d3rlpy tuple observations "
            "(one array per entry, in the order given)."
        )
    keys = [as_key(observation_key, "observation_key", "to_d3rlpy")] if isinstance(observation_key, (str, tuple)) \
        else [as_key(k, f"observation_key[{i}]", "to_d3rlpy") for i, k in enumerate(observation_key)]
    for key in keys:
        if key in held:
            continue
        inner = [k for k in held if k[: len(key)] == key]
        raise EntryKeyError(
            f"to_d3rlpy: observation_key={key_str(key)} "
            + (f"is a dict of entries {', '.join(map(str, inner))}: pass them as a list, "
               "exported as d3rlpy tuple observations." if inner else
               f"is not an observation entry of the buffer (held: {listed}).")
        )
    return keys


def to_d3rlpy(
    rb: Any,
    *,
    observation_key: NestedKey | Sequence[NestedKey] | None = None,
    action_key: NestedKey = "action",
    reward_key: NestedKey = ("next", "reward"),
    terminated_key: NestedKey = ("next", "terminated"),
    discrete: bool | None = None,
    action_size: int | None = None,
) -> Any:
    """The episodes ``rb`` holds as a d3rlpy 2.x ``MDPDataset``, which d3rlpy algorithms ``fit`` on.

    d3rlpy 2 stores one row per step (observation, action, the reward of that
    action) and ends an episode at a ``terminals`` or ``timeouts`` flag on
    its last step. Here: ``terminals = 1`` on the last step of an episode
    that terminated, ``timeouts = 1`` on the last step of every other
    episode: truncated ones, and those still being written, which are thus
    *not* marked finished (D6) and are bootstrapped from, as d3rlpy treats
    timeouts. d3rlpy 2 makes no transition of the last row of a timeout
    episode (it has no next observation there), so such an episode gets one
    more row: its final observation, with the next action (``("next",
    action_key)``, zeros where the buffer keeps none) and reward 0, neither
    of which any transition uses: every held transition is exported, the
    last one bootstrapping from the true final observation. A terminated
    episode's final observation is never needed (d3rlpy 2 does not bootstrap
    there) and gets no row. An episode whose first rows the ring overwrote
    is exported from its oldest held step: never more than the buffer holds (D6).

    Args:
        rb: a buffer over an :class:`~torchrl_ext.storages.TransitionStorage`.

    Keyword Args:
        observation_key (NestedKey or sequence of NestedKey, optional): the
            observation entry, or several (a goal env's ``"observation"`` and
            ``"desired_goal"``, the leaves of a dict observation), exported as
            d3rlpy 2's tuple observations: one array per entry, in the order
            given. Defaults to the buffer's observation entry, when it holds one.
        action_key, reward_key, terminated_key (NestedKey): entries.
        discrete (bool, optional): discrete actions; defaults to integer action dtypes.
            A discrete action is one integer per step, or a one-hot vector
            (TorchRL's ``OneHot`` spec), exported as its index.
        action_size (int, optional): number of discrete actions (the action
            space's ``n``), or the width of continuous ones. Defaults to the
            one-hot width, else the largest action held plus one (discrete;
            give it when some actions were never taken), or the actions' last
            dim (continuous).

    Returns:
        ``d3rlpy.dataset.MDPDataset``.

    Raises:
        ImportError: d3rlpy is not installed (the message names the extra).
        KeyError: ``observation_key`` is not an observation entry (or is a dict
            of them), or is None and the buffer holds several.
        ValueError: the buffer holds no transition, an action does not fit
            ``action_size``, or discrete actions are neither integers nor one-hot.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import make_replay_buffer
        >>> rb = make_replay_buffer(16, seed=0)
        >>> done = torch.tensor([[[False], [False], [True]]])
        >>> _ = rb.extend(TensorDict({"observation": torch.arange(3.0).view(1, 3, 1),
        ...     "action": torch.zeros(1, 3, 1, dtype=torch.int64),
        ...     "next": {"observation": torch.arange(1.0, 4.0).view(1, 3, 1), "reward": torch.ones(1, 3, 1),
        ...              "done": done, "terminated": done.clone()}}, [1, 3]))
        >>> import contextlib, io
        >>> with contextlib.redirect_stdout(io.StringIO()):  # d3rlpy logs the signatures it infers
        ...     dataset = to_d3rlpy(rb)
        >>> dataset.episodes[0].size(), bool(dataset.episodes[0].terminated)
        (3, True)
    """
    d3rlpy = require("d3rlpy", "d3rlpy")
    episodes = nonempty_episodes_of(rb, "to_d3rlpy")
    keys = _observation_entries(rb, observation_key, action_key)
    if discrete is None:
        discrete = not episodes[0].steps.get(action_key).is_floating_point()
    one_hot: int | None = None  # the width of one-hot actions (TorchRL's OneHot spec)

    def actions_of(action: np.ndarray) -> np.ndarray:
        nonlocal one_hot
        if not discrete:
            return action
        indices, width = action_indices(action, "to_d3rlpy", action_key)
        one_hot = width or one_hot
        return indices

    obs: list[list[np.ndarray]] = [[] for _ in keys]  # per entry, its parts
    actions, rewards, terminals, timeouts = [], [], [], []
    for episode in episodes:
        steps = episode.steps
        L = len(episode)
        for parts, key in zip(obs, keys):
            parts.append(steps.get(key).numpy())
        actions.append(actions_of(steps.get(action_key).numpy()))
        rewards.append(steps.get(reward_key).reshape(L, 1).float().numpy())
        terminated = steps.get(terminated_key, None)
        ended_terminal = bool(terminated[-1].any()) if terminated is not None else False
        if not ended_terminal:  # the final observation's row: [1, ...] each
            final_action = steps.get(("next", *as_key(action_key)), None)
            for parts, key in zip(obs, keys):
                parts.append(observations_of(episode, key)[-1:].numpy())
            actions.append(np.zeros_like(actions[-1][-1:]) if final_action is None
                           else actions_of(final_action[-1:].numpy()))
            rewards.append(np.zeros((1, 1), np.float32))
            L += 1
        end = np.zeros(L, np.float32)
        end[-1] = 1.0
        terminals.append(end * ended_terminal)
        timeouts.append(end * (not ended_terminal))
    action = np.concatenate(actions)
    held_size = int(action.max()) + 1 if discrete else int(action.shape[-1])
    if action_size is None:
        action_size = max(held_size, one_hot or 0)
    elif (held_size > action_size) if discrete else (held_size != action_size):
        raise ValueError(
            f"to_d3rlpy: action_size={action_size}, but the buffer holds "
            + (f"action {held_size - 1}" if discrete else f"actions of width {held_size}")
            + "; pass the action space's size, or leave action_size=None to infer it."
        )
    observations = [np.concatenate(parts) for parts in obs]
    observations = [o if o.dtype == np.uint8 else o.astype(np.float32) for o in observations]
    space = d3rlpy.constants.ActionSpace.DISCRETE if discrete else d3rlpy.constants.ActionSpace.CONTINUOUS
    return d3rlpy.dataset.MDPDataset(
        observations=observations if len(observations) > 1 else observations[0],
        actions=action if discrete else action.astype(np.float32),
        rewards=np.concatenate(rewards),
        terminals=np.concatenate(terminals),
        timeouts=np.concatenate(timeouts),
        action_space=space,
        action_size=action_size,
    )
