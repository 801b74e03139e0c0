"""The buffer fed by a TorchRL Collector over a SerialEnv of CartPoles.

The collector's own output (captured with ``post_collect_hook``, or by
iterating a collector without a buffer) is the reference: every frame it
produced is a real transition of one of the envs, in time order per env.
"""
from __future__ import annotations

import contextlib
import warnings
from collections import Counter
from collections.abc import Iterator

import pytest
import torch
from tensordict import TensorDictBase

with warnings.catch_warnings():
    # torchrl 0.14 defines its own weight updaters on a base class it deprecates,
    # and warns for each of them when torchrl.collectors is first imported
    warnings.filterwarnings(
        "ignore", message=r"Creating \w+ which inherits from WeightUpdaterBase",
        category=DeprecationWarning,
    )
    from torchrl.collectors import Collector
from torchrl.envs import GymEnv, SerialEnv, StepCounter, TransformedEnv

from torchrl_ext import make_replay_buffer

NUM_ENVS = 2
FRAMES_PER_BATCH = 64
X_LIMIT, THETA_LIMIT = 2.4, 12 * 2 * torch.pi / 360

OBS_KEYS = ("observation", "step_count")


def make_env(max_steps: int | None = None):
    return TransformedEnv(GymEnv("CartPole-v1"), StepCounter(max_steps=max_steps))


def make_collector(total_frames: int, seed: int, max_steps: int | None = None, **kwargs):
    torch.manual_seed(seed)  # the random policy draws from torch's global RNG
    env = SerialEnv(NUM_ENVS, lambda: make_env(max_steps))
    env.set_seed(seed)  # before the collector's first reset
    collector = Collector(
        env, policy=None, frames_per_batch=FRAMES_PER_BATCH, total_frames=total_frames, **kwargs
    )
    return collector


@contextlib.contextmanager
def shut_down_after(collector: Collector) -> Iterator[Collector]:
    """The collector, shut down (its env too) however the block ends."""
    try:
        yield collector
    finally:
        collector.shutdown()


def collect_into(rb, total_frames: int, seed: int, max_steps: int | None = None):
    """Run a collector with ``replay_buffer=rb``; return what it wrote, ``[N, T]`` each."""
    batches: list[TensorDictBase] = []
    collector = make_collector(
        total_frames, seed, max_steps,
        replay_buffer=rb, post_collect_hook=lambda td: batches.append(td.clone()),
    )
    with shut_down_after(collector):
        for _ in collector:
            pass
    return batches


def collect(total_frames: int, seed: int, max_steps: int | None = None):
    """Iterate a collector without a buffer; return copies of its batches."""
    with shut_down_after(make_collector(total_frames, seed, max_steps)) as collector:
        return [batch.clone() for batch in collector]


# --------------------------------------------------------------- transitions
def as_tuples(td: TensorDictBase) -> list[tuple]:
    """Transitions of a ``[B]`` TensorDict as hashable tuples."""
    n = td.shape[0]
    keys = (
        *OBS_KEYS, "action", ("next", "reward"), *(("next", k) for k in OBS_KEYS),
        ("next", "terminated"), ("next", "truncated"),
    )
    matrix = torch.cat([td.get(k).reshape(n, -1).to(torch.float64) for k in keys], dim=1)
    return [tuple(row) for row in matrix.tolist()]


def per_env_reference(batches: list[TensorDictBase]) -> list[TensorDictBase]:
    """Each env's steps in time order: ``[total_T]`` per env."""
    full = torch.cat(batches, dim=1)  # [N, sum T]
    return [full[i] for i in range(full.shape[0])]


def per_stream_stored(rb) -> list[Counter]:
    rows = torch.as_tensor(rb.storage.live_transition_rows())
    stream = rb.storage.index.row_coordinates(rows.numpy())[1].tolist()
    out = [Counter() for _ in range(rb.storage.num_streams)]
    for s, t in zip(stream, as_tuples(rb.storage.get(rows))):
        out[s][t] += 1
    return out


def check_continuity(sample: TensorDictBase, reference: list[TensorDictBase]) -> None:
    """Each sampled transition is a reference step; its next obs is the obs of the
    step after it in the same env, unless the step ended the episode."""
    where = {}
    for i, steps in enumerate(reference):
        for t, key in enumerate(as_tuples(steps)):
            where[key] = (i, t)
    for row, key in zip(sample, as_tuples(sample)):
        assert key in where
        i, t = where[key]
        steps = reference[i]
        if bool(row["next", "done"]):
            continue
        if t + 1 < steps.shape[0]:
            assert torch.equal(row["next", "observation"], steps[t + 1]["observation"])


