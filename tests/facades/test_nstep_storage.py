"""NStepReplayStorage (rllte API): regression tests for the original's bugs N1-N18."""
from __future__ import annotations

import math
import os

import gymnasium as gym
import numpy as np
import pytest
import torch

from conftest import killed_workers
from torchrl_ext import NStepReplayStorage

OBS = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
ACT = gym.spaces.Discrete(3)


def storage(**kwargs):
    args = dict(num_envs=1, batch_size=2, num_workers=0, n_step=3, discount=0.5, seed=0)
    args.update(kwargs)
    return NStepReplayStorage(OBS, ACT, **args)


def play(store, lengths, env=0, num_envs=1, terminated=True, reward=1.0, start=0.0):
    """Episodes of the given lengths in env ``env``; obs = (global step, env), final obs has -1."""
    t = start
    for length in lengths:
        for i in range(length):
            obs = np.array([[t, e] for e in range(num_envs)], np.float32)
            last = i == length - 1
            nxt = obs + np.array([1.0, 0.0], np.float32)
            if last:
                nxt[env] = [-1.0, env]
            term = np.zeros(num_envs, bool)
            term[env] = last and terminated
            trunc = np.zeros(num_envs, bool)
            trunc[env] = last and not terminated
            store.add(obs, np.zeros(num_envs, np.int64), np.full(num_envs, reward),
                      term, trunc, {}, nxt)
            t += 1
        store.adapter.reset()  # NEXT_STEP: the next call is a new episode's first step
    return t


def drawn(store, rounds=60):
    batches = [store.sample() for _ in range(rounds)]
    return torch.cat([b.observations for b in batches]), batches


@pytest.mark.parametrize("first", ["flat", "column"])
def test_discrete_actions_in_either_accepted_form_after_the_first(first):
    # [num_envs] and [num_envs, 1] are both accepted; the first add fixed the stored
    # shape and the other form then failed in the writer ("'action' has shape (2, 1),
    # expected (2,) ... as in the first write")
    store = storage(num_envs=2, n_step=1, batch_size=64)
    flat, column = np.array([0, 1]), np.array([[1], [2]])
    forms = [flat, column, torch.tensor([[2], [0]]), torch.tensor([1, 2])]
    if first == "column":
        forms = forms[1:] + forms[:1]
    zeros = np.zeros(2, bool)
    for t, action in enumerate(forms):
        obs = np.array([[t, 0], [t, 1]], np.float32)  # (step, env)
        store.add(obs, action, np.ones(2), zeros, zeros, {}, obs + [1, 0])
    assert len(store) == 8
    batch = store.sample()
    assert batch.actions.shape == ((64,) if first == "flat" else (64, 1))
    for (t, env), action in zip(batch.observations.long().tolist(), batch.actions.view(-1).tolist()):
        assert action == int(np.asarray(forms[t]).reshape(-1)[env])


def test_n1_terminal_cuts_bootstrap():
    store = storage()
    play(store, [6])
    obs, batches = drawn(store)
    disc = torch.cat([b.discounts for b in batches]).view(-1)
    steps = obs[:, 0]
    assert bool((disc[steps >= 3] == 0).all())  # windows reaching the terminal
    assert bool((disc[steps < 3] == 0.125).all())


def test_n2_last_n_minus_1_steps_are_sampled():
    store = storage()
    play(store, [6])
    obs, _ = drawn(store)
    assert set(obs[:, 0].tolist()) == {0.0, 1.0, 2.0, 3.0, 4.0, 5.0}


def test_n3_episode_shorter_than_n():
    store = storage(n_step=5, native=True)
    play(store, [2])
    batch = store.sample()
    assert set(batch.steps.view(-1).tolist()) <= {1, 2}


def test_n4_every_env_is_stored():
    store = storage(num_envs=3)
    for t in range(4):
        obs = np.array([[t, e] for e in range(3)], np.float32)
        store.add(obs, np.zeros(3, np.int64), np.ones(3), np.zeros(3, bool), np.zeros(3, bool), {}, obs + [1, 0])
    assert len(store) == 12
    envs = torch.cat([store.sample().observations[:, 1] for _ in range(20)])
    assert set(envs.tolist()) == {0.0, 1.0, 2.0}


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_n5_true_next_observation_in_every_gymnasium_mode(mode):
    env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync",
                       vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode(mode)})
    store = NStepReplayStorage(env.single_observation_space, env.single_action_space, num_envs=2,
                               batch_size=64, num_workers=0, n_step=1, autoreset_mode=mode, seed=0,
                               native=True)
    obs, _ = env.reset(seed=0)
    env.action_space.seed(0)
    for _ in range(200):
        action = env.action_space.sample()
        nxt, r, te, tr, infos = env.step(action)
        store.add(obs, action, r, te, tr, infos, nxt)
        if mode == "Disabled" and (te | tr).any():
            nxt, _ = env.reset(options={"reset_mask": te | tr})
        obs = nxt
    for _ in range(10):
        b = store.sample()
        term = b.terminateds.view(-1)
        final = b.next_observations[term]
        # CartPole terminates past |x| 2.4 or |theta| 12 degrees
        assert bool(((final[:, 0].abs() > 2.4) | (final[:, 2].abs() > 12 * 2 * math.pi / 360)).all())


