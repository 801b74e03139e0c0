"""Every facade takes CUDA tensors in and gives batches on its device (issue 16).

rllte's and pytorchrl's env wrappers hand the buffer torch tensors on the
learner's device; a collector on the GPU gives CUDA TensorDicts. Each facade is
fed such data, into rows on the GPU and into rows in host memory, and must
serve batches on its ``device`` holding what was written. These tests need a
GPU and are skipped without one (the CPU paths are the rest of the suite).
"""
from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from torchrl_ext import (
    BatchReplayBuffer,
    EpisodeReplayBuffer,
    HerReplayStorage,
    MBReplayBuffer,
    NStepReplayStorage,
    RingBufferDataset,
)
from torchrl_ext.transforms import StandardScaler

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
BOX = gym.spaces.Box(-1e3, 1e3, (3,), np.float32)


def cuda_steps(T: int = 12, n: int = 2):
    """``T`` steps of ``n`` envs as CUDA tensors: observation ``t + 100 i``, episodes end at t = 5."""
    for t in range(T):
        obs = (t + 100.0 * torch.arange(n, device="cuda")).unsqueeze(-1).expand(n, 3).clone()
        end = torch.full((n,), t == 5, device="cuda")
        yield obs, end


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_nstep_storage_takes_cuda_tensors(device):
    storage = NStepReplayStorage(BOX, gym.spaces.Discrete(4), device=device, num_envs=2,
                                 batch_size=16, num_workers=0, n_step=1, seed=0)
    for obs, end in cuda_steps():
        action = obs[:, 0].long() % 4
        storage.add(obs, action, obs[:, 0], end, torch.zeros_like(end), {}, obs + 1)
    obs, action, reward, discount, next_obs = storage.sample()
    assert {t.device.type for t in (obs, action, reward, discount, next_obs)} == {device}
    # one-step transitions of what was written: next = obs + 1, reward = obs
    assert torch.equal(next_obs, obs + 1) and torch.equal(reward.view(-1), obs[:, 0])
    assert torch.equal(action.view(-1), obs[:, 0] % 4)


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_her_storage_takes_cuda_tensors(device):
    space = gym.spaces.Dict({"observation": BOX, "achieved_goal": BOX, "desired_goal": BOX})
    storage = HerReplayStorage(space, BOX, device=device, num_envs=2, batch_size=16, seed=0)
    for obs, end in cuda_steps():
        step = {"observation": obs, "achieved_goal": obs, "desired_goal": torch.zeros_like(obs)}
        after = {k: v + 1 for k, v in step.items()}
        storage.add(step, obs, obs[:, 0], end, torch.zeros_like(end), {}, after)
    batch = storage.sample()
    leaves = [v for x in batch for v in (x.values() if isinstance(x, dict) else [x])]
    assert {v.device.type for v in leaves} == {device}
    # relabelling changes goals, never the step: next = obs + 1 in every row
    assert torch.equal(batch.next_observations["observation"], batch.observations["observation"] + 1)


def test_her_storage_copy_info_dict_takes_cuda_flags():
    """With copy_info_dict the done flags were read by np.asarray, which refuses CUDA tensors."""
    space = gym.spaces.Dict({"observation": BOX, "achieved_goal": BOX, "desired_goal": BOX})
    seen = []
    storage = HerReplayStorage(space, BOX, num_envs=2, batch_size=16, seed=0, copy_info_dict=True,
                               reward_fn=lambda a, d, infos: seen.append(infos) or -np.ones(len(a)))
    for obs, end in cuda_steps():
        step = {"observation": obs, "achieved_goal": obs, "desired_goal": torch.zeros_like(obs)}
        after = {k: v + 1 for k, v in step.items()}
        storage.add(step, obs, obs[:, 0], end, torch.zeros_like(end), {"x": obs[:, 0]}, after)
    batch = storage.sample()
    assert batch.rewards.shape == (16, 1) and len(seen[-1]) == 12 and "x" in seen[-1][0]


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_episode_replay_buffer_takes_cuda_tensors(device):
    rb = EpisodeReplayBuffer(RingBufferDataset(100, device=device), batch_size=8,
                             sequence_length=3, seed=0)
    for obs, end in cuda_steps():
        rb.add_step({"x": obs}, end)
    batch = rb.sample()
    x = batch["x"]
    # each field comes back where it was added from; three consecutive steps of one episode
    assert x.device.type == "cuda"
    assert (x[:, 1:, 0] - x[:, :-1, 0] == 1).all()


