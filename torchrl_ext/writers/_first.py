"""The checks of a writer's first batch: the entries that delimit episodes, their layout, the stream count."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from torchrl_ext.core.schema import EntryKeyError, key_str

__all__ = ["check_first_batch", "first_batch_streams"]

# TorchRL's multi-agent layout keeps rewards and dones per agent, [batch, n_agents, 1];
# episodes (and n-step windows) need one reward and one done per env step.
_MULTI_AGENT_FIX = (
    "TorchRL's multi-agent layout ([batch, n_agents, 1] rewards and dones) is not "
    "supported as the reward or done entries. Store one value per env step beside "
    "the per-agent ones, e.g. td['next', 'reward'] = td[{key!r}].{op}(-2) (and "
    "td['next', 'done'] / td['next', 'terminated'] likewise, with .any(-2)); the "
    "per-agent entries are then stored and sampled like any other entry."
)


def check_first_batch(
    leaves: dict[tuple[str, ...], torch.Tensor],
    batch: tuple[int, ...],
    where: str,
    done_keys: Sequence[tuple[str, ...]],
    reward_key: tuple[str, ...],
) -> None:
    """Refuse a first batch from which episodes and transitions cannot be stored.

    The first write fixes the row layout, so it is checked whole: a done entry
    and the reward are present, one value per env step (``batch + (1,)``;
    TorchRL's per-agent layout is named), done flags are bool, and some
    observation is held at the root and under ``"next"``.

    Raises:
        KeyError: no done entry, no reward entry, or no observation.
        ValueError: a reward or done entry of another shape.
        TypeError: a done entry that is not bool.

    Examples:
        >>> import torch
        >>> leaves = {("observation",): torch.zeros(2, 3), ("next", "observation"): torch.ones(2, 3),
        ...           ("next", "reward"): torch.zeros(2, 1), ("next", "done"): torch.zeros(2, 1, dtype=torch.bool)}
        >>> check_first_batch(leaves, (2,), "extend", [("next", "done")], ("next", "reward"))
        >>> check_first_batch({**leaves, ("next", "reward"): torch.zeros(2)}, (2,), "extend",
        ...                   [("next", "done")], ("next", "reward"))
        Traceback (most recent call last):
        ...
        ValueError: extend: ('next', 'reward') has shape (2,), expected (2, 1) (the batch (2,) plus a trailing dim of 1, TorchRL layout).
    """
    names = sorted(map(key_str, leaves))
    present_done = [k for k in done_keys if k in leaves]
    if not present_done:
        raise EntryKeyError(
            f"{where}: none of the done entries {[key_str(k) for k in done_keys]} "
            f"is in the data (entries: {names}); episodes cannot be delimited. "
            "Add ('next', 'done') or pass done_keys=."
        )
    if reward_key not in leaves:
        grouped = [k for k in leaves if k[0] == "next" and k[-1] == reward_key[-1]]
        raise EntryKeyError(
            f"{where}: reward entry {key_str(reward_key)} is missing "
            f"(entries: {names}); pass reward_key= if it has another name."
            + (f" {key_str(grouped[0])} looks like a per-agent reward: "
               + _MULTI_AGENT_FIX.format(key=grouped[0], op="sum") if grouped else "")
        )
    nb = len(batch)
    for key in (reward_key, *present_done):
        value = leaves[key]
        shape = tuple(value.shape)
        if shape[:nb] == batch and len(shape) > nb + 1 and shape[-1] == 1:
            raise ValueError(
                f"{where}: {key_str(key)} has shape {shape}, expected {batch + (1,)}: "
                f"one value per env step, not per agent. "
                + _MULTI_AGENT_FIX.format(key=key, op="sum" if key == reward_key
                                          else "any")
            )
        if shape != batch + (1,):
            raise ValueError(
                f"{where}: {key_str(key)} has shape {shape}, expected "
                f"{batch + (1,)} (the batch {batch} plus a trailing dim of 1, TorchRL layout)."
            )
    for key in present_done:
        if leaves[key].dtype != torch.bool:
            raise TypeError(
                f"{where}: {key_str(key)} has dtype {leaves[key].dtype}, expected torch.bool."
            )
    nexts = leaves.keys() - {*done_keys, reward_key}  # done flags sit at the root too
    if not any(k[0] != "next" and ("next", *k) in nexts for k in leaves):
        raise EntryKeyError(
            f"{where}: no observation found: no entry other than the done flags is present "
            "both at the root and under 'next' (e.g. 'observation' and ('next', "
            f"'observation'); entries: {names}). A TorchRL collector with compact_obs=True "
            "drops the observations under 'next', and each episode's true final observation "
            "with them: leave compact_obs=False (the default; this buffer stores each "
            "observation once anyway)."
        )


def first_batch_streams(
    num_streams: int | None,
    envs: int | None,
    batch: tuple[int, ...],
    where: str,
    traj_key: tuple[str, ...],
) -> int:
    """The number of streams the first write fixes: ``num_streams`` if given, else the batch's envs.

    Args:
        num_streams: the writer's ``num_streams`` (``None``: not given).
        envs: the envs of a ``[num_envs, ...]`` batch; ``None`` for a flat batch
            of trajectory fragments (``traj_key``), which cannot tell.
        batch: the batch size, for the message.
        where: the caller, for the message.
        traj_key: the trajectory id entry, for the message.

    Raises:
        ValueError: a flat batch without ``num_streams``, or more envs than ``num_streams``.

    Examples:
        >>> first_batch_streams(None, 4, (4, 10), "extend", ("collector", "traj_ids"))
        4
        >>> first_batch_streams(8, 4, (4, 10), "extend", ("collector", "traj_ids"))
        8
        >>> first_batch_streams(2, 4, (4, 10), "extend", ("collector", "traj_ids"))
        Traceback (most recent call last):
        ...
        ValueError: extend: data has 4 envs (batch (4, 10)), more than num_streams=2; raise num_streams to the env count of all writers.
    """
    if envs is None:
        if num_streams is None:
            raise ValueError(
                f"{where}: a flat batch with {key_str(traj_key)} needs the number of "
                "envs: build TransitionWriter(num_streams=...) (make_replay_buffer(..., "
                "num_streams=1) for a collector over one env), or pass [num_envs, time] data."
            )
        return num_streams
    if num_streams is None:
        return envs
    if num_streams < envs:
        raise ValueError(
            f"{where}: data has {envs} envs (batch {batch}), more than "
            f"num_streams={num_streams}; raise num_streams to the env count of "
            "all writers."
        )
    return num_streams
