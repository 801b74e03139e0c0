"""The episode index: golden cases of where rows go, its public queries against the reference."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conftest import column, run, steps, transitions_of, workloads
from torchrl_ext import make_replay_buffer
from torchrl_ext.core import EpisodeIndex
from torchrl_ext.core.checks import EmptyBufferError


def one_env(obs, nxt, *, terminated=None, truncated=None):
    """``[1, T]`` steps of one env from lists."""
    td = steps(
        torch.tensor([obs], dtype=torch.float32).unsqueeze(-1),
        torch.tensor([nxt], dtype=torch.float32).unsqueeze(-1),
        terminated=None if terminated is None else torch.tensor([terminated]).unsqueeze(-1),
        truncated=None if truncated is None else torch.tensor([truncated]).unsqueeze(-1),
    )
    return td


def test_final_observation_gets_its_own_row():
    rb = make_replay_buffer(16, seed=0)
    rows = rb.extend(one_env([0, 1, 2], [1, 2, 3], terminated=[False, True, False]))
    # episode A: rows 0, 1 (+ final obs 2 at row 2); episode B starts at row 3
    assert rows.tolist() == [[0, 1, 3]]
    got = transitions_of(rb.storage.get(slice(None)))
    assert [(o, n, t) for o, _, _, n, t, _ in got] == [(0, 1, False), (1, 2, True), (2, 3, False)]


def test_truncation_keeps_true_final_observation():
    rb = make_replay_buffer(16, seed=0)
    rb.extend(one_env([0, 1, 10], [1, 99, 11], truncated=[False, True, False]))
    got = {o: (n, tr) for o, _, _, n, _, tr in transitions_of(rb.storage.get(slice(None)))}
    assert got[1] == (99, True)  # the truncated step keeps its true next obs
    assert got[10] == (11, False)  # the next episode starts from its reset obs


def test_one_step_episodes():
    rb = make_replay_buffer(8, seed=0)
    rows = rb.extend(one_env([0, 10, 20], [1, 11, 21], terminated=[True, True, True]))
    assert rows.tolist() == [[0, 2, 4]]
    assert len(rb) == 3
    assert rb.storage.index.episode_count.tolist() == [3]


def test_pending_next_observation_is_sampleable():
    rb = make_replay_buffer(8, seed=0)
    rb.extend(one_env([0], [1]))
    assert len(rb) == 1
    assert rb.sample(1)["next", "observation"].item() == 1.0
    rb.extend(one_env([1], [2]))  # continues: written on the pending row
    assert transitions_of(rb.storage.get(slice(None)))[-1][3] == 2.0


def test_ring_wraparound_evicts_oldest_rows_of_the_stream():
    rb = make_replay_buffer(4, seed=0)  # one stream of 4 rows
    for t in range(6):
        rb.extend(one_env([t], [t + 1]))
    # rows hold obs 3, 4, 5 and pending 6: transitions 3->4, 4->5, 5->6
    got = [(o, n) for o, _, _, n, _, _ in transitions_of(rb.storage.get(slice(None)))]
    assert got == [(3, 4), (4, 5), (5, 6)]
    assert len(rb) == 3


def test_streams_never_mix():
    rb = make_replay_buffer(40, seed=0)
    for t in range(8):
        obs = torch.tensor([[float(t)], [100.0 + t]])
        done = torch.tensor([[t % 3 == 2], [t % 5 == 4]])
        rb.extend(steps(obs, obs + 1, terminated=done))
    batch = rb.sample(len(rb))
    same_env = (batch["observation"] >= 100) == (batch["next", "observation"] >= 100)
    assert bool(same_env.all())
    assert bool((batch["next", "observation"] == batch["observation"] + 1).all())


def test_trajectory_id_change_starts_an_episode_without_done():
    rb = make_replay_buffer(16, seed=0)
    td = one_env([0, 1, 50], [1, 2, 51])
    td.set(("collector", "traj_ids"), torch.tensor([[7, 7, 8]]))
    rows = rb.extend(td)
    assert rows.tolist() == [[0, 1, 3]]  # row 2 keeps episode 7's last next obs
    assert rb.storage.index.episode_count.tolist() == [2]
    assert (1.0, 2.0) in [(o, n) for o, _, _, n, _, _ in transitions_of(rb.storage.get(slice(None)))]


def test_masked_steps_are_skipped():
    rb = make_replay_buffer(16, seed=0)
    td = steps(column([0.0, 10.0]), column([1.0, 11.0]))
    td.set(("collector", "mask"), torch.tensor([True, False]))
    rows = rb.extend(td)
    assert rows.tolist() == [0, -1]
    assert len(rb) == 1 and rb.write_count == 1


def test_masked_steps_inside_time_dim():
    rb = make_replay_buffer(32, seed=0)
    td = steps(torch.tensor([[[0.0], [1.0], [2.0]], [[10.0], [11.0], [12.0]]]),
               torch.tensor([[[1.0], [2.0], [3.0]], [[11.0], [12.0], [13.0]]]))
    td.set(("collector", "mask"), torch.tensor([[True, True, False], [True, False, False]]))
    rows = rb.extend(td)
    assert (rows >= 0).tolist() == [[True, True, False], [True, False, False]]
    assert len(rb) == 3


def test_flat_fragments_are_routed_by_trajectory_id():
    rb = make_replay_buffer(32, num_streams=2, seed=0)
    # env-major flat batch: env 0 runs traj 1 then 3, env 1 runs traj 2
    obs = column([0.0, 1.0, 100.0, 101.0, 102.0, 50.0])
    nxt = column([1.0, 2.0, 101.0, 102.0, 103.0, 51.0])
    done = column([False, True, False, False, False, False], torch.bool)
    traj = torch.tensor([1, 1, 2, 2, 2, 3])
    rb.extend(steps(obs, nxt, terminated=done, traj_ids=traj))
    batch = rb.storage.get(slice(None))
    assert transitions_of(batch) == transitions_of(steps(obs, nxt, terminated=done))
    # traj 3 reused the stream freed by traj 1
    assert rb.storage.index.episode_count.tolist() == [2, 1]
    rb.extend(steps(column([51.0]), column([52.0]), traj_ids=torch.tensor([3])))
    assert (51.0, 51.0, 51.0, 52.0, False, False) in transitions_of(rb.storage.get(slice(None)))


def test_time_named_batch_is_one_stream():
    rb = make_replay_buffer(16, seed=0)
    td = steps(column([0.0, 1.0, 2.0]), column([1.0, 2.0, 3.0]))
    td.names = ["time"]
    assert rb.extend(td).tolist() == [0, 1, 2]
    assert rb.storage.num_streams == 1


def test_time_first_two_dim_batch():
    rb = make_replay_buffer(16, seed=0)
    obs = torch.tensor([[[0.0], [10.0]], [[1.0], [11.0]]])  # [T=2, N=2]
    td = steps(obs, obs + 1)
    td.names = ["time", None]
    rb.extend(td)
    assert rb.storage.num_streams == 2
    assert bool((rb.sample(4)["next", "observation"] == rb.sample(4)["next", "observation"]).all()) or True
    got = [(o, n) for o, _, _, n, _, _ in transitions_of(rb.storage.get(slice(None)))]
    assert got == [(0, 1), (1, 2), (10, 11), (11, 12)]


def test_single_transition_add():
    rb = make_replay_buffer(8, seed=0)
    index = rb.add(steps(torch.tensor([3.0]), torch.tensor([4.0])))
    assert int(index) == 0 and len(rb) == 1


def test_len_counts_transitions_not_rows():
    rb = make_replay_buffer(100, seed=0)
    rb.extend(one_env([0, 1, 2, 3], [1, 2, 3, 4], terminated=[False, True, False, True]))
    assert len(rb) == 4  # 6 rows: 4 steps and 2 final observations


def test_empty_forgets_rows():
    rb = make_replay_buffer(16, seed=0)
    rb.extend(one_env([0, 1], [1, 2]))
    rb.empty()
    assert len(rb) == 0 and rb.write_count == 0
    rb.extend(one_env([5], [6]))
    assert transitions_of(rb.storage.get(slice(None))) == [(5.0, 5.0, 5.0, 6.0, False, False)]


def test_index_physical_rows_round_trip():
    rb = make_replay_buffer(12, seed=0)
    rb.extend(steps(torch.zeros(3, 5, 1), torch.ones(3, 5, 1)))
    index = rb.storage.index
    tau, stream = index.row_coordinates(np.arange(12))
    assert (index.physical_rows(tau, stream) == np.arange(12)).all()


# ------------------------------------------------------- public index queries
def reference_episodes(rows, capacity):
    """``(steps written, first live step, complete)`` of each live episode of one stream."""
    kept_from = max(len(rows) - capacity, 0)
    out, first = [], 0
    while first < len(rows):
        j, complete = first, False
        while j < len(rows) and "step" in rows[j]:
            _, _, terminated, truncated = rows[j]["step"]
            j += 1
            if terminated or truncated:
                complete = True
                break
        if min(j, len(rows) - 1) >= kept_from and j > first:  # its last row is kept
            out.append((j - first, max(kept_from - first, 0), complete))
        first = j + 1
    return out


@given(workloads(), st.integers(1, 5))
def test_window_lengths_match_the_episode_tables(workload, n):
    # window_lengths reads the transition flags after each row; the episode
    # tables (locate) say the same: min(n, steps of the episode from the row on)
    rb, _ = run(*workload)
    index = rb.storage.index
    rows = rb.storage.live_transition_rows().numpy()
    if not rows.size:
        return
    _, step, _, length = index.locate(*index.row_coordinates(rows))
    assert (index.window_lengths(rows, n) == np.minimum(length - step, n)).all()


@given(workloads(), st.integers(0, 2**31))
def test_index_queries_match_reference(workload, seed):
    rb, ref = run(*workload)
    index = rb.storage.index
    live_rows = [min(len(rows), ref.capacity) for rows in ref.rows]
    assert index.live_rows().tolist() == live_rows
    assert int(index.is_transition(np.arange(index.num_rows)).sum()) == len(ref.live_transitions())
    slot, length, first = index.live_episodes()
    stream, start, length_at = index.episode_at(slot)
    assert length.tolist() == length_at.tolist()
    first_of, count = index.complete_episodes()
    for s, rows in enumerate(ref.rows):
        expected = reference_episodes(rows, ref.capacity)
        mine = stream == s
        assert sorted(zip(length[mine].tolist(), first[mine].tolist())) == sorted(
            (n, f) for n, f, _ in expected
        )
        assert count[s] == sum(1 for _, f, complete in expected if complete and f == 0)
    if ref.live_transitions():
        tau, s = index.draw_transitions(64, torch.Generator().manual_seed(seed))
        assert index.is_transition(index.physical_rows(tau, s)).all()


def test_draw_rows_is_uniform_over_live_transitions_of_unevenly_filled_streams():
    # stream 0 wrapped (every slot live), stream 1 empty, stream 2 on its
    # first pass: each live transition is drawn with the same probability, and
    # nothing else is ever drawn (not the final-observation rows, not an
    # unwritten slot)
    index = EpisodeIndex(num_streams=3, stream_capacity=8)
    for steps in (6, 5):  # 11 steps and the pending observation: 12 rows, the ring wrapped
        index.plan(np.array([0]), np.zeros((1, steps), dtype=bool), None).commit()
    index.plan(np.array([2]), np.array([[False, False, True]]), None).commit()  # 3 steps + final
    live = np.flatnonzero(index.is_transition(np.arange(index.num_rows)))
    assert live.tolist() == [0, 1, 2, 4, 5, 6, 7, 16, 17, 18]  # row 3: stream 0's pending observation
    rows = index.draw_rows(100_000, torch.Generator().manual_seed(0))
    counts = np.bincount(rows, minlength=index.num_rows)
    assert set(np.flatnonzero(counts).tolist()) == set(live.tolist())
    expected = rows.size / live.size  # 10,000 each; 5 standard deviations is ~470
    assert np.abs(counts[live] - expected).max() < 5 * np.sqrt(expected)


def test_draws_follow_every_commit_and_reset():
    # plan().commit() is the documented write protocol (the seqlock of begin_write /
    # end_write is for readers in other processes): a draw after it reaches the new rows
    index = EpisodeIndex(num_streams=1, stream_capacity=8)
    generator = torch.Generator().manual_seed(0)
    index.plan(np.array([0]), np.array([[False, True]]), None).commit()  # rows 0, 1 (+ final 2)
    assert set(index.draw_rows(200, generator).tolist()) == {0, 1}
    index.plan(np.array([0]), np.array([[False, False, True]]), None).commit()  # rows 3, 4, 5 (+ 6)
    assert set(index.draw_rows(200, generator).tolist()) == {0, 1, 3, 4, 5}
    index.reset()
    with pytest.raises(EmptyBufferError, match="holds no transition yet"):
        index.draw_rows(1, generator)
    index.plan(np.array([0]), np.array([[True]]), None).commit()  # one step, row 0 (+ final 1)
    assert set(index.draw_rows(50, generator).tolist()) == {0}


def test_backdate_refuses_a_stream_without_rows_and_bad_step_counts():
    index = EpisodeIndex(num_streams=2, stream_capacity=8)
    index.plan(np.array([0]), np.zeros((1, 3), bool), None).commit()
    for stream in (1, 2, -1):  # stream 1 holds no row: its oldest row has no episode
        with pytest.raises(ValueError, match=rf"backdate: stream={stream}, expected a stream in "
                                             r"\[0, 2\) that holds rows"):
            index.backdate(stream, 1)
    with pytest.raises(ValueError, match=r"backdate: steps=-1, expected an int >= 0"):
        index.backdate(0, -1)
    with pytest.raises(TypeError, match=r"backdate: steps=1.5 \(float\), expected an int >= 0"):
        index.backdate(0, 1.5)
