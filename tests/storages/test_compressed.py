"""Compressed frames (``TransitionStorage(compress=...)``) on real Atari frames.

Frames come from a real ALE vector env (Breakout, grayscale, downscaled to
84x84 by area averaging), written through the gymnasium adapter. The
reference is the same buffer without ``compress``: every sampler must serve
the same batch, bit for bit.
"""
from __future__ import annotations

import pickle
import sys

import ale_py
import gymnasium as gym
import lz4.block
import numpy as np
import pytest
import torch
import torch.nn.functional as F
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict
from torch.utils.data import DataLoader, IterableDataset

from torchrl_ext import make_replay_buffer
from torchrl_ext.core.schema import LeafSpec
from torchrl_ext.envs import GymVectorAdapter
from torchrl_ext.loader import make_loader
from torchrl_ext.samplers import (
    FrameStackSampler,
    HindsightSampler,
    NStepSampler,
    PrioritizedTransitionSampler,
    SequenceSampler,
    UniformTransitionSampler,
)
from torchrl_ext.storages import TransitionStorage
from torchrl_ext.storages.arena import FrameArena

gym.register_envs(ale_py)
NUM_ENVS = 2


def downscale(frames: np.ndarray) -> torch.Tensor:
    """``[N, 210, 160]`` grayscale screens to ``[N, 1, 84, 84]`` uint8 (area average)."""
    x = torch.from_numpy(frames).float().unsqueeze(1)
    return F.interpolate(x, (84, 84), mode="area").round().to(torch.uint8)


@pytest.fixture(scope="module")
def atari():
    """Steps of 2 Breakout envs (episodes cut at 40 steps): ``[2]`` TensorDicts, one per step."""
    env = gym.make_vec("ALE/Breakout-v5", num_envs=NUM_ENVS, vectorization_mode="sync",
                       obs_type="grayscale", repeat_action_probability=0.0, max_episode_steps=40)
    adapter = GymVectorAdapter(NUM_ENVS, observation_key="pixels")
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    out = []
    for _ in range(130):
        action = rng.integers(4, size=NUM_ENVS)
        next_obs, reward, terminated, truncated, infos = env.step(action)
        out.append(adapter.step(downscale(obs), action, reward, terminated, truncated, infos,
                                downscale(next_obs)))
        obs = next_obs
    env.close()
    return out


def fill(rb, atari, count):
    for step in atari[:count]:
        rb.extend(step)
    return rb


SAMPLERS = {
    "uniform": lambda: dict(sampler=UniformTransitionSampler()),
    "prioritized": lambda: dict(sampler=PrioritizedTransitionSampler()),
    "nstep": lambda: dict(n_step=3),
    "frames": lambda: dict(n_frames=4),
    "frames-nstep": lambda: dict(n_step=3, n_frames=4),
    "sequence": lambda: dict(sampler=SequenceSampler(5)),
    "sequence-pad": lambda: dict(sampler=SequenceSampler(6, pad=True)),
    "frames-sequence": lambda: dict(sampler=SequenceSampler(3), n_frames=2),
    "hindsight": lambda: dict(sampler=HindsightSampler("future", 2, base=NStepSampler(2))),
    "hindsight-one-step": lambda: dict(sampler=HindsightSampler("future", 2)),
    "hindsight-no-goals": lambda: dict(sampler=HindsightSampler("future", 0)),
}


def pair(kind, capacity, seed=0, codec="zstd", **kw):
    """The same buffer without and with compressed pixels."""
    return [make_replay_buffer(capacity, batch_size=16, seed=seed, compress=c, **SAMPLERS[kind](), **kw)
            for c in (None, {"pixels": codec})]


def assert_same(a, b):
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key in a.keys(True, True):
        assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_repeated_rows_of_a_batch_are_the_frames_written(atari, codec):
    """Rows read many times in one batch (decoded once, then copied) at episode starts, ends and
    across the ring seam (capacity 48 over 2 streams of 24 rows, 130 steps written)."""
    plain, packed = (fill(rb, atari, 130) for rb in pair("uniform", 48, codec=codec))
    rows = plain.storage.live_transition_rows()
    index = torch.cat([rows, rows.flip(0), rows[:1].expand(9)])  # [2 * live + 9], each row 2-11 times
    assert_same(plain.storage.get(index), packed.storage.get(index))


