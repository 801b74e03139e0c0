"""Export to a Minari dataset (optional extra ``minari``)."""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import gymnasium as gym
import numpy as np
from tensordict.utils import NestedKey

from torchrl_ext.core.schema import as_key, key_str
from torchrl_ext.export.episodes import HeldEpisode, action_indices, nonempty_episodes_of, observations_of, require

__all__ = ["to_minari"]


def _observations(episode: HeldEpisode, space: gym.Space, key: NestedKey) -> Any:
    """``[L + 1]`` observations of ``episode`` as Minari wants them for ``space``.

    A ``Dict`` space's entries are stored at the root (nested ones nested,
    as :class:`~torchrl_ext.envs.GymVectorAdapter` writes them): a dict of
    arrays, one per entry of the space; ``key`` is then not used.
    """
    if not isinstance(space, gym.spaces.Dict):
        return observations_of(episode, key).numpy()
    return _dict_observations(episode, space, ())


def _dict_observations(episode: HeldEpisode, space: gym.spaces.Dict, prefix: tuple[str, ...]) -> dict:
    out: dict[str, Any] = {}  # an array per entry, a dict per nested Dict
    for name, sub in space.spaces.items():
        entry = (*prefix, name)
        if isinstance(sub, gym.spaces.Dict):
            out[name] = _dict_observations(episode, sub, entry)
            continue
        if entry not in episode.steps.keys(True):
            held = sorted(key_str(k) for k in episode.steps.keys(True, True) if as_key(k)[0] != "next")
            raise KeyError(
                f"to_minari: observation_space has the entry {key_str(entry)}, which the buffer "
                f"does not hold (its step entries: {', '.join(held)}); pass the observation "
                "space the buffer was written with."
            )
        out[name] = observations_of(episode, entry).numpy()
    return out


@contextmanager
def _datasets_root(root: str | Path | None) -> Iterator[None]:
    # Minari reads its root from MINARI_DATASETS_PATH only: set it for the call
    if root is None:
        yield
        return
    before = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(root)
    try:
        yield
    finally:
        if before is None:
            del os.environ["MINARI_DATASETS_PATH"]
        else:
            os.environ["MINARI_DATASETS_PATH"] = before


def to_minari(
    rb: Any,
    dataset_id: str,
    *,
    observation_space: gym.Space,
    action_space: gym.Space,
    root: str | Path | None = None,
    observation_key: NestedKey = "observation",
    action_key: NestedKey = "action",
    reward_key: NestedKey = ("next", "reward"),
    terminated_key: NestedKey = ("next", "terminated"),
    truncated_key: NestedKey = ("next", "truncated"),
    **metadata: Any,
) -> Any:
    """The episodes ``rb`` holds as a Minari dataset (``minari.load_dataset`` reads it back).

    Each episode has ``L + 1`` observations (the last one the true final
    observation, or the pending one of an episode still being written),
    ``L`` actions, rewards, ``terminations`` and ``truncations``. An episode
    still being written ends with both flags False: not finished (D6). One
    that ended with neither flag (cut: an env reset by hand, a writer released
    or restarted, or a buffer without those entries) ends truncated, as
    gymnasium ends an episode the MDP did not. An episode whose first rows
    were overwritten starts at its oldest held step.

    Args:
        rb: a buffer over an :class:`~torchrl_ext.storages.TransitionStorage`.
        dataset_id (str): Minari id, e.g. ``"cartpole/replay-v0"``.

    Keyword Args:
        observation_space, action_space (gym.Space): the env's spaces.
        root (str or Path, optional): datasets directory (Minari's
            ``MINARI_DATASETS_PATH``, set for this call only); default: Minari's.
        observation_key, action_key, reward_key, terminated_key, truncated_key: entries
            (``observation_key``: for a non-``Dict`` observation space; a ``Dict``
            space's entries are read at the root, by the space's keys).
        **metadata: passed to ``minari.create_dataset_from_buffers`` (author, ...).

    Returns:
        ``minari.MinariDataset``.

    Raises:
        ImportError: minari is not installed (the message names the extra).
        ValueError: the buffer holds no transition.
        KeyError: an entry of a ``Dict`` observation space is not held.

    Examples:
        >>> import tempfile
        >>> import gymnasium as gym
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import make_replay_buffer
        >>> rb = make_replay_buffer(16, seed=0)
        >>> done = torch.tensor([[[False], [False], [True]]])
        >>> _ = rb.extend(TensorDict({"observation": torch.arange(3.0).view(1, 3, 1),
        ...     "action": torch.zeros(1, 3, dtype=torch.int64),
        ...     "next": {"observation": torch.arange(1.0, 4.0).view(1, 3, 1), "reward": torch.ones(1, 3, 1),
        ...              "done": done, "terminated": done.clone(), "truncated": torch.zeros_like(done)}},
        ...     [1, 3]))
        >>> import warnings
        >>> with warnings.catch_warnings():  # Minari asks for metadata: author, code, description...
        ...     warnings.simplefilter("ignore", UserWarning)
        ...     dataset = to_minari(rb, "demo/replay-v0", root=tempfile.mkdtemp(),
        ...         observation_space=gym.spaces.Box(-10, 10, (1,)), action_space=gym.spaces.Discrete(2))
        >>> dataset.total_episodes, dataset.total_steps
        (1, 3)
    """
    minari = require("minari", "minari")
    episodes = nonempty_episodes_of(rb, "to_minari")
    buffers = []
    for i, episode in enumerate(episodes):
        steps, L = episode.steps, len(episode)

        def flag(key: NestedKey) -> list[bool]:
            value = steps.get(key, None)
            return [False] * L if value is None else value.reshape(L).tolist()

        terminations, truncations = flag(terminated_key), flag(truncated_key)
        if episode.finished and not (terminations[-1] or truncations[-1]):
            truncations[-1] = True  # cut: it ended, but not by the MDP
        action = steps.get(action_key).numpy()
        if isinstance(action_space, gym.spaces.Discrete):  # an integer, or one-hot (TorchRL)
            action = action_indices(action, "to_minari", action_key)[0]
        buffers.append(minari.data_collector.EpisodeBuffer(
            id=i,
            observations=_observations(episode, observation_space, observation_key),
            actions=action,
            rewards=steps.get(reward_key).reshape(L).numpy().astype(np.float64).tolist(),
            terminations=terminations,
            truncations=truncations,
            infos={},
        ))
    with _datasets_root(root):
        return minari.create_dataset_from_buffers(
            dataset_id, buffers, observation_space=observation_space,
            action_space=action_space, **metadata,
        )
