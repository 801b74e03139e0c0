"""Several collectors (and a gymnasium loop) writing into one buffer.

Two TorchRL collectors both number their trajectories from 0: written as one
writer, their episodes were stitched together (the issue's bug: 12 of 800
sampled transitions broke the dynamics). Each writer now has its own streams;
every sampled transition is checked against CartPole's dynamics, and windows,
sequences and hindsight goals against the collectors' own output.
"""
from __future__ import annotations

import multiprocessing
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDictBase

with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message=r"Creating \w+ which inherits from WeightUpdaterBase",
        category=DeprecationWarning,
    )
    from torchrl.collectors import Collector, MultiSyncCollector
from torchrl.envs import GymWrapper, SerialEnv, StepCounter, TransformedEnv

from cartpole import broken_transitions, follows_dynamics, goal_reward, make_goal_cartpole
from test_collector import brute_force_nstep
from torchrl_ext import EpisodeReplayBuffer, RingBufferDataset, make_her_replay_buffer, make_replay_buffer
from torchrl_ext.envs import GymVectorAdapter
from torchrl_ext.samplers import PrioritizedTransitionSampler, SequenceSampler

NUM_ENVS, FRAMES_PER_BATCH, MAX_STEPS = 2, 64, 25


def make_env():
    return TransformedEnv(GymWrapper(make_goal_cartpole()), StepCounter(max_steps=MAX_STEPS))


def make_collector(seed: int, replay_buffer, batches: list, total_frames: int, **kwargs):
    torch.manual_seed(seed)  # the random policy draws from torch's global RNG
    env = SerialEnv(NUM_ENVS, make_env)
    env.set_seed(seed)
    return Collector(
        env, policy=None, frames_per_batch=FRAMES_PER_BATCH, total_frames=total_frames,
        replay_buffer=replay_buffer, post_collect_hook=lambda td: batches.append(td.clone()),
        **kwargs,
    )


def collect_alternately(rb_for, num_batches: int = 8) -> list[list[TensorDictBase]]:
    """Two collectors taking turns, collector ``c`` writing to ``rb_for(c)``.

    Returns each collector's batches, as it produced them.
    """
    outputs: list[list[TensorDictBase]] = [[], []]
    collectors = [
        make_collector(c, rb_for(c), outputs[c], num_batches * FRAMES_PER_BATCH) for c in (0, 1)
    ]
    try:
        for _ in zip(*collectors):
            pass
    finally:
        for collector in collectors:
            collector.shutdown()
    return outputs


class Reference:
    """Where each collected step came from: ``(collector, env, position)``."""

    def __init__(self, outputs: list[list[TensorDictBase]]) -> None:
        self.outputs = outputs
        self.steps = []  # [collector][env] -> [T] TensorDict in time order
        self.where: dict[tuple, tuple[int, int, int]] = {}
        for c, batches in enumerate(outputs):
            full = torch.cat(batches, dim=1)  # [envs, sum T]
            self.steps.append([full[i] for i in range(full.shape[0])])
            for i in range(full.shape[0]):
                for t, key in enumerate(self.keys(full[i])):
                    self.where[key] = (c, i, t)

    @staticmethod
    def keys(td: TensorDictBase) -> list[tuple]:
        """A step's identity: its observation and step count."""
        obs = torch.cat([td["observation"], td["step_count"].double()], -1)
        return [tuple(row) for row in obs.reshape(-1, 5).tolist()]

    def locate(self, td: TensorDictBase) -> list[tuple[int, int, int]]:
        return [self.where[key] for key in self.keys(td)]

    def check_nstep(self, batch: TensorDictBase, n: int, gamma: float) -> None:
        """Every window is the brute-force n-step window of its collector's env."""
        for b, (c, i, t) in enumerate(self.locate(batch)):
            ret, next_obs, terminated, k, discount = brute_force_nstep(self.steps[c][i], t, n, gamma)
            assert int(batch["steps_to_next_obs"][b]) == k
            assert abs(float(batch["next", "reward"][b]) - ret) < 1e-5
            assert torch.equal(batch["next", "observation"][b], next_obs)
            assert bool(batch["next", "terminated"][b]) == terminated
            assert abs(float(batch["discount"][b]) - discount) < 1e-6

    def check_sequences(self, batch: TensorDictBase) -> None:
        """``[B, L]``: consecutive steps of one env of one collector, one trajectory."""
        assert broken_transitions(batch) == 0
        assert torch.equal(batch["observation"][:, 1:], batch["next", "observation"][:, :-1])
        where = np.array([self.locate(row) for row in batch.unbind(0)])  # [B, L, 3]
        assert (where[:, :, :2] == where[:, :1, :2]).all()
        assert (np.diff(where[:, :, 2], axis=1) == 1).all()
        traj = batch["collector", "traj_ids"]
        assert (traj == traj[:, :1]).all()

    def check_hindsight(self, batch: TensorDictBase) -> int:
        """Relabelled goals (non-zero) are achieved goals of the same trajectory, at or
        after the step; returns how many rows were relabelled."""
        assert broken_transitions(batch) == 0
        relabelled = (batch["desired_goal"] != 0).any(-1)
        for b, (c, i, t) in enumerate(self.locate(batch)):
            if not relabelled[b]:
                continue
            steps = self.steps[c][i]
            traj = steps["collector", "traj_ids"]
            future = (torch.arange(steps.shape[0]) >= t) & (traj == traj[t])
            assert (steps["next", "achieved_goal"][future] == batch["desired_goal"][b]).all(-1).any()
            expected = goal_reward(batch["next", "achieved_goal"][b], batch["desired_goal"][b])
            assert float(batch["next", "reward"][b]) == float(expected)
        return int(relabelled.sum())

    def replay(self, rb) -> None:
        """Write the collectors' batches again, taking turns, each through its own handle."""
        handles = [rb.writer_handle(), rb.writer_handle()]
        for pair in zip(*self.outputs):
            for handle, batch in zip(handles, pair):
                handle.extend(batch)


