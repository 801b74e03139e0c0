"""W1 samples through the facades, beside the component under each and cpprb (issue 15).

    .venv/bin/python benchmarks/facade_sample.py --out FILE [--append] [--quick]

One process, ``torch.set_num_threads(1)``. Every buffer holds the same W1 stream
(obs float32[17], action float32[6], 16 envs, 1000-step episodes ending by time
limit), written as its users write it, and is full when timed (1,000,000
transitions; ``--quick``: 100,000). Timed in interleaved blocks of 20 batches of
256, median over blocks:

- ``cpprb ReplayBuffer.sample(256)``: the peer (obs, act, rew, next_obs, done);
- ``make_replay_buffer(...).sample()``: our one-step TorchRL buffer (W1's ``rb.sample()``);
- ``NStepReplayStorage(n_step=1, num_workers=0).sample()``, filled by ``add`` of
  each ``[16]`` step: rllte's batch of five float32 tensors; its component is
  ``storage.rb.sample()`` (the TensorDict before the facade's conversion);
- ``HerReplayStorage(num_goals=0).sample()`` over ``Dict(observation=f32[17],
  achieved_goal=f32[3], desired_goal=f32[3])``: W1 through the HER facade (no
  relabelling: W3 measures that); component ``storage.rb.sample()``. The achieved
  goal is ``obs[:3]``; the desired goal is the one of a goal env, held for the
  whole episode (the first observation's ``[:3]``), so each next observation is
  the next step's observation and no episode is cut;
- ``EpisodeReplayBuffer(RingBufferDataset, sequence_length=1).sample()``, filled by
  ``add_step``: 256 steps (no next observation: the original's batch has none);
  component: the episode pool's ``sample(256, 1)`` under it.

Then, interleaved with cpprb only (its worker processes would disturb the blocks
above): ``NStepReplayStorage`` with rllte's default ``num_workers=4``, whose batches
come from DataLoader workers; its rate is against cpprb in that phase.
"""
from __future__ import annotations

import threads  # noqa: F401 -- first: one thread per native pool (threads.py)

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
os.environ.setdefault("RL_LOGGING_LEVEL", "WARNING")

from measure import interleaved, machine_line, table, table_args, write_tables  # noqa: E402
from workload import ACT_DIM, BATCH, EP_LEN, N_ENVS, OBS_DIM, EpisodeStream, to_td  # noqa: E402

GOAL = 3  # achieved / desired goal width of the HER facade's Dict space


def build(rows: int) -> tuple[dict, dict, object]:
    """Every buffer filled with ``rows`` W1 transitions; (timed ops, their components, workers facade)."""
    import cpprb
    import gymnasium as gym
    import numpy as np
    import torch

    from torchrl_ext import (
        EpisodeReplayBuffer,
        HerReplayStorage,
        NStepReplayStorage,
        RingBufferDataset,
        make_replay_buffer,
    )

    box = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    act_space = gym.spaces.Box(-1, 1, (ACT_DIM,), np.float32)
    goal = gym.spaces.Box(-np.inf, np.inf, (GOAL,), np.float32)
    her_space = gym.spaces.Dict(observation=box, achieved_goal=goal, desired_goal=goal)

    def nstep(workers: int) -> NStepReplayStorage:
        return NStepReplayStorage(box, act_space, storage_size=rows, num_envs=N_ENVS, batch_size=BATCH,
                                  num_workers=workers, n_step=1, seed=0)

    facades = {"nstep": nstep(0), "nstep_workers": nstep(4)}
    her = HerReplayStorage(her_space, act_space, storage_size=rows, num_envs=N_ENVS, batch_size=BATCH,
                           num_goals=0, seed=0, reward_fn=lambda a, d, i: -np.linalg.norm(a - d, axis=-1))
    dataset = RingBufferDataset(rows)
    episodic = EpisodeReplayBuffer(dataset, batch_size=BATCH, sequence_length=1, num_workers=0, seed=0)
    peer = cpprb.ReplayBuffer(rows, env_dict={"obs": {"shape": OBS_DIM}, "act": {"shape": ACT_DIM},
                                              "rew": {}, "next_obs": {"shape": OBS_DIM}, "done": {}})
    rb = make_replay_buffer(rows, batch_size=BATCH, num_streams=N_ENVS, seed=0)

    stream = EpisodeStream(seed=0)
    left = rows // N_ENVS
    infos: dict = {}
    ended = torch.zeros(N_ENVS, dtype=torch.bool)  # each env's previous step ended its episode
    desired = None  # each env's episode goal (HER facade)
    while left:
        T = min(EP_LEN, left)
        c = stream.chunk(T)
        left -= T
        rb.extend(to_td(c))
        flat = {k: v.reshape(N_ENVS * T, -1).numpy() for k, v in c.items()}
        peer.add(obs=flat["obs"], act=flat["act"], rew=flat["rew"], next_obs=flat["next_obs"],
                 done=flat["done"].astype(np.float32))
        npc = {k: v.numpy() for k, v in c.items()}
        for t in range(T):
            obs, nxt = npc["obs"][:, t], npc["next_obs"][:, t]
            rew, term, trunc = npc["rew"][:, t, 0], npc["terminated"][:, t, 0], npc["truncated"][:, t, 0]
            for f in facades.values():
                f.add(obs, npc["act"][:, t], rew, term, trunc, infos, nxt)
            # a goal env's desired goal: set at each episode's first step, then held
            first = ended.numpy()[:, None] if desired is not None else True
            desired = np.where(first, obs[:, :GOAL], desired)
            goals = {"observation": obs, "achieved_goal": obs[:, :GOAL], "desired_goal": desired}
            next_goals = {"observation": nxt, "achieved_goal": nxt[:, :GOAL], "desired_goal": desired}
            her.add(goals, npc["act"][:, t], rew, term, trunc, infos, next_goals)
            # the original's done flag: set on the first step of a new episode
            episodic.add_step({"obs": c["obs"][:, t], "action": c["act"][:, t], "reward": c["rew"][:, t]},
                              ended)
            ended = c["done"][:, t, 0]
    gen = torch.Generator().manual_seed(0)
    pool = dataset.pool  # what EpisodeReplayBuffer samples from (num_workers=0)
    ops = {
        "cpprb ReplayBuffer.sample": lambda: peer.sample(BATCH),
        "ours: make_replay_buffer rb.sample()": rb.sample,
        "ours: NStepReplayStorage.sample() (n_step=1, num_workers=0)": facades["nstep"].sample,
        "ours: HerReplayStorage.sample() (num_goals=0)": her.sample,
        "ours: EpisodeReplayBuffer.sample() (sequence_length=1)": episodic.sample,
    }
    components = {
        "ours: NStepReplayStorage.sample() (n_step=1, num_workers=0)": facades["nstep"].rb.sample,
        "ours: HerReplayStorage.sample() (num_goals=0)": her.rb.sample,
        "ours: EpisodeReplayBuffer.sample() (sequence_length=1)": lambda: pool.sample(BATCH, 1, generator=gen),
    }
    return ops, components, facades["nstep_workers"]


