"""n-step windows: a base sampler picks start transitions, windows run to n steps."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from torchrl.data.replay_buffers.samplers import Sampler

from torchrl_ext.core.episodes import EpisodeIndex
from torchrl_ext.core.kernels.rows import window_rows
from torchrl_ext.core.schema import set_unchecked
from torchrl_ext.sample_index import RowReads, SampleIndex
from torchrl_ext.samplers.refining import RefiningSampler, plain_rows
from torchrl_ext.samplers.uniform import UniformTransitionSampler, storage_index
from torchrl_ext.storages.transition import TransitionStorage

__all__ = ["NStepSampler", "OneStepWindows", "StepWindows", "window_steps"]


def window_steps(index: EpisodeIndex, rows: torch.Tensor, n: int) -> torch.Tensor:
    """Steps of the window of at most ``n`` steps starting at each of ``rows``.

    ``min(n, steps of the episode from the row on)``: a window stops at its
    episode's end, and, in an episode still being written, at its last
    written step. Rows are live transitions (as drawn by a sampler).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import make_replay_buffer
        >>> rb = make_replay_buffer(32)
        >>> done = torch.tensor([[False, True]]).unsqueeze(-1)
        >>> _ = rb.extend(TensorDict({"observation": torch.zeros(1, 2, 1), "action": torch.zeros(1, 2, 1),
        ...     "next": {"observation": torch.ones(1, 2, 1), "reward": torch.ones(1, 2, 1),
        ...              "done": done}}, [1, 2]))
        >>> rows = rb.storage.live_transition_rows()  # both steps of the episode
        >>> sorted(window_steps(rb.storage.index, rows, 3).tolist())  # windows stop at the episode end
        [1, 2]
    """
    return torch.from_numpy(index.window_lengths(rows.numpy(), n))


@dataclass(frozen=True)
class StepWindows:
    """The reader of windows of steps: ``[B, 2]`` (row, k) or ``[B, 3]`` (row, k, goal row).

    Reads, for each window of ``k`` steps starting at a row, a ``[B]``
    TensorDict with the first step's observation and action, ``("next", obs)``
    = the observation after the window's last step (the true final
    observation when the window ends its episode), the last step's next-only
    entries (``("next", "terminated")``...), ``"steps_to_next_obs"`` ``[B, 1]``,
    and under ``"n_step"`` a ``[B, W]`` TensorDict (``W = max(k)``) of each
    window step's next-only entries (reward, done flags) with ``"mask"``
    marking the steps inside the window.
    :class:`~torchrl_ext.transforms.NStepTransform` reduces it. A batch of
    one-step windows only (``W = 1``: every ``k`` is 1) is a batch of
    transitions: it is read as one, with ``"steps_to_next_obs"`` but no
    ``"n_step"`` entries (the transform needs none).

    With a goal-row column (from :class:`~torchrl_ext.samplers.HindsightSampler`,
    ``-1`` for rows kept real), also ``"her"``: the observation entries at
    the goal rows and ``"relabel"`` (``goal_rows >= 0``), and in ``"n_step"``
    each window step's next observation entries (transitions have theirs
    under ``"next"``; without observations, which frame stacks read, one-step
    windows with goals are read as windows, with their next observations).

    Args:
        one_step (bool): every window is one step (hindsight goals on
            one-step transitions): read as transitions without looking at
            ``k``. Defaults to ``False``.

    Examples:
        >>> import torch
        >>> StepWindows().spans(torch.tensor([[5, 3], [9, 1]]))
        (tensor([5, 9]), tensor([3, 1]))
    """

    one_step: bool = False

    def read(
        self, storage: TransitionStorage, index: torch.Tensor, *, observations: bool = True
    ) -> TensorDictBase:
        columns = np.ascontiguousarray(index.numpy())  # [B, 2 or 3]: row, k, goal row
        rows, steps = columns[:, 0], columns[:, 1]
        B, W = rows.shape[0], 1 if self.one_step else int(steps.max())
        hindsight = columns.shape[1] > 2
        relabel = goal_rows = None
        if hindsight:
            goals = columns[:, 2]
            relabel = goals >= 0
            goal_rows = np.where(relabel, goals, rows)  # real rows: any valid row
        if W == 1 and (observations or not hindsight):  # one-step windows are transitions: read as such
            first = torch.from_numpy(np.ascontiguousarray(rows))
            out = storage.packed.gather(first) if observations else storage.packed.gather_steps(first)
            k = torch.from_numpy(steps.reshape(B, 1).copy())  # [B, 1]: 1 each
            set_unchecked(out, "steps_to_next_obs", k.to(out.device))
            if relabel is not None:  # hindsight: the goal rows' observation entries
                if relabel.any():  # a second gather
                    her = storage.packed.gather_observations(torch.from_numpy(goal_rows))
                else:  # every goal row is the row itself: the batch holds its observations
                    her = storage.packed.observations_in(out)
                set_unchecked(her, "relabel", torch.from_numpy(relabel).to(out.device))
                set_unchecked(out, "her", her)
            return out
        # the observation rows, in the order gather_windows reads them: first and
        # after rows (observations); goal rows, window-next rows (hindsight)
        at = 2 * B if observations else 0  # where the goal rows start
        obs_rows = np.empty(at + ((1 + W) * B if hindsight else 0), np.int64)
        after = np.empty(B, np.int64)
        window_next = obs_rows[at + B :].reshape(B, W) if hindsight else np.empty((B, W), np.int64)
        window, mask = _window_rows(storage, columns, W, after, window_next)
        if observations:  # first and after rows interleaved: each window's two reads lie a few rows apart
            obs_rows[0:at:2] = rows
            obs_rows[1:at:2] = after
        if hindsight:
            obs_rows[at : at + B] = goal_rows
        return storage.packed.gather_windows(
            torch.from_numpy(window),
            torch.from_numpy(obs_rows) if obs_rows.size else None,
            mask=torch.from_numpy(mask),
            lengths=torch.from_numpy(steps),
            observations=observations,
            relabel=None if relabel is None else torch.from_numpy(relabel),
            index=index.plain if isinstance(index, SampleIndex) else index,  # the sample's "index"
        )

    def spans(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # [2, B]: rows, then steps (one numpy copy: a fraction of two torch ones)
        columns = index.numpy()[:, :2].T.copy()
        return torch.from_numpy(columns[0]), torch.from_numpy(columns[1])

    def rows_read(self, storage: Any, index: torch.Tensor) -> torch.Tensor:
        columns = np.ascontiguousarray(index.numpy())
        B, W = columns.shape[0], int(columns[:, 1].max())
        after = np.empty(B, np.int64)
        window, mask = _window_rows(storage, columns, W, after, np.empty((B, W), np.int64))
        # the window's rows and the row after it (its next observation)
        read = [window[mask], after]
        if columns.shape[1] > 2:  # and the goal rows
            read.append(columns[:, 2][columns[:, 2] >= 0])
        return torch.from_numpy(np.concatenate(read))


@dataclass(frozen=True)
class OneStepWindows(RowReads):
    """The reader of ``NStepSampler(n=1)``'s index: ``[B]`` rows, each a window of one step.

    A window of one step is the transition itself: its rows are read as
    :class:`~torchrl_ext.sample_index.RowReads` reads plain rows (one
    gather), plus ``"steps_to_next_obs"`` ``[B, 1]`` (all 1), which marks the
    batch as windows for :class:`~torchrl_ext.transforms.NStepTransform`.

    Examples:
        >>> import torch
        >>> OneStepWindows().spans(torch.tensor([5, 9]))
        (tensor([5, 9]), tensor([1, 1]))
    """

    def read(
        self, storage: TransitionStorage, index: torch.Tensor, *, observations: bool = True
    ) -> TensorDictBase:
        out = super().read(storage, index, observations=observations)
        steps = torch.ones(index.shape[0], 1, dtype=torch.int64, device=out.device)
        set_unchecked(out, "steps_to_next_obs", steps)
        return out


_ONE_STEP = OneStepWindows()


def _window_rows(
    storage: TransitionStorage, columns: np.ndarray, width: int, after: np.ndarray,
    window_next: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """``(window, mask)`` of the windows ``columns`` (``[B, k]``: row, steps...), ``width`` wide.

    See :func:`~torchrl_ext.core.kernels.rows.window_rows`: ``[B, width]``
    rows of each window's steps (past its steps a window repeats its last one,
    which ``mask`` hides, so column ``width - 1`` is every window's last step);
    the row after each window (its next observation) is written to ``after``
    (``[B]``) and the row after each window step to ``window_next`` (``[B, width]``).
    """
    B = columns.shape[0]
    window, mask = np.empty((B, width), np.int64), np.empty((B, width), bool)
    capacity = storage_index(storage).stream_capacity
    window_rows(columns, capacity, window, window_next, after, mask)
    return window, mask


class NStepSampler(RefiningSampler):
    """Windows of up to ``n`` steps, starting at transitions drawn by ``base``.

    For a start step ``t`` the window has ``k = min(n, steps left in its episode)``
    steps: it stops at the episode's end (terminated or truncated) and, for an
    episode still being written, at its last written step. Every step of every
    episode can start a window, the last ``n - 1`` included. Windows never
    cross streams, episodes or overwritten rows (they run forward from a live
    row, and newer rows of the same stream are never overwritten first).

    The sample's index is a ``[B, 2]`` :class:`~torchrl_ext.sample_index.SampleIndex`
    (row, k) read by :class:`StepWindows` (with ``n = 1``, every window is
    one transition: the ``[B]`` rows, read by :class:`OneStepWindows`), and
    :class:`~torchrl_ext.transforms.NStepTransform` computes the returns. In
    the sample, ``"index"`` is that tensor (``[B, 2]``, or ``[B]`` with
    ``n = 1``): pass it to ``rb.update_priority`` as is.

    Args:
        n (int): maximum window length. An attribute: it can change between samples.

    Keyword Args:
        base (Sampler, optional): chooses the start transitions. Defaults to
            :class:`~torchrl_ext.samplers.UniformTransitionSampler`; a
            :class:`~torchrl_ext.samplers.PrioritizedTransitionSampler` gives
            prioritized n-step replay (Rainbow).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import TransitionReplayBuffer, TransitionStorage, TransitionWriter
        >>> from torchrl_ext.samplers import NStepSampler
        >>> from torchrl_ext.transforms import NStepTransform
        >>> rb = TransitionReplayBuffer(storage=TransitionStorage(32), writer=TransitionWriter(),
        ...     sampler=NStepSampler(3), transform=NStepTransform(gamma=0.9), batch_size=2)
        >>> done = torch.tensor([[False, True]]).unsqueeze(-1)
        >>> _ = rb.extend(TensorDict({"observation": torch.zeros(1, 2, 1), "action": torch.zeros(1, 2, 1),
        ...     "next": {"observation": torch.ones(1, 2, 1), "reward": torch.ones(1, 2, 1),
        ...              "done": done, "terminated": done.clone()}}, [1, 2]))
        >>> rb.sample()["steps_to_next_obs"].shape
        torch.Size([2, 1])
    """

    extends_transitions = True

    def __init__(self, n: int = 3, *, base: Sampler | None = None) -> None:
        super().__init__(base if base is not None else UniformTransitionSampler())
        self.n = n

    @property
    def n(self) -> int:
        """Maximum window length; may be set between samples (checked as in the constructor)."""
        return self._n

    @n.setter
    def n(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"NStepSampler: n={value!r}, expected an integer >= 1.")
        self._n = int(value)

    def sample(self, storage: TransitionStorage, batch_size: int) -> tuple[SampleIndex, dict]:
        rows, info = self.base.sample(storage, batch_size)
        if self.n == 1:  # a window of one step is the transition: no episode end to look up
            return SampleIndex.wrap(plain_rows(rows, self), _ONE_STEP), info
        rows = plain_rows(rows, self).numpy()
        index = np.empty((rows.shape[0], 2), dtype=np.int64)  # [B, 2] (row, k)
        index[:, 0] = rows
        index[:, 1] = storage_index(storage).window_lengths(rows, self.n)
        return SampleIndex.wrap(torch.from_numpy(index), StepWindows()), info

    def settings(self) -> dict[str, Any]:
        return {"n": self.n}

    def load_settings(self, settings: dict[str, Any]) -> None:
        self.n = int(settings["n"])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n}, base={self.base!r})"