@pytest.fixture(scope="module")
def handles_run():
    """A buffer of two collectors writing through handles, and their output."""
    rb = make_replay_buffer(8192, num_streams=4, seed=0, batch_size=256)
    handles = [rb.writer_handle(), rb.writer_handle()]
    outputs = collect_alternately(lambda c: handles[c])
    return rb, handles, Reference(outputs)


# --------------------------------------------------------------------- the bug
def test_two_collectors_as_one_writer_are_refused():
    """Both collectors hand the buffer itself: trajectory ids collide, and the
    step that would be stitched onto the other collector's episode is refused."""
    rb = make_replay_buffer(8192, num_streams=4, seed=0)
    with pytest.raises(ValueError, match=(
        r"continues its running episode, but its observation differs from that episode's "
        r"last next observation.*give each its own rb.writer_handle\(\)"
    )):
        collect_alternately(lambda c: rb, num_batches=12)


def test_two_collectors_with_handles_keep_their_episodes(handles_run):
    rb, handles, reference = handles_run
    index = rb.storage.index
    streams = [index.owned_streams(h.writer_id).tolist() for h in handles]
    assert streams == [[0, 1], [2, 3]]
    everything = rb.storage.get(slice(None))
    assert broken_transitions(everything) == 0
    # stream by stream, exactly the steps of one env of one collector
    rows = rb.storage.live_transition_rows()
    stream_of = torch.from_numpy(index.row_coordinates(rows.numpy())[1])
    origin = torch.tensor(reference.locate(everything))  # [N, 3]
    for s in range(4):
        c, i = divmod(s, 2)
        assert (origin[stream_of == s, :2] == torch.tensor([c, i])).all()
        assert int((stream_of == s).sum()) == reference.steps[c][i].shape[0]
    for _ in range(4):
        assert broken_transitions(rb.sample()) == 0


def test_nstep_windows_of_two_collectors_are_exact(handles_run):
    rb, _, reference = handles_run
    n, gamma = 3, 0.9
    nstep = make_replay_buffer(8192, num_streams=4, n_step=n, gamma=gamma, seed=1)
    reference.replay(nstep)
    reference.check_nstep(nstep.sample(512), n, gamma)


def test_sequences_of_two_collectors_stay_in_one_episode(handles_run):
    rb, _, reference = handles_run
    rb.set_sampler(SequenceSampler(4))
    try:
        batch = rb.sample(128)  # [128, 4]
    finally:
        rb.set_sampler(make_replay_buffer(8).sampler)
    assert batch.shape == (128, 4)
    reference.check_sequences(batch)


def test_prioritized_sampling_of_two_collectors(handles_run):
    _, _, reference = handles_run
    rb = make_replay_buffer(
        8192, num_streams=4, seed=0, sampler=PrioritizedTransitionSampler(alpha=0.7, beta=0.5)
    )
    reference.replay(rb)
    for _ in range(3):
        sample = rb.sample(256)  # new rows got the maximum priority
        assert broken_transitions(sample) == 0
        sample.set("td_error", sample["observation"][:, 2].abs() + 1e-3)  # learner's errors
        rb.update_tensordict_priority(sample)


