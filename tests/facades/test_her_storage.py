"""HerReplayStorage (rllte API): regression tests for the original's bugs H1-H12.

Episodes are traced: at global step ``t`` of env ``e`` the observation and the
achieved goal are ``t + 1000 * e`` and the desired goal is ``-1``; the
achieved goal after step ``t`` is ``t + 1 + 1000 * e``. A relabelled row's goal
``g`` therefore names its env (``g // 1000``) and goal step (``g % 1000 - 1``).
"""
from __future__ import annotations

import copy
import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch

from torchrl_ext import HerReplayStorage, PrioritizedTransitionSampler, make_her_replay_buffer
from torchrl_ext.envs import GymVectorAdapter

BOX = gym.spaces.Box(-1e6, 1e6, (1,), np.float32)
SPACE = gym.spaces.Dict(observation=BOX, achieved_goal=BOX, desired_goal=BOX)
ACT = gym.spaces.Discrete(3)


def mismatch(achieved, desired, infos=None):
    # numpy arrays as rllte passes them, or tensors (native=True)
    return (achieved != desired).any(-1) * -1.0


def storage(**kwargs):
    args = dict(storage_size=1000, num_envs=1, batch_size=20, num_goals=4, seed=0)
    args.update(kwargs)
    return HerReplayStorage(SPACE, ACT, **args)


def obs_at(t, num_envs):
    value = np.array([[t + 1000 * e] for e in range(num_envs)], np.float32)
    return {"observation": value, "achieved_goal": value.copy(),
            "desired_goal": np.full((num_envs, 1), -1.0, np.float32)}


def play(store, lengths, num_envs=1, done_last=True, infos=None, start=0):
    """Episodes of the given lengths in every env (lockstep, NEXT_STEP mode); episode spans."""
    t, spans = start, []
    for length in lengths:
        spans.append((t, t + length - 1))
        for i in range(length):
            last = done_last and i == length - 1
            nxt = obs_at(t + 1, num_envs)
            info = {} if infos is None else infos(t, num_envs)
            store.add(obs_at(t, num_envs), np.zeros(num_envs, np.int64), -np.ones(num_envs),
                      np.full(num_envs, last), np.zeros(num_envs, bool), info, nxt)
            t += 1
        store.adapter.reset()  # the next call starts a new episode
    return spans


