"""W2 memory: image observations stored once vs a store-next-obs-twice layout.

Workload: frames uint8[3, 84, 84], action float32[6], 4 envs x 500-step
episodes. Each buffer is built and filled in a fresh subprocess and its RSS
growth measured (``python benchmarks/pixels.py KEY ROWS`` prints one JSON line).

Buffers:
- ``ours``: ``make_replay_buffer`` (each frame once; one extra row per episode).
- ``torchrl``: ``TensorDictReplayBuffer(LazyTensorStorage)`` holding
  ``pixels`` and ``("next", "pixels")``: the layout that stores frames twice.
- ``sb3``: SB3 ``ReplayBuffer(optimize_memory_usage=False)`` (obs and next_obs).
"""
from __future__ import annotations

import threads  # noqa: F401 -- first: one thread per native pool (threads.py)

import json
import os
import sys

import numpy as np
import torch

FRAME = (3, 84, 84)
ACT = 6
ENVS = 4
EPISODE = 500
KEYS = ("ours", "torchrl", "sb3")


def chunks(rows: int, T: int = 125):
    """``[ENVS, T]`` steps of consistent episodes, enough for ``rows`` transitions."""
    gen = torch.Generator().manual_seed(0)
    t = 0
    while t * ENVS < rows:
        frames = torch.randint(0, 255, (ENVS, T + 1, *FRAME), dtype=torch.uint8, generator=gen)
        done = torch.zeros(ENVS, T, 1, dtype=torch.bool)
        done[:, :, 0] = (torch.arange(t, t + T) % EPISODE) == EPISODE - 1
        yield frames, done
        t += T


def build_and_fill(key: str, rows: int):
    from tensordict import TensorDict

    def td(frames, done):
        T = done.shape[1]
        return TensorDict({
            "pixels": frames[:, :-1], "action": torch.zeros(ENVS, T, ACT),
            "next": {"pixels": frames[:, 1:], "reward": torch.zeros(ENVS, T, 1),
                     "done": done, "terminated": torch.zeros_like(done), "truncated": done},
        }, [ENVS, T])

    if key == "ours":
        from torchrl_ext import make_replay_buffer

        rb = make_replay_buffer(rows, batch_size=32)
        for frames, done in chunks(rows):
            rb.extend(td(frames, done))
        return rb
    if key == "torchrl":
        from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(rows), batch_size=32)
        for frames, done in chunks(rows):
            rb.extend(td(frames, done).reshape(-1))
        return rb
    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer

    rb = ReplayBuffer(rows, spaces.Box(0, 255, FRAME, np.uint8),
                      spaces.Box(-1, 1, (ACT,), np.float32), n_envs=ENVS,
                      optimize_memory_usage=False)
    for frames, done in chunks(rows):
        f = frames.numpy()
        for t in range(done.shape[1]):
            rb.add(f[:, t], f[:, t + 1], np.zeros((ENVS, ACT), np.float32), np.zeros(ENVS),
                   done[:, t, 0].numpy(), [{}] * ENVS)
    return rb


def probe(key: str, rows: int) -> dict:
    from measure import rss_bytes, settle

    torch.set_num_threads(1)
    build_and_fill(key, ENVS * 250)  # imports and first-call caches: not charged
    settle()
    before = rss_bytes()
    rb = build_and_fill(key, rows)
    settle()
    held = rss_bytes() - before
    del rb
    return {"key": key, "rows": rows, "held_bytes": held}


def measure_all(rows: int) -> dict[str, dict]:
    """Run each buffer's probe in a fresh interpreter."""
    out = {}
    here = os.path.dirname(os.path.abspath(__file__))
    from measure import run_probe

    for key in KEYS:
        out[key] = run_probe([sys.executable, os.path.join(here, "pixels.py"), key, str(rows)], key)
    return out


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [here, os.path.dirname(here)]
    try:
        result = probe(sys.argv[1], int(sys.argv[2]))
    except ImportError as e:
        result = {"key": sys.argv[1], "error": f"not installed: {e}"}
    print("JSON:" + json.dumps(result))


def report(rows: int) -> str:
    """Markdown table of the W2 memory probes, with ratios against each peer."""
    res = measure_all(rows)
    raw = rows * (np.prod(FRAME) * 2 + ACT * 4 + 4 + 3)  # obs + next obs + action + reward + flags
    ours = res["ours"].get("held_bytes")
    lines = [
        f"## 5. Pixels memory (W2: uint8{list(FRAME)}, {ENVS} envs x {EPISODE}-step episodes, {rows:,} rows)",
        "",
        "| impl | RSS growth | x raw transition bytes | ours/peer (bytes; <1 = ours smaller) |",
        "|---|---|---|---|",
    ]
    names = {"ours": "ours: make_replay_buffer (frames once)",
             "torchrl": "TorchRL LazyTensorStorage (pixels + next pixels)",
             "sb3": "SB3 ReplayBuffer (optimize_memory_usage=False)"}
    for key in KEYS:
        r = res[key]
        if "error" in r:
            lines.append(f"| {names[key]} | {r['error'][:80]} | | |")
            continue
        held = r["held_bytes"]
        ratio = "-" if key == "ours" or ours is None else f"{ours / held:.2f}x"
        lines.append(f"| {names[key]} | {held / 1e6:,.1f} MB | {held / raw:.2f} | {ratio} |")
    lines += ["", f"Raw = {rows:,} x (2 frames + action + reward + 3 flags) = {raw / 1e6:,.1f} MB; "
              "one fresh subprocess per buffer, imports warmed up before the baseline."]
    return "\n".join(lines)
