"""Compressed frames: memory and sample rate of image buffers kept compressed.

    .venv/bin/python benchmarks/compressed.py [--quick] [--out FILE --append]

Workloads (real frames, not noise, which does not compress): ALE games played
by a uniformly random policy (4 envs, sticky actions off, frameskip 4, episodes
cut at 1,000 steps), screens downscaled to 84x84 by area averaging:

- ``W2 pixels``: uint8[3, 84, 84] RGB frames of MsPacman (the busiest screen
  of those measured) and of Breakout;
- ``Atari``: uint8[1, 84, 84] grayscale frames of Breakout and MsPacman.

Buffers (each filled with the same transitions, ``ROWS`` rows):

- ``ours``: ``make_replay_buffer(ROWS)`` (each frame stored once, raw);
- ``ours zstd`` / ``ours lz4``: ``make_replay_buffer(ROWS, compress={"pixels": codec})``;
- ``torchrl compressed``: TorchRL's ``CompressedListStorage`` in a
  ``TensorDictReplayBuffer`` (its default codec: zlib before Python 3.14;
  ``pixels`` and ``("next", "pixels")`` are compressed together, per transition);
- ``cpprb next_of``: cpprb ``ReplayBuffer(next_of="obs")`` (each frame once, raw);
- with ``n_frames=4`` stacks (grayscale only): ``ours`` / ``ours zstd`` / ``ours lz4`` with
  ``n_frames=4``, and cpprb ``ReplayBuffer(next_of="obs", stack_compress="obs")``
  storing ``[84, 84, 4]`` stacks (its frames shared between stacks).

Memory: each buffer is built and filled in a fresh subprocess (``--probe``), and
its RSS growth read after ``gc.collect()`` + ``malloc_trim`` (shared-memory
pages included). Sample rate: every buffer of a workload in one process,
interleaved blocks, medians, ``torch.set_num_threads(1)``; batch 32 and 256.
"""
from __future__ import annotations

import threads  # noqa: F401 -- first: one thread per native pool (threads.py)

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
if __name__ == "__main__":
    sys.path[:0] = [HERE, os.path.dirname(HERE)]  # benchmarks/, repo root
os.environ.setdefault("RL_LOGGING_LEVEL", "WARNING")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from measure import interleaved, logger, machine_line, measured_fill, run_probe, table, write_tables  # noqa: E402

log = logger("compressed")
ENVS, MAX_STEPS, N_FRAMES = 4, 1000, 4
BATCHES = (32, 256)
#: name -> (game, rgb)
WORKLOADS = {
    "W2 pixels u8[3,84,84] MsPacman": ("ALE/MsPacman-v5", True),
    "W2 pixels u8[3,84,84] Breakout": ("ALE/Breakout-v5", True),
    "Atari u8[1,84,84] Breakout": ("ALE/Breakout-v5", False),
    "Atari u8[1,84,84] MsPacman": ("ALE/MsPacman-v5", False),
}
KEYS = ("ours", "ours zstd", "ours lz4", "torchrl compressed", "cpprb next_of")
STACK_KEYS = ("ours n_frames=4", "ours zstd n_frames=4", "ours lz4 n_frames=4", "cpprb stack_compress")


