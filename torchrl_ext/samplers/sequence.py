"""Sequences inside episodes: fixed-length windows or whole episodes, O(batch)."""
from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch
from tensordict.utils import NestedKey

from torchrl_ext.core import windows
from torchrl_ext.core.draws import uniform_below
from torchrl_ext.core.episodes import EpisodeIndex
from torchrl_ext.core.schema import as_key
from torchrl_ext.samplers.uniform import UniformTransitionSampler, check_batch_size, storage_index
from torchrl_ext.storages.transition import TransitionStorage

__all__ = ["SequenceSampler", "draw_episodes", "draw_windows"]


def draw_windows(
    index: EpisodeIndex,
    count: int,
    length: int,
    pad: bool,
    generator: torch.Generator | None,
    max_rounds: int = 16,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``count`` windows of ``length`` steps inside episodes, uniform over windows.

    A window starting at step ``t`` of an episode with ``L`` written steps is
    valid iff ``t + length <= L``: every window of every episode, the last one
    included, and in an episode still being written only windows of steps
    already written. With ``pad``, an episode shorter than ``length`` also
    gives one window, from its step 0, that the caller pads.

    Starts are drawn as live transitions and kept if valid: the one window
    algorithm, :func:`torchrl_ext.core.draw_windows`, over the
    episode index (O(batch); exact counting per episode after ``max_rounds``
    rejection rounds, or when valid windows are rare).

    Returns:
        ``(tau, stream, step, width)``: the first step's logical time and
        stream, its step in the episode and the window's number of real steps
        (``length``, or less when padded). numpy int64 arrays of ``[count]``.

    Raises:
        ValueError: no episode has a valid window.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import make_replay_buffer
        >>> rb = make_replay_buffer(32)
        >>> done = torch.tensor([[0, 0, 1]], dtype=torch.bool).unsqueeze(-1)
        >>> _ = rb.extend(TensorDict({"observation": torch.zeros(1, 3, 1), "action": torch.zeros(1, 3, 1),
        ...     "next": {"observation": torch.ones(1, 3, 1), "reward": torch.ones(1, 3, 1), "done": done}},
        ...     [1, 3]))
        >>> tau, stream, step, width = draw_windows(rb.storage.index, 100, 2, False, torch.Generator().manual_seed(0))
        >>> sorted(set(step.tolist())), set(width.tolist())  # both 2-step windows of the 3-step episode
        ([0, 1], {2})
    """
    slot, step, width = windows.draw_windows(index, count, length, pad, generator, max_rounds)
    stream, start, _ = index.episode_at(slot)
    return start + step, stream, step, width


def draw_episodes(
    index: EpisodeIndex, count: int, generator: torch.Generator | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``count`` complete live episodes, uniform over episodes, with replacement.

    An episode is complete once its last step is written (done or a new
    trajectory); one whose first rows were overwritten is not live. O(streams
    + count): per stream, live episodes are a contiguous range of numbers.

    Returns:
        ``(tau, stream, length)`` of each episode's first step, numpy int64 ``[count]``.

    Raises:
        ValueError: no complete episode is stored.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import make_replay_buffer
        >>> rb = make_replay_buffer(32)
        >>> done = torch.tensor([[0, 1, 0]], dtype=torch.bool).unsqueeze(-1)  # 2 steps, then 1 running
        >>> _ = rb.extend(TensorDict({"observation": torch.zeros(1, 3, 1), "action": torch.zeros(1, 3, 1),
        ...     "next": {"observation": torch.ones(1, 3, 1), "reward": torch.ones(1, 3, 1), "done": done}},
        ...     [1, 3]))
        >>> tau, stream, length = draw_episodes(rb.storage.index, 4, torch.Generator().manual_seed(0))
        >>> length.tolist()  # only the complete episode
        [2, 2, 2, 2]
    """
    stream, start, length = index.episode_at(_draw_episode_slots(index, count, generator)[0])
    return start, stream, length


def _draw_episode_slots(
    index: EpisodeIndex, count: int, generator: torch.Generator | None
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`draw_episodes` as ``(table slot, length)`` of each episode."""
    first, per_stream = index.complete_episodes()
    ends = per_stream.cumsum()
    if ends[-1] == 0:
        raise ValueError(
            "cannot sample whole episodes: no complete episode is stored yet "
            "(an episode is complete once a step with a done flag is written)."
        )
    u = uniform_below(int(ends[-1]), count, generator)
    s = np.searchsorted(ends, u, side="right")
    slot = index.episode_slot(s, first[s] + u - (ends[s] - per_stream[s]))
    return slot, index.episode_at(slot)[2]


def _entry(key: tuple[str, ...]) -> NestedKey:
    """An info entry's key: a one-part key as a plain string (the buffer sets those unchecked)."""
    return key[0] if len(key) == 1 else key


class SequenceSampler(UniformTransitionSampler):
    """Sequences of consecutive transitions inside one episode.

    ``rb.sample(batch_size)`` returns a ``[batch_size, sequence_length]``
    TensorDict: ``batch_size`` counts *sequences* (TorchRL's ``SliceSampler``
    counts steps and returns them flat). Each sequence holds consecutive steps
    of one episode of one stream, with each step's true next observation; it
    never crosses an episode boundary, a stream or an overwritten row.

    * ``sequence_length=L``: uniform over every window of ``L`` steps of every
      live episode, the last window of each included; in an episode still
      being written, over the windows already written. With ``pad=True``
      episodes shorter than ``L`` also give one window, from their first step,
      padded by repeating its last step.
    * ``sequence_length=None``: whole complete episodes, uniform over
      episodes, padded to the longest episode of the batch.

    Padded samples carry ``mask_key`` (``[B, L]`` bool, True on real steps).
    Every sample carries ``init_key`` (``[B, L, 1]``), True on each sequence's
    first step, where a recurrent module starts from a fresh state, as with
    TorchRL's ``SliceSampler`` (a sequence never crosses an episode start, so
    no other step needs a reset). Cost is O(batch)
    (windows) or O(batch + streams) (episodes), at any capacity, with writes
    interleaved: nothing is cached or rescanned.

    Args:
        sequence_length (int or None): steps per sequence, or ``None`` for
            whole episodes. An attribute: it can change between samples.

    Keyword Args:
        pad (bool): also serve episodes shorter than ``sequence_length``, padded.
        mask_key (NestedKey): entry of the validity mask. Defaults to
            ``("collector", "mask")``, as TorchRL's padded slices.
        init_key (NestedKey): entry marking episode starts. Defaults to ``"is_init"``.
        max_rounds (int): rejection rounds before the valid windows are counted
            episode by episode (``0``: always count; see
            :func:`torchrl_ext.core.draw_windows`). Defaults to 16.
        generator (torch.Generator, optional): RNG used when the buffer sets none.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import TransitionReplayBuffer, TransitionStorage, TransitionWriter
        >>> from torchrl_ext.samplers import SequenceSampler
        >>> rb = TransitionReplayBuffer(storage=TransitionStorage(64), writer=TransitionWriter(),
        ...     sampler=SequenceSampler(3), batch_size=4, generator=torch.Generator().manual_seed(0))
        >>> obs = torch.arange(6.).view(1, 6, 1)  # one env, episodes of 4 and 2 steps
        >>> done = torch.tensor([[0, 0, 0, 1, 0, 1]], dtype=torch.bool).unsqueeze(-1)
        >>> _ = rb.extend(TensorDict({"observation": obs, "action": torch.zeros(1, 6, 1),
        ...     "next": {"observation": obs + 1, "reward": torch.ones(1, 6, 1), "done": done}},
        ...     [1, 6]))
        >>> sample = rb.sample()
        >>> sample.batch_size  # 4 windows of 3 steps, from the 4-step episode only
        torch.Size([4, 3])
        >>> sorted({tuple(s) for s in sample["observation"].squeeze(-1).tolist()})
        [(0.0, 1.0, 2.0), (1.0, 2.0, 3.0)]
    """

    # settings a checkpoint must be loaded with (torchrl_ext._checkpoint)
    checkpoint_settings: ClassVar[tuple[str, ...]] = ("sequence_length", "pad")
    draws_sequences: ClassVar[bool] = True  # [B, L] rows, which n-step and hindsight cannot extend

    def __init__(
        self,
        sequence_length: int | None,
        *,
        pad: bool = False,
        mask_key: NestedKey = ("collector", "mask"),
        init_key: NestedKey = "is_init",
        max_rounds: int = 16,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(generator=generator)
        self.sequence_length = sequence_length
        if not isinstance(pad, (bool, np.bool_)):
            raise TypeError(
                f"SequenceSampler: pad={pad!r} ({type(pad).__name__}), expected True or False."
            )
        self.pad = bool(pad)
        self.mask_key = as_key(mask_key, "mask_key", "SequenceSampler")
        self.init_key = as_key(init_key, "init_key", "SequenceSampler")
        if (
            isinstance(max_rounds, bool)
            or not isinstance(max_rounds, (int, np.integer))
            or max_rounds < 0
        ):
            raise ValueError(f"SequenceSampler: max_rounds={max_rounds!r}, expected an integer >= 0.")
        self.max_rounds = int(max_rounds)

    @property
    def sequence_length(self) -> int | None:
        """Steps per sequence (``None``: whole episodes); may be set between samples."""
        return self._sequence_length

    @sequence_length.setter
    def sequence_length(self, value: int | None) -> None:
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1
        ):
            raise ValueError(
                f"SequenceSampler: sequence_length={value!r}, expected an integer "
                ">= 1 or None (whole episodes)."
            )
        self._sequence_length = None if value is None else int(value)

    def sample(self, storage: TransitionStorage, batch_size: int) -> tuple[torch.Tensor, dict]:
        index = storage_index(storage)
        if index.is_empty():
            check_batch_size(batch_size, 0)  # raises: the buffer is empty
        if batch_size < 1:
            raise ValueError(f"cannot sample: batch_size={batch_size}, expected >= 1 sequences.")
        generator = self._generator()
        if self.sequence_length is None:
            slot, width = _draw_episode_slots(index, batch_size, generator)
            step, length = np.zeros_like(slot), int(width.max())
        else:
            length = self.sequence_length
            slot, step, width = windows.draw_windows(
                index, batch_size, length, self.pad, generator, self.max_rounds
            )
        # [B, L] rows: each sequence's consecutive rows of its stream, padding repeating its last step
        rows_np = index.window_rows(slot, step, width, length)
        # plain rows, as a uniform draw's: read by the storage as they are (RowReads)
        rows = torch.from_numpy(rows_np)
        is_init = np.zeros((batch_size, length, 1), dtype=bool)
        is_init[:, 0] = True
        info: dict[Any, torch.Tensor] = {_entry(self.init_key): torch.from_numpy(is_init)}
        if self.pad or self.sequence_length is None:
            info[_entry(self.mask_key)] = torch.from_numpy(np.arange(length) < width[:, None])
        return rows, info

    def __repr__(self) -> str:
        return f"{type(self).__name__}(sequence_length={self.sequence_length}, pad={self.pad})"
