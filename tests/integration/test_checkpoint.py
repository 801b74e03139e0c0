"""Checkpoint and resume: data, cursors, episode index, in-progress episodes, RNG."""
from __future__ import annotations

import pickle
import time

import pytest
import torch

from conftest import steps, transitions_of
from torchrl_ext import make_replay_buffer


def fill(rb, start=0, n_steps=9):
    """Two envs with different episode lengths; stream 0 ends mid-way (in progress)."""
    for t in range(start, start + n_steps):
        obs = torch.tensor([[float(t)], [100.0 + t]])
        done = torch.tensor([[t % 4 == 3], [t % 3 == 2]])
        rb.extend(steps(obs, obs + 0.5, terminated=done))


@pytest.mark.parametrize("backend", ["tensor", "memmap"])
def test_dumps_loads_round_trip(backend, tmp_path):
    rb = make_replay_buffer(20, batch_size=4, seed=3, backend=backend, scratch_dir=tmp_path / "a")
    fill(rb, n_steps=13)  # wraps the 10-row rings
    rb.sample()  # move the RNG away from its seed
    rb.dumps(tmp_path / "ckpt")

    restored = make_replay_buffer(20, batch_size=4, seed=999, backend=backend, scratch_dir=tmp_path / "b")
    restored.loads(tmp_path / "ckpt")

    assert len(restored) == len(rb)
    assert restored.write_count == rb.write_count
    assert transitions_of(restored.storage.get(slice(None))) == transitions_of(rb.storage.get(slice(None)))
    for name in ("written", "is_open", "episode_count", "row_episode", "episode_start", "episode_length"):
        assert torch.equal(getattr(restored.storage.index, name), getattr(rb.storage.index, name)), name
    # the next sample is the one the original draws
    assert torch.equal(restored.sample()["index"], rb.sample()["index"])
    # in-progress episodes continue identically
    fill(rb, start=13, n_steps=3)
    fill(restored, start=13, n_steps=3)
    assert transitions_of(restored.storage.get(slice(None))) == transitions_of(rb.storage.get(slice(None)))
    assert torch.equal(restored.sample()["observation"], rb.sample()["observation"])


def test_state_dict_round_trip():
    rb = make_replay_buffer(40, batch_size=4, seed=1)
    fill(rb)
    state = rb.state_dict()
    restored = make_replay_buffer(40, batch_size=4, seed=2)
    restored.load_state_dict(state)
    assert transitions_of(restored.storage.get(slice(None))) == transitions_of(rb.storage.get(slice(None)))
    assert torch.equal(restored.sample()["index"], rb.sample()["index"])


def test_empty_buffer_round_trip(tmp_path):
    rb = make_replay_buffer(40, seed=1)
    rb.dumps(tmp_path)
    restored = make_replay_buffer(40, seed=1)
    restored.loads(tmp_path)
    assert len(restored) == 0


def test_pickle_copy_is_independent():
    rb = make_replay_buffer(40, batch_size=4, seed=1)
    fill(rb)
    copy = pickle.loads(pickle.dumps(rb.storage))
    fill(rb, start=9, n_steps=2)
    assert len(copy) != len(rb)
    assert len(copy) == 18  # 9 steps of 2 envs, nothing evicted


def test_load_into_buffer_with_other_entries_refused(tmp_path):
    rb = make_replay_buffer(40, seed=1)
    fill(rb)
    rb.dumps(tmp_path)
    other = make_replay_buffer(40, seed=1)
    other.extend(steps(torch.zeros(2, 3), torch.ones(2, 3)))
    with pytest.raises(ValueError, match="entries or stream count differ"):
        other.loads(tmp_path)


def _uniform(**kwargs):
    return make_replay_buffer(40, batch_size=4, seed=1, **kwargs)


def _prioritized(**kwargs):
    from torchrl_ext.samplers import PrioritizedTransitionSampler

    return make_replay_buffer(40, batch_size=4, seed=1, sampler=PrioritizedTransitionSampler(), **kwargs)


def _epoch(**kwargs):
    from torchrl_ext.samplers import EpochSampler

    return make_replay_buffer(40, batch_size=4, seed=1, sampler=EpochSampler(**kwargs))


