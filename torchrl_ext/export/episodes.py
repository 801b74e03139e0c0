"""The episodes a buffer holds, in order, as TorchRL transitions: what every export writes."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from torchrl_ext.core.schema import key_str

__all__ = ["HeldEpisode", "action_indices", "episodes_of", "nonempty_episodes_of", "require"]


_INSTALL = {
    # d3rlpy 2.8 pins gymnasium==1.0.0: install it without its dependencies
    "d3rlpy": "pip install 'torchrl_ext[d3rlpy]' && pip install --no-deps d3rlpy==2.8.1",
}


def require(module: str, extra: str) -> ModuleType:
    """Import an optional dependency on first use, or say which extra installs it.

    Examples:
        >>> require("json", "none").__name__
        'json'
    """
    try:
        return importlib.import_module(module)
    except ImportError as error:
        how = _INSTALL.get(extra, f"pip install 'torchrl_ext[{extra}]'")
        raise ImportError(
            f"{module} is needed for this export and is not importable ({error}); install the "
            f"extra {extra!r}: {how}."
        ) from error


@dataclass(frozen=True)
class HeldEpisode:
    """The steps of one episode still held by a buffer, oldest first.

    Attributes:
        stream (int): the stream (env) that wrote it.
        steps (TensorDictBase): ``[L]`` TorchRL transitions as stored (observation
            entries, action, ``("next", ...)`` with the next observation: the
            true final one at the last step of an ended episode).
        finished (bool): the episode ended (a done flag, or a new trajectory
            began in its stream); False for the episode a stream is still
            writing (D6).
        complete (bool): its first step is still held (False when the ring
            overwrote its first rows: ``steps`` start at its oldest held step).
        first_step (int): the step number of ``steps[0]`` in the episode (0
            when complete).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> episode = HeldEpisode(0, TensorDict({"action": torch.zeros(3, 1)}, [3]), True, True)
        >>> len(episode), episode.finished
        (3, True)
    """

    stream: int
    steps: TensorDictBase
    finished: bool
    complete: bool
    first_step: int = 0

    def __len__(self) -> int:
        return int(self.steps.shape[0])


def episodes_of(rb: Any) -> list[HeldEpisode]:
    """Every episode with a transition in ``rb``, stream by stream, oldest first.

    Exactly the held transitions, each once: ``sum(len(e)) == len(rb)``. Never
    more than the buffer holds (an episode whose first rows were overwritten
    is exported from its oldest held step, marked ``complete=False``); never
    an episode invented (one still being written is exported as it stands,
    marked ``finished=False``). O(held transitions).

    Args:
        rb: a buffer over an :class:`~torchrl_ext.storages.TransitionStorage`
            (or the storage itself).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import make_replay_buffer
        >>> rb = make_replay_buffer(32)
        >>> done = torch.tensor([[0, 1, 0]], dtype=torch.bool).unsqueeze(-1)
        >>> _ = rb.extend(TensorDict({"observation": torch.arange(3.).view(1, 3, 1),
        ...     "action": torch.zeros(1, 3, 1), "next": {"observation": torch.arange(1., 4.).view(1, 3, 1),
        ...     "reward": torch.ones(1, 3, 1), "done": done}}, [1, 3]))
        >>> [(len(e), e.finished) for e in episodes_of(rb)]
        [(2, True), (1, False)]
    """
    storage = getattr(rb, "storage", rb)
    index = storage.index
    if index is None or len(storage) == 0:
        return []
    rows = storage.live_transition_rows()  # stream by stream, in time order
    tau, stream = index.row_coordinates(rows.numpy())
    episode, step, start, _ = index.locate(tau, stream)
    # a new episode wherever (stream, episode) changes
    cut = np.flatnonzero((np.diff(stream) != 0) | (np.diff(episode) != 0)) + 1
    bounds = np.concatenate([[0], cut, [rows.numel()]])
    steps = storage.get(rows)
    open_stream = index.is_open.numpy()
    last_episode = index.episode_count.numpy() - 1
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        s, e = int(stream[lo]), int(episode[lo])
        out.append(HeldEpisode(
            stream=s,
            steps=steps[int(lo):int(hi)],
            finished=not (open_stream[s] and e == last_episode[s]),
            complete=bool(step[lo] == 0),
            first_step=int(step[lo]),
        ))
    return out


def observations_of(episode: HeldEpisode, key: Any = "observation") -> torch.Tensor:
    """``[L + 1]`` observations: each step's, then the last step's next observation.

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
        >>> observations_of(episodes_of(rb)[0]).flatten().tolist()
        [0.0, 1.0, 2.0, 3.0]
    """
    steps = episode.steps
    return torch.cat([steps.get(key), steps.get(("next", *((key,) if isinstance(key, str) else key)))[-1:]])


def nonempty_episodes_of(rb: Any, where: str) -> list[HeldEpisode]:
    """:func:`episodes_of`, for exports that cannot write an empty dataset.

    Raises:
        ValueError: the buffer holds no transition (the message starts with ``where``).

    Examples:
        >>> from torchrl_ext import make_replay_buffer
        >>> nonempty_episodes_of(make_replay_buffer(8), "to_minari")
        Traceback (most recent call last):
        ...
        ValueError: to_minari: the buffer holds no transition to export.
    """
    episodes = episodes_of(rb)
    if not episodes:
        raise ValueError(f"{where}: the buffer holds no transition to export.")
    return episodes


def action_indices(action: np.ndarray, where: str, key: Any) -> tuple[np.ndarray, int | None]:
    """``[N]`` int64 indices of ``N`` discrete actions, and the one-hot width if they were one-hot.

    A discrete action is stored as one integer per step (``[N]`` or ``[N, 1]``)
    or, as TorchRL's ``OneHot`` spec writes a ``Discrete`` action, as a
    one-hot vector (``[N, n]``: width ``n``, the number of actions).

    Raises:
        ValueError: ``[N, n]`` rows that are not one-hot (the message starts
            with ``where`` and names ``key``).

    Examples:
        >>> import numpy as np
        >>> action_indices(np.array([[0, 1, 0], [1, 0, 0]]), "to_d3rlpy", "action")
        (array([1, 0]), 3)
        >>> action_indices(np.array([[2], [0]]), "to_d3rlpy", "action")
        (array([2, 0]), None)
    """
    if action.ndim == 1 or action.shape[1:] == (1,):
        return action.reshape(-1).astype(np.int64), None
    flat = action.reshape(action.shape[0], -1)
    one_hot = (flat == 0) | (flat == 1)
    bad = ~(one_hot.all(1) & (flat.sum(1) == 1))
    if action.ndim != 2 or bad.any():
        example = flat[np.argmax(bad)].tolist() if bad.any() else action[0].tolist()
        raise ValueError(
            f"{where}: {key_str(key)} holds {example} at a step, neither one integer per step "
            f"nor a one-hot vector (its shape per step is {tuple(action.shape[1:])}), as a "
            "discrete action must be; pass discrete=False for continuous actions."
        )
    return flat.argmax(1).astype(np.int64), int(flat.shape[1])
