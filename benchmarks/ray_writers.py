"""W7: two remote collectors and one learner on a local Ray cluster.

    .venv/bin/python benchmarks/ray_writers.py            # 3 interleaved rounds of 4 s per buffer
    .venv/bin/python benchmarks/ray_writers.py --quick    # 1 round of 2 s

Two Ray actors play collectors: each replays CartPole rollouts of 2 envs
(``[2, 64]`` batches, trajectory ids from 0 in each, as two independent
TorchRL collectors number them) into the buffer as fast as it takes them,
while the learner (this process) samples. Buffers, each in its own Ray actor
(TorchRL's ``RayReplayBuffer``):

* ours: ``make_replay_buffer(..., service_backend="ray")``, each collector
  writing through its own client (a writer of its own); uniform
  transitions, and sequences of 8 steps (``SequenceSampler``);
* TorchRL: ``LazyTensorStorage`` + ``RandomSampler``, and ``SliceSampler``
  (``traj_key=("collector", "traj_ids")``, ``slice_len=8``), the collectors'
  batches flattened as TorchRL's 1-D storage wants them.

Reported: transitions/s written by both collectors together, batches/s (256
transitions: 256 single steps, or 32 sequences of 8) drawn by the learner
(time inside ``sample`` only), and the share of sampled transitions that are
correct: each follows CartPole's dynamics from its observation and action,
and each step of a sequence starts where the previous one ended.
Interleaved rounds, medians; ``torch.set_num_threads(1)`` everywhere.
"""
from __future__ import annotations

import threads  # noqa: F401 -- first: one thread per native pool (threads.py)

import argparse
import os
import statistics
import sys
import time
import warnings
from functools import partial

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PATHS = [HERE, ROOT, os.path.join(ROOT, "tests", "integration")]  # cartpole.py: the dynamics
sys.path[:0] = PATHS
os.environ.setdefault("RL_LOGGING_LEVEL", "WARNING")

import ray  # noqa: E402
import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from torchrl.data import LazyTensorStorage, RayReplayBuffer, TensorDictReplayBuffer
    from torchrl.data.replay_buffers.samplers import RandomSampler, SliceSampler

from cartpole import cartpole_step, follows_dynamics  # noqa: E402
from measure import logger, machine_line, table, write_tables  # noqa: E402

log = logger("ray")
CAPACITY, BATCH, SEQ = 200_000, 256, 8
ENVS, T = 2, 64


def rollouts(seed: int, num_batches: int) -> list[TensorDict]:
    """``[ENVS, T]`` CartPole batches of random actions, trajectory ids from 0."""
    g = torch.Generator().manual_seed(seed)
    state = (torch.rand(ENVS, 4, generator=g) - 0.5) * 0.1
    traj = torch.arange(ENVS)
    next_id = ENVS
    out = []
    for _ in range(num_batches):
        obs, act, nxt, term, ids = [], [], [], [], []
        for _ in range(T):
            right = torch.rand(ENVS, generator=g) < 0.5
            new = cartpole_step(state, right).float()
            done = (new[:, 0].abs() > 2.4) | (new[:, 2].abs() > 0.2095)
            obs.append(state), act.append(right), nxt.append(new), term.append(done), ids.append(traj)
            reset = (torch.rand(ENVS, 4, generator=g) - 0.5) * 0.1
            state = torch.where(done[:, None], reset, new)
            fresh = torch.arange(next_id, next_id + ENVS)
            traj = torch.where(done, fresh, traj)
            next_id += ENVS
        done = torch.stack(term, 1).unsqueeze(-1)
        out.append(TensorDict({
            "observation": torch.stack(obs, 1).float(),
            "action": torch.nn.functional.one_hot(torch.stack(act, 1).long(), 2),
            "next": {"observation": torch.stack(nxt, 1), "reward": torch.ones(ENVS, T, 1),
                     "done": done, "terminated": done.clone(),
                     "truncated": torch.zeros_like(done)},
            "collector": {"traj_ids": torch.stack(ids, 1)},
        }, [ENVS, T]))
    return out


