"""The one window-drawing algorithm over a plain window source, against enumeration."""
from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conftest import CountingSource
from torchrl_ext.core.windows import RejectionRounds, draw_windows, valid_window


class ListSource:
    """Episodes given as ``(length, first live step)``; candidates are uniform over
    every live step plus ``junk`` draws that hit no episode (key -1)."""

    def __init__(self, episodes, junk=0):
        self.episodes = episodes
        self.steps = [(e, k) for e, (n, f) in enumerate(episodes) for k in range(f, n)]
        self.junk = junk

    def window_candidates(self, count, generator):
        total = len(self.steps) + self.junk
        u = torch.randint(total, (count,), generator=generator).numpy() if total else np.zeros(0, np.int64)
        key = np.full(u.size, -1, dtype=np.int64)
        step = np.zeros(u.size, dtype=np.int64)
        length = np.zeros(u.size, dtype=np.int64)
        for i, j in enumerate(u.tolist()):
            if j < len(self.steps):
                e, k = self.steps[j]
                key[i], step[i], length[i] = e, k, self.episodes[e][0]
        return key, step, length

    def live_episodes(self):
        key = np.arange(len(self.episodes), dtype=np.int64)
        n = np.array([n for n, _ in self.episodes], dtype=np.int64)
        f = np.array([f for _, f in self.episodes], dtype=np.int64)
        return key, n, f


def expected_windows(episodes, width, pad):
    out = set()
    for e, (n, f) in enumerate(episodes):
        out |= {(e, k, width) for k in range(f, n - width + 1)}
        if pad and n < width and f == 0:
            out.add((e, 0, n))
    return out


EPISODE_LISTS = st.lists(st.tuples(st.integers(1, 6), st.integers(0, 3)), max_size=5).map(
    lambda eps: [(n, min(f, n - 1)) for n, f in eps]
)


@given(EPISODE_LISTS, st.integers(1, 5), st.booleans(), st.sampled_from([0, 1, 16]),
       st.integers(0, 40), st.integers(0, 2**31))
def test_windows_are_exactly_the_valid_ones(episodes, width, pad, max_rounds, junk, seed):
    source = ListSource(episodes, junk)
    expected = expected_windows(episodes, width, pad)
    g = torch.Generator().manual_seed(seed)
    if not expected:
        with pytest.raises(ValueError, match=f"cannot sample sequences of {width} steps"):
            draw_windows(source, 3, width, pad, g, max_rounds)
        return
    key, step, real = draw_windows(source, 80 * len(expected), width, pad, g, max_rounds)
    assert set(zip(key.tolist(), step.tolist(), real.tolist())) == expected


@pytest.mark.parametrize("max_rounds", [0, 16])
def test_windows_are_uniform(max_rounds):
    episodes = [(7, 0), (1, 0), (3, 1), (6, 2), (2, 0)]
    expected = expected_windows(episodes, 2, pad=True)
    n = len(expected)
    key, step, real = draw_windows(ListSource(episodes, junk=5), 500 * n, 2, True,
                                   torch.Generator().manual_seed(0), max_rounds)
    counts = Counter(zip(key.tolist(), step.tolist(), real.tolist()))
    assert set(counts) == expected
    chi2 = sum((c - 500) ** 2 / 500 for c in counts.values())
    assert chi2 < 3 * n


def test_rare_windows_fall_back_to_counting_per_episode():
    # one valid start among ~2000 draws: far below the 1 in 64 acceptance
    source = CountingSource(ListSource([(3, 0)], junk=2000))
    key, step, _ = draw_windows(source, 50, 3, False, torch.Generator().manual_seed(1))
    assert source.exact_counts == 1
    assert (key == 0).all() and (step == 0).all()


def test_common_windows_need_no_count():
    source = CountingSource(ListSource([(50, 0)] * 4))
    draw_windows(source, 64, 2, False, torch.Generator().manual_seed(2))
    assert source.exact_counts == 0 and source.candidates < 2 * 64


def test_no_valid_window_is_one_value_error():
    message = (
        "cannot sample sequences of 4 steps: no stored episode has that many live steps "
        "(longest: 3); wait for longer episodes or lower sequence_length, or pad shorter "
        "episodes (pad=True)."
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        draw_windows(ListSource([(3, 0), (5, 3)]), 1, 4, False, None)
    padded = message.replace(", or pad shorter episodes (pad=True).", ".")
    with pytest.raises(ValueError, match=re.escape(padded.replace("longest: 3", "longest: 2"))):
        draw_windows(ListSource([(6, 4)]), 1, 4, True, None)  # a cut episode is not padded
    with pytest.raises(ValueError, match=re.escape("(longest: 0)")):
        draw_windows(ListSource([]), 1, 1, False, None)


def test_valid_window_golden():
    step, length = np.array([0, 1, 2, 0, 0]), np.array([3, 3, 3, 1, 2])
    assert valid_window(step, length, 2, pad=False).tolist() == [True, True, False, False, True]
    assert valid_window(step, length, 2, pad=True).tolist() == [True, True, False, True, True]


def test_rejection_rounds_stop_below_the_minimum_rate():
    rounds = RejectionRounds(max_rounds=5, min_rate=0.1, first_rate=0.5)
    seen = 0
    for draws in rounds:
        seen += 1
        assert draws(10) == int(10 / draws.rate * 1.05) + 4
        draws.accepted(1, 20)  # rate 0.05 < 0.1: no further round
    assert seen == 1
    assert list(RejectionRounds(max_rounds=0)) == []
