"""Rows on a device: every sampler, window and transform serves batches there (issue 16).

The zoo runs on every available device (CPU always, CUDA where there is one)
and must give, on device ``X``, the same batches as a CPU buffer with the same
seed, every entry on ``X``. The tests marked ``cuda`` need a GPU: data written
from CUDA tensors, and checkpoints moved between devices.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from torchrl_ext import (
    HerReplayStorage,
    NStepReplayStorage,
    TransitionStorage,
    make_her_replay_buffer,
    make_replay_buffer,
)
from torchrl_ext.samplers import PrioritizedTransitionSampler, SequenceSampler
from torchrl_ext.storages._memory import move_together

CUDA = torch.cuda.is_available()
DEVICES = ["cpu", *(["cuda"] if CUDA else [])]
cuda_only = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")


def goal_reward(achieved, desired, infos):
    return -(achieved != desired).any(-1).float()


def episodes(device: str, T: int = 30) -> TensorDict:
    """2 envs, ``T`` steps, goal entries; terminates every 7th step; built on ``device``."""
    obs = torch.arange(T, dtype=torch.float32).expand(2, T).clone()
    obs[1] += 100
    done = (obs % 7 == 6).unsqueeze(-1)
    goal = (obs % 5).unsqueeze(-1)
    flag = torch.zeros_like(done)
    td = TensorDict(
        {
            "observation": obs.unsqueeze(-1).expand(2, T, 3).clone(),
            "achieved_goal": goal, "desired_goal": torch.ones_like(goal),
            "action": obs.unsqueeze(-1),
            "next": {
                "observation": (obs + 1).unsqueeze(-1).expand(2, T, 3).clone(),
                "achieved_goal": goal + 1, "desired_goal": torch.ones_like(goal),
                "reward": obs.unsqueeze(-1) / 10, "done": done, "terminated": done,
                "truncated": flag,
            },
        },
        [2, T],
    )
    return td.to(device)


BUILDERS = {
    "uniform": lambda **kw: make_replay_buffer(200, **kw),
    "nstep": lambda **kw: make_replay_buffer(200, n_step=3, **kw),
    "frames": lambda **kw: make_replay_buffer(200, n_frames=4, **kw),
    "nstep-frames": lambda **kw: make_replay_buffer(200, n_step=2, n_frames=3, **kw),
    "masks": lambda **kw: make_replay_buffer(200, mask_size=5, **kw),
    "prioritized": lambda **kw: make_replay_buffer(200, sampler=PrioritizedTransitionSampler(), **kw),
    "sequence": lambda **kw: make_replay_buffer(200, sampler=SequenceSampler(4, pad=True), **kw),
    "her": lambda **kw: make_her_replay_buffer(200, goal_reward, num_goals=4, **kw),
    "her-no-goals": lambda **kw: make_her_replay_buffer(200, goal_reward, num_goals=0, **kw),
    "her-nstep": lambda **kw: make_her_replay_buffer(200, goal_reward, n_step=3, **kw),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_every_sampler_serves_on_the_storage_device(kind, device):
    rb = BUILDERS[kind](batch_size=16, seed=5, device=device)
    reference = BUILDERS[kind](batch_size=16, seed=5)  # CPU rows
    rb.extend(episodes(device))
    reference.extend(episodes("cpu"))
    assert rb.storage.device == torch.device(device)
    for _ in range(3):
        batch, expected = rb.sample(), reference.sample()
        for key, value in batch.items(include_nested=True, leaves_only=True):
            assert value.device.type == device, (key, value.device)
            # the same rows; sums (n-step returns) may round differently on another device
            torch.testing.assert_close(value.cpu(), expected.get(key), rtol=1e-6, atol=0,
                                       msg=lambda m, key=key: f"{key}: {m}")


@pytest.mark.parametrize(("device", "num_workers"), [("cpu", 0), *([("cuda", 4)] if CUDA else [])])
def test_facades_keep_rows_and_batches_on_their_device(device, num_workers):
    # on CUDA with rllte's default 4 workers: rows on the GPU are sampled in this process
    box = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    nstep = NStepReplayStorage(box, gym.spaces.Discrete(2), device=device, num_envs=2,
                               batch_size=8, num_workers=num_workers, seed=0)
    space = gym.spaces.Dict({"observation": box, "achieved_goal": box, "desired_goal": box})
    her = HerReplayStorage(space, box, device=device, num_envs=2, batch_size=8, seed=0)
    obs = {k: np.zeros((2, 3), np.float32) for k in space.spaces}
    for t in range(6):
        flags = np.array([t == 5, False])
        nstep.add(obs["observation"], np.array([0, 1]), np.ones(2), flags, np.zeros(2, bool),
                  {}, obs["observation"] + 1)
        her.add(obs, np.zeros((2, 3), np.float32), np.ones(2), flags, np.zeros(2, bool), {}, obs)
    for storage in (nstep, her):
        assert storage.rb.storage.device == torch.device(device)
        batch = storage.sample()  # rllte's batches: tuples of float32 tensors (dicts for HER)
        leaves = [v for x in batch for v in (x.values() if isinstance(x, dict) else [x])]
        assert {v.device.type for v in leaves} == {device}


def test_memmap_rows_cannot_live_on_a_device(tmp_path):
    with pytest.raises(ValueError, match="backend='memmap' keeps rows in a file on disk, not on "
                                         "device='cuda'"):
        TransitionStorage(100, backend="memmap", scratch_dir=tmp_path, device="cuda")


def test_move_together_keeps_every_dtype_and_shape():
    rows = torch.arange(6).view(2, 3)
    mask, weight = torch.tensor([[True, False]]), torch.rand(5, dtype=torch.float16)
    moved = move_together((mask, None, rows, weight), torch.device("meta"))  # no data, layout only
    assert moved[1] is None
    for before, after in zip((mask, rows, weight), (moved[0], moved[2], moved[3])):
        assert (after.device.type, after.dtype, after.shape) == ("meta", before.dtype, before.shape)


# ------------------------------------------------------------------------ CUDA
@cuda_only
def test_cuda_move_together_moves_the_values():
    # a strided view too: a window's column of row indices
    strided = torch.arange(12).view(4, 3)[:, 1]
    tensors = (torch.tensor([[True, False]]), torch.arange(7), torch.rand(3, dtype=torch.float16), strided)
    moved = move_together(tensors, torch.device("cuda"))
    for before, after in zip(tensors, moved):
        assert after.is_cuda and torch.equal(after.cpu(), before)


@cuda_only
@pytest.mark.parametrize("tensor", [torch.arange(5), torch.arange(12).view(4, 3)[:, 1]])
def test_cuda_move_together_moves_a_lone_tensor_by_itself(tensor):
    moved, kept = move_together((tensor, None), torch.device("cuda"))
    assert kept is None and moved.is_cuda and torch.equal(moved.cpu(), tensor)


@cuda_only
def test_cuda_move_together_takes_a_device_without_index_as_the_current_one():
    # a batch on "cuda" holds tensors on "cuda:0": those stay, the CPU ones move
    there, here = torch.arange(3, device="cuda"), torch.ones(2, dtype=torch.bool)
    kept, moved = move_together((there, here), torch.device("cuda"))
    assert kept is there and moved.is_cuda and bool(moved.all())


ONE_COPY = {  # (capacity, make_replay_buffer's keywords)
    "uniform": (100, {}),
    "growing": (100_000, {}),  # 1024 rows per stream held: slots are mapped rows
    "nstep": (100, {"n_step": 3}),
}


@cuda_only
@pytest.mark.parametrize("kind", sorted(ONE_COPY))
def test_cuda_sample_moves_its_rows_to_the_device_once(kind):
    # the read's slots, windows' masks and lengths, and the sample's "index" entry: one
    # copy (rows at a ring's end, read apart, ride in it too)
    capacity, kw = ONE_COPY[kind]
    rb = make_replay_buffer(capacity, batch_size=16, device="cuda", seed=0, **kw)
    rb.extend(episodes("cuda"))
    packed = rb.storage.packed
    assert (packed.allocated < packed.stream_capacity) == (kind == "growing")
    rb.sample()  # warm
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA], acc_events=True) as prof:
        batch = rb.sample()
        torch.cuda.synchronize()
    copies = [e.name for e in prof.events() if e.name.startswith("Memcpy")]
    assert copies == ["Memcpy HtoD (Pageable -> Device)"], copies
    reference = make_replay_buffer(capacity, batch_size=16, seed=0, **kw)
    reference.extend(episodes("cpu"))
    reference.sample()
    assert torch.equal(batch["index"].cpu(), reference.sample()["index"])


@cuda_only
def test_cuda_extend_from_cuda_data_into_cpu_and_cuda_rows():
    for device in ("cpu", "cuda"):
        rb = make_replay_buffer(200, batch_size=8, n_step=3, seed=1, device=device)
        rb.extend(episodes("cuda"))  # a collector on the GPU
        assert len(rb) == 60 and rb.sample()["observation"].device.type == device


@cuda_only
def test_cuda_collector_fragments_with_trajectory_ids():
    rb = make_replay_buffer(100, batch_size=4, num_streams=2, seed=0, device="cuda")
    data = episodes("cuda", T=6)[0]
    data["collector", "traj_ids"] = torch.zeros(6, dtype=torch.int64, device="cuda")
    rb.extend(data[:3])
    rb.extend(data[3:])  # continues trajectory 0: its observation is checked on the GPU
    assert len(rb) == 6
    with pytest.raises(ValueError, match="observation differs from that episode's last next"):
        broken = data[3:].clone()
        broken["observation"] += 1
        rb.extend(broken)


@cuda_only
@pytest.mark.parametrize(("source", "target"), [("cuda", "cpu"), ("cpu", "cuda")])
def test_cuda_checkpoint_moves_between_devices(source, target, tmp_path):
    rb = make_replay_buffer(200, batch_size=16, n_step=3, seed=2, device=source)
    rb.extend(episodes(source))
    torch.save(rb.state_dict(), tmp_path / "rb.pt")
    state = torch.load(tmp_path / "rb.pt", map_location=target, weights_only=False)
    copy = make_replay_buffer(200, batch_size=16, n_step=3, seed=2, device=target)
    copy.load_state_dict(state)
    rb.dumps(tmp_path / "dump")
    copy2 = make_replay_buffer(200, batch_size=16, n_step=3, seed=2, device=target)
    copy2.loads(tmp_path / "dump")
    expected = rb.sample()
    for other in (copy, copy2):
        batch = other.sample()
        assert batch["observation"].device.type == target
        assert (batch.to(source) == expected).all()


def test_compressed_frames_cannot_live_on_a_device():
    from torchrl_ext import TransitionStorage

    with pytest.raises(ValueError, match=r"compress=\{'pixels': 'zstd'\} keeps frames compressed in "
                                         r"host memory, not on device='cuda'"):
        TransitionStorage(64, device="cuda", compress={"pixels": "zstd"})
