"""The facades' per-step add against SB3's ``add``, in the same process (issue 15).

    .venv/bin/python benchmarks/facade_add.py OLD_TREE NEW_TREE [--rounds 5]
    .venv/bin/python benchmarks/facade_add.py --child      # one tree, prints JSON
    .venv/bin/python benchmarks/facade_add.py --out FILE [--append] [--quick]  # a table (run.py)

One fresh interpreter per tree per round (order alternating), ``PYTHONPATH=<tree>``,
``torch.set_num_threads(1)``. Each child builds every buffer, warms it up, then
times the operations below in interleaved blocks (each round times every
operation once, in a shuffled order), so SB3's ``add`` is measured beside ours
under the same load:

- ``NStep add``: ``NStepReplayStorage.add`` of one W1 step (16 envs, obs
  float32[17], action float32[6]), each observation its previous next
  observation, an episode end (truncation) every 1000 steps;
- ``HER add``: ``HerReplayStorage.add`` of one 16-env step of a ``Dict`` of
  three ``MultiBinary(8)`` entries, ``Discrete(8)`` actions, an episode end every 50 steps;
- ``Episode add_step``: ``EpisodeReplayBuffer.add_step`` of one 16-env step
  (obs float32[17], action float32[6], reward) with the seed's ``done`` flag;
- ``SB3 ReplayBuffer.add`` (W1 spaces, ``n_envs=16``) and ``SB3 DictReplayBuffer.add``
  (the HER spaces): the peers.

Every buffer holds 32,000 transitions (2,000 steps of each env) and is full when
timed, so the cost includes overwriting and evicting (as ``run.py``'s write cost).
Every add cycles 2,000 pre-built distinct steps; blocks of 1024 adds (the facades
write held steps every 64 or 1024 adds: each block holds its share of writes). Prints, per tree, the median
over rounds of each operation's median and minimum microseconds per call, and
each facade's ratio to SB3's ``add`` in the same child (on a shared machine,
trust the ratios and the minimums).
"""
from __future__ import annotations

import threads  # noqa: F401 -- first: one thread per native pool (threads.py)

import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from ab import timed, trees_from_argv  # noqa: E402
from measure import block_orders  # noqa: E402

N, OBS, ACT, STEPS = 16, 17, 6, 2000
#: every buffer holds 2,000 steps of each env: full (overwriting, evicting) once timed
CAP = 32_000


def measure(blocks: int = 12) -> dict[str, tuple[float, float]]:
    """Every operation's (median, minimum) microseconds per call, timed in interleaved blocks."""
    import gymnasium as gym
    import numpy as np
    import torch

    from torchrl_ext import EpisodeReplayBuffer, HerReplayStorage, NStepReplayStorage, RingBufferDataset

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    ops = {}

    # W1 stream: obs_t+1 = next_obs_t, truncation every 1000 steps (then a reset observation)
    chain = rng.standard_normal((STEPS + 1, N, OBS), dtype=np.float32)
    acts = rng.standard_normal((STEPS, N, ACT), dtype=np.float32)
    rews = rng.standard_normal((STEPS, N), dtype=np.float32)
    trunc = np.zeros((STEPS, N), bool)
    trunc[999::1000] = True
    flags = np.zeros(N, bool)
    box = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    nstep = NStepReplayStorage(box, gym.spaces.Box(-1, 1, (ACT,), np.float32), storage_size=CAP,
                               num_envs=N, batch_size=256, num_workers=0, n_step=3, seed=0)

    def w1_steps():
        while True:
            for t in range(STEPS):
                yield t

    it = w1_steps()

    def nstep_add():
        t = next(it)
        nstep.add(chain[t], acts[t], rews[t], flags, trunc[t], {}, chain[t + 1])
    ops["NStep add"] = nstep_add

    from stable_baselines3.common.buffers import DictReplayBuffer, ReplayBuffer

    sb3 = ReplayBuffer(CAP, box, gym.spaces.Box(-1, 1, (ACT,), np.float32), device="cpu",
                       n_envs=N, optimize_memory_usage=False)
    run_info, end_info = [{} for _ in range(N)], [{"TimeLimit.truncated": True} for _ in range(N)]
    dones = trunc.astype(np.float32)
    it_sb3 = w1_steps()

    def sb3_add():
        t = next(it_sb3)
        sb3.add(chain[t], chain[t + 1], acts[t], rews[t], dones[t], end_info if trunc[t, 0] else run_info)
    ops["SB3 ReplayBuffer.add"] = sb3_add

    bits = gym.spaces.MultiBinary(8)
    space = gym.spaces.Dict(observation=bits, achieved_goal=bits, desired_goal=bits)
    hchain = [{k: rng.integers(0, 2, (N, 8), dtype=np.int8) for k in space.spaces} for _ in range(STEPS + 1)]
    hact = rng.integers(0, 8, (STEPS, N))
    hrew = -np.ones(N, np.float32)
    hdone = np.zeros((STEPS, N), bool)
    hdone[49::50] = True
    her = HerReplayStorage(space, gym.spaces.Discrete(8), storage_size=CAP, num_envs=N,
                           batch_size=256, seed=0)
    it_her = w1_steps()

    def her_add():
        t = next(it_her)
        her.add(hchain[t], hact[t], hrew, hdone[t], flags, {}, hchain[t + 1])
    ops["HER add"] = her_add

    sb3d = DictReplayBuffer(CAP, space, gym.spaces.Discrete(8), device="cpu", n_envs=N)
    it_sb3d = w1_steps()

    def sb3d_add():
        t = next(it_sb3d)
        sb3d.add(hchain[t], hchain[t + 1], hact[t], hrew, hdone[t].astype(np.float32), run_info)
    ops["SB3 DictReplayBuffer.add"] = sb3d_add

    episodic = EpisodeReplayBuffer(RingBufferDataset(CAP), batch_size=8, sequence_length=4, seed=0)
    was_done = np.zeros((STEPS, N), bool)
    was_done[1:] = trunc[:-1]
    was_done_t = torch.from_numpy(was_done)
    steps = [{"obs": torch.from_numpy(chain[t]), "action": torch.from_numpy(acts[t]),
              "reward": torch.from_numpy(rews[t])} for t in range(STEPS)]
    it_ep = w1_steps()

    def episode_add():
        t = next(it_ep)
        episodic.add_step(steps[t], was_done_t[t])
    ops["Episode add_step"] = episode_add

    for fn in ops.values():  # past the first writes, the first flushes and an episode end
        for _ in range(2100):
            fn()
    times: dict[str, list] = {k: [] for k in ops}
    # blocks of 1024 adds (each holds the same number of chunk writes), in shuffled order
    for order in block_orders(list(ops), blocks):
        for label in order:
            times[label].append(timed(ops[label], 1, 1024, warmup=0))
    return {k: (statistics.median(m for m, _ in v), min(m for _, m in v)) for k, v in times.items()}


