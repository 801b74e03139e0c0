"""Windows of consecutive steps inside episodes: which are valid, and how to draw them."""
from __future__ import annotations

from typing import Iterator

import numpy as np

__all__ = ["RejectionRounds", "valid_window"]


def valid_window(step: np.ndarray, length: np.ndarray, width: int, pad: bool) -> np.ndarray:
    """Whether a window of ``width`` steps may start at ``step`` of an episode of ``length``.

    Every window inside the episode, the last one included; with ``pad``, also
    step 0 of an episode shorter than ``width`` (the caller pads it).

    Examples:
        >>> import numpy as np
        >>> valid_window(np.arange(4), np.full(4, 4), 3, pad=False).tolist()
        [True, True, False, False]
    """
    ok = step + width <= length
    if pad:
        ok |= (step == 0) & (length < width)
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
