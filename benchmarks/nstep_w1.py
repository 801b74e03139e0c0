"""The W1-sized n-step table of ``nstep.py``: n-step vs one-step sampling on small observations.

    .venv/bin/python benchmarks/nstep_w1.py [--quick]   # this table alone

Issue 15 asks n-step sampling to cost at most 1.3x one-step sampling on pixels
(``nstep.py``'s W2 table) and on W1-sized observations (this table). Workload:
the W1 stream (``workload.py``: obs f32[17], action f32[6], 16 envs x 1000-step
episodes ending truncated), 200,000 rows, n = 3, gamma = 0.99, batch 256.
Buffers, each filled with the same data and sampled interleaved in this process:

- ``ours``: ``make_replay_buffer(200_000, batch_size=256, n_step=3, gamma=0.99)``;
- ``ours1``: ``make_replay_buffer(200_000, batch_size=256)`` (one-step);
- ``sb3``: ``stable_baselines3.common.buffers.NStepReplayBuffer(n_steps=3)``, one
  ``add`` per 16-env step, truncation via ``infos["TimeLimit.truncated"]``;
- ``sb3_1``: SB3 ``ReplayBuffer`` (one-step), filled the same way.
"""
from __future__ import annotations

import threads  # noqa: F401 -- first: one thread per native pool (threads.py)

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if __name__ == "__main__":
    sys.path[:0] = [HERE, os.path.dirname(HERE)]  # benchmarks/, repo root
os.environ.setdefault("RL_LOGGING_LEVEL", "WARNING")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from measure import interleaved, logger, machine_line, status_of, table  # noqa: E402
from workload import ACT_DIM, EP_LEN, N_ENVS, OBS_DIM, EpisodeStream, to_td  # noqa: E402

N = 3
GAMMA = 0.99
BATCH = 256
log = logger("nstep-w1")

W1_ROWS = 200_000  # enough to reach past the caches; cheap to fill
W1_EPISODES = W1_ROWS // (N_ENVS * EP_LEN) + 1  # one-episode chunks: full, and wrapped


def _w1_ours(n_step: int | None):
    from torchrl_ext import make_replay_buffer

    kw = {} if n_step is None else {"n_step": n_step, "gamma": GAMMA}
    rb = make_replay_buffer(W1_ROWS, batch_size=BATCH, seed=0, **kw)
    stream = EpisodeStream(seed=0)
    for _ in range(W1_EPISODES):
        rb.extend(to_td(stream.chunk(EP_LEN)))
    return rb.sample


def _w1_sb3(n_step: int | None):
    import warnings

    from gymnasium import spaces
    from stable_baselines3.common.buffers import NStepReplayBuffer, ReplayBuffer

    stream = EpisodeStream(seed=0)
    obs_space = spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    act_space = spaces.Box(-1, 1, (ACT_DIM,), np.float32)
    kw = {} if n_step is None else {"n_steps": n_step, "gamma": GAMMA}
    with warnings.catch_warnings():  # "not enough memory" estimate warning
        warnings.simplefilter("ignore")
        rb = (ReplayBuffer if n_step is None else NStepReplayBuffer)(
            W1_ROWS, obs_space, act_space, device="cpu", n_envs=stream.n_envs,
            optimize_memory_usage=False, handle_timeout_termination=True, **kw)
    np.random.seed(0)
    no_info = [{} for _ in range(stream.n_envs)]
    for _ in range(W1_EPISODES):
        c = {k: v.numpy() for k, v in stream.chunk(EP_LEN).items()}
        for t in range(c["obs"].shape[1]):
            done = c["done"][:, t, 0]  # W1 episodes end by time limit
            infos = [{"TimeLimit.truncated": True}] * len(done) if done.any() else no_info
            rb.add(c["obs"][:, t], c["next_obs"][:, t], c["act"][:, t], c["rew"][:, t, 0], done, infos)
    return lambda: rb.sample(BATCH)


W1_IMPLS = {  # key: (label, sample function builder)
    "ours": ("ours: make_replay_buffer(n_step=3)", lambda: _w1_ours(N)),
    "ours1": ("ours: make_replay_buffer (one-step)", lambda: _w1_ours(None)),
    "sb3": ("SB3 NStepReplayBuffer (n_steps=3)", lambda: _w1_sb3(N)),
    "sb3_1": ("SB3 ReplayBuffer (one-step)", lambda: _w1_sb3(None)),
}


def w1_nstep(quick: bool) -> tuple[dict, dict]:
    """Sample times (interleaved) and status of the W1-sized buffers."""
    samplers, status = {}, {}
    for key, (_, build) in W1_IMPLS.items():
        log(f"W1-sized fill {key} @ {W1_ROWS:,}")
        try:
            samplers[key] = build()
            samplers[key]()
            status[key] = "ok"
        except Exception as e:  # noqa: BLE001 -- report, keep going
            status[key] = status_of(key, e)
            log(f"  {key}: {e!r}")
    log("W1-sized sampling, interleaved")
    times = interleaved(samplers, *((30, 20) if quick else (100, 20)))
    return times, status


def w1_report(times: dict, status: dict) -> list[str]:
    rows = []
    for key, (label, _) in W1_IMPLS.items():
        s = times.get(key)
        if not s:
            rows.append([label, status.get(key, "n/a"), "", ""])
            continue
        rows.append([label, f"{s['median'] * 1e6:,.0f}", f"{s['p25'] * 1e6:,.0f}-{s['p75'] * 1e6:,.0f}",
                     f"{BATCH / s['median']:,.0f}"])

    def ratio(a: str, b: str) -> str:
        """``a / b`` sample time: of the medians, and of the minimums (the least disturbed blocks)."""
        if a not in times or b not in times:
            return "n/a"
        ta, tb = times[a], times[b]
        return f"{ta['median'] / tb['median']:.2f}x (minimums: {ta['min'] / tb['min']:.2f}x)"

    return [f"## W1-sized n-step sampling (obs f32[17], action f32[6], 16 envs x 1000-step episodes, "
            f"{W1_ROWS:,} rows, n={N}, batch {BATCH})", "",
            table(["impl", "us/batch (median)", "us/batch p25-p75", "samples/s"], rows), "",
            f"**ours n-step / ours one-step sample time: {ratio('ours', 'ours1')}** (target <= 1.3x); "
            f"SB3 NStepReplayBuffer / SB3 ReplayBuffer: {ratio('sb3', 'sb3_1')}; "
            f"ours n-step / SB3 NStepReplayBuffer: {ratio('ours', 'sb3')}.", "",
            "Every buffer filled with the same W1 stream (`workload.py`), then sampled in interleaved "
            "blocks of 20 batches in this process; median over blocks (on a shared machine, "
            "the ratio of minimums is the steadier). SB3 gets one `add` per "
            "16-env step, `infos[\"TimeLimit.truncated\"]` at episode ends.", ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    a = ap.parse_args()
    torch.set_num_threads(1)
    print(f"- {machine_line()}\n")
    print("\n".join(w1_report(*w1_nstep(a.quick))))


if __name__ == "__main__":
    main()