def test_ring_buffer_on_cuda_serves_its_loader_on_cuda():
    dataset = RingBufferDataset(50, device="cuda")
    dataset.add_episode({"x": torch.arange(10.0, device="cuda").unsqueeze(-1)})
    batch = next(iter(dataset.get_loader(4, 3, seed=0)))
    assert batch["x"].device.type == "cuda"
    assert (batch["x"][:, 1:] - batch["x"][:, :-1] == 1).all()


def test_ring_buffer_loader_pins_memory_when_asked():
    dataset = RingBufferDataset(50)
    dataset.add_episode({"x": torch.arange(10.0).unsqueeze(-1)})
    loader = dataset.get_loader(4, 3, seed=0, pin_memory=True)
    assert loader.pin_memory and next(iter(loader))["x"].is_pinned()


def test_model_based_buffer_takes_cuda_tensors_and_serves_cuda_batches():
    model = SimpleNamespace(standard_scaler=StandardScaler(), reward_function=None)
    actor = SimpleNamespace(action_space=gym.spaces.Discrete(2), dynamics_model=model)
    buffer = MBReplayBuffer(50, "cuda", actor, None, None, seed=0)
    for t, (obs, end) in enumerate(cuda_steps(n=3)):
        buffer.insert_transition({
            "Observation": obs, "Action": torch.zeros(3, 1, dtype=torch.int64, device="cuda"),
            "Reward": obs[:, :1].clone(), "NextObservation": obs + 1,
            "Done": torch.zeros(3, 1, device="cuda"), "NextDone": end.float().unsqueeze(-1),
        })
    batches = list(buffer.generate_batches(1, mini_batch_size=8, num_epochs=1))
    assert batches and all(b["train_input"].device.type == "cuda" for b in batches)
    labels = buffer.scaler.inverse_transform(torch.cat([b["train_label"] for b in batches]))
    assert len(labels) == 36  # every step of the 3 envs is a transition
    assert torch.allclose(labels[:, :3], torch.ones_like(labels[:, :3]))  # next - obs


def test_d3rlpy_buffer_takes_cuda_tensors():
    buf = BatchReplayBuffer(100, None, observation_space=BOX, action_space=gym.spaces.Discrete(2),
                            n_envs=2, seed=0)
    for obs, end in cuda_steps():
        buf.append(obs, torch.zeros(2, dtype=torch.int64, device="cuda"), obs[:, 0], end, end)
    batch = buf.sample(16, n_steps=1)
    # d3rlpy's arrival rewards: o_t came with reward o_t[0], the step to o_t+1 earns o_t[0] + 1
    assert torch.equal(batch.next_observations, batch.observations + 1)
    assert torch.equal(batch.rewards.view(-1), batch.observations[:, 0])
    assert torch.equal(batch.next_rewards.view(-1), batch.observations[:, 0] + 1)


@pytest.mark.parametrize(("source", "target"), [("cuda", "cpu"), ("cpu", "cuda")])
def test_episodic_checkpoint_moves_between_devices(source, target, tmp_path):
    # saved on one device, loaded with map_location onto the other: the same next batches
    def build(device):
        return EpisodeReplayBuffer(RingBufferDataset(30, device=device), batch_size=8,
                                   sequence_length=3, seed=5)

    rb = build(source)
    for t in range(40):  # 2 envs, episodes of 7 and 9 steps, evictions
        was_done = torch.tensor([t % 7 == 0 and t > 0, t % 9 == 0 and t > 0], device=source)
        rb.add_step({"x": torch.tensor([[float(t // 7), t % 7], [100.0 + t // 9, t % 9]],
                                       device=source)}, was_done)
    torch.save(rb.state_dict(), tmp_path / "rb.pt")
    restored = build(target)
    restored.load_state_dict(torch.load(tmp_path / "rb.pt", map_location=target, weights_only=False))
    for _ in range(3):
        batch, expected = restored.sample()["x"], rb.sample()["x"]
        assert batch.device.type == target and torch.equal(batch.cpu(), expected.cpu())
