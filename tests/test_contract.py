"""One contract, every storage backend and buffer assembly.

The components must behave the same inside a plain ``TensorDictReplayBuffer``,
inside our ``TransitionReplayBuffer`` (lean paths) and when that buffer falls
back to TorchRL's paths (a transform is set).
"""
from __future__ import annotations

import pickle

import pytest
import torch
from torchrl.data import TensorDictReplayBuffer
from torchrl.envs.transforms import Compose, RenameTransform

from conftest import steps, transitions_of
from torchrl_ext import TransitionStorage, TransitionWriter, TransitionReplayBuffer, UniformTransitionSampler

BACKENDS = ["tensor", "memmap"]
ASSEMBLIES = ["transition", "torchrl", "fallback"]


def build(assembly, backend, tmp_path, seed=0, size=60):
    storage = TransitionStorage(size, backend=backend, scratch_dir=tmp_path / f"s{seed}")
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


def test_sampler_own_generator_is_checkpointed(tmp_path):
    sampler = UniformTransitionSampler(generator=torch.Generator().manual_seed(5))
    rb = TensorDictReplayBuffer(storage=TransitionStorage(60), writer=TransitionWriter(), sampler=sampler)
    rb.extend(episodes(0))
    sampler.dumps(tmp_path)
    first = rb.sample(4)["index"]
    sampler.loads(tmp_path)
    assert torch.equal(rb.sample(4)["index"], first)