def child() -> None:
    print(json.dumps(measure()))


def report(argv: list[str]) -> None:
    """This tree's facades beside SB3 as a markdown table (``make bench``)."""
    from measure import machine_line, table, table_args, write_tables

    a = table_args(__doc__, argv, "4 blocks instead of 12")
    times = measure(4 if a.quick else 12)
    rows = []
    for op, (median, low) in times.items():
        peer = PEER.get(op)
        ratio = f"{median / times[peer][0]:.2f}x" if peer else "-"
        rows.append([op, f"{median:,.1f}", f"{low:,.1f}", peer or "(peer)", ratio])
    lines = ["## Facade adds: one 16-env step, as the facades' users call them", "", machine_line(), "",
             "Every buffer full (32,000 transitions), 2,000 distinct steps cycled, interleaved blocks of "
             "1,024 adds (each holds its share of the facades' chunk writes). Target (issue 15): "
             "at most 1.00x SB3's add.", "",
             table(["operation", "us/step (median)", "us/step (min)", "peer", "vs peer (cost)"], rows), ""]
    print("\n".join(lines))
    write_tables("\n".join(lines), a.out, a.append)


PEER = {"NStep add": "SB3 ReplayBuffer.add", "HER add": "SB3 DictReplayBuffer.add",
        "Episode add_step": "SB3 ReplayBuffer.add"}


def main() -> None:
    runs = trees_from_argv(__file__, __doc__)

    def med(tree: str, op: str, i: int) -> float:
        return statistics.median(x[op][i] for x in runs[tree])

    def peer_ratio(tree: str, op: str) -> float:
        # per child: ours / SB3 in the same process, then the median over rounds
        return statistics.median(x[op][0] / x[PEER[op]][0] for x in runs[tree])

    print("| operation | old median (us) | new median (us) | new / old | old min | new min "
          "| new / old | old / SB3 | new / SB3 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for op in runs["old"][0]:
        o, n = [med("old", op, i) for i in (0, 1)], [med("new", op, i) for i in (0, 1)]
        peer = (f"{peer_ratio('old', op):.2f} | {peer_ratio('new', op):.2f}" if op in PEER else "- | -")
        print(f"| {op} | {o[0]:,.1f} | {n[0]:,.1f} | {n[0] / o[0]:.2f} | {o[1]:,.1f} | {n[1]:,.1f} "
              f"| {n[1] / o[1]:.2f} | {peer} |")
    print("\nSB3 peers: NStep add and Episode add_step / SB3 ReplayBuffer.add (W1 spaces); "
          "HER add / SB3 DictReplayBuffer.add (the HER spaces); median over rounds of the "
          "per-child ratio of medians.")


if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:
        child()
    elif "--out" in sys.argv[1:]:
        report(sys.argv[1:])
    else:
        main()
