"""Staged facade adds (a chunk resolved at once) store what one-step-at-a-time resolution stores.

Reference: the adapter resolves each step on its own (``GymVectorAdapter.resolve``),
ends the episodes of envs reset by hand and writes the step, one ``extend`` per
step: the obviously-correct loop the facades ran before steps were staged.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conftest import transitions_of
from torchrl_ext import EpisodeReplayBuffer, NStepReplayStorage, RingBufferDataset, make_replay_buffer
from torchrl_ext.envs import GymVectorAdapter
from torchrl_ext.facades._batching import StepBatcher
from torchrl_ext.facades.episodic.running import RunningEpisodes

MODES = ["NextStep", "SameStep", "Disabled", "Legacy"]
NORMAL, TERMINATE, TRUNCATE, RESET_BY_HAND = range(4)


def vector_env_steps(mode, events, seed=0, legacy_dones=False, done_reset_steps=False):
    """The ``add`` arguments of a scripted vector env of ``len(events[0])`` envs in ``mode``.

    ``events[t][i]``: what env ``i`` does at step ``t``. Observations are unique
    numbers, so the stored rows tell every step apart. ``done_reset_steps``:
    NEXT_STEP reset steps may carry done flags too (gymnasium's never do; the
    adapter's rule for them chains over time).
    """
    rng = np.random.default_rng(seed)
    n = len(events[0])
    counter = iter(range(1, 10_000))
    obs = np.array([[float(next(counter))] for _ in range(n)], np.float32)
    after_done = np.zeros(n, bool)  # NEXT_STEP: the next step is the reset step
    steps = []
    for row in events:
        event = np.array(row)
        obs = obs.copy()
        for i in np.flatnonzero(event == RESET_BY_HAND):
            obs[i] = next(counter)  # env.reset() mid-episode: not the previous next obs
            after_done[i] = False  # a reset by hand clears gymnasium's pending reset
        nxt = np.array([[float(next(counter))] for _ in range(n)], np.float32)
        term, trunc = event == TERMINATE, event == TRUNCATE
        if mode == "NextStep" and not done_reset_steps:
            term, trunc = term & ~after_done, trunc & ~after_done  # a reset step ends nothing
        done = term | trunc
        infos: object = {}
        reported = nxt.copy()  # what the env returns as next_obs
        if mode in ("SameStep", "Legacy"):
            reset = np.array([[float(next(counter))] for _ in range(n)], np.float32)
            reported = np.where(done[:, None], reset, nxt)
            if mode == "SameStep" and done.any():
                final = np.empty(n, dtype=object)
                for i in range(n):
                    final[i] = nxt[i] if done[i] else None
                infos = {"final_obs": final, "_final_obs": done}
            elif mode == "Legacy":
                infos = [{"terminal_observation": nxt[i], "TimeLimit.truncated": bool(trunc[i])}
                         if done[i] else {} for i in range(n)]
        truncated = None if mode == "Legacy" and legacy_dones else trunc
        terminated = done if truncated is None else term
        action = rng.integers(0, 3, n)
        reward = rng.random(n).astype(np.float32)
        steps.append((obs, action, reward, terminated, truncated, infos, reported))
        if mode == "NextStep":
            after_done = done.copy()
            obs = np.where(done[:, None], nxt, reported)  # the reset step observes the final obs again
        else:
            obs = reported
            if mode == "Disabled":  # reset the done envs by hand
                for i in np.flatnonzero(done):
                    obs[i] = next(counter)
    return steps


def reference(mode, steps, n, capacity):
    rb = make_replay_buffer(capacity, seed=0)
    adapter = GymVectorAdapter(n, autoreset_mode=mode)
    for step in steps:
        entries = adapter.resolve(*step)
        if adapter.unseen_resets.any():
            rb.writer.end_episodes(adapter.unseen_resets)
        rb.extend(adapter.to_tensordict(entries, [n]))
    return rb


def staged(mode, steps, n, capacity, chunk):
    rb = make_replay_buffer(capacity, seed=0)
    batcher = StepBatcher(rb, GymVectorAdapter(n, autoreset_mode=mode), chunk=chunk)
    for step in steps:
        batcher.add(*step)
    batcher.flush()
    return rb


def assert_same_buffers(a, b):
    assert len(a) == len(b)
    assert transitions_of(a.storage.get(slice(None))) == transitions_of(b.storage.get(slice(None)))
    ia, ib = a.storage.index, b.storage.index
    for name in ("episode_count", "written", "is_open", "episode_start", "episode_length"):
        assert torch.equal(getattr(ia, name), getattr(ib, name)), name


@given(
    mode=st.sampled_from(MODES),
    events=st.integers(1, 3).flatmap(lambda n: st.lists(
        st.lists(st.sampled_from([NORMAL] * 6 + [TERMINATE, TRUNCATE, RESET_BY_HAND]),
                 min_size=n, max_size=n), min_size=1, max_size=40)),
    chunk=st.integers(1, 9),
    legacy_dones=st.booleans(),
    done_reset_steps=st.booleans(),
)
def test_staged_adds_store_what_one_step_writes_store(mode, events, chunk, legacy_dones,
                                                       done_reset_steps):
    """Every mode, episode ends, NEXT_STEP reset steps, resets by hand mid-chunk, truncation."""
    n = len(events[0])
    steps = vector_env_steps(mode, events, legacy_dones=legacy_dones,
                             done_reset_steps=done_reset_steps)
    assert_same_buffers(staged(mode, steps, n, 400, chunk), reference(mode, steps, n, 400))


@pytest.mark.parametrize("mode", MODES)
def test_staged_adds_over_a_small_ring_evict_like_one_step_writes(mode):
    """Chunks longer than half a stream's ring (the writer splits them) and eviction."""
    events = [[TERMINATE if t % 13 == 12 else RESET_BY_HAND if t % 17 == 9 else NORMAL] * 2
              for t in range(120)]
    steps = vector_env_steps(mode, events)
    assert_same_buffers(staged(mode, steps, 2, 40, 32), reference(mode, steps, 2, 40))


def test_reset_by_hand_of_the_adapter_mid_chunk_resolves_the_held_steps_first():
    """``adapter.reset()`` between adds: the held steps follow the old state, the next ones the new."""
    events = [[NORMAL, NORMAL]] * 10
    steps = vector_env_steps("NextStep", events)
    rb = make_replay_buffer(100, seed=0)
    adapter = GymVectorAdapter(2)
    batcher = StepBatcher(rb, adapter, chunk=8)
    ref, ref_adapter = make_replay_buffer(100, seed=0), GymVectorAdapter(2)
    for t, step in enumerate(steps):
        if t == 5:  # env.reset(): the adapter and the buffer are told, the next obs is new
            adapter.reset()  # writes the held steps first
            rb.writer.end_episodes([0, 1])
            ref_adapter.reset(ref)
            step = (step[0] + 100, *step[1:])
        batcher.add(*step)
        ref.extend(ref_adapter.step(*step))
    batcher.flush()
    assert_same_buffers(rb, ref)
    assert ref.storage.index.episode_count.tolist() == [2, 2]


def added_with_an_infinite_reward(steps, count, bad):
    """A buffer and a chunk-8 batcher given ``steps[:count]``, env 1's reward infinite at step ``bad``.

    Step 0 is written at once, the others held.
    """
    rb = make_replay_buffer(100, seed=0)
    batcher = StepBatcher(rb, GymVectorAdapter(2), chunk=8)
    for t, step in enumerate(steps[:count]):
        if t == bad:
            step = (step[0], step[1], np.array([0.0, np.inf], np.float32), *step[3:])
        batcher.add(*step)
    return rb, batcher


def test_non_finite_value_raises_when_its_chunk_is_written_naming_entry_env_and_step():
    """The steps before it are stored; it and the held ones after it are not; episodes end there."""
    steps = vector_env_steps("NextStep", [[NORMAL, NORMAL]] * 12)
    rb, batcher = added_with_an_infinite_reward(steps, 8, bad=4)  # steps 1 .. 7 held
    with pytest.raises(ValueError, match=r"GymVectorAdapter.step \(step 4\): \('next', 'reward'\) of "
                                         r"env 1 is inf .*; .* That step and the 4 added after it were "
                                         r"not stored \(steps are written in chunks\); the running "
                                         r"episodes end before it\."):
        batcher.add(*steps[8])
    assert len(rb) == 2 * 4  # steps 0 .. 3
    for step in steps[9:]:  # the next steps open new episodes, glued to nothing
        batcher.add(*step)
    batcher.flush()
    assert len(rb) == 2 * 7
    assert rb.storage.index.episode_count.tolist() == [2, 2]


def test_non_finite_value_in_held_steps_counts_the_new_layout_step_that_wrote_them_as_not_stored():
    """A step of a new layout writes the held steps first; if they raise, the message counts it too."""
    steps = vector_env_steps("NextStep", [[NORMAL, NORMAL]] * 6)
    rb, batcher = added_with_an_infinite_reward(steps, 5, bad=3)  # steps 1 .. 4 held
    obs, *rest, nxt = steps[5]
    with pytest.raises(ValueError, match=r"\(step 3\): .* That step and the 2 added after it were "
                                         r"not stored"):
        batcher.add(obs.astype(np.float64), *rest, nxt.astype(np.float64))  # a new layout
    assert len(rb) == 2 * 3 and len(batcher) == 0  # steps 0 .. 2


def test_the_first_step_and_a_new_layout_are_written_at_their_add():
    """A step whose entries change shape is written alone: the writer's error names the entry."""
    rb = make_replay_buffer(100, seed=0)
    batcher = StepBatcher(rb, GymVectorAdapter(1), chunk=8)
    args = (np.zeros(1, np.int64), np.ones(1, np.float32), np.zeros(1, bool), np.zeros(1, bool), {})
    batcher.add(np.zeros((1, 2), np.float32), *args, np.zeros((1, 2), np.float32))
    assert len(rb) == 1 and len(batcher) == 0  # the first step: written at once
    batcher.add(np.zeros((1, 2), np.float32), *args, np.zeros((1, 2), np.float32))
    assert len(batcher) == 1
    with pytest.raises(ValueError, match=r"'observation' has shape \(1, 3\), expected \(1, 2\)"):
        batcher.add(np.zeros((1, 3), np.float32), *args, np.zeros((1, 3), np.float32))
    assert len(rb) == 2  # the held step was written first


@pytest.mark.parametrize("held, bad", [((2, 3), (3, 2)), ((2, 3), (1, 2, 3)), ((2, 0), (1, 0))])
def test_an_observation_of_the_held_size_in_another_shape_is_refused_naming_it(held, bad):
    """The held size in another shape (``[1, 0]`` for ``[2, 0]`` even broadcasts): refused, the held step kept."""
    rb = make_replay_buffer(100, seed=0)
    batcher = StepBatcher(rb, GymVectorAdapter(2), chunk=8)
    args = (np.zeros(2, np.int64), np.ones(2, np.float32), np.zeros(2, bool), np.zeros(2, bool), {})
    obs, wrong = np.zeros(held, np.float32), np.zeros(bad, np.float32)
    batcher.add(obs, *args, obs)
    batcher.add(obs, *args, obs)
    with pytest.raises(ValueError, match=rf"obs has shape \({', '.join(map(str, bad))}\), expected \(2, \.\.\.\)"):
        batcher.add(wrong, *args, wrong)
    assert (len(rb), len(batcher)) == (2, 1)  # the first step's 2 transitions, and the held step


def test_inputs_not_laid_out_as_the_held_steps_are_converted_and_held():
    """Torch tensors, lists and other dtypes go through the checks, then join the chunk."""
    import gymnasium as gym

    space = gym.spaces.Box(-10, 10, (2,), np.float32)
    store = NStepReplayStorage(space, gym.spaces.Discrete(3), storage_size=100, num_envs=2,
                               num_workers=0, batch_size=2, n_step=1, seed=0)
    obs = np.zeros((2, 2), np.float32)
    flags = np.zeros(2, bool)
    store.add(obs, np.array([0, 1]), np.ones(2), flags, flags, {}, obs + 1)
    store.add(torch.from_numpy(obs + 1), [1, 2], [1.0, 1.0], [False, False], flags, {}, obs + 2)
    store.add((obs + 2).astype(np.float64), np.array([2.0, 0.0]), np.ones(2, np.float64),
              flags, flags, {}, obs + 3)
    assert len(store._rb) == 2  # the first step; the next two are held, not written one by one
    with pytest.raises(ValueError, match=r"actions holds values in \[0, 3\], outside Discrete\(3\)"):
        store.add(obs + 3, np.array([0, 3]), np.ones(2), flags, flags, {}, obs + 4)
    with pytest.raises(ValueError, match=r"actions holds 0.5 \(env 1\), not an integer"):
        store.add(obs + 3, np.array([0.0, 0.5]), np.ones(2), flags, flags, {}, obs + 4)
    assert len(store) == 6
    assert sorted(store.rb.storage.get(slice(None))["action"].view(-1).tolist()) == [0, 0, 1, 1, 2, 2]


@given(
    num_envs=st.integers(1, 3),
    dones=st.lists(st.integers(0, 2 ** 3 - 1), min_size=1, max_size=300),
    capacity=st.integers(1, 5),
)
def test_running_episodes_hold_each_envs_steps_through_growth_and_moves(num_envs, dones, capacity):
    """Against per-env lists: episodes of any length, ended at random, blocks grown and compacted."""
    spec = {"x": (torch.Size([2]), torch.float32, torch.device("cpu"))}
    running = RunningEpisodes(num_envs, spec, capacity=capacity)
    lists: list[list[list[float]]] = [[] for _ in range(num_envs)]
    for t, mask in enumerate(dones):
        step = np.array([[t, env] for env in range(num_envs)], np.float32)
        running.append({"x": torch.from_numpy(step)})
        for env in range(num_envs):
            lists[env].append([float(t), float(env)])
            if mask >> env & 1:
                assert running.take(env)["x"].tolist() == lists[env]
                lists[env] = []
    for env in range(num_envs):
        taken = running.take(env)
        assert (taken["x"].tolist() if taken is not None else []) == lists[env]


def test_episode_buffer_stores_episodes_longer_than_its_blocks_and_checkpoints_running_steps():
    rb = EpisodeReplayBuffer(RingBufferDataset(5000), batch_size=2, sequence_length=2)
    for t in range(300):  # env 0: one 300-step episode; env 1: episodes of 7
        rb.add_step({"x": torch.tensor([[t, 0.0], [t, 1.0]])},
                    torch.tensor([False, t % 7 == 0 and t > 0]))
    state = rb.state_dict()
    assert [len(steps) for steps in state["running"]] == [300, 300 % 7]
    restored = EpisodeReplayBuffer(RingBufferDataset(5000), batch_size=2, sequence_length=2)
    restored.load_state_dict(state)
    for buffer in (rb, restored):
        buffer.flush()
    assert restored.dataset.episode_lengths[-2:] == rb.dataset.episode_lengths[-2:] == [300, 300 % 7]
    assert torch.equal(restored.dataset.episode(rb.num_episodes - 2)["x"][:, 0],
                       torch.arange(300, dtype=torch.float32))


def test_legacy_infos_are_checked_at_each_staged_add():
    """LEGACY ``truncated=None``: infos must be one dict per env, at every add (done or not)."""
    import gymnasium as gym

    store = NStepReplayStorage(gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(2),
                               storage_size=100, num_envs=2, num_workers=0, autoreset_mode="legacy")
    obs, flags = np.zeros((2, 2), np.float32), np.zeros(2, bool)
    store.add(obs, np.array([0, 1]), np.ones(2), flags, None, [{}, {}], obs)
    store.add(obs, np.array([0, 1]), np.ones(2), flags, None, [{}, {}], obs)  # held
    with pytest.raises(ValueError, match=r"LEGACY mode needs infos as a list of 2 dicts \(one per "
                                         r"env\), got dict of length 0"):
        store.add(obs, np.array([0, 1]), np.ones(2), flags, None, {}, obs)
    assert len(store) == 4


def test_the_buffer_under_a_facade_holds_every_added_step(tmp_path):
    """``storage.rb`` writes the held steps first: sampled, exported or reloaded, nothing is missing."""
    import gymnasium as gym

    from torchrl_ext import HerReplayStorage
    from torchrl_ext.export import load_buffer, save_episodes

    store = NStepReplayStorage(gym.spaces.Box(-9, 9, (2,), np.float32), gym.spaces.Discrete(2),
                               storage_size=100, num_envs=2, num_workers=0, n_step=1, seed=0)
    obs, flags = np.zeros((2, 2), np.float32), np.zeros(2, bool)
    for t in range(5):  # the first step is written at once, the other four held
        store.add(obs + t, np.array([0, 1]), np.ones(2), flags, flags, {}, obs + t + 1)
    assert len(store._batcher) == 4
    save_episodes(store.rb, tmp_path / "episodes")
    assert len(load_buffer(tmp_path / "episodes")) == 10

    bits = gym.spaces.MultiBinary(2)
    her = HerReplayStorage(gym.spaces.Dict(observation=bits, achieved_goal=bits, desired_goal=bits),
                           gym.spaces.Discrete(2), storage_size=100, num_envs=2)
    goal = dict(observation=np.zeros((2, 2), np.int8), achieved_goal=np.zeros((2, 2), np.int8),
                desired_goal=np.ones((2, 2), np.int8))
    for _ in range(3):
        her.add(goal, np.array([0, 1]), -np.ones(2), flags, flags, {}, goal)
    assert len(her._batcher) == 2 and len(her.rb) == 6 and len(her._batcher) == 0
