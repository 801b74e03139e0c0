"""Adapters giving every buffer the same small interface.

``build(capacity)``      create an empty buffer
``fill(chunk)``          bulk insert one ``[n_envs, T]`` workload chunk (setup only)
``prep_steps(chunk)``    pre-convert a chunk into per-step write arguments
                         (done outside the timed region)
``write(step)``          one vector-env step (16 transitions) -- timed
``sample()``             one batch of 256 transitions -- timed

Import errors surface from ``build`` so the harness can mark a row
"not installed" / "unavailable" instead of crashing.
"""

from __future__ import annotations

import numpy as np
import torch

from workload import ACT_DIM, BATCH, N_ENVS, OBS_DIM, step_slices, to_td

FIELDS = ("obs", "act", "next_obs", "rew", "done", "terminated", "truncated")


class Impl:
    key = ""
    label = ""
    kind = "peer"  # "ours" | "peer" | "floor"

    def prep_steps(self, chunk):
        return step_slices(chunk)


class Ours(Impl):
    key, label, kind = "ours", "ours: make_replay_buffer (TransitionStorage)", "ours"

    def build(self, capacity):
        from torchrl_ext import make_replay_buffer

        self.rb = make_replay_buffer(capacity, batch_size=BATCH)

    def fill(self, chunk):
        self.rb.extend(to_td(chunk))  # collector-shaped [16, T], time last

    def prep_steps(self, chunk):
        return [to_td(s) for s in step_slices(chunk)]

    def write(self, step):
        self.rb.extend(step)

    def sample(self):
        return self.rb.sample()


class TorchRLNative(Ours):
    key, label, kind = "torchrl", "TorchRL LazyTensorStorage+RandomSampler", "peer"

    def build(self, capacity):
        from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
        from torchrl.data.replay_buffers import RandomSampler

        self.rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(capacity), sampler=RandomSampler(), batch_size=BATCH
        )

    def fill(self, chunk):
        self.rb.extend(to_td(chunk).reshape(-1))  # flat transitions


class SB3(Impl):
    key, label = "sb3", "SB3 ReplayBuffer (n_envs=16)"

    def build(self, capacity):
        from gymnasium.spaces import Box
        from stable_baselines3.common.buffers import ReplayBuffer

        self.rb = ReplayBuffer(
            capacity,
            Box(-np.inf, np.inf, (OBS_DIM,), np.float32),
            Box(-1.0, 1.0, (ACT_DIM,), np.float32),
            device="cpu",
            n_envs=N_ENVS,
            optimize_memory_usage=False,
        )
        self._info_run = [{} for _ in range(N_ENVS)]
        self._info_trunc = [{"TimeLimit.truncated": True} for _ in range(N_ENVS)]

    def _args(self, s):
        trunc = bool(s["truncated"].any())
        return (
            s["obs"].numpy(), s["next_obs"].numpy(), s["act"].numpy(),
            s["rew"][:, 0].numpy(), s["done"][:, 0].numpy().astype(np.float32),
            self._info_trunc if trunc else self._info_run,
        )

    def fill(self, chunk):
        for s in step_slices(chunk):
            self.rb.add(*self._args(s))

    def prep_steps(self, chunk):
        return [self._args(s) for s in step_slices(chunk)]

    def write(self, step):
        self.rb.add(*step)

    def sample(self):
        return self.rb.sample(BATCH)


class Cpprb(Impl):
    key, label = "cpprb", "cpprb ReplayBuffer"

    def build(self, capacity):
        import cpprb

        self.rb = cpprb.ReplayBuffer(
            capacity,
            env_dict={
                "obs": {"shape": OBS_DIM}, "act": {"shape": ACT_DIM}, "rew": {},
                "next_obs": {"shape": OBS_DIM}, "done": {},
            },
        )

    @staticmethod
    def _kw(c):
        f = lambda x: x.reshape(-1, x.shape[-1]).numpy()  # noqa: E731
        return dict(
            obs=f(c["obs"]), act=f(c["act"]), rew=f(c["rew"]),
            next_obs=f(c["next_obs"]), done=f(c["done"]).astype(np.float32),
        )

    def fill(self, chunk):
        self.rb.add(**self._kw(chunk))

    def prep_steps(self, chunk):
        return [self._kw(s) for s in step_slices(chunk)]

    def write(self, step):
        self.rb.add(**step)

    def sample(self):
        return self.rb.sample(BATCH)


class GatherFloor(Impl):
    """Separate preallocated tensors per field, gathered with one LongTensor."""

    key, label, kind = "gather", "floor: bare per-field gather", "floor"

    def build(self, capacity):
        dims = {"obs": OBS_DIM, "act": ACT_DIM, "next_obs": OBS_DIM, "rew": 1}
        self.buf = {k: torch.empty(capacity, d) for k, d in dims.items()}
        for k in ("done", "terminated", "truncated"):
            self.buf[k] = torch.empty(capacity, 1, dtype=torch.bool)
        self.cap, self.pos, self.size = capacity, 0, 0

    def _put(self, flat):
        n = next(iter(flat.values())).shape[0]
        idx = (self.pos + torch.arange(n)) % self.cap
        for k, v in flat.items():
            self.buf[k][idx] = v
        self.pos = (self.pos + n) % self.cap
        self.size = min(self.cap, self.size + n)

    def fill(self, chunk):
        self._put({k: v.reshape(-1, v.shape[-1]) for k, v in chunk.items()})

    def write(self, step):  # contiguous slice copy (capacity % 16 == 0)
        p = self.pos
        for k, v in step.items():
            self.buf[k][p : p + N_ENVS] = v
        self.pos = (p + N_ENVS) % self.cap

    def sample(self):
        idx = torch.randint(self.size, (BATCH,))
        return {k: v[idx] for k, v in self.buf.items()}


class PackedFloor(Impl):
    """One packed float32 [N, 44] tensor (flags stored as floats) + index_select."""

    key, label, kind = "packed", "floor: packed [N,44] index_select", "floor"
    D = OBS_DIM * 2 + ACT_DIM + 1 + 3

    def build(self, capacity):
        self.buf = torch.empty(capacity, self.D)
        self.cap, self.pos, self.size = capacity, 0, 0

    @staticmethod
    def _pack(c):
        return torch.cat([c[k].float() for k in FIELDS], dim=-1)

    def fill(self, chunk):
        rows = self._pack(chunk).reshape(-1, self.D)
        idx = (self.pos + torch.arange(rows.shape[0])) % self.cap
        self.buf[idx] = rows
        self.pos = (self.pos + rows.shape[0]) % self.cap
        self.size = min(self.cap, self.size + rows.shape[0])

    def prep_steps(self, chunk):
        return [self._pack(s) for s in step_slices(chunk)]

    def write(self, step):
        p = self.pos
        self.buf[p : p + N_ENVS] = step
        self.pos = (p + N_ENVS) % self.cap

    def sample(self):
        return self.buf.index_select(0, torch.randint(self.size, (BATCH,)))


ALL = [Ours, TorchRLNative, SB3, Cpprb, GatherFloor, PackedFloor]
BY_KEY = {c.key: c for c in ALL}
