"""The cost of facade input validation on the per-step add path.

    .venv/bin/python benchmarks/input_checks.py OLD_TREE NEW_TREE [--rounds 5]

Before / after: one fresh interpreter per tree per round (order alternating),
``PYTHONPATH=<tree>``, ``torch.set_num_threads(1)``, timing
``NStepReplayStorage.add`` and ``HerReplayStorage.add`` of one vector-env step
(16 envs of 17 float32 entries; 8 envs of 84x84x3 uint8 pixels), with the
observation of each step its previous next observation (as from a real env).
Then, in the new tree, ``check_finite=True`` vs ``False`` interleaved in one
process. Prints median and minimum microseconds per call and the ratios (on a
shared machine, trust the minimum).
"""
from __future__ import annotations

import threads  # noqa: F401 -- first: one thread per native pool (threads.py)

import inspect
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from ab import timed, trees_from_argv  # noqa: E402
from measure import block_orders  # noqa: E402


def child() -> None:
    import gymnasium as gym
    import numpy as np
    import torch

    from torchrl_ext import HerReplayStorage, NStepReplayStorage

    torch.set_num_threads(1)
    finite_opt = "check_finite" in inspect.signature(NStepReplayStorage).parameters
    cases = {
        "state [16, 17] f32": (16, gym.spaces.Box(-1, 1, (17,), np.float32)),
        "pixels [8, 84, 84, 3] u8": (8, gym.spaces.Box(0, 255, (84, 84, 3), np.uint8)),
    }
    results = {}
    for name, (n, space) in cases.items():
        for check in ([True, False] if finite_opt else [None]):
            extra = {} if check is None else {"check_finite": check}
            store = NStepReplayStorage(space, gym.spaces.Discrete(4), storage_size=5_000,
                                       num_envs=n, num_workers=0, batch_size=32, seed=0, **extra)
            obs = [space.sample()[None].repeat(n, 0) for _ in range(2)]
            action, reward, flags = np.zeros(n, np.int64), np.ones(n, np.float32), np.zeros(n, bool)
            t = [0]

            def add(store=store, obs=obs, action=action, reward=reward, flags=flags, t=t):
                i = t[0] % 2
                store.add(obs[i], action, reward, flags, flags, {}, obs[1 - i])
                t[0] += 1
            label = f"NStep add {name}" + ("" if check is None else f" check_finite={check}")
            results[label] = add
        goal = gym.spaces.Dict(observation=space, achieved_goal=gym.spaces.Box(-1, 1, (3,)),
                               desired_goal=gym.spaces.Box(-1, 1, (3,)))
        her = HerReplayStorage(goal, gym.spaces.Discrete(4), storage_size=5_000, num_envs=n,
                               batch_size=32, seed=0)
        hobs = [{k: np.asarray(v)[None].repeat(n, 0) for k, v in goal.sample().items()}
                for _ in range(2)]
        ht = [0]

        def hadd(her=her, hobs=hobs, n=n, ht=ht):
            i = ht[0] % 2
            her.add(hobs[i], np.zeros(n, np.int64), np.ones(n, np.float32), np.zeros(n, bool),
                    np.zeros(n, bool), {}, hobs[1 - i])
            ht[0] += 1
        results[f"HER add {name}"] = hadd
    # interleave the variants: each rep times every variant once
    times: dict[str, list] = {k: [] for k in results}
    for order in block_orders(list(results), 15):
        for label in order:
            times[label].append(timed(results[label], 5, 40, warmup=2))
    print(json.dumps({k: (statistics.median(m for m, _ in v), min(m for _, m in v))
                      for k, v in times.items()}))


def main() -> None:
    runs = trees_from_argv(__file__, __doc__, rounds=3)

    def med(tree: str, op: str, i: int) -> float:
        return statistics.median(x[op][i] for x in runs[tree])
    print("| operation | old median (us) | new median (us) | new / old | old min | new min | new / old |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for op in runs["new"][0]:
        base = op.replace(" check_finite=True", "").replace(" check_finite=False", "")
        old_op = op if op in runs["old"][0] else base
        if old_op not in runs["old"][0]:
            continue
        o, n = [med("old", old_op, i) for i in (0, 1)], [med("new", op, i) for i in (0, 1)]
        print(f"| {op} | {o[0]:,.1f} | {n[0]:,.1f} | {n[0] / o[0]:.2f} "
              f"| {o[1]:,.1f} | {n[1]:,.1f} | {n[1] / o[1]:.2f} |")
    print("\n| check_finite (new tree) | on median | off median | on / off | on min | off min | on / off |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for op in runs["new"][0]:
        if op.endswith("check_finite=True"):
            off = op.replace("=True", "=False")
            on_, off_ = [med("new", op, i) for i in (0, 1)], [med("new", off, i) for i in (0, 1)]
            print(f"| {op[:-len(' check_finite=True')]} | {on_[0]:,.1f} | {off_[0]:,.1f} | "
                  f"{on_[0] / off_[0]:.2f} | {on_[1]:,.1f} | {off_[1]:,.1f} | {on_[1] / off_[1]:.2f} |")


if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:
        child()
    else:
        main()
