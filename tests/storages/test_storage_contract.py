"""One contract, every storage, storage backend and buffer assembly.

The components must behave the same inside a plain ``TensorDictReplayBuffer``,
inside our ``TransitionReplayBuffer`` (lean paths) and when that buffer falls
back to TorchRL's paths (a transform is set). Then every storage
(``TransitionStorage`` and ``EpisodePool``) keeps one contract: what is written
comes back as windows of consecutive steps, state round-trips, worker processes
see the same rows, and
an empty storage refuses to sample.
"""
from __future__ import annotations

import pickle

import pytest
import torch
from tensordict import TensorDict
from torch.utils.data import DataLoader, IterableDataset
from torchrl.data import TensorDictReplayBuffer
from torchrl.envs.transforms import Compose, RenameTransform

from conftest import steps, transitions_of
from torchrl_ext import TransitionReplayBuffer, TransitionStorage, TransitionWriter, UniformTransitionSampler
from torchrl_ext.samplers import SequenceSampler
from torchrl_ext.storages import EpisodePool

# "+zstd": the observation kept compressed (TransitionStorage(compress=...))
BACKENDS = ["tensor", "memmap", "tensor+zstd", "memmap+zstd"]
ASSEMBLIES = ["transition", "torchrl", "fallback"]


def build(assembly, backend, tmp_path, seed=0, size=60):
    backend, _, codec = backend.partition("+")
    storage = TransitionStorage(size, backend=backend, scratch_dir=tmp_path / f"s{seed}",
                                compress={"observation": codec} if codec else None)
    parts = dict(
        storage=storage,
        writer=TransitionWriter(),
        sampler=UniformTransitionSampler(),
        batch_size=5,
        generator=torch.Generator().manual_seed(seed),
    )
    if assembly == "torchrl":
        return TensorDictReplayBuffer(**parts)
    if assembly == "fallback":  # an identity-like transform forces TorchRL's paths
        parts["transform"] = Compose(RenameTransform(["action"], ["action_copy"], create_copy=True))
    return TransitionReplayBuffer(**parts)


def episodes(t0, T=4):
    """3 envs, T steps: next obs is obs + 1, or obs + 0.5 when the step terminates."""
    obs = torch.arange(t0, t0 + T, dtype=torch.float32)
    obs = torch.stack([obs, obs + 100, obs + 200]).unsqueeze(-1)  # [3 envs, T, 1]
    done = obs % 3 == 2
    return steps(obs, torch.where(done, obs + 0.5, obs + 1), terminated=done)


@pytest.fixture(params=[(a, b) for a in ASSEMBLIES for b in BACKENDS], ids=lambda p: f"{p[0]}-{p[1]}")
def rb(request, tmp_path):
    return build(*request.param, tmp_path)


def test_extend_returns_rows_shaped_like_the_batch(rb):
    rows = rb.extend(episodes(0))
    assert rows.shape == (3, 4)
    assert rows.unique().numel() == 12
    assert bool(((rows >= 0) & (rows < rb.storage.max_size)).all())
    assert rb.write_count == 12


def test_len_counts_live_transitions(rb):
    rb.extend(episodes(0))
    assert len(rb) == 12
    for t in range(4, 40, 4):
        rb.extend(episodes(t))
    assert 0 < len(rb) < rb.storage.max_size  # evicted, and final-obs rows are not transitions


def test_sample_shape_index_and_consistency(rb):
    rb.extend(episodes(0))
    batch = rb.sample()
    assert batch.batch_size == (5,)
    assert batch["index"].shape == (5,)
    assert rb.storage.contains(batch["index"])
    gap = batch["next", "observation"] - batch["observation"]
    assert bool((gap == torch.where(batch["next", "terminated"], 0.5, 1.0)).all())


def test_one_call_equals_step_by_step(rb, tmp_path):
    other = build("transition", "tensor", tmp_path, seed=1)
    data = episodes(0)
    rb.extend(data)
    for t in range(4):
        other.extend(data[:, t])
    assert transitions_of(rb.storage.get(slice(None))) == transitions_of(other.storage.get(slice(None)))


def test_empty_then_reuse(rb):
    rb.extend(episodes(0))
    rb.empty()
    assert len(rb) == 0
    rb.extend(episodes(50))
    assert len(rb) == 12