def draws(store, rounds=30):
    """(obs step, env, goal step or -1, batch) for every row of ``rounds`` batches."""
    out = []
    for _ in range(rounds):
        b = store.sample()
        v = b.observations["observation"].view(-1).long()
        g = b.observations["desired_goal"].view(-1).long()
        goal_step = torch.where(g >= 0, g % 1000 - 1, -1)
        out.append((v % 1000, v // 1000, goal_step, torch.where(g >= 0, g // 1000, -1), b))
    return out


def span_of(spans, t):
    return next((lo, hi) for lo, hi in spans if lo <= t <= hi)


# ------------------------------------------------------------- H1 .. H12
def test_h1_default_reward_fn_works():
    store = storage(reward_fn=None)
    play(store, [10, 10])
    for _, _, goal, _, b in draws(store):
        achieved = b.next_observations["achieved_goal"].view(-1)
        desired = b.observations["desired_goal"].view(-1)
        expected = torch.where(achieved == desired, 0.0, -1.0)
        assert torch.equal(b.rewards.view(-1)[goal >= 0], expected[goal >= 0])
    assert 0.0 in torch.cat([d[4].rewards.view(-1) for d in draws(store)]).tolist()


def test_h2_reward_fn_of_shape_n_and_n_1():
    flat = storage(reward_fn=mismatch)
    column = storage(reward_fn=lambda a, d, i: mismatch(a, d).reshape(-1, 1))
    play(flat, [10, 10])
    play(column, [10, 10])
    for _ in range(5):
        a, b = flat.sample(), column.sample()
        assert a.rewards.shape == b.rewards.shape == (20, 1)
        assert torch.equal(a.rewards, b.rewards)


def test_h3_random_strategy_works():
    store = storage(goal_selection_strategy="random", num_envs=2)
    spans = play(store, [5, 5], num_envs=2)
    achieved_after = {t + 1 + 1000 * e for lo, hi in spans for t in range(lo, hi + 1) for e in (0, 1)}
    goals = torch.cat([d[4].observations["desired_goal"].view(-1)[4:] for d in draws(store)])
    assert set(goals.long().tolist()) <= achieved_after


def test_h4_reset_clears_data_and_bookkeeping():
    store = storage()
    play(store, [5, 5])
    play(store, [3], done_last=False, start=10)  # an episode in progress
    store.reset()
    assert len(store) == 0
    with pytest.raises(ValueError, match="the storage is empty; add steps before sampling"):
        store.sample()
    play(store, [20], start=100)
    obs = torch.cat([d[0] for d in draws(store, 5)])
    assert bool((obs >= 100).all())  # nothing from before the reset, no half episode


@pytest.mark.parametrize("held", [False, True], ids=["written", "held"])
def test_h4_reset_keeps_the_envs_next_step_reset_step_out(held):
    # reset() empties the storage, not the env: a NEXT_STEP env whose episode ended
    # before it still spends its next step resetting (final obs -> reset obs)
    store = storage(num_goals=0)
    step = lambda t, nxt, term: store.add(obs_at(t, 1), np.zeros(1, np.int64), -np.ones(1),
                                           np.array([term]), np.zeros(1, bool), {}, obs_at(nxt, 1))
    step(0, 1, False)
    step(1, 2, True)  # the episode ends on observation 2
    if not held:
        assert len(store) == 2
    store.reset()
    step(2, 50, False)  # the env's reset step: observes 2 again, returns the reset observation 50
    step(50, 51, False)
    assert len(store) == 1
    assert set(draws(store, 3)[0][0].tolist()) == {50}


def test_h5_terminated_fn_recomputes_termination_of_relabelled_rows():
    relabel = storage(terminated_fn=lambda a, d, i: (a == d).all(-1))
    keep = storage()
    spans = play(relabel, [10, 10])
    play(keep, [10, 10])
    for obs, _, goal, _, b in draws(relabel):
        achieved = b.next_observations["achieved_goal"].view(-1)
        desired = b.observations["desired_goal"].view(-1)
        term = b.terminateds.view(-1)
        assert torch.equal(term[goal >= 0], (achieved == desired)[goal >= 0])
        assert torch.equal(term[goal < 0], torch.tensor([span_of(spans, t)[1] == t
                                                         for t in obs[goal < 0].tolist()]))
    for obs, _, _, _, b in draws(keep):  # without it: the stored flags, relabelled or not
        assert torch.equal(b.terminateds.view(-1),
                           torch.tensor([span_of(spans, t)[1] == t for t in obs.tolist()]))


def test_h6_per_env_infos_and_nothing_stored_without_copy_info_dict():
    seen = []

    def reward_fn(achieved, desired, infos):
        seen.append((achieved.reshape(-1).copy(), infos))
        return mismatch(achieved, desired)

    def infos(t, num_envs):
        step = np.array([t + 1000 * e for e in range(num_envs)])
        return {"step": step, "_step": np.ones(num_envs, bool), "name": "x",
                "final_obs": np.array([None] * num_envs, dtype=object)}

    store = storage(num_envs=3, reward_fn=reward_fn, copy_info_dict=True)
    play(store, [4, 4], num_envs=3, infos=infos)
    draws(store, 5)
    for achieved, info in seen:  # one dict per row, in an object array as rllte passes them
        assert info.dtype == object and all(list(row) == ["step"] for row in info)
        assert [row["step"] for row in info] == (achieved - 1).astype(np.int64).tolist()  # this env's, this step's
    seen.clear()
    store = storage(num_envs=3, reward_fn=reward_fn)
    play(store, [4, 4], num_envs=3, infos=infos)
    draws(store, 5)
    assert seen and all(info == [{}] * len(achieved) for achieved, info in seen)  # rllte's empty dicts
    assert not any("info" in key for key in store.rb.storage.schema.row_keys)


def test_h7_episodes_longer_than_per_env_capacity():
    for length in (10, 25):
        store = storage(storage_size=10, batch_size=5, goal_selection_strategy="future")
        play(store, [length])
        assert 0 < len(store) < 10
        for obs, _, goal, _, _ in draws(store):
            lowest = length - len(store)
            assert bool((obs >= lowest).all()) and bool((obs < length).all())
            assert bool((goal[goal >= 0] >= obs[goal >= 0]).all())  # live rows only, future
            assert bool((goal[goal >= 0] < length).all())


def test_h8_sampling_before_the_first_episode_ends():
    future = storage(batch_size=5)
    final = storage(batch_size=5, goal_selection_strategy="final")
    play(future, [5], done_last=False)
    play(final, [5], done_last=False)
    for (obs, _, goal, _, _), (_, _, last, _, _) in zip(draws(future), draws(final)):
        assert bool((goal[1:] >= obs[1:]).all()) and bool((goal[1:] <= 4).all())
        assert last[1:].tolist() == [4, 4, 4, 4]  # the last written step



def test_adapter_reset_after_an_episode_without_a_done_flag_starts_a_new_one():
    """``store.adapter.reset()`` (after ``env.reset()``) once stopped the adapter checking the
    next observation: a new episode whose first observation happened to follow on was glued
    onto the running one, and its final goal relabelled the old one's steps."""
    store = storage(goal_selection_strategy="final")
    play(store, [3], done_last=False)  # steps 0 .. 2, no done flag; then store.adapter.reset()
    play(store, [4], start=3)  # steps 3 .. 6: a new episode, observing on from step 2
    assert store.rb.storage.index.episode_count.tolist() == [2]
    for obs, _, goal, _, _ in draws(store):
        relabelled = goal >= 0
        final = torch.where(obs <= 2, 2, 6)  # the last step of each obs' own episode
        assert relabelled.any() and torch.equal(goal[relabelled], final[relabelled])

def test_h9_dtypes_are_kept():
    bits = gym.spaces.MultiBinary(4)
    space = gym.spaces.Dict(observation=gym.spaces.Box(0, 255, (2,), np.uint8),
                            achieved_goal=bits, desired_goal=bits)
    store = HerReplayStorage(space, ACT, storage_size=100, batch_size=4, num_goals=1, seed=0,
                             native=True)
    for t in range(4):
        obs = {"observation": np.full((1, 2), t), "achieved_goal": np.full((1, 4), t % 2),
               "desired_goal": np.ones((1, 4))}  # float64 in, cast to the space dtypes
        store.add(obs, np.array([1]), np.array([-1.0]), np.array([t == 3]), np.array([False]),
                  {}, obs)
    b = store.sample()
    assert b.observations["observation"].dtype == torch.uint8
    assert b.observations["achieved_goal"].dtype == torch.int8
    assert b.next_observations["desired_goal"].dtype == torch.int8
    assert b.actions.dtype == torch.int64
    assert b.terminateds.dtype == b.truncateds.dtype == torch.bool
    store.native = False  # the original's float32 batch, from the same uint8 / int8 rows
    b = store.sample()
    assert store.rb.storage[0]["observation"].dtype == torch.uint8
    assert b.observations["observation"].dtype == b.terminateds.dtype == torch.float32
    assert b.actions.dtype == torch.float32 and (1.0 - b.terminateds).shape == (4, 1)


def test_h9_goal_and_achieved_goal_of_different_dtypes():
    space = gym.spaces.Dict(observation=BOX, achieved_goal=gym.spaces.MultiBinary(4),
                            desired_goal=gym.spaces.Box(0, 1, (4,), np.int64))
    store = HerReplayStorage(space, ACT, storage_size=100, batch_size=4, num_goals=1, seed=0,
                             native=True)
    for t in range(4):
        obs = {"observation": np.zeros((1, 1)), "achieved_goal": np.full((1, 4), t % 2),
               "desired_goal": np.ones((1, 4))}
        store.add(obs, np.array([1]), np.array([-1.0]), np.array([t == 3]), np.array([False]),
                  {}, obs)
    assert store.sample().observations["desired_goal"].dtype == torch.int64


@pytest.mark.parametrize("action", [np.array([2, 1]), np.array([[2], [1]]),
                                    np.array([2.0, 1.0]), torch.tensor([2.0, 1.0])])
def test_h10_discrete_actions_of_any_shape_and_dtype(action):
    store = storage(num_envs=2, batch_size=4, num_goals=0, native=True)
    for t in range(2):
        store.add(obs_at(t, 2), action, -np.ones(2), np.array([t == 1] * 2), np.zeros(2, bool),
                  {}, obs_at(t + 1, 2))
    b = store.sample()
    assert b.actions.dtype == torch.int64 and b.actions.shape == (4, 1)
    env = b.observations["observation"].view(-1).long() // 1000
    assert torch.equal(b.actions.view(-1), 2 - env)


@pytest.mark.parametrize("mode", ["SameStep", "NextStep"])
def test_h11_final_strategy_uses_the_true_final_observation(mode):
    store = storage(num_envs=2, goal_selection_strategy="final", autoreset_mode=mode)
    reset = obs_at(-99, 2)  # the next episode's first observation
    t = 0
    for episode in range(3):
        if mode == "NextStep" and episode:  # the reset step observes the final obs again
            store.add(obs_at(t, 2), np.zeros(2, np.int64), np.zeros(2), np.zeros(2, bool),
                      np.zeros(2, bool), {}, obs_at(t, 2))
        for i in range(4):
            last = i == 3
            nxt, infos = obs_at(t + 1, 2), {}
            if last and mode == "SameStep":
                final = obs_at(t + 1, 2)
                infos = {"final_obs": np.array([{k: v[e] for k, v in final.items()} for e in (0, 1)],
                                               dtype=object), "_final_obs": np.ones(2, bool)}
                nxt = reset
            store.add(obs_at(t, 2), np.zeros(2, np.int64), -np.ones(2), np.full(2, last),
                      np.zeros(2, bool), infos, nxt)
            t += 1
    assert len(store) == 24
    for obs, env, goal, goal_env, b in draws(store):
        assert torch.equal(goal[4:], obs[4:] // 4 * 4 + 3)  # the episode's last step
        assert torch.equal(goal_env[4:], env[4:])
        achieved = b.next_observations["achieved_goal"].view(-1)  # never the reset observation
        assert torch.equal(achieved, b.observations["achieved_goal"].view(-1) + 1)


def test_h12_no_silent_remainder():
    store = storage(storage_size=10, num_envs=3)
    assert store.capacity_per_env == 4
    play(store, [2], num_envs=3)
    assert store.rb.storage.max_size == 12
    assert len(store) == 6


def test_h12_her_composes_with_n_step_and_priorities():
    rb = make_her_replay_buffer(
        200, mismatch, strategy="future", num_goals=1, n_step=3, gamma=0.5,
        sampler=PrioritizedTransitionSampler(alpha=1.0, beta=1.0), batch_size=6, seed=0,
    )
    adapter = GymVectorAdapter(1)
    for t in range(6):
        rb.extend(adapter.step(obs_at(t, 1), np.array([0]), np.array([-1.0]), np.array([t == 5]),
                               np.array([False]), {}, obs_at(t + 1, 1)))
    for _ in range(10):
        d = rb.sample()
        t = d["observation"].view(-1).long()
        k = d["steps_to_next_obs"].view(-1)
        assert torch.equal(k, torch.clamp(6 - t, max=3))
        goal = d["desired_goal"].view(-1)
        expected = []
        for i in range(6):
            if goal[i] < 0:  # real: every step -1
                r = [-1.0] * int(k[i])
            else:  # relabelled: achieved goal after each window step vs the goal
                r = [0.0 if t[i] + s + 1 == goal[i] else -1.0 for s in range(int(k[i]))]
            expected.append(sum(0.5**s * x for s, x in enumerate(r)))
        assert torch.allclose(d["next", "reward"].view(-1), torch.tensor(expected))
        assert bool((d["priority_weight"] > 0).all())
    rb.update_priority(d["index"], torch.arange(1.0, 7.0))
    assert rb.sampler.base.base.max_priority == 6.0


def test_h12_her_prioritized_update_tensordict_priority():
    rb = make_her_replay_buffer(
        200, mismatch, num_goals=1, sampler=PrioritizedTransitionSampler(alpha=1.0),
        batch_size=4, seed=0,
    )
    adapter = GymVectorAdapter(1)
    for t in range(4):
        rb.extend(adapter.step(obs_at(t, 1), np.array([0]), np.array([-1.0]), np.array([t == 3]),
                               np.array([False]), {}, obs_at(t + 1, 1)))
    d = rb.sample()
    d.set("td_error", torch.full((4,), 5.0))
    rb.update_tensordict_priority(d)
    assert rb.sampler.base.base.max_priority == 5.0


# ------------------------------------------------------------ HER semantics
@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
def test_goals_never_come_from_another_env(strategy):
    store = storage(num_envs=3, goal_selection_strategy=strategy)
    play(store, [3, 5, 4], num_envs=3)
    for _, env, goal, goal_env, _ in draws(store):
        assert torch.equal(goal_env[goal >= 0], env[goal >= 0])


@pytest.mark.parametrize("k", [0, 1, 3, 4])
def test_real_rows_first_relabelled_last(k):
    store = storage(num_goals=k, batch_size=20)
    play(store, [6, 6, 6, 6])
    n_virtual = int(20 * k / (k + 1))
    for _, _, goal, _, _ in draws(store, 5):
        assert bool((goal[: 20 - n_virtual] < 0).all())
        assert bool((goal[20 - n_virtual :] >= 0).all())


@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
def test_strategy_goal_ranges(strategy):
    store = storage(goal_selection_strategy=strategy, num_goals=4)
    spans = play(store, [1, 7, 3, 5, 6])
    seen = set()
    for obs, _, goal, _, _ in draws(store, 60):
        for t, j in zip(obs[4:].tolist(), goal[4:].tolist()):
            lo, hi = span_of(spans, t)
            if strategy == "future":
                assert t <= j <= hi
            elif strategy == "final":
                assert j == hi
            else:
                assert lo <= j <= hi
            seen.add((t, j))
    if strategy == "future":  # the current step itself is a possible goal
        assert any(t == j for t, j in seen) and any(t < j for t, j in seen)
    if strategy == "episode":
        assert any(j < t for t, j in seen)


# --------------------------------------------------------------- validation
def test_constructor_validation():
    with pytest.raises(TypeError, match="expected a gymnasium Dict space"):
        HerReplayStorage(BOX, ACT)
    with pytest.raises(KeyError, match="goal_key='goal' is not an entry"):
        HerReplayStorage(SPACE, ACT, goal_key="goal")
    no_achieved = gym.spaces.Dict(observation=BOX, desired_goal=BOX)
    with pytest.raises(KeyError, match="achieved_goal_key='achieved_goal'"):
        HerReplayStorage(no_achieved, ACT)
    with pytest.raises(ValueError, match=r"'futur'.*\['future', 'final', 'episode', 'random'\]"):
        HerReplayStorage(SPACE, ACT, goal_selection_strategy="futur")
    with pytest.raises(ValueError, match="num_goals=-1, expected an int >= 0"):
        HerReplayStorage(SPACE, ACT, num_goals=-1)
    store = HerReplayStorage(SPACE, ACT, goal_selection_strategy="random", goal_key=("desired_goal",))
    assert store.goal_selection_strategy == "random"


def test_update_is_a_no_op_and_len_counts_transitions():
    store = storage()
    play(store, [4, 3])
    store.update({"loss": 1.0}, step=3)
    assert len(store) == 7
    assert "transitions=7" in repr(store)


def test_copy_info_dict_stores_non_finite_info_values_as_one_step_adds_do():
    """check_finite covers observations, actions and rewards; a NaN info value is stored at any add."""
    store = storage(num_envs=2, copy_info_dict=True)
    for t in range(5):  # step 0 is written at once, steps 1 .. 4 are staged
        info = {"dist": np.array([np.nan if t in (0, 3) else 0.5, 1.0])}
        store.add(obs_at(t, 2), np.zeros(2, np.int64), -np.ones(2), np.zeros(2, bool),
                  np.zeros(2, bool), info, obs_at(t + 1, 2))
    assert len(store) == 10
    dist = store.rb.storage.get(slice(None))["next", "info", "dist"]
    assert int(dist.isnan().sum()) == 2


@pytest.mark.parametrize("column", [False, True])
def test_discrete_observation_entries_are_columns_as_in_the_original(column):
    """rllte (as SB3) stores a ``Discrete`` entry of the Dict space as ``(N, 1)``: batches and
    ``reward_fn`` get ``(B, 1)``, whether the env gives ``(N,)`` or ``(N, 1)``."""
    cell = gym.spaces.Discrete(10)
    space = gym.spaces.Dict(observation=cell, achieved_goal=cell, desired_goal=cell)
    seen = []

    def reward_fn(achieved, desired, infos):
        seen.append((achieved.shape, desired.shape))
        return -(achieved != desired).float()

    store = HerReplayStorage(space, ACT, storage_size=100, num_envs=2, batch_size=10,
                             reward_fn=reward_fn, seed=0, native=True)

    def at(t):
        value = np.array([t, t]).reshape((2, 1) if column else (2,))
        return {"observation": value, "achieved_goal": value, "desired_goal": np.full_like(value, 9)}

    for t in range(4):
        store.add(at(t), np.zeros(2, np.int64), -np.ones(2), np.full(2, t == 3), np.zeros(2, bool),
                  {}, at(t + 1))
    b = store.sample()
    for obs in (b.observations, b.next_observations):
        assert {k: tuple(v.shape) for k, v in obs.items()} == dict.fromkeys(space.spaces, (10, 1))
    assert seen == [((8, 1), (8, 1))]
    relabelled = b[2:]
    assert torch.equal(relabelled.rewards, reward_fn(relabelled.next_observations["achieved_goal"],
                                                     relabelled.observations["desired_goal"], None))
    store.native = False
    assert store.sample().observations["desired_goal"].shape == (10, 1)


@pytest.mark.parametrize("name", ["discount", "action", "next", "index"])
def test_dict_observation_entry_named_like_a_batch_entry_is_refused(name):
    space = gym.spaces.Dict(observation=BOX, achieved_goal=BOX, desired_goal=BOX, **{name: BOX})
    with pytest.raises(ValueError, match=rf"observation_space has an entry {name!r}.*rename it"):
        HerReplayStorage(space, ACT)


def test_sampling_with_fewer_transitions_than_batch_size_draws_with_replacement():
    store = storage(batch_size=20, native=True)
    play(store, [2], done_last=False)
    b = store.sample()
    assert b.batch_size == (20,) and set(b.observations["observation"].view(-1).tolist()) <= {0.0, 1.0}


def test_storage_size_below_two_rows_per_env_is_refused_at_construction():
    with pytest.raises(ValueError, match=r"storage_size=3 gives 1 row\(s\) to each of num_envs=3 "
                                         r"envs.*at least 2.*storage_size >= 4"):
        storage(storage_size=3, num_envs=3)
    assert storage(storage_size=4, num_envs=3).capacity_per_env == 2


def test_h6_copy_info_dict_takes_a_list_of_per_env_dicts():
    """A list of per-env dicts (SB3 VecEnv infos, LEGACY mode): the original stored each env's
    own dict; ``reward_fn`` gets each env's values, zeros where an env's dict lacks the entry."""
    seen = []

    def reward_fn(achieved, desired, infos):
        seen.append((achieved.reshape(-1).copy(), infos))
        return mismatch(achieved, desired)

    def infos(t, num_envs):
        out = [{"step": t + 1000 * e, "TimeLimit.truncated": False} for e in range(num_envs)]
        if t % 4 == 3:  # the episode's last step
            for e, info in enumerate(out):
                info["terminal_observation"] = {k: v[e] for k, v in obs_at(t + 1, num_envs).items()}
        del out[1]["step"]
        return out

    store = storage(num_envs=3, reward_fn=reward_fn, copy_info_dict=True, autoreset_mode="legacy")
    play(store, [4, 4], num_envs=3, infos=infos)
    draws(store, 5)
    assert seen
    for achieved, info in seen:
        assert all(list(row) == ["step"] for row in info)
        env = achieved.astype(np.int64) // 1000
        want = np.where(env == 1, 0, achieved - 1).astype(np.int64)
        assert [int(row["step"]) for row in info] == want.tolist()


@pytest.mark.parametrize("copy_facade", [copy.deepcopy, lambda f: pickle.loads(pickle.dumps(f))], ids=["deepcopy", "pickle"])
def test_a_facade_holding_multi_binary_steps_copies_and_goes_on_checking(copy_facade):
    """The staged path's MultiBinary check was a local closure, which pickle refuses ('Can't pickle
    local object'): a facade that had added a step could not be pickled."""
    bits = gym.spaces.MultiBinary(4)
    space = gym.spaces.Dict(observation=bits, achieved_goal=bits, desired_goal=bits)
    storage = HerReplayStorage(space, gym.spaces.Discrete(3), storage_size=100, num_envs=2, batch_size=4, seed=0)
    obs = {k: np.zeros((2, 4), np.int8) for k in space.spaces}
    no = np.zeros(2, bool)
    for _ in range(3):
        storage.add(obs, np.array([0, 1]), np.zeros(2), no, no, {}, obs)
    copied = copy_facade(storage)
    copied.add(obs, np.array([0, 1]), np.zeros(2), no, no, {}, obs)
    bad = {**obs, "achieved_goal": np.full((2, 4), 2, np.int8)}
    with pytest.raises(ValueError, match=r"achieved_goal.* holds 2 at \(0, 0\) \(env 0\), outside MultiBinary\(4\)"):
        copied.add(obs, np.array([0, 1]), np.zeros(2), no, no, {}, bad)
    assert len(copied) == 2 * 4
