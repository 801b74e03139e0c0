"""Before/after: the same quick workloads on two source trees, in alternating subprocesses.

    .venv/bin/python benchmarks/ab.py OLD_TREE NEW_TREE [--rounds 5]

Each round runs one fresh interpreter per tree (order alternating between
rounds), with ``PYTHONPATH=<tree>`` so that tree's ``torchrl_ext`` is imported
and ``torch.set_num_threads(1)``. A child builds every buffer, warms up and
prints the median and minimum time per call of each operation; the parent
prints, per operation, the median over rounds of each for each tree and the
ratios new / old (on a shared machine, trust the minimum).
Only public APIs present in both trees are used:

- W1 sample / extend: ``make_replay_buffer(100_000, batch_size=256)`` filled with
  the W1 stream (16 envs, 1000-step episodes); ``rb.sample()`` and a one-step
  ``[16]`` ``rb.extend``.
- W4 sample: ``make_replay_buffer(64_000, batch_size=64, sampler=SequenceSampler(50))``.
- W4 rare windows: ``SequenceSampler(900)`` on the same buffer (the exact
  per-episode count runs on every sample).
- HER facade: ``HerReplayStorage.add`` of one ``[16]`` vector-env step (in blocks of 1024
  adds: facades write their held steps a chunk at a time) and ``sample``.
- Pool windows: ``EpisodePool.sample(64, 50)``.
- n-step: ``make_replay_buffer(100_000, batch_size=256, n_step=3)`` on the W1 stream.
- NStep facade: ``NStepReplayStorage(n_step=1, num_workers=0)`` (W1 spaces, 16 envs):
  ``sample`` and the ``rb.sample`` under it (their ratio is the facade's overhead),
  and ``add`` of one ``[16]`` step (blocks of 1024 adds).
"""
from __future__ import annotations

import threads  # noqa: F401 -- first: one thread per native pool (threads.py)

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def timed(fn, reps: int, inner: int, warmup: int = 5) -> tuple[float, float]:
    """Median and minimum microseconds per call over ``reps`` batches of ``inner`` calls.

    On a shared machine the minimum (the batch least disturbed by other
    processes) compares code more reliably than the median.
    """
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        out.append((time.perf_counter() - start) / inner * 1e6)
    return statistics.median(out), min(out)


