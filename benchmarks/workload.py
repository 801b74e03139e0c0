"""Workload W1: synthetic MuJoCo-sized transitions from 16 lockstep envs.

obs float32[17], action float32[6], reward float32, done/terminated/truncated
flags; every env runs 1000-step episodes that end by time limit
(``done = truncated = True`` on the 1000th step).  After a done step the next
step's ``observation`` is a fresh reset observation, exactly as a TorchRL
collector (or SB3 with ``terminal_observation``) would produce.

The stream is generated in vectorized ``[n_envs, T]`` chunks (time last) of
plain torch tensors; each implementation adapts a chunk to its own input
format (see ``impls.py``).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

OBS_DIM = 17
ACT_DIM = 6
N_ENVS = 16
EP_LEN = 1000
BATCH = 256
# raw bytes of one transition: obs + next_obs + action + reward (float32) + 3 bools
RAW_BYTES_PER_TRANSITION = (OBS_DIM + OBS_DIM + ACT_DIM + 1) * 4 + 3


class EpisodeStream:
    """Deterministic stream of lockstep vector-env steps, produced in chunks."""

    def __init__(self, seed: int = 0, n_envs: int = N_ENVS, ep_len: int = EP_LEN):
        self.g = torch.Generator().manual_seed(seed)
        self.n_envs = n_envs
        self.ep_len = ep_len
        self.t = 0  # global step counter (all envs in lockstep)
        self.carry = self._randn(n_envs, OBS_DIM)  # observation of the next step

    def _randn(self, *shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=self.g)

    def chunk(self, T: int) -> dict[str, torch.Tensor]:
        """Next ``T`` steps of every env as tensors shaped ``[n_envs, T, ...]``."""
        E = self.n_envs
        raw = self._randn(E, T + 1, OBS_DIM)
        raw[:, 0] = self.carry
        steps = self.t + torch.arange(T)
        done_t = (steps % self.ep_len) == self.ep_len - 1  # [T]
        obs = raw[:, :T].clone()
        next_obs = raw[:, 1:].clone()
        # a step that follows a done step starts from a reset observation
        after_done = torch.zeros(T, dtype=torch.bool)
        after_done[1:] = done_t[:-1]
        n_reset = int(after_done.sum())
        if n_reset:
            obs[:, after_done] = self._randn(E, n_reset, OBS_DIM)
        self.carry = self._randn(E, OBS_DIM) if bool(done_t[-1]) else raw[:, T].clone()
        self.t += T
        done = done_t.view(1, T, 1).expand(E, T, 1).clone()
        return {
            "obs": obs,
            "act": self._randn(E, T, ACT_DIM),
            "next_obs": next_obs,
            "rew": self._randn(E, T, 1),
            "done": done,
            "terminated": torch.zeros_like(done),
            "truncated": done.clone(),
        }

    def chunks_for(self, n_rows: int) -> list[dict[str, torch.Tensor]]:
        """Chunks totalling exactly ``n_rows`` transitions (n_rows % n_envs == 0)."""
        assert n_rows % self.n_envs == 0, n_rows
        steps, out, max_T = n_rows // self.n_envs, [], chunk_len(n_rows)
        while steps:
            T = min(max_T, steps)
            out.append(self.chunk(T))
            steps -= T
        return out


def chunk_len(capacity: int) -> int:
    """Steps per bulk-fill chunk: one episode, but at most half of what one env's
    share of the capacity holds (per-env ring storages reject larger writes)."""
    return max(1, min(EP_LEN, capacity // N_ENVS // 2))


def to_td(c: dict[str, torch.Tensor]) -> TensorDict:
    """TorchRL layout of a chunk, batch ``[n_envs, T]`` (or ``[n_envs]``)."""
    batch = c["obs"].shape[:-1]
    return TensorDict(
        {
            "observation": c["obs"],
            "action": c["act"],
            "next": TensorDict(
                {
                    "observation": c["next_obs"],
                    "reward": c["rew"],
                    "done": c["done"],
                    "terminated": c["terminated"],
                    "truncated": c["truncated"],
                },
                batch_size=batch,
            ),
        },
        batch_size=batch,
    )


def step_slices(c: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    """Split a ``[n_envs, T]`` chunk into T contiguous one-step ``[n_envs]`` dicts."""
    T = c["obs"].shape[1]
    return [{k: v[:, t].contiguous() for k, v in c.items()} for t in range(T)]