@pytest.mark.parametrize(
    "saved, built, message",
    [
        (_uniform, _prioritized, r"sampler: the checkpoint has UniformTransitionSampler, "
                                 r"this buffer PrioritizedTransitionSampler"),
        (_prioritized, _uniform, r"the checkpoint has PrioritizedTransitionSampler, "
                                 r"this buffer UniformTransitionSampler"),
        (_epoch, _uniform, r"the checkpoint has EpochSampler, this buffer UniformTransitionSampler"),
        (lambda: _uniform(n_step=3), _uniform,
         r"the checkpoint has NStepSampler > UniformTransitionSampler, this buffer UniformTransitionSampler"),
        (_epoch, lambda: _epoch(ensemble_size=2),
         r"EpochSampler ensemble_size: the checkpoint has None, this buffer 2"),
        (_epoch, lambda: _epoch(holdout_fraction=0.2),
         r"EpochSampler holdout_fraction: the checkpoint has 0.0, this buffer 0.2"),
        (_uniform, lambda: _uniform(done_keys=[("next", "done")]),
         r"writer done_keys: the checkpoint has \[\['next', 'done'\], \['next', 'terminated'\], "
         r"\['next', 'truncated'\]\], this buffer \[\['next', 'done'\]\]"),
    ],
    ids=["uniform-to-prioritized", "prioritized-to-uniform", "epoch-to-uniform", "nstep-to-plain",
         "ensemble", "holdout", "done-keys"],
)
@pytest.mark.parametrize("route", ["loads", "load_state_dict"])
def test_loads_into_a_buffer_built_otherwise_names_what_differs(saved, built, message, route, tmp_path):
    """load_state_dict checked nothing: a prioritized checkpoint loaded into a uniform
    buffer without its priorities, and a failed load left rows without priorities."""
    rb = saved()
    fill(rb)
    other = built()
    if route == "loads":
        rb.dumps(tmp_path / "ckpt")
        where, load = r"TransitionReplayBuffer.loads\('.*ckpt'\)", lambda: other.loads(tmp_path / "ckpt")
    else:
        where, load = r"TransitionReplayBuffer.load_state_dict", lambda: other.load_state_dict(rb.state_dict())
    with pytest.raises(ValueError, match=where + r": the checkpoint was written by a buffer built otherwise: .*"
                       + message):
        load()
    assert len(other) == 0  # refused before anything was loaded


def _her(seed=1):
    from torchrl_ext import make_her_replay_buffer

    rb = make_her_replay_buffer(40, lambda a, d, i: -(a != d).any(-1).float(), n_step=2,
                                batch_size=6, seed=seed)
    extend = rb.extend

    def extend_with_goals(td):  # the achieved goal is the observation; the desired one 0
        for key in (("achieved_goal",), ("next", "achieved_goal")):
            td[key] = td[(*key[:-1], "observation")].clone()
            td[(*key[:-1], "desired_goal")] = torch.zeros_like(td[key])
        return extend(td)

    rb.extend = extend_with_goals
    return rb


def _change_frames(rb):
    rb.sampler.n_frames, rb.sampler.base.n = 2, 1
    return lambda s: (s.n_frames, s.base.n)


def _change_goals(rb):
    from torchrl_ext.samplers import HindsightStrategy

    rb.sampler.strategy, rb.sampler.num_goals, rb.sampler.base.n = HindsightStrategy.FINAL, 2, 1
    return lambda s: (s.strategy, s.num_goals, s.base.n)


@pytest.mark.parametrize(
    "make, change",
    [(lambda seed=1: make_replay_buffer(40, batch_size=4, seed=seed, n_step=3, n_frames=4), _change_frames),
     (_her, _change_goals)],
    ids=["frames-nstep", "hindsight"],
)
def test_dumps_keeps_sampler_settings_changed_after_build(make, change, tmp_path):
    """n, n_frames, strategy, num_goals may change per call; a checkpoint keeps the current ones."""
    rb = make()
    fill(rb, n_steps=13)
    settings = change(rb)
    rb.dumps(tmp_path / "ckpt")
    restored = make(seed=5)  # built with the same arguments as rb
    restored.loads(tmp_path / "ckpt")
    assert settings(restored.sampler) == settings(rb.sampler)
    a, b = rb.sample(), restored.sample()
    assert torch.equal(a["index"], b["index"]) and (a == b).all()


def _write_until(rb, stop) -> None:
    t = 0
    while not stop.is_set():  # obs t, next obs t + 1; an episode ends every 5 steps
        obs = torch.tensor([[float(t)]])
        rb.extend(steps(obs, obs + 1, terminated=torch.tensor([[t % 5 == 4]])))
        t += 1


def test_dumps_while_another_process_writes_is_one_point_in_time(tmp_path):
    """A shared buffer (rb.share(), as multi-process collectors make it) saved while
    a worker process writes and its ring wraps: each checkpoint holds the rows its
    episode index describes, none written after."""
    import multiprocessing

    rb = make_replay_buffer(64, batch_size=4, seed=1, num_streams=2).share()
    rb.extend(steps(torch.tensor([[-10.0]]), torch.tensor([[-9.0]])))
    ctx = multiprocessing.get_context("fork")
    stop = ctx.Event()
    worker = ctx.Process(target=_write_until, args=(rb, stop))
    worker.start()
    try:
        while int(rb.storage.episode_index.written.sum()) < 200:  # its 32-row ring wraps
            time.sleep(0.01)
        for i in range(20):
            rb.dumps(tmp_path / str(i))
    finally:
        stop.set()
        worker.join(60)
    for i in range(20):
        restored = make_replay_buffer(64, batch_size=4, seed=1, num_streams=2)
        restored.loads(tmp_path / str(i))
        td = restored.storage.get(slice(None))
        assert torch.equal(td["next", "observation"], td["observation"] + 1), i
