"""Storage grows with what it holds, not with its capacity (issue 17, "Allocation").

Memory is measured in a fresh subprocess (resident set size before and after),
so nothing else of the test session counts. Bounds are generous memory bounds,
never time bounds.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from conftest import steps
from torchrl_ext import TransitionReplayBuffer, TransitionStorage, TransitionWriter, make_replay_buffer
from torchrl_ext.samplers import FrameStackSampler, NStepSampler, SequenceSampler, UniformTransitionSampler
from torchrl_ext.storages._packed import PackedRows
from torchrl_ext.transforms import NStepTransform

REPO = Path(__file__).resolve().parents[2]
GB = 2**30

pytestmark = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="Linux reserves lazily")

# Resident memory of the process, in bytes (Linux: /proc/self/statm, in pages).
_RSS = "def rss():\n    return int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE')\n"


def run_measured(body: str) -> dict[str, float]:
    """Run ``body`` in a fresh interpreter; it prints ``name=value`` lines, returned as a dict."""
    script = "import os\n" + _RSS + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": str(REPO), "RL_LOGGING_LEVEL": "WARNING"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert done.returncode == 0, done.stderr[-3000:]
    pairs = (line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return {k: float(v) for k, v in pairs}


def test_rllte_defaults_with_pixels_grow_with_the_data():
    # rllte's own test: 3x84x84 float32 observations, storage_size=1_000_000 and
    # the other defaults (4 DataLoader workers): 85 GB if allocated up front.
    got = run_measured(
        """
        import gymnasium as gym, numpy as np
        from torchrl_ext import NStepReplayStorage
        obs_space = gym.spaces.Box(0.0, 1.0, (3, 84, 84), np.float32)
        storage = NStepReplayStorage(obs_space, gym.spaces.Box(-1.0, 1.0, (6,), np.float32), seed=0)
        before = rss()
        rng = np.random.default_rng(0)
        obs = rng.random((1, 3, 84, 84), dtype=np.float32)
        for t in range(300):
            nxt = rng.random((1, 3, 84, 84), dtype=np.float32)
            done = np.array([t % 100 == 99])
            storage.add(obs, rng.random((1, 6), dtype=np.float32), np.ones(1), done,
                        np.zeros(1, bool), {}, nxt)
            obs = nxt
        for _ in range(4):
            batch = storage.sample()
        assert tuple(batch.observations.shape) == (256, 3, 84, 84), batch.observations.shape
        print(f"growth={rss() - before}")
        print(f"transitions={len(storage)}")
        """
    )
    assert got["transitions"] == 298  # NEXT_STEP autoreset: the step after each of 2 ends is a reset
    assert got["growth"] < 1 * GB


def test_drqv2_frame_stacks_at_full_capacity_grow_with_the_data():
    # DrQ-v2's uint8 3-frame stacks of 3x84x84 pixels (9x84x84), a million rows
    # (64 GB up front), written as a collector would: [num_envs, time] batches.
    got = run_measured(
        """
        import torch
        from tensordict import TensorDict
        from torchrl_ext import make_replay_buffer
        rb = make_replay_buffer(1_000_000, batch_size=256, n_step=3, gamma=0.99, seed=0)
        before = rss()
        flag = torch.zeros(1, 50, 1, dtype=torch.bool)
        for t in range(4):
            pixels = torch.randint(0, 255, (1, 51, 9, 84, 84), dtype=torch.uint8)
            rb.extend(TensorDict({"pixels": pixels[:, :-1], "action": torch.zeros(1, 50, 1),
                "next": {"pixels": pixels[:, 1:], "reward": torch.ones(1, 50, 1),
                         "done": flag, "terminated": flag, "truncated": flag}}, [1, 50]))
        batch = rb.sample()
        assert batch["pixels"].dtype == torch.uint8
        print(f"growth={rss() - before}")
        """
    )
    assert got["growth"] < 1 * GB


def test_episodic_ring_buffer_grows_with_the_data():
    got = run_measured(
        """
        import torch
        from tensordict import TensorDict
        from torchrl_ext.storages import EpisodePool
        spec = TensorDict({"obs": torch.zeros(3, 84, 84)}, [])
        before = rss()
        pool = EpisodePool(1_000_000, spec)  # 85 GB of float frames if allocated
        for _ in range(4):
            pool.append(TensorDict({"obs": torch.rand(50, 3, 84, 84)}, [50]))
        assert pool.sample(8, 10)["obs"].shape == (8, 10, 3, 84, 84)
        print(f"growth={rss() - before}")
        print(f"checkpoint={pool.state_dict()['rows'].bytes()}")
        """
    )
    assert got["growth"] < 1 * GB
    assert got["checkpoint"] == 200 * 3 * 84 * 84 * 4  # the rows used, not the capacity


# ----------------------------------------------------------------- checkpoints
def three_envs(t0: int, T: int) -> torch.Tensor:
    obs = torch.arange(t0, t0 + T, dtype=torch.float32)
    obs = torch.stack([obs, obs + 1000, obs + 2000]).unsqueeze(-1)  # [3, T, 1]
    return steps(obs, obs + 1, terminated=obs % 7 == 6)


@pytest.mark.parametrize("backend", ["tensor", "memmap"])
@pytest.mark.parametrize("how", ["state_dict", "dumps"])
def test_checkpoint_holds_the_rows_in_use_and_restores_them(backend, how, tmp_path):
    def build(name):
        return make_replay_buffer(
            300_000, batch_size=64, n_step=3, backend=backend, scratch_dir=tmp_path / name, seed=3
        )

    rb = build("a")
    rb.extend(three_envs(0, 10))
    if how == "state_dict":
        state = rb.state_dict()
        rows = state["_storage"]["rows"]
        # 30 steps and one more row per episode (5 ended, 3 running), of 300_000
        assert rows.batch_size == (38,)
        copy = build("b")
        copy.load_state_dict(state)
    else:
        rb.dumps(tmp_path / "ckpt")
        rows_dir = tmp_path / "ckpt" / "storage" / "rows"
        copy = build("b")
        copy.loads(tmp_path / "ckpt")
        assert sum(f.stat().st_size for f in rows_dir.rglob("*") if f.is_file()) < 100_000
    for _ in range(3):
        a, b = rb.sample(), copy.sample()
        assert (a == b).all()
    rb.extend(three_envs(10, 4))
    copy.extend(three_envs(10, 4))  # the copy goes on where the original is
    assert (rb.sample() == copy.sample()).all()


def test_checkpoint_of_a_wrapped_ring_holds_every_row(tmp_path):
    rb = make_replay_buffer(30, batch_size=8, seed=1)  # 10 rows per env
    rb.extend(three_envs(0, 25))
    state = rb.state_dict()
    assert state["_storage"]["rows"].batch_size == (30,)
    copy = make_replay_buffer(30, batch_size=8, seed=1)
    copy.load_state_dict(state)
    assert (rb.sample() == copy.sample()).all()


# ------------------------------------------- growth of device rows (run on CPU)
class GrowingStorage(TransitionStorage):
    """CPU rows that grow as on an accelerator (``PackedRows(grow=True)``), for a machine without one."""

    def initialize(self, schema, num_streams):
        super().initialize(schema, num_streams)
        self.packed = PackedRows(schema, num_streams, self.episode_index.stream_capacity,
                                 "tensor", None, self.device, grow=True)
        self._storage = self.packed.buffers


def buffer_on(storage, sampler, transform=None):
    return TransitionReplayBuffer(storage=storage, writer=TransitionWriter(), sampler=sampler,
                                  transform=transform, batch_size=32,
                                  generator=torch.Generator().manual_seed(4))


SAMPLERS = {
    "uniform": lambda: (UniformTransitionSampler(), None),
    "nstep": lambda: (NStepSampler(3), NStepTransform(0.9)),
    "sequence": lambda: (SequenceSampler(5), None),
    "frames": lambda: (FrameStackSampler(3), None),
}


@pytest.mark.parametrize("kind", sorted(SAMPLERS))
def test_grown_rows_serve_what_reserved_rows_serve(kind):
    # 2 streams of 3000 rows: the growing buffer holds 1024 per stream, then 2048, then 3000
    grown = buffer_on(GrowingStorage(6000), *SAMPLERS[kind]())
    reserved = buffer_on(TransitionStorage(6000), *SAMPLERS[kind]())
    sizes = []
    for t0 in range(0, 4000, 500):  # past the capacity: the rings wrap
        for rb in (grown, reserved):
            rb.extend(three_envs(t0, 500)[:2])
        sizes.append(grown.storage.packed.allocated)
        assert (grown.sample() == reserved.sample()).all()
    # ~571 rows per stream per write (an extra row per episode): doubled, then capped
    assert sizes == sorted(sizes) and set(sizes) == {1024, 2048, 3000}


def test_grown_rows_checkpoint_into_reserved_rows_and_back():
    grown = buffer_on(GrowingStorage(6000), UniformTransitionSampler())
    grown.extend(three_envs(0, 1500)[:2])
    reserved = buffer_on(TransitionStorage(6000), UniformTransitionSampler())
    reserved.load_state_dict(grown.state_dict())
    again = buffer_on(GrowingStorage(6000), UniformTransitionSampler())
    again.load_state_dict(reserved.state_dict())  # grows to hold the checkpoint's rows
    expected = grown.sample()
    assert (reserved.sample() == expected).all()
    assert (again.sample() == expected).all()


@pytest.mark.parametrize("kind", ["uniform", "nstep"])
def test_grown_rows_move_the_sample_index_with_the_read(kind):
    # rows mapped to a grown buffer are not the index: the index rides in the read's one
    # transfer, and the sample's "index" entry (moved by on_device) reuses that copy
    rb = buffer_on(GrowingStorage(6000), *SAMPLERS[kind]())
    rb.extend(three_envs(0, 500)[:2])
    packed = rb.storage.packed
    assert packed.allocated < packed.stream_capacity  # slots are not rows
    batch = rb.sample()
    host, there = packed.moved_index()
    assert host is batch["index"] and torch.equal(there, host)
    assert packed.moved_index() is None  # taken once
    assert rb.storage.on_device([host], torch.device("cpu"))[0] is host
