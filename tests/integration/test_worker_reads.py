"""Issue 13, worker classes: DataLoader workers while the main process writes.

Two classes of the hardening issue live here:

* ``torn rows``: workers read a small ring that the main process keeps
  overwriting; every row of every window a worker serves (the transition, its
  n-step window, its frame stack, its sequence, its hindsight goal) must be one
  written step, whole, or the draw is retried;
* ``sampling too early``: a worker stream that fails (no data yet, a worker
  killed) must not leave a dead iterator behind; the next call starts fresh.

The steps are self-checking (see ``SyntheticEnvs`` in the concurrent-writers
test): the observation of step ``t`` of env ``e`` of writer ``w`` in its
episode ``k`` is ``[w, e, k, t]``, so a row from another step shows.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict, TensorDictBase

from test_concurrent_writers import NUM_ENVS, SyntheticEnvs, broken, broken_windows
from torchrl_ext import make_her_replay_buffer, make_loader, make_replay_buffer
from torchrl_ext.facades.episodic import EpisodeReplayBuffer, RingBufferDataset
from torchrl_ext.facades.nstep import NStepReplayStorage
from torchrl_ext.samplers import SequenceSampler
from torchrl_ext.samplers.uniform import EmptyBufferError
from torchrl_ext.storages.pool import EpisodePool

GAMMA = 0.5
CAPACITY = 256  # 64 rows a stream: the ring turns over every few bursts


def broken_stacks(batch: TensorDictBase, n_frames: int) -> int:
    """Frame stacks: ``n_frames`` consecutive steps of one episode, first frame repeated."""
    bad = 0
    for key in ("observation", ("next", "observation")):
        frames = batch[key]  # [B, F, 4]
        last = frames[:, -1]
        offsets = torch.arange(n_frames - 1, -1, -1)
        want_t = (last[:, None, 3] - offsets).clamp(min=0)
        ok = (frames[..., :3] == last[:, None, :3]).all(-1) & (frames[..., 3] == want_t)
        bad += int((~ok.all(-1)).sum())
    return bad


def broken_sequences(batch: TensorDictBase) -> int:
    """Sequences: consecutive whole steps of one episode."""
    obs = batch["observation"]  # [B, L, 4]
    ok = (obs[:, 1:, :3] == obs[:, :1, :3]).all(-1) & (obs[:, 1:, 3] == obs[:, :-1, 3] + 1)
    return int((~ok.all(-1)).sum()) + broken(batch)


def her_reward(achieved: torch.Tensor, desired: torch.Tensor, infos: object = None) -> torch.Tensor:
    return (achieved == desired).all(-1, keepdim=True).float()


def broken_goals(batch: TensorDictBase) -> int:
    """Hindsight: whole steps; a relabelled goal is a later achieved goal of the episode."""
    obs, nxt = batch["observation"], batch["next", "observation"]
    goal, reward = batch["desired_goal"], batch["next", "reward"][:, 0]
    ok = (nxt[:, :3] == obs[:, :3]).all(-1) & (nxt[:, 3] == obs[:, 3] + 1)
    ok &= batch["action"][:, 0] == obs[:, 0] * 1000 + obs[:, 1] * 100 + obs[:, 3]
    ok &= (batch["next", "achieved_goal"] == nxt).all(-1)
    stored = (goal == -1).all(-1)  # kept: the step's own reward
    later = (goal[:, :3] == obs[:, :3]).all(-1) & (goal[:, 3] > obs[:, 3])
    relabelled = her_reward(nxt, goal)[:, 0]
    ok &= torch.where(stored, reward == obs[:, 3], later & (reward == relabelled))
    return int((~ok).sum())


class GoalEnvs(SyntheticEnvs):
    """Synthetic steps with goals: achieved goal = the next observation, desired = -1."""

    def batch(self):
        td = super().batch()
        td["achieved_goal"] = td["observation"].clone()
        td["desired_goal"] = torch.full_like(td["observation"], -1)
        td["next", "achieved_goal"] = td["next", "observation"].clone()
        td["next", "desired_goal"] = td["desired_goal"].clone()
        return td


KINDS = {
    "uniform": (lambda: make_replay_buffer(CAPACITY, num_streams=2 * NUM_ENVS, batch_size=64, seed=0),
                SyntheticEnvs, broken),
    "n_step": (lambda: make_replay_buffer(CAPACITY, num_streams=2 * NUM_ENVS, batch_size=64,
                                          n_step=3, gamma=GAMMA, seed=0),
               SyntheticEnvs, lambda b: broken_windows(b, GAMMA)),
    "frames": (lambda: make_replay_buffer(CAPACITY, num_streams=2 * NUM_ENVS, batch_size=64,
                                          n_frames=4, seed=0),
               SyntheticEnvs, lambda b: broken_stacks(b, 4)),
    "sequences": (lambda: make_replay_buffer(CAPACITY, num_streams=2 * NUM_ENVS, batch_size=64,
                                             sampler=SequenceSampler(4), seed=0),
                  SyntheticEnvs, broken_sequences),
    "compressed frames": (lambda: make_replay_buffer(CAPACITY, num_streams=2 * NUM_ENVS, batch_size=64,
                                                     n_frames=4, compress={"observation": "lz4"}, seed=0),
                          SyntheticEnvs, lambda b: broken_stacks(b, 4)),
    "hindsight": (lambda: make_her_replay_buffer(CAPACITY, her_reward, num_goals=4,
                                                 num_streams=2 * NUM_ENVS, batch_size=64, seed=0),
                  GoalEnvs, broken_goals),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_torn_rows_workers_serve_whole_windows_while_the_ring_wraps(kind):
    """Two writers overwrite a 256-row ring while two workers sample it."""
    build, envs_of, count_broken = KINDS[kind]
    rb = build()
    writers = [(rb.writer_handle(), envs_of(w)) for w in (0, 1)]
    for _ in range(8):
        for handle, envs in writers:
            handle.extend(envs.batch())
    it = iter(make_loader(rb, num_workers=2, seed=0, prefetch_factor=4))
    seen = bad = 0
    index = rb.storage.index
    try:  # counts, not time: a slow machine only takes longer
        while seen < 64 * 40 or index.written.max() <= 20 * index.stream_capacity:
            for handle, envs in writers:
                for _ in range(4):
                    handle.extend(envs.batch())
            batch = next(it)
            bad += count_broken(batch)
            seen += batch.shape[0]
    finally:
        del it
    assert index.written.max() > 20 * index.stream_capacity  # wrapped 20 times while read
    assert seen >= 64 * 40
    assert bad == 0, f"{bad} of {seen} sampled {kind} items are torn"


# ------------------------------------------------------------ sampling too early
def nstep_storage(**kwargs) -> NStepReplayStorage:
    space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    return NStepReplayStorage(space, gym.spaces.Discrete(2), storage_size=1000, num_envs=1,
                              batch_size=4, num_workers=2, pin_memory=False, n_step=2,
                              fetch_every=8, seed=0, **kwargs)


def play(store: NStepReplayStorage, steps: int) -> None:
    for t in range(steps):
        obs = np.array([[t, 0]], np.float32)
        store.add(obs, np.zeros(1, np.int64), np.ones(1), np.array([t == steps - 1]),
                  np.zeros(1, bool), {}, obs + [1, 0])


def test_sampling_too_early_with_workers_recovers_nstep_storage():
    store = nstep_storage()
    with pytest.raises(EmptyBufferError, match="the storage is empty; add steps before sampling"):
        store.sample()
    with pytest.raises(EmptyBufferError, match="the storage is empty"):
        next(store.replay_iter)
    play(store, 6)  # no reset() in between
    assert store.sample().observations.shape == (4, 2)
    assert next(store.replay_iter)[0].shape == (4, 2)


def workers_started_by(sample) -> list[multiprocessing.Process]:
    """The worker processes that the first ``sample()`` starts."""
    before = {child.pid for child in multiprocessing.active_children()}
    sample()
    return [child for child in multiprocessing.active_children() if child.pid not in before]


def kill_workers_and_sample(children, sample, calls: int = 50) -> BaseException:
    """``kill -9`` the loader's two workers, then sample until their loss shows.

    DataLoader reports a dead worker from its ``SIGCHLD`` handler (wherever the
    main thread is then) or from the next batch it waits for; batches already
    fetched still come first.
    """
    assert len(children) == 2
    try:
        for child in children:
            os.kill(child.pid, signal.SIGKILL)
        for child in children:
            child.join(10)
        for _ in range(calls):
            sample()
    except RuntimeError as e:
        return e
    raise AssertionError(f"{calls} samples after the workers were killed, and no error")


def recovers(sample):
    """The sample after the failure, with new workers and no ``reset()``."""
    try:
        return sample()
    except RuntimeError as e:  # the dead iterator's own report, if the signal came first
        assert "DataLoader worker" in str(e), e
        return sample()


def test_sampling_too_early_with_workers_recovers_after_the_workers_are_killed():
    store = nstep_storage()
    play(store, 6)
    error = kill_workers_and_sample(workers_started_by(store.sample), store.sample)
    assert "DataLoader worker" in str(error) or "sampling stream ended" in str(error)
    assert recovers(store.sample).observations.shape == (4, 2)
    assert next(store.replay_iter)[0].shape == (4, 2)


def test_sampling_too_early_with_workers_recovers_episode_replay_buffer():
    dataset = RingBufferDataset(capacity=200)
    buffer = EpisodeReplayBuffer(dataset, batch_size=4, sequence_length=8, num_workers=2, seed=0)
    with pytest.raises(RuntimeError, match="Cannot sample from empty dataset"):
        buffer.sample()
    dataset.add_episode({"obs": torch.arange(5.0)[:, None], "reward": torch.zeros(5)})
    with pytest.raises(RuntimeError, match="the longest stored episode has 5"):
        buffer.sample()
    dataset.add_episode({"obs": torch.arange(20.0)[:, None], "reward": torch.zeros(20)})
    workers = workers_started_by(buffer.sample)  # no reset(): the workers start now
    assert buffer.sample().batch_size == (4, 8)
    error = kill_workers_and_sample(workers, buffer.sample)
    assert "DataLoader worker" in str(error) or "sampling stream ended" in str(error)
    # the killed workers held nothing: writes and new workers go on
    dataset.add_episode({"obs": torch.arange(30.0)[:, None], "reward": torch.zeros(30)})
    assert recovers(buffer.sample).batch_size == (4, 8)


def _sample_forever(pool: EpisodePool) -> None:
    generator = torch.Generator().manual_seed(os.getpid())
    while True:
        pool.sample(64, 16, generator=generator)


def test_worker_killed_mid_sample_leaves_the_episode_pool_writable():
    """``kill -9`` of readers in the middle of their samples, then writes must go on.

    The readers sample without pause, so each kill lands inside a sample; the
    pool's readers take no lock (before, a reader killed holding the pool's
    lock left every later write and sample waiting forever).
    """
    pool = EpisodePool(4096, TensorDict({"obs": torch.zeros(64)}, []))
    for length in (300, 500, 700):
        pool.append(TensorDict({"obs": torch.rand(length, 64)}, [length]))
    fork = multiprocessing.get_context("fork")
    for _ in range(5):
        reader = fork.Process(target=_sample_forever, args=(pool,), daemon=True)
        reader.start()
        time.sleep(0.3)
        os.kill(reader.pid, signal.SIGKILL)
        reader.join(1)  # (another test's DataLoader SIGCHLD handler may have reaped it first)
    writes = []
    writer = threading.Thread(target=lambda: writes.append(pool.append(
        TensorDict({"obs": torch.ones(200, 64)}, [200]))), daemon=True)
    writer.start()
    writer.join(10)
    assert writes, "append blocked after readers were killed mid-sample"
    assert pool.sample(8, 16, generator=torch.Generator().manual_seed(0)).batch_size == (8, 16)


@pytest.mark.parametrize("how", ["load_state_dict", "loads"])
def test_a_checkpoint_loaded_under_a_worker_s_draw_makes_it_draw_again(how, tmp_path):
    """A worker draws without the buffer's lock: a checkpoint loaded in place meanwhile
    rewrites every row, so the draw is stale (as for a write), whatever the checkpoint's
    own write count; writes after the load are seen as new too."""
    envs = SyntheticEnvs(0)
    saved = make_replay_buffer(CAPACITY, batch_size=8, seed=0)
    saved.extend(envs.batch())
    saved.dumps(tmp_path / "ckpt")
    state = saved.state_dict()
    rb = make_replay_buffer(CAPACITY, batch_size=8, seed=0)
    for _ in range(20):  # this buffer has written far more than the checkpoint had
        rb.extend(envs.batch())
    storage, rows = rb.storage, rb.sample()["index"]
    token = storage.read_token()
    if how == "loads":
        rb.loads(tmp_path / "ckpt")
    else:
        rb.load_state_dict(state)
    assert storage.stale(rows, token)
    token = storage.read_token()
    assert not storage.stale(rows, token)
    rb.extend(envs.batch())
    assert storage.stale(rb.storage.live_transition_rows(), token)


def test_a_buffer_emptied_under_a_worker_s_draw_makes_it_draw_again():
    """rb.empty() forgets every row: a worker that drew before it must not serve the draw,
    and the rows written after it are new to a draw taken in between."""
    envs = SyntheticEnvs(0)
    rb = make_replay_buffer(CAPACITY, batch_size=8, seed=0)
    for _ in range(3):
        rb.extend(envs.batch())
    storage, rows = rb.storage, rb.sample()["index"]
    token = storage.read_token()
    rb.empty()
    assert storage.stale(rows, token)
    token = storage.read_token()
    rb.extend(envs.batch())
    assert storage.stale(rb.storage.live_transition_rows(), token)