def test_storage_pickles(rb):
    rb.extend(episodes(0))
    copy = pickle.loads(pickle.dumps(rb.storage))
    assert transitions_of(copy.get(slice(None))) == transitions_of(rb.storage.get(slice(None)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_assembly_draws_the_same_indices(backend, tmp_path):
    buffers = [build(a, backend, tmp_path / a, seed=7) for a in ASSEMBLIES]
    for buffer in buffers:
        buffer.extend(episodes(0))
        buffer.extend(episodes(4))
    samples = [buffer.sample() for buffer in buffers]
    for sample in samples[1:]:
        assert torch.equal(sample["index"], samples[0]["index"])
        assert torch.equal(sample["next", "observation"], samples[0]["next", "observation"])


# ------------------------------------------------- every storage: one contract
class TransitionCase:
    """A TransitionStorage in a buffer; windows drawn by a SequenceSampler."""

    compress: dict | None = None

    def __init__(self):
        self.rb = TransitionReplayBuffer(storage=TransitionStorage(64, compress=self.compress),
                                         writer=TransitionWriter(), sampler=UniformTransitionSampler())

    def write(self, ids):
        obs = torch.tensor(ids, dtype=torch.float32).view(1, -1, 1)
        nxt = torch.tensor([*ids[1:], -1], dtype=torch.float32).view(1, -1, 1)  # -1: final obs
        done = torch.zeros_like(obs, dtype=torch.bool)
        done[0, -1] = True
        self.rb.extend(steps(obs, nxt, terminated=done))

    def windows(self, count, seed):
        sampler = SequenceSampler(2, generator=torch.Generator().manual_seed(seed))
        rows, _ = sampler.sample(self.rb.storage, count)
        return self.rb.storage.get(rows)["observation"].squeeze(-1).long()

    def state(self):
        return self.rb.storage.state_dict()

    def restore(self, state):
        other = type(self)()
        other.rb.storage.load_state_dict(state)
        return other

    def clear(self):
        self.rb.empty()


class PoolCase:
    """An EpisodePool of step ids."""

    def __init__(self):
        self.pool = EpisodePool(64, TensorDict({"id": torch.zeros((), dtype=torch.int64)}, []))

    def write(self, ids):
        self.pool.append(TensorDict({"id": torch.tensor(ids)}, [len(ids)]))

    def windows(self, count, seed):
        return self.pool.sample(count, 2, generator=torch.Generator().manual_seed(seed))["id"]

    def state(self):
        return self.pool.state_dict()

    def restore(self, state):
        other = PoolCase()
        other.pool.load_state_dict(state)
        return other

    def clear(self):
        self.pool.clear()


class CompressedCase(TransitionCase):
    """A TransitionStorage keeping its observations compressed."""

    compress = {"observation": "zstd"}


STORAGES = {"transition": TransitionCase, "compressed": CompressedCase, "pool": PoolCase}
EPISODES = [[10, 11, 12], [20, 21], [30], [40, 41, 42, 43]]  # step ids, one episode each


def windows_of(episodes):
    return {(e[t], e[t + 1]) for e in episodes for t in range(len(e) - 1)}


@pytest.fixture(params=list(STORAGES), ids=list(STORAGES))
def case(request):
    return STORAGES[request.param]()


def filled(case):
    for ids in EPISODES:
        case.write(ids)
    return case


def test_an_empty_storage_refuses_to_sample(case):
    with pytest.raises(ValueError, match="cannot sample"):
        case.windows(1, seed=0)


def test_windows_are_consecutive_steps_of_one_written_episode(case):
    got = {tuple(w) for w in filled(case).windows(400, seed=1).tolist()}
    assert got == windows_of(EPISODES)  # every window, the last of each episode included


def test_state_round_trip_gives_the_same_next_sample(case):
    restored = case.restore(filled(case).state())
    assert torch.equal(restored.windows(32, seed=2), case.windows(32, seed=2))


class Windows(IterableDataset):
    """Windows a DataLoader worker process draws from the shared storage."""

    def __init__(self, case):
        self.case = case

    def __iter__(self):
        yield self.case.windows(32, seed=3)


def test_a_worker_process_samples_the_same_rows(case):
    filled(case)
    loader = DataLoader(Windows(case), batch_size=None, num_workers=1, multiprocessing_context="fork")
    (in_worker,) = list(loader)
    assert torch.equal(in_worker, case.windows(32, seed=3))


def test_clear_forgets_every_episode_and_the_storage_is_reusable(case):
    filled(case).clear()
    with pytest.raises(ValueError, match="cannot sample"):
        case.windows(1, seed=0)
    case.write([50, 51])
    assert {tuple(w) for w in case.windows(20, seed=4).tolist()} == {(50, 51)}
