"""Which of ``T`` vector-env steps are transitions, and where episodes break, in one pass; and the result.

Pure functions over ``[num_envs, T]`` arrays: :class:`~torchrl_ext.envs.GymVectorAdapter`
resolves one step as ``T = 1`` and a facade's chunk of held steps as ``T = chunk``
with the same code. The one recurrence over time (a NEXT_STEP reset step exists
only after a step that was stored and done) is vectorised over envs, with a
loop over time only at the rare steps where it chains.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from torchrl_ext.core.checks import sums_finite

__all__ = ["ResolvedSteps", "first_nonfinite_step", "follow_on", "observation_keys", "reset_steps"]


class ResolvedSteps(NamedTuple):
    """:meth:`~torchrl_ext.envs.GymVectorAdapter.resolve_steps`' result for ``T`` steps of ``num_envs`` envs.

    Attributes:
        entries: TorchRL entries by key, ``[num_envs, T, ...]`` each, with
            ``("collector", "mask")`` False at the steps that are not transitions.
        unseen: ``[num_envs, T]`` bool, the steps whose observation does not
            follow on from the previous next observation while the env's
            episode was running (a reset the adapter did not see): each opens
            a new episode.
        kept: the steps before the first one holding a NaN or infinity (``T``
            when all are finite, or with ``check_finite=False``).
        error: the ``ValueError`` naming that step's entry, env and step
            number; ``None`` when there is none.

    Examples:
        >>> import numpy as np
        >>> from torchrl_ext.envs import GymVectorAdapter
        >>> adapter = GymVectorAdapter(1)
        >>> raw = adapter.convert(np.zeros((1, 2)), np.zeros(1), np.array([np.nan]), np.zeros(1),
        ...                       np.zeros(1), {}, np.ones((1, 2)))
        >>> resolved = adapter.resolve_steps({k: v[:, None] for k, v in raw.items()})
        >>> resolved.kept, type(resolved.error).__name__  # the only step holds a NaN reward
        (0, 'ValueError')
    """

    entries: dict[tuple[str, ...], np.ndarray]
    unseen: np.ndarray
    kept: int
    error: ValueError | None


def observation_keys(entries: Mapping[tuple[str, ...], Any]) -> list[tuple[str, ...]]:
    """The observation entries of a step's ``entries``: each root key also held under ``"next"``.

    Examples:
        >>> observation_keys({("obs",): 0, ("action",): 0, ("next", "obs"): 0})
        [('obs',)]
    """
    return [k for k in entries if k[0] != "next" and ("next", *k) in entries]


def follow_on(obs: np.ndarray, nxt: np.ndarray, last: np.ndarray | None) -> np.ndarray:
    """``[n, T]`` bool: step ``t``'s observation is step ``t - 1``'s next observation.

    ``last`` (``[n, ...]``) is the next observation before step 0; ``None``
    (no step seen yet) counts as following on. Two observations are the same
    if their bytes are, or else all their values (``==``): NaN follows the
    same NaN, ``-0.0`` follows ``0.0``, and nothing is cast (next observations
    of another dtype than the observations are compared by value). An
    observation whose shape or dtype differs from ``last`` does not follow on.

    Args:
        obs: ``[n, T, ...]`` observations.
        nxt: ``[n, T, ...]`` next observations, as the env returned them.
        last: ``[n, ...]`` or ``None``.

    Examples:
        >>> obs = np.array([[[0.0], [1.0], [5.0]]])  # one env, three steps
        >>> nxt = np.array([[[1.0], [2.0], [6.0]]])
        >>> follow_on(obs, nxt, np.array([[0.0]])).tolist()  # step 2 does not start at 2.0
        [[True, True, False]]
        >>> nan = np.array([[[np.nan]]])
        >>> follow_on(nan, nan, np.array([[np.nan]])).tolist()  # the same bytes
        [[True]]
    """
    n, T = obs.shape[:2]
    same = np.ones((n, T), dtype=bool)
    if last is not None:
        if last.shape != (n, *obs.shape[2:]) or last.dtype != obs.dtype:
            same[:, 0] = False  # the observation changed shape: no continuation
        else:
            same[:, 0] = _rows_equal(obs[:, 0], last, 1)
    if T > 1:
        same[:, 1:] = _rows_equal(obs[:, 1:], nxt[:, :-1], 2)
    return same


def _rows_equal(a: np.ndarray, b: np.ndarray, lead: int) -> np.ndarray:
    """``a == b`` over all but the ``lead`` leading dims: the same bytes, or (rows whose bytes differ) equal values.

    Bytes first, as the widest unsigned words that tile a row (one word per
    row for 8 bytes of goals), in memory order: an ``[n, T]`` view of
    time-major steps (a facade's chunk) is compared as the ``[T, n]`` rows it
    is, with no copy. Only the few rows whose bytes differ (episode starts,
    ``-0.0`` against ``0.0``) are compared by value; NaN follows the same NaN.
    Arrays of different dtypes are compared by value alone.
    """
    same = np.ones(a.shape[:lead], dtype=bool)
    if not a.size:
        return same
    if a.dtype != b.dtype or a.shape != b.shape:  # another dtype (an env's float64 next observations): values
        same[...] = np.equal(a, b).reshape(*same.shape, -1).all(-1)
        return same
    rows = same
    if lead == 2 and a.swapaxes(0, 1).flags.c_contiguous and b.swapaxes(0, 1).flags.c_contiguous:
        a, b, rows = a.swapaxes(0, 1), b.swapaxes(0, 1), same.swapaxes(0, 1)  # rows: a view of same
    n = rows.size
    x, y = np.ascontiguousarray(a).reshape(n, -1), np.ascontiguousarray(b).reshape(n, -1)
    row_bytes = x.shape[1] * x.itemsize
    word = next(w for w in (8, 4, 2, 1) if row_bytes % w == 0)
    differ = x.view(f"u{word}") != y.view(f"u{word}")  # [n, words]
    at = np.flatnonzero(differ)
    if not at.size:  # the usual case stops here
        return same
    flat = np.ones(n, dtype=bool)
    flat[at // differ.shape[1]] = False
    where = np.flatnonzero(~flat)  # rows whose bytes differ: equal values still follow on
    flat[where] = (x[where] == y[where]).all(-1)
    rows[...] = flat.reshape(rows.shape)
    return same


def reset_steps(candidate: np.ndarray) -> np.ndarray:
    """``[n, T]`` bool: the NEXT_STEP reset steps among ``candidate`` steps.

    ``candidate[:, t]``: step ``t`` follows a done step (for ``t = 0``: the
    adapter's pending reset) and observes its final observation again. It is
    a reset step, and not a transition, unless step ``t - 1`` was itself a
    reset step (then ``t - 1`` was never stored and its done flag resets
    nothing): ``reset[t] = candidate[t] & ~reset[t - 1]``.

    Examples:
        >>> candidate = np.array([[True, True, True, False, True]])
        >>> reset_steps(candidate).astype(int).tolist()
        [[1, 0, 1, 0, 1]]
    """
    reset = candidate.copy()
    # only steps whose previous step is a candidate too depend on it, in time order
    for t in (np.flatnonzero((candidate[:, 1:] & candidate[:, :-1]).any(0)) + 1).tolist():
        reset[:, t] = candidate[:, t] & ~reset[:, t - 1]
    return reset


def first_nonfinite_step(entries: dict[Any, np.ndarray]) -> int | None:
    """The first time index ``t`` where a floating ``[n, T, ...]`` entry holds NaN or an infinity.

    One reduction per entry when every value is finite (:func:`~torchrl_ext.core.checks.sums_finite`);
    ``None`` then.

    Examples:
        >>> reward = np.array([[1.0, 2.0, np.nan, np.inf]])  # [1 env, 4 steps]
        >>> first_nonfinite_step({"reward": reward, "done": np.zeros((1, 4), bool)})
        2
    """
    if sums_finite(entries.values()):
        return None
    first = None
    for value in (v for v in entries.values() if v.dtype.kind == "f"):
        bad = ~np.isfinite(value).reshape(*value.shape[:2], -1).all(-1).all(0)  # [T]
        if bad.any():
            t = int(np.argmax(bad))
            first = t if first is None else min(first, t)
    return first