@settings(max_examples=40)
@given(kind=st.sampled_from(sorted(SAMPLERS)), codec=st.sampled_from(["zstd", "lz4"]),
       capacity=st.integers(40, 300), count=st.integers(20, 130), seed=st.integers(0, 2**16))
def test_every_sampler_serves_the_frames_written_bit_exact(atari, kind, codec, capacity, count, seed):
    plain, packed = (fill(rb, atari, count) for rb in pair(kind, capacity, seed, codec))
    for _ in range(3):  # capacities under 260 rows wrap the rings: overwritten blobs too
        assert_same(plain.sample(), packed.sample())


def test_each_frame_is_stored_once(atari):
    rb = fill(make_replay_buffer(1000, compress={"pixels": "zstd"}), atari, 100)
    arena = rb.storage.packed.arenas[("pixels",)]
    # one frame per transition (its next observation), plus the first
    # observation of each episode (40 steps each: 3 per stream in 100 steps,
    # the reset steps between them are not transitions)
    assert len(rb) == NUM_ENVS * (40 + 40 + 18)
    assert int((arena.state()["lengths"] > 0).sum()) == len(rb) + NUM_ENVS * 3


def test_memory_is_under_a_quarter_of_the_raw_frames(atari):
    rb = fill(make_replay_buffer(1000, compress={"pixels": "zstd"}), atari, 130)
    raw = NUM_ENVS * 130 * 84 * 84
    assert rb.storage.packed.resident_bytes < raw / 4


