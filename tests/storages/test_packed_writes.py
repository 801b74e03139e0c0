"""Writes of packed rows: straight into the buffer run by run, or packed then scattered: the same bytes."""
from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

import torchrl_ext.storages._packed as packed
from torchrl_ext import make_replay_buffer


def chunk(t0: int, T: int, envs: int = 3) -> TensorDict:
    """``[envs, T]`` steps with every dtype kind a row holds (floats, bfloat16, ints, bools)."""
    g = torch.Generator().manual_seed(t0)
    obs = torch.randn(envs, T + 1, 5, generator=g)
    done = torch.rand(envs, T, 1, generator=g) < 0.05
    return TensorDict({
        "observation": obs[:, :-1],
        "action": torch.randint(0, 7, (envs, T, 2), generator=g),
        "extra": torch.randn(envs, T, 3, generator=g).to(torch.bfloat16),
        "next": {"observation": obs[:, 1:], "reward": torch.randn(envs, T, 1, generator=g),
                 "done": done, "terminated": done},
    }, [envs, T])


@pytest.mark.parametrize("T", [40, 97, 300])
def test_rows_written_run_by_run_are_the_rows_packed_then_scattered(monkeypatch, T):
    """Chunks of every length wrap the rings (runs split at the seam) and open episodes mid-run."""
    buffers = {}
    for name, run_rows in (("runs", 1), ("scatter", 10**9)):
        monkeypatch.setattr(packed, "_RUN_ROWS", run_rows)
        rb = make_replay_buffer(3 * 256, batch_size=4)
        for t0 in range(0, 4 * T, T):
            rb.extend(chunk(t0, T))
        buffers[name] = rb.storage.packed._rows.clone()
    assert torch.equal(buffers["runs"], buffers["scatter"])


def test_runs_are_taken_only_when_they_are_long():
    at = torch.arange(64).numpy()
    assert packed._runs(at) == [(0, 64, 0)]
    assert packed._runs(at[:16]) is None  # a one-step write of 16 envs: scattered
    split = torch.cat([torch.arange(100, 140), torch.arange(0, 40)]).numpy()  # wraps at the seam
    assert packed._runs(split) == [(100, 140, 0), (0, 40, 40)]
    assert packed._runs(torch.arange(0, 128, 2).numpy()) is None