def check_terminal_obs(td: TensorDictBase) -> None:
    terminated = td["next", "terminated"].view(-1)
    final = td["next", "observation"][terminated]
    assert ((final[:, 0].abs() > X_LIMIT) | (final[:, 2].abs() > THETA_LIMIT)).all()


# -------------------------------------------------------------------- tests
@pytest.mark.parametrize("max_steps", [None, 20], ids=["terminations", "with-truncation"])
def test_collector_writes_every_frame(max_steps):
    total = 6 * FRAMES_PER_BATCH
    rb = make_replay_buffer(10_000, batch_size=128, seed=0)
    batches = collect_into(rb, total, seed=0, max_steps=max_steps)
    assert sum(b.numel() for b in batches) == total
    assert len(rb) == total == rb.write_count
    reference = per_env_reference(batches)
    # exactly the collector's transitions, env i in stream i
    for i, stored in enumerate(per_stream_stored(rb)):
        assert stored == Counter(as_tuples(reference[i])), f"stream {i}"
    everything = rb.storage.get(slice(None))
    assert everything["next", "terminated"].any()
    check_terminal_obs(everything)
    if max_steps is not None:
        truncated = everything["next", "truncated"].view(-1)
        assert truncated.any()
        assert (everything["next", "step_count"][truncated] == max_steps).all()
    for _ in range(3):
        sample = rb.sample()
        assert (sample["next", "step_count"] == sample["step_count"] + 1).all()
        check_terminal_obs(sample)
        check_continuity(sample, reference)
    # episodes per stream: one per done, plus the running one
    for i, steps in enumerate(reference):
        done = steps["next", "done"].view(-1)
        expected = int(done.sum()) + int(not done[-1])
        assert int(rb.storage.index.episode_count[i]) == expected


def test_collector_output_extended_by_hand_matches_replay_buffer_arg():
    """Iterating the collector and calling rb.extend gives the same buffer."""
    total = 4 * FRAMES_PER_BATCH
    rb_auto = make_replay_buffer(10_000, seed=0)
    batches_auto = collect_into(rb_auto, total, seed=1)
    rb_hand = make_replay_buffer(10_000, seed=0)
    batches = collect(total, seed=1)
    for batch in batches:
        rb_hand.extend(batch)
    assert len(rb_hand) == total
    stored = per_stream_stored(rb_hand)
    for i, steps in enumerate(per_env_reference(batches)):
        assert stored[i] == Counter(as_tuples(steps))
    # same seeds, same rollouts, same buffer contents
    for a, b in zip(batches, batches_auto, strict=True):
        assert torch.equal(a["observation"], b["observation"])
    assert stored == per_stream_stored(rb_auto)


def test_flat_batches_with_traj_ids():
    """[N*T] batches (steps of a trajectory in order) need num_streams."""
    total = 6 * FRAMES_PER_BATCH
    batches = collect(total, seed=2)
    rb = make_replay_buffer(10_000, num_streams=NUM_ENVS, batch_size=128, seed=0)
    for batch in batches:
        rb.extend(batch.reshape(-1))
    assert len(rb) == total
    reference = per_env_reference(batches)
    everything = rb.storage.get(slice(None))
    assert Counter(as_tuples(everything)) == Counter(
        t for steps in reference for t in as_tuples(steps)
    )
    check_terminal_obs(everything)
    for _ in range(3):
        sample = rb.sample()
        assert (sample["next", "step_count"] == sample["step_count"] + 1).all()
        check_continuity(sample, reference)
    # a trajectory stays on one stream, in one episode
    traj = everything["collector", "traj_ids"]
    rows = torch.as_tensor(rb.storage.live_transition_rows())
    streams = torch.from_numpy(rb.storage.index.row_coordinates(rows.numpy())[1])
    for tid in traj.unique().tolist():
        assert streams[traj == tid].unique().numel() == 1