@ray.remote(num_cpus=1)
class Collector:
    """A remote collector replaying its own rollouts into a buffer client."""

    def __init__(self, seed: int, num_batches: int) -> None:
        torch.set_num_threads(1)
        self.batches = rollouts(seed, num_batches)

    def run(self, client, seconds: float, flat: bool) -> int:
        """Write for ``seconds`` (at least one batch); each replay of the rollouts
        gets new trajectory ids, so a rollout's end is a trajectory's end."""
        written, i, end = 0, 0, time.monotonic() + seconds
        while not written or time.monotonic() < end:
            batch = self.batches[i % len(self.batches)]
            if i >= len(self.batches):
                batch = batch.clone()
                batch["collector", "traj_ids"] += (i // len(self.batches)) * 10**6
            client.extend(batch.reshape(-1) if flat else batch)
            written += batch.numel()
            i += 1
        return written


def correct(batch: TensorDict, seq: bool) -> tuple[int, int]:
    """(correct transitions, transitions) of a sampled batch (``[B]`` or ``[B, SEQ]``)."""
    ok = follows_dynamics(batch["observation"], batch["action"], batch["next", "observation"])
    if seq:
        linked = (batch["observation"][:, 1:] == batch["next", "observation"][:, :-1]).all(-1)
        ok[:, 1:] &= linked
    return int(ok.sum()), ok.numel()


def build(impl: str, seq: bool):
    remote = {"remote_config": {"num_cpus": 0}}
    if impl == "ours":
        from torchrl_ext import make_replay_buffer
        from torchrl_ext.samplers import SequenceSampler

        sampler = SequenceSampler(SEQ) if seq else None
        return make_replay_buffer(CAPACITY, num_streams=4, seed=0, sampler=sampler,
                                  service_backend="ray", service_backend_options=remote)
    sampler = (partial(SliceSampler, slice_len=SEQ, traj_key=("collector", "traj_ids"))
               if seq else RandomSampler)
    return RayReplayBuffer(replay_buffer_cls=TensorDictReplayBuffer,
                           storage=partial(LazyTensorStorage, CAPACITY), sampler=sampler,
                           **remote)


def one_round(impl: str, seq: bool, collectors, seconds: float) -> dict:
    rb = build(impl, seq)
    clients = [rb.client() for _ in collectors]
    flat = impl == "torchrl"
    # a first batch from each, so the learner has data to sample
    ray.get([c.run.remote(client, 0.0, flat) for c, client in zip(collectors, clients)])
    jobs = [c.run.remote(client, seconds, flat) for c, client in zip(collectors, clients)]
    start = time.monotonic()
    batches, in_sample, good, total = 0, 0.0, 0, 0
    while time.monotonic() - start < seconds:
        t = time.perf_counter()
        batch = rb.sample(BATCH // SEQ) if (seq and impl == "ours") else rb.sample(BATCH)
        in_sample += time.perf_counter() - t
        batches += 1
        if seq and impl == "torchrl":
            batch = batch.reshape(BATCH // SEQ, SEQ)
        g, n = correct(batch, seq)
        good, total = good + g, total + n
    written = sum(ray.get(jobs))
    elapsed = time.monotonic() - start
    rb.shutdown()
    return {"write": written / elapsed, "sample": batches / in_sample, "correct": good / total}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one round of 2 s")
    ap.add_argument("--out", default=None, help="append the tables to this markdown file")
    ap.add_argument("--append", action="store_true", help="(with --out) append, as run.py does")
    a = ap.parse_args()
    torch.set_num_threads(1)
    rounds, seconds = (1, 2.0) if a.quick else (3, 4.0)
    pythonpath = os.pathsep.join(PATHS + [os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=150 * 2**20,
             log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": pythonpath,
                                                            "OMP_NUM_THREADS": "1"}})
    try:
        collectors = [Collector.remote(seed, 200) for seed in (0, 1)]
        results: dict[tuple[str, bool], list[dict]] = {}
        for r in range(rounds):
            for seq in (False, True):
                for impl in (("ours", "torchrl") if r % 2 == 0 else ("torchrl", "ours")):
                    log(f"round {r + 1}/{rounds}: {impl} {'sequences' if seq else 'uniform'}")
                    results.setdefault((impl, seq), []).append(one_round(impl, seq, collectors, seconds))
    finally:
        ray.shutdown()
    rows = []
    for seq in (False, True):
        med = {impl: {k: statistics.median(m[k] for m in results[(impl, seq)])
                      for k in ("write", "sample", "correct")} for impl in ("ours", "torchrl")}
        o, t = med["ours"], med["torchrl"]
        rows.append([
            "sequences of 8" if seq else "uniform",
            f"{o['write']:,.0f}", f"{t['write']:,.0f}", f"{o['write'] / t['write']:.2f}x",
            f"{o['sample']:,.0f}", f"{t['sample']:,.0f}", f"{o['sample'] / t['sample']:.2f}x",
            f"{100 * o['correct']:.2f} %", f"{100 * t['correct']:.2f} %",
        ])
    out = "\n".join([
        "## W7: two remote collectors + one learner, local Ray cluster",
        "",
        f"{machine_line()}; ray {ray.__version__}; {rounds} interleaved round(s) of {seconds:.0f} s, "
        "medians; collectors write [2, 64] CartPole batches, trajectory ids from 0 in each.",
        "",
        table(["workload", "written/s ours", "written/s TorchRL", "ratio",
               "batches/s ours", "batches/s TorchRL", "ratio", "correct ours", "correct TorchRL"],
              rows),
    ])
    print(out)
    write_tables(out, a.out, append=a.append)


if __name__ == "__main__":
    main()
