"""Hypothesis properties: the buffer against the slow loop reference."""
from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from conftest import column, run, steps, transitions_of, workloads


@given(workloads())
def test_live_transitions_match_reference(workload):
    rb, ref = run(*workload)
    expected = ref.live_transitions()
    assert len(rb) == len(expected)
    assert transitions_of(rb.storage.get(slice(None))) == expected


@given(workloads(), st.integers(0, 2**31))
def test_samples_are_live_reference_transitions(workload, seed):
    rb, ref = run(*workload)
    expected = set(ref.live_transitions())
    rb.set_rng(torch.Generator().manual_seed(seed))
    batch = rb.sample(len(expected))
    assert set(transitions_of(batch)) <= expected


@given(workloads())
def test_episode_index_counts_episodes(workload):
    num_streams, _, lengths, endings, _ = workload
    rb, _ = run(*workload)
    index = rb.storage.index
    for s in range(num_streams):
        ends = [e[i] for e, T in zip(endings, lengths) for i in range(s * T, (s + 1) * T)]
        # an episode opens at the first step and after each ending
        opened = 1 + sum(1 for e in ends[:-1] if e)
        assert int(index.episode_count[s]) == opened
        assert bool(index.is_open[s]) == (ends[-1] == 0)


def test_uniform_over_transitions_chi_square():
    """Every live transition is drawn about equally often (episode-end rows never)."""
    rb, ref = run(2, 9, [3, 3, 3], [[0, 1, 0, 0, 2, 0], [1, 0, 0, 0, 0, 1], [0, 0, 2, 0, 0, 0]], False)
    n = len(ref.live_transitions())
    rb.set_rng(torch.Generator().manual_seed(0))
    draws = torch.cat([rb.sample(n)["observation"][:, 0] for _ in range(4000)])
    _, counts = torch.unique(draws, return_counts=True)
    assert counts.numel() == n
    expected = draws.numel() / n
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 3 * n  # loose: the test has no flaky threshold near the mean (n - 1)


def test_column_helper_shape():
    assert column([1, 2]).shape == (2, 1)