def test_n6_no_files_in_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = storage()
    play(store, [5, 5])
    store.sample()
    assert os.listdir(tmp_path) == []
    with pytest.raises(ValueError, match="save_snapshot=True needs snapshot_dir"):
        storage(save_snapshot=True)


def test_n6_snapshot_reopens_in_its_directory(tmp_path):
    store = storage(save_snapshot=True, snapshot_dir=tmp_path / "snap")
    play(store, [4, 4])
    store.save()
    reopened = storage(save_snapshot=True, snapshot_dir=tmp_path / "snap")
    assert len(reopened) == len(store) == 8
    assert torch.equal(reopened.sample().observations, store.sample().observations)


def test_n6_a_snapshot_reopens_with_the_constructor_s_n_step_and_its_own_observations(tmp_path):
    """A reopened snapshot served the saved n_step, not the constructor's; one saved
    with other observations reopened, and the first add failed without naming it."""
    import gymnasium as gym

    store = storage(save_snapshot=True, snapshot_dir=tmp_path / "snap", n_step=3)
    play(store, [4, 4])
    store.save()
    reopened = storage(save_snapshot=True, snapshot_dir=tmp_path / "snap", n_step=1)
    assert reopened.rb.sampler.n == 1 and "n_step=1" in repr(reopened)
    assert torch.equal(reopened.sample().rewards, torch.ones(2, 1))  # one-step returns
    wider = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    with pytest.raises(ValueError, match=r"the snapshot in .*snap.buffer holds observations 'observation' of "
                                         r"\(shape, dtype\) \(\(2,\), torch.float32\), but observation_space "
                                         r"gives \(\(3,\), torch.float32\)"):
        NStepReplayStorage(wider, ACT, num_envs=1, batch_size=2, num_workers=0, save_snapshot=True,
                           snapshot_dir=tmp_path / "snap")


def test_n7_length_counts_transitions():
    store = storage()
    play(store, [6])
    assert len(store) == 6


def test_n8_uniform_over_transitions_not_episodes():
    store = storage(n_step=1)
    play(store, [1, 9])  # one 1-step episode (obs 0), one 9-step episode (obs 1..9)
    obs, _ = drawn(store, rounds=400)
    share = float((obs[:, 0] == 0).float().mean())
    assert 0.05 < share < 0.15  # 1/10 of transitions (per-episode sampling would give 1/2)


def test_n9_workers_start_on_python_311():
    store = storage(num_workers=2)
    play(store, [5])
    assert store.sample().observations.shape == (2, 2)


def test_n10_sampling_with_one_episode_and_several_workers():
    store = storage(num_workers=2)
    play(store, [2])
    assert store.sample().rewards.shape == (2, 1)


def test_dropping_a_storage_stops_its_workers_without_killing_them(monkeypatch):
    """The facade and its iterator form a cycle: collected by gc, the DataLoader iterator's
    queues used to be finalized before it, its workers never got the stop signal, and the
    collection waited 5 s per worker before killing them."""
    import gc

    store = storage(num_workers=2)
    play(store, [4])
    store.sample()
    workers = list(store._iter._iterator._workers)
    killed = killed_workers(monkeypatch, workers)
    del store
    gc.collect()
    assert [w.exitcode for w in workers] == [0, 0] and killed == []


def test_n11_worker_batches_cover_the_whole_buffer():
    store = storage(num_workers=2, batch_size=16, num_envs=2)
    for t in range(10):
        obs = np.array([[t, 0], [t, 1]], np.float32)
        store.add(obs, np.zeros(2, np.int64), np.ones(2), np.zeros(2, bool), np.zeros(2, bool), {}, obs + [1, 0])
    for _ in range(4):  # every batch, from either worker, holds both envs
        assert set(store.sample().observations[:, 1].tolist()) == {0.0, 1.0}


