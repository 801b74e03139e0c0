"""Shared test helpers: transition builders, worker checks and Hypothesis profiles."""
from __future__ import annotations

import logging
import os

os.environ.setdefault("RL_LOGGING_LEVEL", "WARNING")  # torchrl logs every storage init

import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from reference import LoopReference
from torchrl_ext import make_replay_buffer

settings.register_profile(
    "ci",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
logging.getLogger("torchrl").setLevel(logging.WARNING)


def steps(
    obs: torch.Tensor,
    next_obs: torch.Tensor,
    *,
    terminated: torch.Tensor | None = None,
    truncated: torch.Tensor | None = None,
    reward: torch.Tensor | None = None,
    action: torch.Tensor | None = None,
    traj_ids: torch.Tensor | None = None,
) -> TensorDict:
    """TorchRL transitions from ``obs`` / ``next_obs`` of shape ``batch + [1]``.

    Action and reward default to the observation (its first feature), so every
    entry of a transition can be traced back to the step that wrote it.
    """
    batch = obs.shape[:-1]
    terminated = torch.zeros(*batch, 1, dtype=torch.bool) if terminated is None else terminated
    truncated = torch.zeros(*batch, 1, dtype=torch.bool) if truncated is None else truncated
    out = TensorDict(
        {
            "observation": obs,
            "action": obs.clone() if action is None else action,
            "next": {
                "observation": next_obs,
                "reward": obs[..., :1].clone() if reward is None else reward,
                "terminated": terminated,
                "truncated": truncated,
                "done": terminated | truncated,
            },
        },
        batch_size=batch,
    )
    if traj_ids is not None:
        out.set(("collector", "traj_ids"), traj_ids)
    return out


def column(values, dtype=torch.float32) -> torch.Tensor:
    """``[N] -> [N, 1]`` tensor."""
    return torch.tensor(values, dtype=dtype).unsqueeze(-1)


def transitions_of(td) -> list[tuple]:
    """Sorted (obs, action, reward, next_obs, terminated, truncated) tuples."""
    return sorted(
        zip(
            td["observation"][..., 0].reshape(-1).tolist(),
            td["action"][..., 0].reshape(-1).tolist(),
            td["next", "reward"][..., 0].reshape(-1).tolist(),
            td["next", "observation"][..., 0].reshape(-1).tolist(),
            td["next", "terminated"][..., 0].reshape(-1).tolist(),
            td["next", "truncated"][..., 0].reshape(-1).tolist(),
        )
    )


class CountingSource:
    """A window source (``torchrl_ext.core.windows.WindowSource``) that counts its calls.

    ``candidates``: candidate starts drawn; ``exact_counts``: times the valid
    windows were counted episode by episode (the exact fallback).
    """

    def __init__(self, source):
        self.source, self.candidates, self.exact_counts = source, 0, 0

    def window_candidates(self, count, generator):
        self.candidates += count
        return self.source.window_candidates(count, generator)

    def live_episodes(self):
        self.exact_counts += 1
        return self.source.live_episodes()


# per step: 0 = continue, 1 = terminated, 2 = truncated
ENDINGS = st.sampled_from([0, 0, 0, 1, 2])


@st.composite
def workloads(draw):
    num_streams = draw(st.integers(1, 3))
    stream_capacity = draw(st.integers(2, 12))
    num_writes = draw(st.integers(1, 12))
    # every write covers all streams with the same number of steps, at times
    # more than a stream's ring holds (the oldest rows of the write are evicted)
    lengths = draw(st.lists(st.integers(1, 7), min_size=num_writes, max_size=num_writes))
    endings = [
        draw(st.lists(ENDINGS, min_size=num_streams * t, max_size=num_streams * t))
        for t in lengths
    ]
    single_steps = draw(st.booleans())  # write [N] one-step batches instead of [N, T]
    return num_streams, stream_capacity, lengths, endings, single_steps


def run(num_streams, stream_capacity, lengths, endings, single_steps, **kwargs):
    """Feed the same episodes to the buffer (``make_replay_buffer(**kwargs)``) and the reference."""
    rb = make_replay_buffer(num_streams * stream_capacity, seed=0, **kwargs)
    ref = LoopReference(num_streams, stream_capacity)
    counter = iter(range(1, 10**9))
    current = [float(next(counter)) for _ in range(num_streams)]  # obs each stream is in
    for T, ending in zip(lengths, endings):
        ending = torch.tensor(ending).view(num_streams, T)
        obs = torch.zeros(num_streams, T)
        nxt = torch.zeros(num_streams, T)
        for t in range(T):
            for s in range(num_streams):
                obs[s, t] = current[s]
                nxt[s, t] = next(counter)
                term, trunc = bool(ending[s, t] == 1), bool(ending[s, t] == 2)
                ref.step(s, current[s], current[s], current[s], float(nxt[s, t]), term, trunc)
                current[s] = float(next(counter)) if term or trunc else float(nxt[s, t])
        data = steps(
            obs.unsqueeze(-1),
            nxt.unsqueeze(-1),
            terminated=(ending == 1).unsqueeze(-1),
            truncated=(ending == 2).unsqueeze(-1),
        )
        if single_steps:
            for t in range(T):
                rb.extend(data[:, t])
        else:
            rb.extend(data)
    return rb, ref


def killed_workers(monkeypatch, workers) -> list[int]:
    """The pids of ``workers`` (DataLoader worker processes) that get killed from now on.

    DataLoader kills (``terminate``) a worker that did not stop within 5 s of its
    stop signal; a worker that stopped by itself is never in the list. Other
    tests' workers are not counted.
    """
    ours = {w.pid for w in workers}
    killed: list[int] = []
    kind = type(workers[0])
    kill = kind.terminate

    def terminate(self):
        if self.pid in ours:
            killed.append(self.pid)
        kill(self)

    monkeypatch.setattr(kind, "terminate", terminate)
    return killed