def child() -> None:
    import gymnasium as gym
    import numpy as np
    import torch
    from tensordict import TensorDict

    sys.path.insert(0, HERE)
    from workload import EpisodeStream, step_slices, to_td

    from torchrl_ext import HerReplayStorage, NStepReplayStorage, make_replay_buffer
    from torchrl_ext.samplers import SequenceSampler
    from torchrl_ext.storages import EpisodePool

    torch.set_num_threads(1)
    results = {}
    stream = EpisodeStream(seed=0)
    rb = make_replay_buffer(100_000, batch_size=256, seed=0)
    for _ in range(6):
        rb.extend(to_td(stream.chunk(1000)))
    results["W1 sample (256)"] = timed(rb.sample, 60, 20)
    writes = [to_td(s) for s in step_slices(stream.chunk(400))]
    it = iter(writes * 10)
    results["W1 extend ([16] step)"] = timed(lambda: rb.extend(next(it)), 60, 20)
    nstep = make_replay_buffer(100_000, batch_size=256, n_step=3, seed=0)
    for _ in range(6):
        nstep.extend(to_td(stream.chunk(1000)))
    results["W2 n-step sample (256, n=3)"] = timed(nstep.sample, 60, 10)

    seq = make_replay_buffer(64_000, batch_size=64, sampler=SequenceSampler(50), seed=0)
    stream = EpisodeStream(seed=1)
    for _ in range(3):
        seq.extend(to_td(stream.chunk(1000)))
    results["W4 sample (64 x 50)"] = timed(seq.sample, 60, 10)
    seq.sampler.sequence_length = 900
    results["W4 rare windows (64 x 900)"] = timed(seq.sample, 30, 5)

    bits = gym.spaces.MultiBinary(8)
    space = gym.spaces.Dict(observation=bits, achieved_goal=bits, desired_goal=bits)
    her = HerReplayStorage(space, gym.spaces.Discrete(8), storage_size=100_000, num_envs=16,
                           batch_size=256, seed=0)
    rng = np.random.default_rng(0)
    obs = {k: rng.integers(0, 2, (16, 8), dtype=np.int8) for k in space.spaces}
    action, reward = np.zeros(16, np.int64), -np.ones(16, np.float32)
    flags = np.zeros(16, bool)
    for t in range(2000):
        her.add(obs, action, reward, flags | (t % 50 == 49), flags, {}, obs)
    # facade adds: blocks of 1024 adds, so that each holds its share of the chunk writes
    results["HER facade add ([16] step)"] = timed(
        lambda: her.add(obs, action, reward, flags, flags, {}, obs), 8, 1024)
    results["HER facade sample (256)"] = timed(her.sample, 40, 5)

    box = gym.spaces.Box(-1, 1, (17,), np.float32)
    facade = NStepReplayStorage(box, gym.spaces.Box(-1, 1, (6,), np.float32), storage_size=100_000,
                                num_envs=16, batch_size=256, num_workers=0, n_step=1, seed=0)
    o = rng.standard_normal((16, 17), dtype=np.float32)
    a = rng.standard_normal((16, 6), dtype=np.float32)
    for t in range(3000):
        facade.add(o, a, reward, flags, flags | (t % 1000 == 999), {}, o)
    results["NStep facade sample (256, n=1)"] = timed(facade.sample, 40, 5)
    results["  rb.sample under it"] = timed(lambda: facade.rb.sample(256), 40, 5)
    results["NStep facade add ([16] step)"] = timed(
        lambda: facade.add(o, a, reward, flags, flags, {}, o), 8, 1024)

    pool = EpisodePool(64_000, TensorDict({"x": torch.zeros(17)}, []))
    for _ in range(60):
        pool.append(TensorDict({"x": torch.randn(1000, 17)}, [1000]))
    g = torch.Generator().manual_seed(0)
    results["Pool windows (64 x 50)"] = timed(lambda: pool.sample(64, 50, generator=g), 60, 10)
    print(json.dumps(results))


def alternate(script: str, old: str, new: str, rounds: int) -> dict[str, list[dict]]:
    """``script --child`` under each tree, alternating the order each round; its JSON lines."""
    trees = {"old": os.path.abspath(old), "new": os.path.abspath(new)}
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    for r in range(rounds):
        for name in (("old", "new") if r % 2 == 0 else ("new", "old")):
            env = dict(os.environ, PYTHONPATH=trees[name], RL_LOGGING_LEVEL="WARNING")
            out = subprocess.run([sys.executable, script, "--child"], env=env, cwd="/",
                                 capture_output=True, text=True, check=True)
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1} {name} done", file=sys.stderr)
    return runs


def trees_from_argv(script: str, doc: str | None, rounds: int = 5) -> dict[str, list[dict]]:
    """``OLD_TREE NEW_TREE [--rounds N]`` from the command line, then :func:`alternate` over them."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=rounds)
    a = ap.parse_args()
    return alternate(script, a.old, a.new, a.rounds)


def main() -> None:
    runs = trees_from_argv(__file__, __doc__)
    print("| operation | old median (us) | new median (us) | new / old | old min | new min | new / old |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for op in runs["old"][0]:
        old, new = ([statistics.median(x[op][i] for x in runs[t]) for i in (0, 1)] for t in ("old", "new"))
        print(f"| {op} | {old[0]:,.1f} | {new[0]:,.1f} | {new[0] / old[0]:.2f} "
              f"| {old[1]:,.1f} | {new[1]:,.1f} | {new[1] / old[1]:.2f} |")


if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:
        child()
    else:
        main()