def test_hindsight_goals_of_two_collectors_come_from_their_own_episodes():
    her = make_her_replay_buffer(
        8192, goal_reward, strategy="future", num_goals=4, num_streams=4, seed=0,
    )
    handles = [her.writer_handle(), her.writer_handle()]
    reference = Reference(collect_alternately(lambda c: handles[c], num_batches=6))
    assert reference.check_hindsight(her.sample(500)) == her.sampler.n_virtual(500)


# ------------------------------------------------------------- other writers
def test_collector_next_to_a_gymnasium_loop():
    """A collector (writer 0: it gets the buffer itself) and a gymnasium vector
    loop (its own handle) write into one buffer, taking turns."""
    rb = make_replay_buffer(8192, num_streams=NUM_ENVS + 3, seed=0, batch_size=256)
    loop = rb.writer_handle()
    envs = gym.vector.SyncVectorEnv([make_goal_cartpole] * 3)
    adapter = GymVectorAdapter(3)
    obs, _ = envs.reset(seed=3)
    outputs: list[TensorDictBase] = []
    torch.manual_seed(0)
    env = SerialEnv(NUM_ENVS, lambda: TransformedEnv(GymWrapper(make_goal_cartpole())))
    env.set_seed(0)
    collector = Collector(  # no trajectory ids: the loop has none either (same entries)
        env, policy=None, frames_per_batch=FRAMES_PER_BATCH, total_frames=6 * FRAMES_PER_BATCH,
        replay_buffer=rb, track_traj_ids=False, post_collect_hook=outputs.append,
    )
    loop_steps = 0
    try:
        for _ in collector:  # a collector batch, then 30 steps of the loop
            for _ in range(30):
                action = envs.action_space.sample()
                next_obs, reward, terminated, truncated, infos = envs.step(action)
                step = adapter.step(obs, action, reward, terminated, truncated, infos, next_obs)
                step.set("action", torch.nn.functional.one_hot(torch.as_tensor(action), 2))
                for flag in ("done", "terminated", "truncated"):  # the collector's root flags
                    step.set(flag, torch.zeros(3, 1, dtype=torch.bool))
                loop.extend(step)
                loop_steps += int(step["collector", "mask"].sum())
                obs = next_obs
    finally:
        collector.shutdown()
        envs.close()
    index = rb.storage.index
    assert index.owned_streams(0).tolist() == [0, 1]
    assert index.owned_streams(loop.writer_id).tolist() == [2, 3, 4]
    assert len(rb) == 6 * FRAMES_PER_BATCH + loop_steps
    assert broken_transitions(rb.storage.get(slice(None))) == 0
    for _ in range(4):
        assert broken_transitions(rb.sample()) == 0


def test_more_writers_than_streams_is_an_error_naming_the_fix():
    rb = make_replay_buffer(8192, seed=0)  # streams inferred from the first writer: 2
    first, second = rb.writer_handle(), rb.writer_handle()
    collect_alternately(lambda c: first if c == 0 else None, num_batches=1)
    with pytest.raises(ValueError, match=(
        rf"writer {second.writer_id} writes 2 envs \(batch \(2, 32\)\), but only 0 of the "
        r"buffer's 2 streams are free \(writers \[1\] own the others\). Build the writer with "
        r"num_streams= the total env count of all writers, e.g. make_replay_buffer\(..., "
        r"num_streams=4\), or release the streams of a finished writer"
    )):
        collect_alternately(lambda c: second if c == 0 else None, num_batches=1)
    first.release()  # a finished writer frees its streams
    collect_alternately(lambda c: second if c == 0 else None, num_batches=1)
    assert rb.storage.index.owned_streams(second.writer_id).tolist() == [0, 1]
    assert broken_transitions(rb.storage.get(slice(None))) == 0


def make_serial_env():
    return SerialEnv(NUM_ENVS, make_env)