def test_overwritten_blobs_free_their_memory(atari):
    """Writing the data 20 times over a ring of 60 rows keeps memory to a ring's worth."""
    rb = make_replay_buffer(120, batch_size=16, seed=0, compress={"pixels": "zstd"})
    reference = make_replay_buffer(120, batch_size=16, seed=0)
    fill(rb, atari, 130)
    arena = rb.storage.packed.arenas[("pixels",)]
    after_one = arena.resident_bytes
    for _ in range(20):
        fill(rb, atari, 130)
    for _ in range(21):
        fill(reference, atari, 130)
    assert arena.resident_bytes <= after_one + 2 * NUM_ENVS * arena.segment_bytes
    assert_same(reference.sample(), rb.sample())


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_a_frame_that_does_not_compress_is_stored_raw(codec):
    arena = FrameArena(codec, LeafSpec(torch.Size([1, 84, 84]), torch.uint8), 4, 2, None)
    noise = torch.randint(0, 256, (2, 1, 84, 84), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    arena.write(noise, torch.tensor([0, 3]))
    assert arena.state()["lengths"].tolist() == [84 * 84, 0, 0, 84 * 84]
    assert torch.equal(arena.read(torch.tensor([3, 0])), noise.flip(0))


OTHER_LEVELS = {
    "zstd": zstandard.ZstdCompressor(level=19).compress,
    # checkpoints written before HC (fast mode) and before HC level 6 (level 3)
    "lz4-fast": lambda f: lz4.block.compress(f, store_size=False),
    "lz4-hc3": lambda f: lz4.block.compress(f, store_size=False, mode="high_compression", compression=3),
}


@pytest.mark.parametrize("encoder", sorted(OTHER_LEVELS))
def test_blobs_written_at_another_level_still_read(encoder):
    """Blobs are plain lz4 blocks / zstd frames: checkpoints written at other levels still read."""
    codec, encode = encoder.split("-")[0], OTHER_LEVELS[encoder]
    frames = torch.arange(2 * 84 * 84).remainder(7).to(torch.uint8).view(2, 1, 84, 84)
    arena = FrameArena(codec, LeafSpec(torch.Size([1, 84, 84]), torch.uint8), 4, 2, None)
    blobs = [encode(f.numpy().tobytes()) for f in frames]
    lengths = torch.tensor([len(blobs[0]), 0, 0, len(blobs[1])], dtype=torch.int32)
    blob_bytes = torch.frombuffer(bytearray(b"".join(blobs)), dtype=torch.uint8)
    arena.load_state(TensorDict({"lengths": lengths, "blobs": blob_bytes}, []))
    assert torch.equal(arena.read(torch.tensor([[3, 0], [0, 0]])), frames[torch.tensor([[1, 0], [0, 0]])])


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_a_blob_that_does_not_decode_is_an_error_naming_its_rows(codec):
    arena = FrameArena(codec, LeafSpec(torch.Size([1, 8, 8]), torch.uint8), 4, 2, None)
    arena.write(torch.zeros(2, 1, 8, 8, dtype=torch.uint8), torch.tensor([0, 3]))
    state = arena.state()
    state["blobs"][:] = 255  # neither an lz4 block nor a zstd frame
    arena.load_state(state)
    with pytest.raises(RuntimeError, match=rf"FrameArena.read: the {codec} blobs of rows \[0, 3\] do not "
                       r"decode to 64-byte frames: the frame pool is corrupt"):
        arena.read(torch.tensor([3, 0, 3]))


@pytest.mark.parametrize("kind", ["frames-nstep", "sequence", "hindsight"])
def test_state_dict_restores_the_next_sample(atari, kind):
    _, rb = (fill(b, atari, 90) for b in pair(kind, 150))
    _, fresh = pair(kind, 150, seed=5)
    fresh.load_state_dict(rb.state_dict())
    assert_same(fresh.sample(), rb.sample())


def test_dumps_loads_restore_the_next_sample(atari, tmp_path):
    _, rb = (fill(b, atari, 90) for b in pair("frames-nstep", 150))
    rb.dumps(tmp_path / "ckpt")
    _, fresh = pair("frames-nstep", 150, seed=5)
    fresh.loads(tmp_path / "ckpt")
    assert_same(fresh.sample(), rb.sample())
    fill(fresh, atari, 130)  # writing on goes on from the restored rows
    fill(rb, atari, 130)
    assert_same(fresh.sample(), rb.sample())


def test_memmap_backend_keeps_the_pool_in_the_scratch_dir(atari, tmp_path):
    plain = fill(make_replay_buffer(150, batch_size=8, seed=0, n_step=3), atari, 90)
    rb = fill(make_replay_buffer(150, batch_size=8, seed=0, n_step=3, backend="memmap",
                                 scratch_dir=tmp_path / "rows", compress={"pixels": "zstd"}), atari, 90)
    assert any(p.name.startswith("torchrl_ext-frames-") for p in (tmp_path / "rows").iterdir())
    assert_same(plain.sample(), rb.sample())


def test_a_nested_entry_named_like_a_compressed_key_is_kept(atari):
    """compress={"pixels": ...} compresses "pixels" only: a wrist camera's ("wrist", "pixels")
    and a root-only ("info", "pixels") are other entries, stored as written."""
    def with_wrist(step):
        wrist = {"pixels": step["pixels"] // 2}
        return step.update({"wrist": wrist, "info": {"pixels": step["action"].float()},
                            "next": {"wrist": {"pixels": step["next", "pixels"] // 2}}})

    steps = [with_wrist(s.clone()) for s in atari[:30]]
    plain, packed = (fill(rb, steps, 30) for rb in pair("nstep", 150))
    assert_same(plain.sample(), packed.sample())


def test_a_pickled_storage_reads_the_same_frames(atari):
    rb = fill(make_replay_buffer(150, compress={"pixels": "zstd"}), atari, 90)
    copy = pickle.loads(pickle.dumps(rb.storage))
    rows = torch.arange(0, 150, 7)
    assert torch.equal(copy.get(rows)["pixels"], rb.storage.get(rows)["pixels"])


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_worker_processes_read_frames_written_after_they_started(atari, context):
    """Workers sample the shared arena; rows written while they run reach them."""
    rb = fill(make_replay_buffer(1000, batch_size=32, seed=0, n_step=3, n_frames=4,
                                 compress={"pixels": "zstd"}), atari, 20)
    written = {}
    for step in atari:
        for env in range(NUM_ENVS):
            written[step["next", "pixels"][env].numpy().tobytes()] = True
            written[step["pixels"][env].numpy().tobytes()] = True
    loader = make_loader(rb, num_workers=2, num_batches=4, multiprocessing_context=context,
                         seed=1, prefetch_factor=1)
    batches = []
    for i, batch in enumerate(loader):
        if i == 0:
            fill(rb, atari[20:], 110)  # the ring now holds steps the workers did not see at start
        batches.append(batch)
    frames = torch.cat([b["next", "pixels"].reshape(-1, 84, 84) for b in batches])
    assert all(f.unsqueeze(0).numpy().tobytes() in written for f in frames)
    assert len(batches) == 8


class Reads(IterableDataset):
    def __init__(self, storage, rows):
        self.storage, self.rows = storage, rows

    def __iter__(self):
        yield self.storage.get(self.rows)["pixels"]


def test_a_worker_reads_the_rows_this_process_reads(atari):
    rb = fill(make_replay_buffer(150, compress={"pixels": "zstd"}), atari, 90)
    rows = torch.arange(0, 150, 3)
    loader = DataLoader(Reads(rb.storage, rows), batch_size=None, num_workers=1,
                        multiprocessing_context="fork")
    (in_worker,) = list(loader)
    assert torch.equal(in_worker, rb.storage.get(rows)["pixels"])


# ------------------------------------------------------------------- errors
def test_unknown_codec_is_refused():
    with pytest.raises(ValueError, match=r"compress\['pixels'\]='gzip': unknown codec; expected one of \['zstd', 'lz4'\]"):
        TransitionStorage(10, compress={"pixels": "gzip"})


def test_compress_must_be_a_dict():
    with pytest.raises(TypeError, match=r"compress='pixels': expected a dict of observation key to codec"):
        TransitionStorage(10, compress="pixels")


@pytest.mark.parametrize("codec, package", [("zstd", "zstandard"), ("lz4", "lz4.block")])
def test_a_missing_codec_package_is_an_error_naming_the_key_and_the_extra(codec, package, monkeypatch):
    monkeypatch.setitem(sys.modules, package, None)  # import fails as if not installed
    with pytest.raises(ImportError, match=rf"compress\['pixels'\]='{codec}': the {codec} codec needs the "
                       rf"{package.split('.')[0]} package, .*pip install 'torchrl_ext\[compress\]'"):
        TransitionStorage(10, compress={"pixels": codec})


@pytest.mark.parametrize("compress, error, match", [
    ({1: "zstd"}, TypeError, r"compress has the key 1 \(int\), expected an observation key: a str or a "
                             r"tuple of str, e.g. compress=\{'pixels': 'zstd'\}"),
    ({"pixels": "zstd", ("pixels",): "lz4"}, ValueError,
     r"compress names 'pixels' twice \('pixels' and \('pixels',\)\); give each entry one codec"),
])
def test_compress_keys_must_be_observation_keys_given_once(compress, error, match):
    with pytest.raises(error, match=match):
        TransitionStorage(10, compress=compress)


def test_compressing_an_entry_that_is_not_an_observation_is_refused(atari):
    rb = make_replay_buffer(100, compress={"action": "zstd"})
    with pytest.raises(KeyError, match=r"compress has 'action', which is not an observation entry .*'pixels'"):
        rb.extend(atari[0])


def test_a_checkpoint_with_other_compression_is_refused(atari):
    _, rb = (fill(b, atari, 30) for b in pair("uniform", 150))
    plain, _ = pair("uniform", 150)
    with pytest.raises(ValueError, match=r"checkpoint has compress=\[\[\['pixels'\], 'zstd'\]\], this storage \[\]"):
        plain.load_state_dict(rb.state_dict())