def test_n12_new_steps_are_seen_within_fetch_every():
    store = storage(num_workers=2, batch_size=2, fetch_every=2)
    t = play(store, [3])
    store.sample()  # workers running
    play(store, [3], start=t + 100)
    seen = set()
    for _ in range(2 * 1 + 4):  # at most prefetch_factor=1 stale batch per worker
        seen |= set(store.sample().observations[:, 0].tolist())
    assert max(seen) >= t + 100


def test_n12_workers_drawing_two_batches_at_a_time_keep_the_staleness_bound():
    """``fetch_every`` of 3 batches: each worker draws 2 batches at a time, and still
    at most 2 workers x 1 item x 2 batches + 1 held here were prepared before a write."""
    store = storage(num_workers=2, batch_size=2, fetch_every=6)
    assert (store._per_item, store._prefetch) == (2, 1)
    t = play(store, [3])
    store.sample()  # workers running
    play(store, [3], start=t + 100)
    seen = set()
    for _ in range(2 * 1 * 2 + 1 + 4):  # the stale batches, then fresh ones
        seen |= set(store.sample().observations[:, 0].tolist())
    assert max(seen) >= t + 100


@pytest.mark.parametrize("native", [False, True])
def test_worker_items_of_two_batches_are_served_one_batch_at_a_time(native):
    store = storage(num_workers=2, batch_size=4, fetch_every=12, n_step=1, native=native)
    play(store, [30])
    batches = [next(store.replay_iter) for _ in range(6)]
    firsts = [(b["observation"] if native else b[0])[:, 0] for b in batches]
    assert all(f.shape == (4,) for f in firsts)
    assert len({tuple(f.tolist()) for f in firsts}) == 6  # each an own draw, no batch served twice
    assert store.sample().observations.shape == (4, 2)
    store.reset()  # the held batch of the last item goes with the workers
    assert not store._held_batches


def test_n13_capacity_is_global_fifo():
    store = storage(storage_size=12)
    play(store, [5, 5, 5])  # 18 rows for 12 slots
    assert 0 < len(store) <= 12
    obs, _ = drawn(store)
    assert min(obs[:, 0].tolist()) >= 5  # the oldest episode went first


def test_n14_reset_keeps_the_data():
    store = storage(num_workers=2)
    play(store, [4])
    store.sample()
    store.reset()
    assert len(store) == 4
    assert store.sample().observations.shape == (2, 2)


def test_n15_bad_input_raises_instead_of_being_swallowed():
    store = storage()
    play(store, [2])
    with pytest.raises(ValueError, match=r"observations has shape \(1, 3\), expected \(1, 2\)"):
        store.add(np.zeros((1, 3), np.float32), np.zeros(1, np.int64), np.ones(1),
                  np.zeros(1, bool), np.zeros(1, bool), {}, np.zeros((1, 3), np.float32))


def test_n16_many_episodes_all_sampleable():
    store = storage(n_step=1)
    play(store, [1] * 25)
    obs, _ = drawn(store, rounds=200)
    assert set(obs[:, 0].tolist()) == set(float(t) for t in range(25))


def test_n17_terminated_and_truncated_are_returned():
    store = storage(n_step=1, batch_size=1, native=True)
    play(store, [1], terminated=True)
    play(store, [1], terminated=False, start=1.0)
    obs, batches = drawn(store, rounds=20)
    term = torch.cat([b.terminateds for b in batches]).view(-1)
    trunc = torch.cat([b.truncateds for b in batches]).view(-1)
    assert bool((term == (obs[:, 0] == 0)).all()) and bool((trunc == (obs[:, 0] == 1)).all())