def test_multi_sync_collector_workers_are_writers_of_their_own():
    """MultiSyncCollector(replay_buffer=rb): each worker process writes through its
    copy of the buffer, a writer of its own (process id), into its own streams."""
    rb = make_replay_buffer(8192, num_streams=4, seed=0, batch_size=256)
    collector = MultiSyncCollector(
        [make_serial_env, make_serial_env], policy=None, frames_per_batch=2 * FRAMES_PER_BATCH,
        total_frames=8 * FRAMES_PER_BATCH, replay_buffer=rb,
    )
    try:
        for _ in collector:
            pass
    finally:
        collector.shutdown()
    index = rb.storage.index
    owners = index.stream_writer.tolist()
    assert len(set(owners)) == 2 and min(owners) >= 2**32  # two worker processes
    assert len(rb) == 8 * FRAMES_PER_BATCH
    assert rb.write_count == 8 * FRAMES_PER_BATCH  # the workers' writes, as TorchRL counts them
    everything = rb.storage.get(slice(None))
    assert broken_transitions(everything) == 0
    # a trajectory lives in one stream, contiguous: the sampler sees whole episodes
    rows = rb.storage.live_transition_rows()
    stream = torch.from_numpy(index.row_coordinates(rows.numpy())[1])
    traj = everything["collector", "traj_ids"]
    for tid in traj.unique().tolist():
        assert stream[traj == tid].unique().numel() == 1
    assert broken_transitions(rb.sample()) == 0


def test_episodic_facade_one_front_per_writer(handles_run):
    """The episodic API: each collector feeds its own EpisodeReplayBuffer front (which
    groups its envs' steps into episodes) over one shared dataset; stored episodes and
    sampled sequences are each one env's consecutive steps."""
    _, _, reference = handles_run
    dataset = RingBufferDataset(20_000)
    fronts = [EpisodeReplayBuffer(dataset, batch_size=64, sequence_length=6, seed=0)
              for _ in reference.outputs]
    for pair in zip(*reference.outputs):  # the collectors take turns
        for front, batch in zip(fronts, pair):
            for t in range(batch.shape[1]):
                step = batch[:, t]
                front.add_step(
                    {"obs": step["observation"], "action": step["action"],
                     "next_obs": step["next", "observation"]},
                    is_last=step["next", "done"].squeeze(-1),
                )
    for front in fronts:
        front.flush()
    assert dataset.num_timesteps == sum(b.numel() for out in reference.outputs for b in out)
    batch = fronts[0].sample()  # [64, 6], from either writer's episodes
    assert follows_dynamics(batch["obs"], batch["action"], batch["next_obs"]).all()
    assert torch.equal(batch["obs"][:, 1:], batch["next_obs"][:, :-1])


def _extend_in_child(blob: bytes, queue) -> None:
    import pickle

    from conftest import steps as make_steps

    rb = pickle.loads(blob)  # a copy of the buffer in this (forked) process
    data = make_steps(torch.zeros(2, 1, 1) + 5, torch.ones(2, 1, 1) + 5)
    try:
        rb.extend(data)
        queue.put(("written", len(rb)))
    except ValueError as error:
        queue.put(("refused", str(error)))


@pytest.mark.parametrize("prioritized", [False, True])
def test_prioritized_buffer_refuses_writes_from_a_process_copy(prioritized):
    """A worker's copy of a PER buffer would write rows that never get a priority: refused.

    The priority tree lives in the process that built the buffer; a
    multi-process collector's worker gets a pickled copy. Other samplers read
    the shared episode index, so their copies may write.
    """
    import pickle

    from conftest import steps as make_steps

    sampler = PrioritizedTransitionSampler(alpha=0.6, beta=0.4) if prioritized else None
    # 4 streams: 2 for this process's envs, 2 for the copy's (a writer of its own)
    rb = make_replay_buffer(64, batch_size=2, sampler=sampler, num_streams=4, seed=0)
    rb.extend(make_steps(torch.zeros(2, 1, 1), torch.ones(2, 1, 1)))
    queue = multiprocessing.get_context("fork").SimpleQueue()
    child = multiprocessing.get_context("fork").Process(
        target=_extend_in_child, args=(pickle.dumps(rb), queue)
    )
    child.start()
    outcome, detail = queue.get()
    child.join(30)
    if prioritized:
        assert outcome == "refused"
        assert "PrioritizedTransitionSampler keeps the priorities in the process that built" in detail
        assert "service_backend='ray'" in detail
    else:
        assert (outcome, detail) == ("written", 4)
    rb.extend(make_steps(torch.zeros(2, 1, 1) + 1, torch.ones(2, 1, 1) + 1))  # here: allowed
    assert len(rb) == 4


def _write_in_fork(rb, k: int) -> None:
    from conftest import steps as make_steps

    for t in range(20):  # env of writer k: obs 1000 k + t, next obs + 1
        obs = torch.tensor([[1000.0 * k + t]])
        rb.extend(make_steps(obs, obs + 1))