def test_time_first_batches():
    """A ``[T, N]`` batch with its first dim named "time" is transposed."""
    total = 4 * FRAMES_PER_BATCH
    batches = collect(total, seed=3)
    rb = make_replay_buffer(10_000, batch_size=64, seed=0)
    for batch in batches:
        time_first = batch.transpose(0, 1)
        assert time_first.names[0] == "time"
        rb.extend(time_first)
    assert len(rb) == total
    stored = per_stream_stored(rb)
    reference = per_env_reference(batches)
    for i, steps in enumerate(reference):
        assert stored[i] == Counter(as_tuples(steps)), f"stream {i}"
    sample = rb.sample()
    assert (sample["next", "step_count"] == sample["step_count"] + 1).all()
    check_continuity(sample, reference)


# ----------------------------------------------------------------- n-step
def brute_force_nstep(env_steps: TensorDictBase, i: int, n: int, gamma: float) -> tuple:
    """The n-step window of step ``i`` of one env, walking the collector output."""
    ret, k, j = 0.0, 0, i
    traj = env_steps["collector", "traj_ids"]
    while True:
        ret += gamma**k * float(env_steps["next", "reward"][j])
        k += 1
        done = bool(env_steps["next", "done"][j])
        if done or k == n or j + 1 == env_steps.shape[0] or traj[j + 1] != traj[j]:
            break
        j += 1
    terminated = bool(env_steps["next", "terminated"][j])
    next_obs = env_steps["next", "observation"][j]
    return ret, next_obs, terminated, k, gamma**k * (not terminated)


def test_nstep_windows_of_collector_batches_match_brute_force():
    n, gamma = 3, 0.9
    rb = make_replay_buffer(4096, n_step=n, gamma=gamma, seed=0)
    reference = per_env_reference(collect_into(rb, total_frames=640, seed=5, max_steps=12))
    where = {}  # (traj id, step count) -> (env, position)
    for env, steps in enumerate(reference):
        for pos, (traj, count) in enumerate(
            zip(steps["collector", "traj_ids"].tolist(), steps["step_count"].view(-1).tolist())
        ):
            where[(traj, count)] = (env, pos)
    for _ in range(5):
        batch = rb.sample(128)
        keys = zip(batch["collector", "traj_ids"].tolist(), batch["step_count"].view(-1).tolist())
        for b, key in enumerate(keys):
            env, pos = where[key]
            ret, next_obs, terminated, k, discount = brute_force_nstep(reference[env], pos, n, gamma)
            assert int(batch["steps_to_next_obs"][b]) == k
            assert abs(float(batch["next", "reward"][b]) - ret) < 1e-5
            assert torch.equal(batch["next", "observation"][b], next_obs)
            assert bool(batch["next", "terminated"][b]) == terminated
            assert abs(float(batch["discount"][b]) - discount) < 1e-6


def test_compact_obs_batches_are_refused_not_stored_without_next_observations():
    """``Collector(compact_obs=True)`` drops the observations under "next", and with them
    every episode's true final observation. The root done flags, present under "next"
    too, passed for an observation: the buffer stored the steps and served batches
    without any next observation. The first write is refused, naming the option."""
    rb = make_replay_buffer(1000, seed=0)
    collector = make_collector(2 * FRAMES_PER_BATCH, seed=0, replay_buffer=rb, compact_obs=True)
    with shut_down_after(collector), pytest.raises(
        KeyError, match=r"no observation found: no entry other than the done flags.*compact_obs=True"
    ):
        next(iter(collector))
    assert len(rb) == 0



def test_single_env_collector_is_told_to_pass_num_streams_1():
    """A collector over one (unbatched) env writes ``[T]`` batches with trajectory ids (not
    named "time" on the way to the buffer), which read as flat fragments of any number of
    envs: the error asked for num_streams without saying that one env means 1."""
    env = make_env(max_steps=7)
    collector = Collector(env, policy=None, frames_per_batch=10, total_frames=20,
                          replay_buffer=make_replay_buffer(1000, seed=0))
    with shut_down_after(collector), pytest.raises(
        ValueError, match=r"needs the number of envs: .*num_streams=1\) for a collector over one env"
    ):
        next(iter(collector))
    rb = make_replay_buffer(1000, num_streams=1, seed=0)  # as the message says
    collector = Collector(env, policy=None, frames_per_batch=10, total_frames=40, replay_buffer=rb)
    with shut_down_after(collector):
        for _ in collector:
            pass
    assert len(rb) == 40 and (rb.storage.get(slice(None))["next", "step_count"] <= 7).all()
