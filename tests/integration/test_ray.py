"""Our buffer inside TorchRL's RayReplayBuffer, fed by two RayCollector workers.

A local Ray cluster (2 CPUs) for the whole module. The remote collectors both
number their trajectories from 0; each writes through its own client (a
writer of its own), so no episode mixes: every sampled transition is checked
against CartPole's dynamics, and n-step windows, sequences and hindsight goals
against what the collectors produced (recorded by a Ray actor).
"""
from __future__ import annotations

import os
import warnings
from functools import partial
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")  # the [ray] extra; `make test` installs it

with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message=r"Creating \w+ which inherits from WeightUpdaterBase",
        category=DeprecationWarning,
    )
    from torchrl.collectors.distributed import RayCollector
from torchrl.envs import SerialEnv

from cartpole import broken_transitions, goal_reward
from test_many_writers import FRAMES_PER_BATCH, Reference, make_env
from torchrl_ext import make_her_replay_buffer, make_replay_buffer
from torchrl_ext.samplers import PrioritizedTransitionSampler, SequenceSampler

ACTOR = {"remote_config": {"num_cpus": 0}}  # the buffer actor takes no CPU of the 2
NUM_BATCHES = 6


@ray.remote(num_cpus=0)
class Recorder:
    """Collects each remote collector's batches, keyed by its actor id."""

    def __init__(self):
        self.batches = {}

    def append(self, worker, batch):
        self.batches.setdefault(worker, []).append(batch)

    def get(self):
        return [self.batches[k] for k in sorted(self.batches)]


def make_serial_env(seed: int):
    env = SerialEnv(2, make_env)
    env.set_seed(seed)  # before the collector's first reset (RayCollector.set_seed comes after it)
    return env


@pytest.fixture(scope="module")
def cluster():
    # Ray workers import what they run (env makers, the recorder hook) by name:
    # give them this directory and the package, as the tests see them
    here = Path(__file__).parent
    paths = [str(here), str(here.parents[1]), os.environ.get("PYTHONPATH", "")]
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=150 * 2**20,
             log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in paths if p)}})
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def collected(cluster):
    """Two remote collectors writing into one remote buffer; their recorded output."""
    rb = make_replay_buffer(8192, num_streams=4, batch_size=256, seed=0,
                            service_backend="ray", service_backend_options=ACTOR)
    recorder = Recorder.remote()

    def record(batch, recorder=recorder):
        worker = ray.get_runtime_context().get_actor_id()
        ray.get(recorder.append.remote(worker, batch.clone()))

    with warnings.catch_warnings():  # a random policy: no weights to send to the workers
        warnings.filterwarnings("ignore", message="The policy is not an nn.Module")
        warnings.filterwarnings("ignore", message="RayCollector iteration started before weight")
        collector = _ray_collector(rb, record)
        for _ in collector:
            pass
        collector.shutdown(shutdown_ray=False)
    reference = Reference(ray.get(recorder.get.remote()))
    yield rb, reference
    rb.shutdown()


def _ray_collector(rb, record):
    return RayCollector(
        [partial(make_serial_env, 0), partial(make_serial_env, 1)],
        policy=None,
        frames_per_batch=FRAMES_PER_BATCH,
        total_frames=2 * NUM_BATCHES * FRAMES_PER_BATCH,
        sync=True,
        replay_buffer=rb,
        remote_configs={"num_cpus": 1, "memory": 256 * 2**20},
        post_collect_hook=record,
    )


def test_two_ray_collectors_keep_their_episodes(collected):
    rb, reference = collected
    assert len(reference.outputs) == 2
    assert len(rb) == 2 * NUM_BATCHES * FRAMES_PER_BATCH
    for _ in range(4):
        sample = rb.sample()
        assert broken_transitions(sample) == 0
        reference.locate(sample)  # every sampled step is a step a collector made
    # the remote collectors numbered their trajectories alike: same ids, other streams
    ids = [torch.cat(b, 1)["collector", "traj_ids"].unique() for b in reference.outputs]
    assert set(ids[0].tolist()) & set(ids[1].tolist())


def test_ray_nstep_windows_are_exact(collected):
    _, reference = collected
    n, gamma = 3, 0.9
    rb = make_replay_buffer(8192, num_streams=4, n_step=n, gamma=gamma, seed=0,
                            service_backend="ray", service_backend_options=ACTOR)
    try:
        reference.replay(rb)  # two clients taking turns: two writers
        batch = rb.sample(512)
    finally:
        rb.shutdown()
    reference.check_nstep(batch, n, gamma)