def _write_in_two_forks(rb, target=_write_in_fork) -> None:
    """Two forked processes write to ``rb`` (``target(rb, 1)`` and ``target(rb, 2)``), then exit cleanly."""
    ctx = multiprocessing.get_context("fork")
    children = [ctx.Process(target=target, args=(rb, k)) for k in (1, 2)]
    for child in children:
        child.start()
    for child in children:
        child.join(60)
        assert child.exitcode == 0


def test_forked_processes_are_writers_of_their_own():
    """Processes forked with the buffer (multiprocessing "fork", a collector under
    mp.set_start_method("fork")) inherit it without unpickling: each is still a
    writer of its own, in its own streams, never continuing another's episode."""

    from conftest import steps as make_steps

    rb = make_replay_buffer(96, num_streams=3, batch_size=8, seed=0)
    rb.extend(make_steps(torch.tensor([[-10.0]]), torch.tensor([[-9.0]])))  # this process: stream 0
    _write_in_two_forks(rb)
    assert len(rb) == 41
    everything = rb.storage.get(slice(None))
    assert torch.equal(everything["next", "observation"], everything["observation"] + 1)
    owners = rb.storage.index.stream_writer.tolist()
    assert owners[0] == 0 and len(set(owners)) == 3 and min(owners[1:]) >= 2**32


def _write_through_handle_in_fork(handle, k: int) -> None:
    from conftest import steps as make_steps

    for t in range(20):
        obs = torch.tensor([[1000.0 * k + t]])
        handle.extend(make_steps(obs, obs + 1))


def test_a_handle_s_copies_in_other_processes_are_writers_of_their_own():
    """One handle given to a multi-process collector (replay_buffer=rb.writer_handle())
    reaches each worker as a copy; every copy wrote as the handle's id, into the same
    streams: with trajectory ids each write cut the other process's running episode
    (n-step windows stopped short), without them the two processes' steps were
    stitched into one episode. Each copy now writes as a writer of its own, and the handle's
    release() in its own process frees the copies' streams too."""
    from conftest import steps as make_steps

    rb = make_replay_buffer(96, num_streams=3, batch_size=8, seed=0).share()
    rb.extend(make_steps(torch.tensor([[-10.0]]), torch.tensor([[-9.0]])))  # rows exist: shared
    handle = rb.writer_handle()
    _write_in_two_forks(handle, _write_through_handle_in_fork)  # each fork writes through the handle
    assert len(rb) == 41
    everything = rb.storage.get(slice(None))
    assert torch.equal(everything["next", "observation"], everything["observation"] + 1)
    owners = rb.storage.index.stream_writer.tolist()
    assert owners[0] == 0 and len(set(owners[1:])) == 2 and handle.writer_id not in owners  # one writer per process
    assert rb.storage.index.episode_count.tolist() == [1, 1, 1]  # never cut by the other process
    handle.release()
    assert rb.storage.index.writers().tolist() == [0]


def _write_then_end_in_fork(rb) -> None:
    from conftest import steps as make_steps

    obs = torch.tensor([[1000.0]])
    rb.extend(make_steps(obs, obs + 1))
    rb.writer.end_episodes([0])  # this process's env 0: its own episode, not the parent's
    rb.extend(make_steps(obs + 10, obs + 11))


def test_end_episodes_in_a_process_copy_ends_that_process_s_episode():
    """Called without a writer id in a process copy, end_episodes / release act on
    that process's own writer; they defaulted to writer 0, the parent's, ending
    its running episode and leaving the copy's to be continued."""

    from conftest import steps as make_steps

    rb = make_replay_buffer(64, num_streams=2, batch_size=8, seed=0)
    rb.extend(make_steps(torch.tensor([[0.0]]), torch.tensor([[1.0]])))  # parent: stream 0
    child = multiprocessing.get_context("fork").Process(target=_write_then_end_in_fork, args=(rb,))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    index = rb.storage.index
    assert index.is_open.tolist() == [True, True]  # the parent's episode still runs
    assert index.episode_count.tolist() == [1, 2]  # the copy's env was reset by hand
    rb.extend(make_steps(torch.tensor([[1.0]]), torch.tensor([[2.0]])))  # the parent's continues
    assert rb.storage.index.episode_count.tolist() == [1, 2]


def _extend_in_fork(rb, queue) -> None:
    from conftest import steps as make_steps

    try:
        rb.extend(make_steps(torch.zeros(2, 1, 1) + 5, torch.ones(2, 1, 1) + 5))
        queue.put(("written", len(rb)))
    except ValueError as error:
        queue.put(("refused", str(error)))