def test_n18_dtypes_are_stored_natively_and_kept_with_native():
    pixels = gym.spaces.Box(0, 255, (3, 4, 4), np.uint8)
    frame = np.full((1, 3, 4, 4), 255, np.uint8)
    for native in (False, True):
        store = NStepReplayStorage(pixels, ACT, num_envs=1, batch_size=2, num_workers=0, seed=0,
                                   native=native)
        for _ in range(3):
            store.add(frame, np.array([2]), np.ones(1), np.zeros(1, bool), np.zeros(1, bool), {},
                      frame)
        assert store.rb.storage[0]["observation"].dtype == torch.uint8  # uint8 in memory
        batch = store.sample()
        want = torch.uint8 if native else torch.float32  # the original's float32 by default
        assert batch.observations.dtype == want and batch.next_observations.dtype == want
        assert batch.actions.dtype == (torch.int64 if native else torch.float32)
        assert float(batch.observations.max()) == 255.0  # no normalisation, as the original


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dict_observation_space(num_workers):
    """Each entry of a Dict observation, also when the workers send only the batch's five entries."""
    space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,), np.float32),
                             "goal": gym.spaces.Box(-1, 1, (2,), np.float32)})
    store = NStepReplayStorage(space, ACT, num_envs=1, batch_size=2, num_workers=num_workers, seed=0)
    obs = {"pos": np.zeros((1, 2), np.float32), "goal": np.ones((1, 2), np.float32)}
    for _ in range(3):
        store.add(obs, np.array([0]), np.ones(1), np.zeros(1, bool), np.zeros(1, bool), {},
                  {"pos": obs["pos"] + 1, "goal": obs["goal"]})
    batch = store.sample()
    assert set(batch.observations.keys()) == set(batch.next_observations.keys()) == {"pos", "goal"}
    assert (batch.observations["pos"] == 0).all() and (batch.next_observations["pos"] == 1).all()
    assert (batch.observations["goal"] == 1).all() and (batch.rewards == 1).all()
    if num_workers:  # the workers send the five entries only, each observation entry under both keys
        item = next(store._iter)
        assert sorted(item.keys(include_nested=True, leaves_only=True), key=str) == sorted(
            ["pos", "goal", "action", "discount", ("next", "reward"), ("next", "pos"), ("next", "goal")], key=str)
    store.reset()


def test_constructor_errors():
    with pytest.raises(TypeError, match="observation_space is tuple, expected a gymnasium Space"):
        NStepReplayStorage((2,), ACT)
    with pytest.raises(ValueError, match="fetch_every=0, expected an int >= 1"):
        storage(fetch_every=0)
    with pytest.raises(ValueError, match="the storage is empty; add steps before sampling"):
        storage(num_workers=1).sample()


@pytest.mark.parametrize("native", [False, True])
def test_dict_observation_space_with_one_observation_entry_gives_dicts(native):
    space = gym.spaces.Dict({"observation": gym.spaces.Box(-1, 1, (2,), np.float32)})
    store = NStepReplayStorage(space, ACT, num_envs=1, batch_size=2, num_workers=0, seed=0,
                               native=native)
    obs = {"observation": np.zeros((1, 2), np.float32)}
    for _ in range(3):
        store.add(obs, np.array([0]), np.ones(1), np.zeros(1, bool), np.zeros(1, bool), {}, obs)
    batch = store.sample()
    for observations in (batch.observations, batch.next_observations):
        assert list(observations.keys()) == ["observation"]
        assert observations["observation"].shape == (2, 2)
    if not native:  # replay_iter's [obs, action, reward, discount, next_obs]
        assert list(next(store.replay_iter)[0].keys()) == ["observation"]


@pytest.mark.parametrize("name", ["discount", "action", "next", "index", "steps_to_next_obs"])
def test_dict_observation_entry_named_like_a_batch_entry_is_refused(name):
    box = gym.spaces.Box(-1, 1, (1,), np.float32)
    space = gym.spaces.Dict({"pixels": box, name: box})
    with pytest.raises(ValueError, match=rf"observation_space has an entry {name!r}.*rename it"):
        NStepReplayStorage(space, ACT, num_workers=0)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_held_replay_iter_sees_steps_added_after_it_was_taken(num_workers):
    """DrQ-v2's loop: ``replay_iter = storage.replay_iter`` once, then ``next(replay_iter)`` per update."""
    store = storage(num_workers=num_workers, batch_size=4)

    def add(t):  # one running episode
        obs = np.array([[t, 0]], np.float32)
        store.add(obs, np.zeros(1, np.int64), np.ones(1), np.zeros(1, bool), np.zeros(1, bool), {},
                  obs + [1, 0])

    for t in range(3):
        add(t)
    replay_iter = store.replay_iter
    next(replay_iter)
    for t in range(3, 6):  # fewer steps than a chunk of held steps
        add(t)
    # the batches prepared before the adds: each worker's items in flight and the rest of
    # the item held here (see _worker_items), within fetch_every samples
    stale = num_workers * store._prefetch * store._per_item + store._per_item - 1
    assert stale * store.batch_size <= num_workers * store.fetch_every
    seen = set()
    for _ in range(stale + 4):  # past them
        seen |= set(next(replay_iter)[0][:, 0].tolist())
    assert seen & {3.0, 4.0, 5.0}


def test_storage_size_below_two_rows_per_env_is_refused_at_construction():
    with pytest.raises(ValueError, match=r"storage_size=5 gives 1 row\(s\) to each of num_envs=3 "
                                         r"envs.*at least 2.*storage_size >= 6"):
        storage(storage_size=5, num_envs=3)
    assert len(storage(storage_size=6, num_envs=3)) == 0