# -------------------------------------------------------------------- data
def record(game: str, rgb: bool, steps: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``steps`` steps of each of ``ENVS`` envs: frames ``[E, steps, C, 84, 84]`` and flags.

    ``obs[e, t]`` is the frame the action was taken in, ``next_obs[e, t]`` the
    frame after it (the true final frame at an episode's end).
    """
    import ale_py
    import gymnasium as gym
    import torch.nn.functional as F

    gym.register_envs(ale_py)

    def small(screen):
        x = torch.from_numpy(screen).float()
        x = x.permute(2, 0, 1)[None] if rgb else x[None, None]
        return F.interpolate(x, (84, 84), mode="area").round().to(torch.uint8)[0].numpy()

    C = 3 if rgb else 1
    obs = np.empty((ENVS, steps, C, 84, 84), np.uint8)
    nxt = np.empty_like(obs)
    terminated = np.zeros((ENVS, steps), bool)
    truncated = np.zeros((ENVS, steps), bool)
    rng = np.random.default_rng(seed)
    for e in range(ENVS):
        env = gym.make(game, obs_type="rgb" if rgb else "grayscale", repeat_action_probability=0.0,
                       max_episode_steps=MAX_STEPS)
        screen, _ = env.reset(seed=seed + e)
        frame = small(screen)
        for t in range(steps):
            screen, _, term, trunc, _ = env.step(int(rng.integers(env.action_space.n)))
            obs[e, t], nxt[e, t] = frame, small(screen)
            terminated[e, t], truncated[e, t] = term, trunc
            frame = nxt[e, t]
            if term or trunc:
                screen, _ = env.reset()
                frame = small(screen)
        env.close()
    return {"obs": obs, "next_obs": nxt, "terminated": terminated, "truncated": truncated}


def load(path: str) -> dict[str, np.ndarray]:
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


# ----------------------------------------------------------------- buffers
class Ours:
    def __init__(self, codec: str | None, n_frames: int | None = None):
        self.codec, self.n_frames = codec, n_frames

    def fill(self, d):
        from tensordict import TensorDict
        from torchrl_ext import make_replay_buffer

        E, T = d["terminated"].shape
        self.rb = make_replay_buffer(E * T + E * 64, seed=0, n_frames=self.n_frames,
                                     compress={"pixels": self.codec} if self.codec else None)
        for t0 in range(0, T, 100):
            s = slice(t0, t0 + 100)
            term = torch.from_numpy(d["terminated"][:, s, None])
            trunc = torch.from_numpy(d["truncated"][:, s, None])
            self.rb.extend(TensorDict({
                "pixels": torch.from_numpy(d["obs"][:, s]), "action": torch.zeros(E, term.shape[1], 1),
                "next": {"pixels": torch.from_numpy(d["next_obs"][:, s]),
                         "reward": torch.zeros(E, term.shape[1], 1),
                         "terminated": term, "truncated": trunc, "done": term | trunc},
            }, [E, term.shape[1]]))

    def sample(self, batch):
        return self.rb.sample(batch)


class TorchRLCompressed:
    def fill(self, d):
        from tensordict import TensorDict
        from torchrl.data import CompressedListStorage, TensorDictReplayBuffer

        E, T = d["terminated"].shape
        self.rb = TensorDictReplayBuffer(storage=CompressedListStorage(E * T))
        flat = {k: v.reshape(E * T, *v.shape[2:]) for k, v in d.items()}
        done = torch.from_numpy(flat["terminated"] | flat["truncated"])[:, None]
        for i in range(0, E * T, 1000):
            s = slice(i, i + 1000)
            self.rb.extend(TensorDict({
                "pixels": torch.from_numpy(flat["obs"][s]), "action": torch.zeros(done[s].shape[0], 1),
                "next": {"pixels": torch.from_numpy(flat["next_obs"][s]),
                         "reward": torch.zeros(done[s].shape[0], 1), "done": done[s]},
            }, [done[s].shape[0]]))

    def sample(self, batch):
        return self.rb.sample(batch)


class Cpprb:
    """cpprb with ``next_of`` (and ``stack_compress`` for ``n_frames`` stacks): one env at a time,
    an episode per ``add`` (cpprb's ``next_of`` needs consecutive steps of one episode)."""

    def __init__(self, n_frames: int | None = None):
        self.n_frames = n_frames

    def fill(self, d):
        import cpprb

        E, T = d["terminated"].shape
        C = d["obs"].shape[2]
        shape = (84, 84, self.n_frames) if self.n_frames else (C, 84, 84)
        extra = {"stack_compress": "obs"} if self.n_frames else {}
        self.rb = cpprb.ReplayBuffer(E * T, {"obs": {"shape": shape, "dtype": np.uint8},
                                             "act": {}, "rew": {}, "done": {}},
                                     next_of="obs", **extra)
        done = d["terminated"] | d["truncated"]
        for e in range(E):
            ends = np.flatnonzero(done[e]).tolist() + [T - 1]
            start = 0
            for end in ends:
                if end < start:
                    continue
                obs, nxt = d["obs"][e, start:end + 1], d["next_obs"][e, start:end + 1]
                if self.n_frames:
                    obs, nxt = _stacks(obs, nxt, self.n_frames)
                n = end + 1 - start
                self.rb.add(obs=obs, next_obs=nxt, act=np.zeros(n), rew=np.zeros(n),
                            done=done[e, start:end + 1].astype(np.float32))
                self.rb.on_episode_end()
                start = end + 1

    def sample(self, batch):
        return self.rb.sample(batch)


def _stacks(obs: np.ndarray, nxt: np.ndarray, F: int) -> tuple[np.ndarray, np.ndarray]:
    """``[n, 1, 84, 84]`` frames of one episode to ``[n, 84, 84, F]`` stacks (first frame repeated)."""
    frames = np.concatenate([np.repeat(obs[:1, 0], F - 1, 0), obs[:, 0], nxt[-1:, 0]])  # [F-1+n+1]
    n = obs.shape[0]
    idx = np.arange(n + 1)[:, None] + np.arange(F)[None]  # [n + 1, F]
    stacks = frames[idx].transpose(0, 2, 3, 1)  # [n + 1, 84, 84, F]
    return stacks[:-1], stacks[1:]


BUFFERS = {
    "ours": lambda: Ours(None),
    "ours zstd": lambda: Ours("zstd"),
    "ours lz4": lambda: Ours("lz4"),
    "torchrl compressed": TorchRLCompressed,
    "cpprb next_of": Cpprb,
    "ours n_frames=4": lambda: Ours(None, N_FRAMES),
    "ours zstd n_frames=4": lambda: Ours("zstd", N_FRAMES),
    "ours lz4 n_frames=4": lambda: Ours("lz4", N_FRAMES),
    "cpprb stack_compress": lambda: Cpprb(N_FRAMES),
}


# ------------------------------------------------------------------ probes
def probe(key: str, data_path: str) -> dict:
    """Fill one buffer in this fresh process: its RSS growth."""
    torch.set_num_threads(1)
    d = load(data_path)
    warm = BUFFERS[key]()  # one-time costs (imports, first calls) are not the buffer's
    warm.fill({k: v[:, :50] for k, v in d.items()})
    warm.sample(8)
    del warm
    buffer = BUFFERS[key]()
    out = measured_fill(lambda: buffer.fill(d))
    buffer.sample(8)
    return {"key": key, **out}


def run(quick: bool) -> str:
    torch.set_num_threads(1)
    steps = 1000 if quick else 5000
    reps, inner = (10, 5) if quick else (60, 10)
    lines = [f"## Compressed frames ({ENVS} envs x {steps:,} steps = {ENVS * steps:,} transitions "
             f"of real ALE frames, random policy)", "",
             f"{machine_line()}. Memory: RSS growth of one buffer filled in a fresh process. "
             "Sample: all buffers of a workload interleaved in one process, median per batch; "
             "ratios against `ours` (uncompressed) of the same workload and run. "
             "Goal: compressed `ours` at most 0.25x the memory of `ours` at no less than 0.5x its "
             "sample rate.", ""]
    header = ["workload", "buffer", "MB held", "memory vs ours"] + [
        f"us/batch {b}" for b in BATCHES] + [f"rate vs ours ({b})" for b in BATCHES]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (game, rgb) in WORKLOADS.items():
            log(f"{name}: recording {ENVS} x {steps} steps")
            d = record(game, rgb, steps)
            path = os.path.join(tmp, "frames.npz")
            np.savez(path, **d)
            keys = KEYS + (() if rgb else STACK_KEYS)
            memory = {}
            for key in keys:
                log(f"{name}: memory of {key}")
                memory[key] = run_probe([sys.executable, __file__, "--probe", key, path], key)
            buffers = {}
            for key in keys:
                buffers[key] = BUFFERS[key]()
                buffers[key].fill(d)
            times = {b: interleaved({k: (lambda v=v, b=b: v.sample(b)) for k, v in buffers.items()},
                                    reps, inner) for b in BATCHES}
            del buffers
            for key in keys:
                base = "ours n_frames=4" if "n_frames" in key or "stack" in key else "ours"
                mem = memory[key]
                held = mem.get("held_bytes")
                cells = [name, key,
                         f"{held / 1e6:,.1f}" if held is not None else mem.get("error", "?"),
                         f"{held / memory[base]['held_bytes']:.3f}x"
                         if held is not None and memory[base].get("held_bytes") else "-"]
                cells += [f"{times[b][key]['median'] * 1e6:,.0f}" for b in BATCHES]
                cells += [f"{times[b][base]['median'] / times[b][key]['median']:.2f}x" for b in BATCHES]
                rows.append(cells)
    return "\n".join(lines + [table(header, rows), ""])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1,000 steps per env, few repetitions")
    ap.add_argument("--out", default=None, help="also write the table to this markdown file")
    ap.add_argument("--append", action="store_true", help="append to --out")
    ap.add_argument("--probe", nargs=2, metavar=("KEY", "DATA"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.probe:
        try:
            out = probe(*a.probe)
        except Exception as e:  # noqa: BLE001 -- reported as a row
            out = {"key": a.probe[0], "error": f"{type(e).__name__}: {str(e)[:90]}"}
        print("JSON:" + json.dumps(out))
        return
    text = run(a.quick)
    print(text)
    write_tables(text, a.out, a.append)


if __name__ == "__main__":
    main()