def test_prioritized_buffer_refuses_writes_from_a_forked_process():
    """A process forked with a PER buffer (not pickled: multiprocessing "fork") is a
    process copy too: its rows would never get a priority in the building process."""

    from conftest import steps as make_steps

    sampler = PrioritizedTransitionSampler(alpha=0.6, beta=0.4)
    rb = make_replay_buffer(64, batch_size=2, sampler=sampler, num_streams=4, seed=0)
    rb.extend(make_steps(torch.zeros(2, 1, 1), torch.ones(2, 1, 1)))
    ctx = multiprocessing.get_context("fork")
    queue = ctx.SimpleQueue()
    child = ctx.Process(target=_extend_in_fork, args=(rb, queue))
    child.start()
    outcome, detail = queue.get()
    child.join(30)
    assert outcome == "refused", detail
    assert "PrioritizedTransitionSampler keeps the priorities in the process that built" in detail
    assert len(rb) == 2 and rb.sampler.total > 0
    rb.extend(make_steps(torch.zeros(2, 1, 1) + 1, torch.ones(2, 1, 1) + 1))  # here: allowed
    assert len(rb) == 4


def test_write_count_counts_the_writes_of_every_process():
    """rb.write_count of a buffer shared with worker processes counts their writes too,
    as TorchRL's writers do (their count is shared memory): it counted only the
    writes of the process asking, 1 of 41 here."""

    from conftest import steps as make_steps

    rb = make_replay_buffer(96, num_streams=3, batch_size=8, seed=0).share()
    rb.extend(make_steps(torch.tensor([[-10.0]]), torch.tensor([[-9.0]])))
    _write_in_two_forks(rb)
    assert len(rb) == rb.write_count == 41
    assert rb.stats()["write_count"] == 41
    rb.empty()
    assert rb.write_count == 0


def _handle_in_fork(rb, ready, go) -> None:
    from conftest import steps as make_steps

    handle = rb.writer_handle()
    ready.put(handle.writer_id)
    go.get()
    for t in range(5):
        obs = torch.tensor([[1000.0 + t]])
        handle.extend(make_steps(obs, obs + 1))


def test_writer_handles_made_in_two_processes_get_their_own_ids():
    """rb.writer_handle() in a worker process and in the trainer: the count of ids
    handed out was each process's own, so both got id 1 and wrote into one stream,
    stitching their steps into one episode."""

    from conftest import steps as make_steps

    rb = make_replay_buffer(96, num_streams=3, batch_size=8, seed=0).share()
    rb.extend(make_steps(torch.tensor([[-10.0]]), torch.tensor([[-9.0]])))  # rows exist: shared
    ctx = multiprocessing.get_context("fork")
    ready, go = ctx.SimpleQueue(), ctx.SimpleQueue()
    child = ctx.Process(target=_handle_in_fork, args=(rb, ready, go))
    child.start()
    child_id = ready.get()
    handle = rb.writer_handle()
    go.put(None)
    for t in range(5):
        obs = torch.tensor([[float(t)]])
        handle.extend(make_steps(obs, obs + 1))
    child.join(60)
    assert child.exitcode == 0
    assert handle.writer_id != child_id
    everything = rb.storage.get(slice(None))
    assert len(rb) == 11 and rb.storage.index.episode_count.tolist() == [1, 1, 1]
    assert torch.equal(everything["next", "observation"], everything["observation"] + 1)


def _first_write_in_fork(rb, errors) -> None:
    from conftest import steps as make_steps

    try:
        rb.extend(make_steps(torch.tensor([[1.0]]), torch.tensor([[2.0]])))
    except ValueError as error:
        errors.put(str(error))
    else:
        errors.put(None)


def test_a_copy_made_before_the_first_write_refuses_to_write():
    """The storage is allocated by the first write: a process forked with a buffer
    that was never written would write rows nobody else sees (the parent's buffer
    stayed empty); it is refused, naming the fix."""

    ctx = multiprocessing.get_context("fork")
    rb = make_replay_buffer(64, num_streams=2, batch_size=8, seed=0)
    errors = ctx.Queue()
    child = ctx.Process(target=_first_write_in_fork, args=(rb, errors))
    child.start()
    message = errors.get(timeout=60)
    child.join(60)
    assert message is not None and "before its first write" in message
    assert "Write a first batch in the process that built the buffer" in message
    assert len(rb) == 0
