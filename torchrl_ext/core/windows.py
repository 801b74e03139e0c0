"""Windows of consecutive steps inside episodes: which are valid, and how to draw them."""
from __future__ import annotations

from typing import Iterator, Protocol

import numpy as np
import torch

from torchrl_ext.core.draws import uniform_below
from torchrl_ext.core.kernels.sequences import keep_windows, valid_starts

__all__ = ["RejectionRounds", "WindowSource", "draw_windows", "valid_window"]


def valid_window(step: np.ndarray, length: np.ndarray, width: int, pad: bool) -> np.ndarray:
    """Whether a window of ``width`` steps may start at ``step`` of an episode of ``length``.

    Every window inside the episode, the last one included; with ``pad``, also
    step 0 of an episode shorter than ``width`` (the caller pads it). The rule
    is :func:`~torchrl_ext.core.kernels.sequences.valid_start`, which the
    draws apply too.

    Examples:
        >>> import numpy as np
        >>> valid_window(np.arange(4), np.full(4, 4), 3, pad=False).tolist()
        [True, True, False, False]
    """
    step, length = np.broadcast_arrays(np.asarray(step, np.int64), np.asarray(length, np.int64))
    ok = np.empty(step.shape, dtype=bool)
    valid_starts(step.ravel(), length.ravel(), width, bool(pad), ok.reshape(-1))
    return ok


class RejectionRounds:
    """Rounds of rejection sampling that draw as many candidates as they need.

    Iterating gives up to ``max_rounds`` rounds; ``draws(todo)`` is how many
    candidates to draw for ``todo`` missing results (``todo`` divided by the
    acceptance rate, with a margin), and ``accepted(kept, drawn)`` records a
    round. The first round assumes ``first_rate`` (most starts are usually
    valid, so one round usually suffices); later rounds use the rate seen.
    The loop stops early once the rate drops below ``min_rate``: the caller
    then switches to an exact method.

    Examples:
        >>> rounds = RejectionRounds()
        >>> draws = next(iter(rounds))
        >>> draws(64)  # a margin for the few invalid starts
        78
        >>> draws.accepted(16, 78)  # 1 in 5 accepted
        >>> draws(48)  # 48 missing: draw about 5x as many
        249
    """

    def __init__(
        self, max_rounds: int = 16, min_rate: float = 1 / 64, first_rate: float = 0.9
    ) -> None:
        self.max_rounds = max_rounds
        self.min_rate = min_rate
        self.rate = first_rate

    def __iter__(self) -> Iterator[RejectionRounds]:
        for _ in range(self.max_rounds):
            if self.rate < self.min_rate:
                return
            yield self

    def __call__(self, todo: int) -> int:
        return int(todo / self.rate * 1.05) + 4

    def accepted(self, kept: int, drawn: int) -> None:
        self.rate = kept / drawn if drawn else 0.0


class WindowSource(Protocol):
    """What :func:`draw_windows` needs from a store of episodes.

    Episodes are named by an int64 key (a table slot) the source can map back
    to its rows. :class:`~torchrl_ext.core.EpisodeIndex` and
    :class:`~torchrl_ext.storages.EpisodePool` are window sources.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext.storages import EpisodePool
        >>> source: WindowSource = EpisodePool(4, TensorDict({"x": torch.zeros(())}, []))
        >>> slot = source.append(TensorDict({"x": torch.zeros(3)}, [3]))
        >>> key, length, first = source.live_episodes()
        >>> key.tolist(), length.tolist(), first.tolist()
        ([0], [3], [0])
    """

    def window_candidates(
        self, count: int, generator: torch.Generator | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``count`` steps drawn uniformly from a set holding every valid window start.

        Returns ``(key, step, length)``: each draw's episode (``-1``: the draw
        hit no episode), its step in the episode and the episode's length.
        """
        ...

    def live_episodes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(key, length, first live step)`` of every episode that has a live step."""
        ...


def draw_windows(
    source: WindowSource,
    count: int,
    width: int,
    pad: bool,
    generator: torch.Generator | None,
    max_rounds: int = 16,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``count`` windows of ``width`` steps, uniform over the valid windows of ``source``.

    A window may start at step ``t`` of an episode of ``L`` steps iff
    ``t + width <= L`` (:func:`valid_window`; with ``pad``, step 0 of a shorter
    episode too). Candidate starts are drawn from the source and kept when
    valid: exact rejection sampling, O(batch / acceptance) per round (see
    :class:`RejectionRounds`). After ``max_rounds`` rounds, or once fewer than
    1 in 64 candidates are valid, the valid windows are counted episode by
    episode (O(live episodes)) and drawn from exactly.

    Returns:
        ``(key, step, real)``: each window's episode key and first step, and its
        number of real steps (``width``, or fewer when padded). numpy int64 ``[count]``.

    Raises:
        ValueError: no episode has a valid window.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext.storages import EpisodePool
        >>> pool = EpisodePool(8, TensorDict({"x": torch.zeros(())}, []))
        >>> slot = pool.append(TensorDict({"x": torch.arange(3.0)}, [3]))
        >>> key, step, real = draw_windows(pool, 100, 2, False, torch.Generator().manual_seed(0))
        >>> sorted(set(step.tolist())), set(real.tolist())  # both 2-step windows of the 3 steps
        ([0, 1], {2})
        >>> draw_windows(pool, 1, 4, False, None)
        Traceback (most recent call last):
        ...
        ValueError: cannot sample sequences of 4 steps: no stored episode has that many live steps (longest: 3); wait for longer episodes or lower sequence_length, or pad shorter episodes (pad=True).
    """
    key, step, real = np.empty((3, count), dtype=np.int64)
    filled = 0
    for draws in RejectionRounds(max_rounds):
        e, k, n = source.window_candidates(draws(count - filled), generator)
        # the valid candidates, in draw order, until the batch is full
        kept = keep_windows(e, k, n, width, bool(pad), key, step, real, filled)
        draws.accepted(kept - filled, e.size)
        filled = kept
        if filled == count:
            return key, step, real
    key[filled:], step[filled:], real[filled:] = _exact_windows(
        source, count - filled, width, pad, generator
    )
    return key, step, real


def _exact_windows(
    source: WindowSource, count: int, width: int, pad: bool, generator: torch.Generator | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # Count the valid windows of every live episode, then draw among them.
    key, n, first = source.live_episodes()
    windows = np.maximum(n - width + 1 - first, 0)
    if pad:
        windows = np.where((n < width) & (first == 0), 1, windows)
    total = int(windows.sum())
    if total == 0:
        longest = int((n - first).max()) if n.size else 0
        raise ValueError(
            f"cannot sample sequences of {width} steps: no stored episode has that many live "
            f"steps (longest: {longest}); wait for longer episodes or lower sequence_length"
            + ("." if pad else ", or pad shorter episodes (pad=True).")
        )
    u = uniform_below(total, count, generator)
    ends = windows.cumsum()
    e = np.searchsorted(ends, u, side="right")
    return key[e], first[e] + u - (ends[e] - windows[e]), np.minimum(n[e], width)