def test_ray_prioritized_with_learner_updates_and_checkpoint(collected, tmp_path):
    _, reference = collected
    rb = make_replay_buffer(8192, num_streams=4, seed=0, batch_size=128,
                            sampler=PrioritizedTransitionSampler(alpha=1.0, beta=0.5),
                            service_backend="ray", service_backend_options=ACTOR)
    try:
        reference.replay(rb)
        low: set[int] = set()
        for _ in range(3):  # the learner sends its TD errors back to the actor
            sample = rb.sample()
            assert broken_transitions(sample) == 0
            sample.set("td_error", torch.full((128,), 1e-6))
            rb.update_tensordict_priority(sample)
            low.update(sample["index"].tolist())
        # the priorities reached the actor's sampler: those rows are (almost) never drawn again
        drawn = torch.cat([rb.sample()["index"] for _ in range(4)]).tolist()
        assert sum(i in low for i in drawn) <= 2
        rb.dumps(tmp_path / "ckpt")
        expected = rb.sample()
        rb.sample()  # move on, then come back
        rb.loads(tmp_path / "ckpt")
        again = rb.sample()
    finally:
        rb.shutdown()
    assert torch.equal(again["index"], expected["index"])
    assert torch.equal(again["observation"], expected["observation"])


def test_ray_sequences_and_hindsight_goals_stay_in_their_episodes(collected):
    _, reference = collected
    seq = make_replay_buffer(8192, num_streams=4, seed=0, sampler=SequenceSampler(4),
                             service_backend="ray", service_backend_options=ACTOR)
    her = make_her_replay_buffer(8192, goal_reward, strategy="future", num_goals=4,
                                 num_streams=4, seed=0,
                                 service_backend="ray", service_backend_options=ACTOR)
    try:
        reference.replay(seq)
        reference.replay(her)
        sequences = seq.sample(64)
        goals = her.sample(250)
    finally:
        seq.shutdown()
        her.shutdown()
    assert sequences.shape == (64, 4)
    reference.check_sequences(sequences)
    assert reference.check_hindsight(goals) == 200


def _one_step(value: float):
    from tensordict import TensorDict

    return TensorDict({"observation": torch.full((1, 1), value), "action": torch.zeros(1, 1),
                       "next": {"observation": torch.full((1, 1), value + 1.0), "reward": torch.ones(1, 1),
                                "done": torch.zeros(1, 1, dtype=torch.bool)}}, [1])


def _pairs(batch) -> set:
    return set(zip(batch["observation"].view(-1).tolist(), batch["next", "observation"].view(-1).tolist()))


def test_ray_release_writer_and_adapter_reset_end_the_running_episode(cluster):
    """rb.release_writer() on the Ray buffer released writer 0, which owns nothing
    there (the actor's default writer is its process copy): a restarted env was
    glued onto the old episode (a transition 1 -> 101). adapter.reset(rb) with
    the Ray buffer or a client of it raised AttributeError."""
    import numpy as np

    from torchrl_ext.envs import GymVectorAdapter

    rb = make_replay_buffer(64, num_streams=1, batch_size=32, seed=0,
                            service_backend="ray", service_backend_options=ACTOR)
    steps = make_replay_buffer(64, num_streams=2, batch_size=64, seed=0,
                               service_backend="ray", service_backend_options=ACTOR)
    try:
        rb.extend(_one_step(0.0))  # an episode running
        rb.release_writer()  # the env restarts
        rb.extend(_one_step(100.0))
        assert _pairs(rb.sample()) == {(0.0, 1.0), (100.0, 101.0)}
        for target, start in ((steps, 200.0), (steps.client(), 400.0)):
            adapter = GymVectorAdapter(1)
            for o in (start, start + 1, start + 100):  # reset by hand before the third step
                if o == start + 100:
                    adapter.reset(target)
                target.extend(adapter.step(
                    np.array([[o]], np.float32), np.zeros((1, 1), np.float32), np.ones(1, np.float32),
                    [False], [False], {}, np.array([[o + 1.0]], np.float32)))
        assert len(steps) == 6
        assert _pairs(steps.sample()) == {(o, o + 1) for o in (200.0, 201.0, 300.0, 400.0, 401.0, 500.0)}
    finally:
        rb.shutdown()
        steps.shutdown()
