"""The compiled index arithmetic (core/kernels) against the episode tables and plain loops.

Each kernel fuses what the episode index's numpy queries say (row coordinates,
``locate``, ``physical_rows``, ``live_start``) into one pass; these properties
hold it to those queries, on random multi-stream workloads with wrapped rings.
"""
from __future__ import annotations

import numpy as np
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from conftest import run, steps, workloads
from torchrl_ext import make_replay_buffer
from torchrl_ext.core.kernels import goals
from torchrl_ext.core.kernels.rows import any_ring_end, ring_divmod, window_rows
from torchrl_ext.samplers import frame_steps


def live_rows(rb) -> np.ndarray:
    return rb.storage.live_transition_rows().numpy()


@given(workloads(), st.sampled_from([goals.FUTURE, goals.FINAL, goals.EPISODE]), st.integers(0, 2**31))
def test_goal_rows_match_the_episode_tables(workload, strategy, seed):
    rb, _ = run(*workload)
    index, rows = rb.storage.index, live_rows(rb)
    if not rows.size:
        return
    u = np.random.default_rng(seed).random(rows.size)
    # the definition (HindsightStrategy), from the index's numpy queries
    tau, stream = index.row_coordinates(rows)
    _, _, start, length = index.locate(tau, stream)
    last = start + length - 1
    if strategy == goals.FINAL:
        goal = last
    else:
        lo = tau if strategy == goals.FUTURE else np.maximum(start, index.live_start()[stream])
        goal = lo + np.minimum((u * (last - lo + 1)).astype(np.int64), last - lo)
    expected = index.physical_rows(goal + 1, stream)
    assert index.goal_rows(rows, u, strategy).tolist() == expected.tolist()


@given(workloads(), st.integers(1, 4), st.integers(1, 3))
def test_frame_rows_match_frame_steps(workload, n_frames, n):
    rb, _ = run(*workload)
    index, rows = rb.storage.index, live_rows(rb)
    if not rows.size:
        return
    steps_ = index.window_lengths(rows, n)
    tau, stream = index.row_coordinates(rows)
    _, _, start, _ = index.locate(tau, stream)
    taus = frame_steps(np.stack([tau, tau + steps_], 1), start[:, None], n_frames)  # [B, 2, F]
    frames, lost = index.frame_rows(rows, steps_, n_frames)
    assert frames.tolist() == index.physical_rows(taus, stream[:, None, None]).tolist()
    oldest = np.maximum(tau - (n_frames - 1), start)
    expected = oldest < index.live_start()[stream]
    if lost is None:  # no stack needs an overwritten frame
        assert not expected.any()
    else:
        assert expected.any() and lost.tolist() == expected.tolist()


@given(st.integers(2, 9), st.data())
def test_window_rows_walk_the_ring(C, data):
    rows = np.array(data.draw(st.lists(st.integers(0, 3 * C - 1), min_size=1, max_size=8)))
    k = np.array(data.draw(st.lists(st.integers(1, C), min_size=rows.size, max_size=rows.size)))
    W = int(k.max())
    window, nxt = np.empty((rows.size, W), np.int64), np.empty((rows.size, W), np.int64)
    after, mask = np.empty(rows.size, np.int64), np.empty((rows.size, W), bool)
    window_rows(np.stack([rows, k], 1), C, window, nxt, after, mask)
    for i, (r, n) in enumerate(zip(rows.tolist(), k.tolist())):
        base, slot = r - r % C, r % C
        walk = [base + (slot + j) % C for j in range(n + 1)]  # the window's rows, then the one after
        assert window[i].tolist() == [walk[min(j, n - 1)] for j in range(W)]
        assert nxt[i].tolist() == [walk[min(j, n - 1) + 1] for j in range(W)]
        assert mask[i].tolist() == [j < n for j in range(W)]
        assert after[i] == walk[n]


@given(st.integers(-(2**62) + 1, 2**62 - 1), st.integers(1, 2**40))
@example(2**62 - 1, 1)  # the estimate one too high
@example(2**62 - 200, 1)  # many steps too high
@example(-(2**62) + 200, 1)  # many steps too low
@example(3 * 2**60 - 1, 3)
@example(49, 49)  # too low at a multiple: 49 * (1 / 49) < 1
@example(0, 1)
@example(-1, 1)
def test_ring_divmod_is_pythons_divmod(x, d):
    # exact wherever the float estimate is off (large x, small d; values near multiples)
    assert ring_divmod(x, d) == divmod(x, d)


@given(st.integers(1, 2**31), st.integers(0, 2**20), st.integers(-2, 2))
def test_ring_divmod_at_multiples_of_the_divisor(d, q, off):
    # next to a multiple, where a rounded estimate lands just below it
    assert ring_divmod(q * d + off, d) == divmod(q * d + off, d)


def test_any_ring_end():
    assert any_ring_end(np.array([4, 11]), 4)  # 11 is stream 2's slot 3
    assert not any_ring_end(np.array([0, 1, 2, 4, 5, 6]), 4)
    assert not any_ring_end(np.empty(0, np.int64), 4)


def test_a_transition_at_the_ring_end_takes_its_next_observation_from_the_ring_start():
    # one stream of 4 slots; 5 steps wrap it: the step at slot 3 has its next obs at slot 0
    rb = make_replay_buffer(4, seed=0)
    obs = torch.arange(5.0).view(1, 5, 1)
    rb.extend(steps(obs, obs + 1))
    # slots 0-3 hold tau 4, 5, 2, 3: slot 3 is step 3 (obs 3), slot 0 its next obs (4)
    batch = rb.storage.get(torch.tensor([3, 3, 2, 3]))
    assert batch["observation"].view(-1).tolist() == [3.0, 3.0, 2.0, 3.0]
    assert batch["next", "observation"].view(-1).tolist() == [4.0, 4.0, 3.0, 4.0]
    assert batch["action"].view(-1).tolist() == [3.0, 3.0, 2.0, 3.0]
