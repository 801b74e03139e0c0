"""Frame stacks at sample time: golden cases and properties against the loop reference."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tensordict import TensorDict

from conftest import run, steps, workloads
from reference import frame_reference
from torchrl_ext import make_replay_buffer
from torchrl_ext.sample_index import RowReads, SampleIndex
from torchrl_ext.samplers import (
    FrameStackSampler,
    HindsightSampler,
    NStepSampler,
    PrioritizedTransitionSampler,
    SequenceSampler,
    frame_steps,
)
from torchrl_ext.samplers.frames import FrameStacks
from torchrl_ext.samplers.nstep import StepWindows, window_steps


def episode_buffer(T=10, *, terminated=True, n_frames=4, n_step=None, capacity=64, **kwargs):
    """One env, one episode of ``T`` steps: obs t = t, final obs = 100."""
    obs = torch.arange(T, dtype=torch.float32).view(1, T, 1)
    nxt = torch.cat([obs[:, 1:], torch.full((1, 1, 1), 100.0)], 1)
    term = torch.zeros(1, T, 1, dtype=torch.bool)
    term[0, -1] = terminated
    rb = make_replay_buffer(capacity, n_frames=n_frames, n_step=n_step, seed=0, **kwargs)
    rb.extend(steps(obs, nxt, terminated=term))
    return rb


def stacks_by_step(batch) -> dict:
    """obs t -> (obs stack, next stack) of a batch of scalar observations."""
    obs = batch["observation"][..., 0].tolist()
    nxt = batch["next", "observation"][..., 0].tolist()
    return {o[-1]: (tuple(o), tuple(n)) for o, n in zip(obs, nxt)}


def every_stack(rb, n_frames, n=1):
    """Every live transition read through frame stacks of ``n``-step windows."""
    storage = rb.storage
    rows = storage.live_transition_rows()
    index = torch.stack([rows, window_steps(storage.index, rows, n)], -1)
    reader = FrameStacks(n_frames, None, StepWindows())
    batch = storage.get(SampleIndex.wrap(index, reader))
    return {
        o[-1]: (tuple(o), tuple(x), k)
        for o, x, k in zip(
            batch["observation"][..., 0].tolist(),
            batch["next", "observation"][..., 0].tolist(),
            batch["steps_to_next_obs"][:, 0].tolist(),
        )
    }


# --------------------------------------------------------------- golden cases
def test_frame_steps_golden():
    got = frame_steps(torch.tensor([5, 6, 9]).numpy(), torch.tensor([5, 5, 5]).numpy(), 3)
    assert got.tolist() == [[5, 5, 5], [5, 5, 6], [7, 8, 9]]
    assert frame_steps(torch.tensor([7]).numpy(), torch.tensor([2]).numpy(), 1).tolist() == [[7]]


def test_stacks_at_episode_start_repeat_first_observation():
    got = stacks_by_step(episode_buffer().sample(10))
    assert got[0.0] == ((0.0, 0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0))  # d3rlpy's rule
    assert got[1.0] == ((0.0, 0.0, 0.0, 1.0), (0.0, 0.0, 1.0, 2.0))


def test_stacks_mid_and_end_of_episode():
    got = every_stack(episode_buffer(), 4)
    assert got[5.0] == ((2.0, 3.0, 4.0, 5.0), (3.0, 4.0, 5.0, 6.0), 1)
    assert got[9.0] == ((6.0, 7.0, 8.0, 9.0), (7.0, 8.0, 9.0, 100.0), 1)  # true final obs


def test_stacks_never_cross_into_previous_episode():
    obs = torch.arange(6, dtype=torch.float32).view(1, 6, 1)
    term = torch.tensor([0, 1, 0, 0, 0, 1], dtype=torch.bool).view(1, 6, 1)
    rb = make_replay_buffer(64, n_frames=3, seed=0)
    nxt = torch.where(term, 50.0, obs + 1)
    rb.extend(steps(obs, nxt, terminated=term))  # episodes (0, 1) and (2 .. 5)
    got = every_stack(rb, 3)
    assert got[2.0][0] == (2.0, 2.0, 2.0)
    assert got[3.0][0] == (2.0, 2.0, 3.0)


def test_stacks_across_the_ring_seam():
    # 12 rows: the 10-step episode plus its final obs wrap around after the first episode
    rb = episode_buffer(4, capacity=12)
    obs = torch.arange(20, 30, dtype=torch.float32).view(1, 10, 1)
    rb.extend(steps(obs, obs + 1))
    got = every_stack(rb, 4)
    assert got[21.0][0] == (20.0, 20.0, 20.0, 21.0)
    assert got[29.0] == ((26.0, 27.0, 28.0, 29.0), (27.0, 28.0, 29.0, 30.0), 1)


def test_an_index_read_after_a_write_stacks_what_its_rows_hold_then():
    # the sampler hands its located transitions to the reader; a write in between voids them
    rb = episode_buffer(8, capacity=12)
    index, _ = rb.sampler.sample(rb.storage, 16)
    before = rb.storage.get(index)
    obs = torch.arange(20, 26, dtype=torch.float32).view(1, 6, 1)
    rb.extend(steps(obs, obs + 1))  # the ring wraps: some sampled rows now hold other steps
    after, fresh = rb.storage.get(index), rb.storage.get(SampleIndex.wrap(
        index.as_subclass(torch.Tensor), FrameStacks(4, None, index.reader.inner)))
    assert not torch.equal(after["observation"], before["observation"])
    assert torch.equal(after["observation"], fresh["observation"])
    assert torch.equal(after["next", "observation"], fresh["next", "observation"])


def test_stacks_in_episode_still_being_written():
    rb = episode_buffer(3, terminated=False)
    assert every_stack(rb, 4)[2.0] == ((0.0, 0.0, 1.0, 2.0), (0.0, 1.0, 2.0, 100.0), 1)
    rb.extend(steps(torch.tensor([[100.0]]), torch.tensor([[101.0]])))
    assert every_stack(rb, 4)[100.0] == ((0.0, 1.0, 2.0, 100.0), (1.0, 2.0, 100.0, 101.0), 1)


def test_overwritten_first_rows_are_not_served():
    # 8 rows per stream, one running episode of 20 steps: rows of steps 12.. live
    rb = make_replay_buffer(8, n_frames=3, batch_size=6, seed=0)
    obs = torch.arange(20, dtype=torch.float32).view(1, 20, 1)
    for t in range(20):
        rb.extend(steps(obs[:, t], obs[:, t] + 1))
    served = set()
    for _ in range(50):
        served |= set(stacks_by_step(rb.sample()).items())
    # steps 13 and 14 would need frames 11 / 12 -> 11 (overwritten): never served
    assert {o for o, _ in served} == {15.0, 16.0, 17.0, 18.0, 19.0}
    assert dict(served)[15.0] == ((13.0, 14.0, 15.0), (14.0, 15.0, 16.0))


def test_redrawn_stacks_keep_their_batch_position_s_role():
    # a transition whose stack is not served is redrawn; the redraw was a batch of
    # the redrawn positions only, so HER relabelled int(k * 4 / 5) of them: a
    # single redraw at a relabelled position came back real, breaking the
    # "real rows first, the last n_virtual relabelled" layout and the HER ratio
    sampler = FrameStackSampler(3, base=HindsightSampler("future", num_goals=4))
    rb = make_replay_buffer(8, sampler=sampler, batch_size=5, seed=0)
    obs = torch.arange(20, dtype=torch.float32).view(1, 20, 1)
    for t in range(20):  # steps 13 and 14 (of 12 .. 18 live) are not served
        rb.extend(steps(obs[:, t], obs[:, t] + 1))
    for _ in range(30):  # about 3 in 4 batches have a redraw
        batch = rb.sample()
        goals = batch["index"][:, 2]
        assert bool((goals[:1] == -1).all()) and bool((goals[1:] >= 0).all()), goals
        assert bool((batch["observation"][:, -1, 0] >= 15).all())


def test_not_served_everywhere_is_an_error():
    rb = make_replay_buffer(4, n_frames=6, batch_size=2, seed=0)
    obs = torch.arange(10, dtype=torch.float32).view(1, 10, 1)
    for t in range(10):
        rb.extend(steps(obs[:, t], obs[:, t] + 1))
    with pytest.raises(ValueError, match="stacks of n_frames=6 still reach rows the ring overwrote"):
        rb.sample()


def test_few_held_stacks_are_served_every_time():
    # 12 rows, one running episode of 40 steps: steps 29 .. 39 live, of which only
    # 39 has its 10 earlier frames held. Each of the 256 positions of a batch was
    # redrawn at most 64 times, so about 1 sample in 2 failed on the same rows.
    rb = make_replay_buffer(12, n_frames=11, batch_size=256, seed=0)
    obs = torch.arange(40, dtype=torch.float32).view(1, 40, 1)
    for t in range(40):
        rb.extend(steps(obs[:, t], obs[:, t] + 1))
    for _ in range(40):
        assert set(rb.sample()["observation"][:, -1, 0].tolist()) == {39.0}


def test_a_heavy_row_whose_stack_is_lost_does_not_stop_prioritized_draws():
    # a prioritized draw i comes from segment i of the mass: once the ring overwrote
    # the first frames of a row holding most of it, the positions whose segments lay
    # inside that row drew it at every redraw, and every sample failed
    rb = make_replay_buffer(16, batch_size=8, n_frames=4, seed=0,
                            sampler=PrioritizedTransitionSampler(alpha=1.0, beta=0.4))
    obs = torch.arange(18, dtype=torch.float32).view(1, 18, 1)
    rb.extend(steps(obs[:, :10], obs[:, :10] + 1))
    rows = rb.storage.live_transition_rows()
    rb.update_priority(rows, torch.where(rows == 3, 50.0, 1.0))  # step 3: 50 of the 59 mass
    rb.extend(steps(obs[:, 10:], obs[:, 10:] + 1))  # the ring overwrote steps 0 .. 2
    for _ in range(20):
        batch = rb.sample()
        served = batch["observation"][:, -1, 0]
        assert bool((served >= 6).all()), served  # steps 3 .. 5 lost a frame
        rb.update_priority(batch["index"], torch.ones(8))


def test_not_served_anywhere_is_found_whatever_the_draws():
    # no live transition has its stack held: the error names what the rows hold
    rb = make_replay_buffer(4, n_frames=6, batch_size=2, seed=0)
    obs = torch.arange(10, dtype=torch.float32).view(1, 10, 1)
    for t in range(10):
        rb.extend(steps(obs[:, t], obs[:, t] + 1))
    with pytest.raises(ValueError, match=r"^FrameStackSampler: after 64 redraws, stacks of n_frames=6 "
                       r"still reach rows the ring overwrote: 0 of the 3 live transitions have the 5 "
                       r"earlier frames of their episode held; raise the capacity or lower n_frames\.$"):
        rb.sample()


def test_images_stack_along_channels_and_stay_uint8():
    T = 5
    pixels = (torch.arange(T, dtype=torch.uint8).view(1, T, 1, 1, 1) * 10).expand(1, T, 2, 3, 3)
    nxt = torch.cat([pixels[:, 1:], torch.full((1, 1, 2, 3, 3), 99, dtype=torch.uint8)], 1)
    data = TensorDict({"pixels": pixels.clone(), "action": torch.zeros(1, T, 1),
                       "next": {"pixels": nxt.clone(), "reward": torch.zeros(1, T, 1),
                                "done": torch.zeros(1, T, 1, dtype=torch.bool)}}, [1, T])
    rb = make_replay_buffer(32, n_frames=4, seed=0)
    rb.extend(data)
    batch = rb.sample(4)
    assert batch["pixels"].shape == (4, 8, 3, 3) and batch["pixels"].dtype == torch.uint8
    for stack, nstack in zip(batch["pixels"], batch["next", "pixels"]):
        t = int(stack[-1, 0, 0]) // 10  # newest frame in the last C channels
        frames = [max(t - j, 0) * 10 for j in (3, 2, 1, 0)]
        assert stack[:, 0, 0].tolist() == [f for f in frames for _ in range(2)]
        assert nstack[-2:, 0, 0].tolist() == [(t + 1) * 10] * 2


def test_dict_observation_entries_get_a_frame_axis_and_keys_select():
    T = 4
    obs = torch.arange(T, dtype=torch.float32).view(1, T, 1)
    data = TensorDict({"obs": {"pos": obs.expand(1, T, 2).clone(), "goal": obs.clone()},
                       "action": torch.zeros(1, T, 1),
                       "next": {"obs": {"pos": (obs + 1).expand(1, T, 2).clone(), "goal": obs + 1},
                                "reward": torch.zeros(1, T, 1),
                                "done": torch.zeros(1, T, 1, dtype=torch.bool)}}, [1, T])
    rb = make_replay_buffer(32, sampler=FrameStackSampler(3, keys=[("obs", "pos")]), seed=0)
    rb.extend(data)
    batch = rb.sample(3)
    assert batch["obs", "pos"].shape == (3, 3, 2)  # [B, F, 2]
    assert batch["obs", "goal"].shape == (3, 1)  # not stacked
    assert batch["obs", "pos"][:, -1, 0].tolist() == batch["obs", "goal"][:, 0].tolist()


def test_keys_given_as_one_string_is_that_key():
    # keys="obs" was read as the sequence of keys "o", "b", "s" (a str is a
    # sequence): the sample then failed naming 'o', which nobody had passed
    T = 4
    obs = torch.arange(T, dtype=torch.float32).view(1, T, 1)
    data = TensorDict({"obs": obs.clone(), "goal": obs.clone(), "action": torch.zeros(1, T, 1),
                       "next": {"obs": obs + 1, "goal": obs + 1, "reward": torch.zeros(1, T, 1),
                                "done": torch.zeros(1, T, 1, dtype=torch.bool)}}, [1, T])
    sampler = FrameStackSampler(3, keys="obs")
    assert sampler.keys == (("obs",),)
    rb = make_replay_buffer(32, sampler=sampler, seed=0)
    rb.extend(data)
    batch = rb.sample(3)
    assert batch["obs"].shape == (3, 3, 1) and batch["goal"].shape == (3, 1)


def test_n_frames_changes_between_samples():
    rb = episode_buffer()
    assert rb.sample(3)["observation"].shape == (3, 4, 1)
    rb.sampler.n_frames = 2
    assert rb.sample(3)["observation"].shape == (3, 2, 1)


def test_nstep_windows_stack_the_observation_after_the_window():
    rb = episode_buffer(n_step=3, gamma=0.5)
    got = every_stack(rb, 4, 3)
    assert got[0.0] == ((0.0,) * 4, (0.0, 1.0, 2.0, 3.0), 3)
    assert got[8.0] == ((5.0, 6.0, 7.0, 8.0), (7.0, 8.0, 9.0, 100.0), 2)
    batch = rb.sample(10)
    assert batch["index"].shape == (10, 2)  # (row, k): frame stacks add no column
    for o, n, k in zip(batch["observation"][..., 0].tolist(), batch["next", "observation"][..., 0].tolist(),
                       batch["steps_to_next_obs"][:, 0].tolist()):
        assert got[o[-1]] == (tuple(o), tuple(n), k)


def test_prioritized_frames_update_priorities_through_the_index():
    sampler = FrameStackSampler(2, base=NStepSampler(2, base=PrioritizedTransitionSampler(alpha=1.0)))
    rb = make_replay_buffer(64, batch_size=8, sampler=sampler, seed=0)
    obs = torch.arange(12, dtype=torch.float32).view(1, 12, 1)
    rb.extend(steps(obs, obs + 1))
    batch = rb.sample()
    assert batch["priority_weight"].shape == (8,)
    td_error = torch.where(batch["observation"][:, -1, 0] == batch["observation"][0, -1, 0], 1e3, 1e-6)
    rb.update_priority(batch["index"], td_error)
    first = float(batch["observation"][0, -1, 0])
    assert float((rb.sample()["observation"][:, -1, 0] == first).float().mean()) > 0.8


def test_hindsight_goals_are_not_stacked():
    T = 6
    obs = torch.arange(T, dtype=torch.float32).view(1, T, 1)
    data = TensorDict({"observation": obs.clone(), "achieved_goal": obs.clone(),
                       "desired_goal": torch.full((1, T, 1), -1.0), "action": torch.zeros(1, T, 1),
                       "next": {"observation": obs + 1, "achieved_goal": obs + 1,
                                "desired_goal": torch.full((1, T, 1), -1.0),
                                "reward": torch.zeros(1, T, 1),
                                "done": torch.zeros(1, T, 1, dtype=torch.bool)}}, [1, T])
    sampler = FrameStackSampler(3, keys=["observation"], base=HindsightSampler("future", 1))
    rb = make_replay_buffer(64, sampler=sampler, seed=0)
    rb.extend(data)
    batch = rb.sample(4)
    assert batch["index"].shape == (4, 3)
    assert batch["observation"].shape == (4, 3, 1)
    assert batch["her", "achieved_goal"].shape == (4, 1)
    t = batch["observation"][:, -1, 0]
    goal = batch["her", "achieved_goal"][2:, 0]  # relabelled half: a future achieved goal
    assert bool((goal >= t[2:] + 1).all())


def test_sequences_of_frame_stacks():
    rb = episode_buffer(8, sampler=SequenceSampler(3), batch_size=2)
    batch = rb.sample()
    assert batch["observation"].shape == (2, 3, 4, 1)  # [B, L, F, 1]
    reference = every_stack(episode_buffer(8), 4)
    for seq_obs, seq_next in zip(batch["observation"][..., 0].tolist(),
                                 batch["next", "observation"][..., 0].tolist()):
        for o, n in zip(seq_obs, seq_next):
            assert reference[o[-1]][:2] == (tuple(o), tuple(n))


def test_n_frames_validation():
    with pytest.raises(ValueError, match=r"n_frames=0, expected an integer >= 1"):
        FrameStackSampler(0)
    with pytest.raises(ValueError, match=r"n_frames=2.5, expected an integer >= 1"):
        FrameStackSampler(2.5)  # type: ignore[arg-type]


def test_unknown_key_names_the_key():
    rb = episode_buffer(sampler=FrameStackSampler(2, keys=["pixels"]))
    with pytest.raises(KeyError, match=r"keys has 'pixels', which is not an observation entry"):
        rb.sample(2)


def test_frames_under_nstep_is_refused_with_the_fix():
    rb = make_replay_buffer(64, sampler=NStepSampler(3, base=FrameStackSampler(4)), seed=0)
    rb.extend(steps(torch.zeros(1, 3, 1), torch.ones(1, 3, 1)))
    with pytest.raises(TypeError, match=r"put that sampler outermost, e.g. FrameStackSampler\(4, base=NStepSampler"):
        rb.sample(2)


def test_checkpoint_restores_n_frames_and_next_sample(tmp_path):
    rb = episode_buffer(n_step=2)
    rb.sampler.n_frames = 3
    rb.dumps(tmp_path)
    expected = rb.sample(5)
    other = make_replay_buffer(64, n_frames=4, n_step=2, seed=1)
    other.loads(tmp_path)
    other.sampler.load_state_dict(rb.sampler.state_dict())
    assert other.sampler.n_frames == 3
    got = other.sample(5)
    assert torch.equal(got["observation"], expected["observation"])


def test_plain_rows_reader_is_the_storage_read():
    rb = episode_buffer()
    rows = rb.storage.live_transition_rows()[:3]
    a = rb.storage.get(SampleIndex.wrap(rows, RowReads()))
    assert torch.equal(a["observation"], rb.storage.get(rows)["observation"])


def test_readers_leave_out_observations_on_request():
    # what FrameStacks relies on: the inner read without observation entries is
    # the full read minus them (root and "next"), with every other entry equal
    rb = episode_buffer(n_step=3)
    storage = rb.storage
    rows = storage.live_transition_rows()[:6]
    window = torch.stack([rows, window_steps(storage.index, rows, 3)], -1)
    goals = torch.stack([rows, window[:, 1], torch.where(rows % 2 == 0, rows, -1)], -1)
    cases = [(RowReads(), rows), (RowReads(), rows[:4].view(2, 2)),
             (StepWindows(), window), (StepWindows(), goals)]
    observation = {"observation", ("next", "observation")}
    for reader, index in cases:
        full = reader.read(storage, SampleIndex.wrap(index, reader))
        bare = reader.read(storage, SampleIndex.wrap(index, reader), observations=False)
        assert bare.batch_size == full.batch_size
        keys = set(full.keys(True, True)) - observation
        assert set(bare.keys(True, True)) == keys, reader
        for key in keys:
            assert torch.equal(bare[key], full[key]), (reader, key)


# ----------------------------------------------------------------- properties
@given(workloads(), st.integers(1, 4), st.integers(1, 3))
def test_stacks_match_reference(workload, n_frames, n):
    rb, ref = run(*workload)
    expected = {}
    for rows in ref.rows:
        expected.update(frame_reference(rows, ref.capacity, n_frames, n))
    got = every_stack(rb, n_frames, n)
    assert set(got) == set(expected)
    assert {o: v for o, v in got.items() if expected[o] is not None} == {
        o: v for o, v in expected.items() if v is not None
    }


@given(workloads(), st.integers(1, 4), st.integers(0, 2**31))
def test_sampled_stacks_are_served_reference_stacks(workload, n_frames, seed):
    rb, ref = run(*workload, n_frames=n_frames)
    expected = {}
    for rows in ref.rows:
        expected.update(frame_reference(rows, ref.capacity, n_frames, 1))
    if all(v is None for v in expected.values()):
        return
    rb.set_rng(torch.Generator().manual_seed(seed))
    for o, (s, n) in stacks_by_step(rb.sample(min(8, len(rb)))).items():
        assert expected[o] == (s, n, 1)


def test_sequences_whose_first_frames_were_overwritten_are_refused_naming_sequences():
    """One stream of 8 rows holds steps 3..10 of one episode: the only 7-step sequence
    starts at step 3, whose frame 2 the ring overwrote. The refusal spoke of
    transitions ('the base sampler keeps drawing the others'), not of sequences."""
    from torchrl_ext.samplers import SequenceSampler

    rb = make_replay_buffer(8, batch_size=1, sampler=SequenceSampler(7), n_frames=2, seed=0)
    obs = torch.arange(10.0).view(1, 10, 1)
    rb.extend(TensorDict({"observation": obs, "action": obs.clone(),
                          "next": {"observation": obs + 1, "reward": torch.zeros(1, 10, 1),
                                   "done": torch.zeros(1, 10, 1, dtype=torch.bool)}}, [1, 10]))
    with pytest.raises(ValueError, match=r"the sequences drawn still need frames the ring overwrote: a sequence "
                                         r"is served only if the 1 frames before its first step are held"):
        rb.sample()