def report(argv: list[str]) -> None:
    import torch

    a = table_args(__doc__, argv, "100,000 rows, fewer blocks")
    torch.set_num_threads(1)
    rows, reps = (100_000, 60) if a.quick else (1_000_000, 300)
    start = time.perf_counter()
    ops, components, workers = build(rows)
    fill_s = time.perf_counter() - start
    timed = interleaved({**ops, **{f"component of {k}": v for k, v in components.items()}}, reps, 20)
    # the workers' facade beside cpprb only: its workers prefetch on this machine's cores
    # in the background, which would disturb the blocks above
    alone = interleaved({"workers": workers.sample, "cpprb": ops["cpprb ReplayBuffer.sample"]},
                        max(reps // 3, 2), 20, warmup=50)
    workers.reset()
    cpprb_s = timed["cpprb ReplayBuffer.sample"]["median"]

    def row(label: str, med: float, q25: float, q75: float, component: float | None,
            peer: float = cpprb_s) -> list[str]:
        return [label, f"{BATCH / med:,.0f}", f"{med * 1e6:,.1f}", f"{q25 * 1e6:,.1f}-{q75 * 1e6:,.1f}",
                f"{peer / med:.2f}x", "-" if component is None else f"{med / component:.2f}x"]

    rows_out = []
    for label in ops:
        q = timed[label]
        comp = components.get(label)
        rows_out.append(row(label, q["median"], q["p25"], q["p75"],
                            None if comp is None else timed[f"component of {label}"]["median"]))
        if comp is not None:
            c = timed[f"component of {label}"]
            facade = label.removeprefix("ours: ").split(".")[0]
            call = "dataset.pool.sample(256, 1)" if "Episode" in facade else "storage.rb.sample()"
            rows_out.append(row(f"ours: {facade}'s component, {call}", c["median"], c["p25"], c["p75"], None))
    q = alone["workers"]
    rows_out.append(row("ours: NStepReplayStorage.sample() (num_workers=4, rllte's default; beside cpprb "
                        "only)", q["median"], q["p25"], q["p75"], None, alone["cpprb"]["median"]))
    lines = [f"## W1 samples through the facades (batch {BATCH}, {rows:,} transitions, full)", "",
             machine_line(), "",
             table(["call", "samples/s", "us/batch (median)", "us/batch p25-p75", "rate vs cpprb",
                    "facade / component"], rows_out), "",
             f"Every buffer holds the same W1 stream, written as its users write it (facades: one `add` / "
             f"`add_step` per 16-env step; fill of all buffers {fill_s:.0f} s). Interleaved blocks of 20 "
             f"batches, median over {reps} blocks per call. Facades return their original's batch: NStep "
             "five float32 tensors, HER a tuple of float32 dicts and tensors (W1 fields, `num_goals=0`: "
             "no relabelling, W3 measures that; achieved goal `obs[:3]`, desired goal held for the "
             "episode, as a goal env gives them), Episode a `[256, 1]` TensorDict of obs, action, reward; "
             "cpprb returns numpy arrays (obs, act, rew, next_obs, done). The num_workers=4 row is timed "
             "after the others, interleaved with cpprb only (its 4 workers prefetch in the background on "
             "this machine's cores), and its rate is against cpprb in that phase. "
             "Targets (issue 15): rate at least 1.0x cpprb; facade / component at most 1.2x.", ""]
    print("\n".join(lines))
    write_tables("\n".join(lines), a.out, a.append)


if __name__ == "__main__":
    report(sys.argv[1:])
