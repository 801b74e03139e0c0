"""Before/after: do two source trees draw the same samples? (run with ``PYTHONPATH=<tree>``)

    PYTHONPATH=OLD .venv/bin/python benchmarks/ab_samples.py
    PYTHONPATH=NEW .venv/bin/python benchmarks/ab_samples.py

Prints one digest per workload (uniform, prioritized, sequences, padded and rare
windows, whole episodes, n-step, HER, EpisodePool, the HER and n-step facades),
each over seeded writes and samples through public APIs only; equal digests
mean equal samples. A companion of ``ab.py`` for refactors that must not change
behaviour.
"""
from __future__ import annotations

import threads  # noqa: F401 -- first: one thread per native pool (threads.py)

import hashlib
import os
import sys

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workload import EpisodeStream, to_td  # noqa: E402

from torchrl_ext import (  # noqa: E402
    HerReplayStorage,
    NStepReplayStorage,
    make_her_replay_buffer,
    make_replay_buffer,
)
from torchrl_ext.samplers import PrioritizedTransitionSampler, SequenceSampler  # noqa: E402
from torchrl_ext.storages import EpisodePool  # noqa: E402


class Digest:
    """A sha256 of every leaf fed to it, in key order."""

    def __init__(self):
        self.h = hashlib.sha256()

    def feed(self, x) -> None:
        if hasattr(x, "items"):  # a TensorDict, or the rllte facades' dict observations
            leaves = x.items() if isinstance(x, dict) else x.items(include_nested=True, leaves_only=True)
            for key, value in sorted(leaves, key=lambda kv: str(kv[0])):
                self.h.update(str(key).encode())
                self.h.update(value.contiguous().numpy().tobytes())
        else:
            self.h.update(x.contiguous().numpy().tobytes())

    def hex(self) -> str:
        return self.h.hexdigest()[:12]


def buffers() -> dict[str, str]:
    """Seeded buffers of four envs, sampled between writes."""
    out = {}
    kinds = {
        "uniform": {},
        "prioritized": {"sampler": PrioritizedTransitionSampler(alpha=0.6, beta=0.4)},
        "sequences": {"sampler": SequenceSampler(20)},
        "padded": {"sampler": SequenceSampler(1500, pad=True)},
        "rare windows": {"sampler": SequenceSampler(990)},
        "whole episodes": {"sampler": SequenceSampler(None)},
        "n-step": {"n_step": 3},
    }
    for name, options in kinds.items():
        rb = make_replay_buffer(8_000, batch_size=32, seed=0, **options)
        stream, digest = EpisodeStream(seed=3, n_envs=4), Digest()
        for write in range(5):
            rb.extend(to_td(stream.chunk(700)))
            if write == 4 or name not in ("rare windows", "whole episodes"):
                for _ in range(3):
                    digest.feed(rb.sample())
        out[name] = digest.hex()
    rb = make_her_replay_buffer(8_000, lambda a, d, i: -(a != d).any(-1).float(), batch_size=32,
                                seed=0, n_step=2)
    stream, digest = EpisodeStream(seed=4, n_envs=4), Digest()
    for _ in range(3):
        chunk = to_td(stream.chunk(500))
        for prefix in ((), ("next",)):
            chunk[(*prefix, "achieved_goal")] = chunk[(*prefix, "observation")][..., :2].round()
            chunk[(*prefix, "desired_goal")] = torch.zeros_like(chunk["observation"][..., :2])
        rb.extend(chunk)
    for _ in range(3):
        digest.feed(rb.sample())
    out["her"] = digest.hex()
    return out


def pool() -> str:
    pool = EpisodePool(5000, TensorDict({"x": torch.zeros(())}, []))
    generator, digest = torch.Generator().manual_seed(0), Digest()
    slots = [pool.append(TensorDict({"x": torch.arange(float(n))}, [n])) for n in (300, 5, 900, 40, 1200)]
    pool.evict(slots[1])
    for width, pad, rounds in ((10, False, 16), (1000, True, 16), (1100, False, 0), (None, False, 16)):
        digest.feed(pool.sample(64, width, pad=pad, generator=generator, max_rounds=rounds))
    return digest.hex()


def facades() -> dict[str, str]:
    out = {}
    bits = gym.spaces.MultiBinary(6)
    space = gym.spaces.Dict(observation=bits, achieved_goal=bits, desired_goal=bits)

    def reward(achieved, desired, infos):  # numpy arrays and a dict per row, as rllte passes them
        extra = np.array([info.get("v", 0) for info in infos], np.float32)
        return (achieved != desired).astype(np.float32).sum(-1) + extra

    for copy_info_dict in (False, True):
        storage = HerReplayStorage(space, gym.spaces.Discrete(6), storage_size=2000, num_envs=4,
                                   batch_size=16, seed=0, copy_info_dict=copy_info_dict, reward_fn=reward)
        rng, digest = np.random.default_rng(0), Digest()
        for _ in range(300):
            obs = {k: rng.integers(0, 2, (4, 6), dtype=np.int8) for k in space.spaces}
            nxt = {k: rng.integers(0, 2, (4, 6), dtype=np.int8) for k in space.spaces}
            storage.add(obs, rng.integers(0, 6, 4), rng.normal(size=4), rng.random(4) < 0.05,
                        rng.random(4) < 0.02, {"v": rng.normal(size=4)}, nxt)
        for _ in range(3):
            batch = storage.sample()
            for part in (batch.observations, batch.rewards, batch.actions, batch.terminateds):
                digest.feed(part)
        out[f"HER facade (copy_info_dict={copy_info_dict})"] = digest.hex()
    nstep = NStepReplayStorage(gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2),
                               num_envs=2, num_workers=0, batch_size=8, seed=0)
    rng, digest = np.random.default_rng(1), Digest()
    for _ in range(200):
        nstep.add(rng.normal(size=(2, 3)), rng.integers(0, 2, 2), rng.normal(size=2),
                  rng.random(2) < 0.05, rng.random(2) < 0.02, {}, rng.normal(size=(2, 3)))
    for _ in range(3):
        batch = nstep.sample()
        for part in (batch.observations, batch.rewards, batch.discounts):
            digest.feed(part)
    out["n-step facade"] = digest.hex()
    return out


if __name__ == "__main__":
    torch.set_num_threads(1)
    for name, digest in {**buffers(), "EpisodePool": pool(), **facades()}.items():
        print(f"{name}: {digest}")
