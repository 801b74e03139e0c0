"""Hypothesis properties: the buffer against the slow loop reference."""
from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from conftest import column, steps, transitions_of
from reference import LoopReference
from torchrl_ext import make_replay_buffer

# per step: 0 = continue, 1 = terminated, 2 = truncated
ENDINGS = st.sampled_from([0, 0, 0, 1, 2])


@st.composite
def workloads(draw):
    num_streams = draw(st.integers(1, 3))
    stream_capacity = draw(st.integers(2, 12))
    num_writes = draw(st.integers(1, 12))
    # every write covers all streams with the same number of steps, at times
    # more than a stream's ring holds (the oldest rows of the write are evicted)
    lengths = draw(st.lists(st.integers(1, 7), min_size=num_writes, max_size=num_writes))
    endings = [
        draw(st.lists(ENDINGS, min_size=num_streams * t, max_size=num_streams * t))
        for t in lengths
    ]
    single_steps = draw(st.booleans())  # write [N] one-step batches instead of [N, T]
    return num_streams, stream_capacity, lengths, endings, single_steps


def run(num_streams, stream_capacity, lengths, endings, single_steps, **kwargs):
    """Feed the same episodes to the buffer (``make_replay_buffer(**kwargs)``) and the reference."""
    rb = make_replay_buffer(num_streams * stream_capacity, seed=0, **kwargs)
    ref = LoopReference(num_streams, stream_capacity)
    counter = iter(range(1, 10**9))
    current = [float(next(counter)) for _ in range(num_streams)]  # obs each stream is in
    for T, ending in zip(lengths, endings):
        ending = torch.tensor(ending).view(num_streams, T)
        obs = torch.zeros(num_streams, T)
        nxt = torch.zeros(num_streams, T)
        for t in range(T):
            for s in range(num_streams):
                obs[s, t] = current[s]
                nxt[s, t] = next(counter)
                term, trunc = bool(ending[s, t] == 1), bool(ending[s, t] == 2)
                ref.step(s, current[s], current[s], current[s], float(nxt[s, t]), term, trunc)
                current[s] = float(next(counter)) if term or trunc else float(nxt[s, t])
        data = steps(
            obs.unsqueeze(-1),
            nxt.unsqueeze(-1),
            terminated=(ending == 1).unsqueeze(-1),
            truncated=(ending == 2).unsqueeze(-1),
        )
        if single_steps:
            for t in range(T):
                rb.extend(data[:, t])
        else:
            rb.extend(data)
    return rb, ref


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
