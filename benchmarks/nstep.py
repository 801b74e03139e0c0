"""W2 n-step benchmark: n-step sampling of pixel transitions, side by side.

    .venv/bin/python benchmarks/nstep.py                  # full: 100k transitions (~17 GB RSS)
    .venv/bin/python benchmarks/nstep.py --quick          # 20k transitions, few repetitions
    .venv/bin/python benchmarks/nstep.py --out FILE --append   # (what run.py does)
    .venv/bin/python benchmarks/nstep.py --probe KEY ROWS # one memory probe (subprocess)

Workload: frames uint8[3, 84, 84], action float32[6], 4 envs x 500-step episodes
(staggered by 125 steps; episodes alternate terminated / truncated), n = 3,
gamma = 0.99, batch 256, capacity 100,000 transitions. Every frame carries a
header (env, episode, step) in its first 4 bytes and the reward is a known
function of (env, episode, step), so every sampled n-step transition is
checked against the exact target: observation after the window, n-step return
and bootstrap discount gamma**k * (1 - terminated).

Buffers (all filled with the same episodes, each through its own API):

- ``ours``: ``make_replay_buffer(cap, batch_size=256, n_step=3, gamma=0.99)``,
  ``[4, T]`` TensorDicts (``"pixels"`` at the root and under ``"next"``);
- ``ours1``: ``make_replay_buffer(cap, batch_size=256)`` (one-step), same data;
- ``sb3``: ``stable_baselines3.common.buffers.NStepReplayBuffer`` (``add``, one
  vector step per call; truncation via ``infos["TimeLimit.truncated"]``);
- ``cpprb``: ``cpprb.ReplayBuffer(..., Nstep={"size": 3, "gamma": 0.99, "rew": "rew",
  "next": "next_obs"})``, ``add`` env by env, ``on_episode_end()`` after each episode
  (cpprb's n-step queue is one stream);
- ``torchrl``: ``TensorDictReplayBuffer(LazyTensorStorage(cap, ndim=2),
  transform=MultiStepTransform(3, 0.99))`` fed time-last ``[4, T]`` (write-time n-step);
- ``floor``: per-field gather ``t.index_select(0, idx)`` of obs, next_obs, action, reward, done from
  preallocated tensors (SB3's arrays, viewed as ``[N, ...]`` torch tensors).

Also: RSS of a full buffer, ours vs SB3 ``NStepReplayBuffer`` (fresh subprocess per
buffer, see ``pixels.py``), and ``make_loader`` workers feeding a training loop.

W1-sized n-step (issue 15: n-step at most 1.3x the one-step cost on W1-sized
observations too): the W1 stream (``workload.py``: obs f32[17], action f32[6], 16
envs x 1000-step episodes ending truncated), 200,000 rows, n = 3, batch 256; ours
n-step vs ours one-step vs SB3 ``NStepReplayBuffer`` and SB3 ``ReplayBuffer`` on the
same data, sampled interleaved in this process (``nstep_w1.py``, also runnable alone).
"""
from __future__ import annotations

import threads  # noqa: F401 -- first: one thread per native pool (threads.py)

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if __name__ == "__main__":
    sys.path[:0] = [HERE, os.path.dirname(HERE)]  # benchmarks/, repo root
os.environ.setdefault("RL_LOGGING_LEVEL", "WARNING")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from measure import (  # noqa: E402
    hwm_bytes,
    interleaved,
    logger,
    machine_line,
    measured_fill,
    probe_main,
    settle,
    status_of,
    table,
    write_tables,
)
from loader_rates import calibrated_train_step, loader_rates  # noqa: E402
from nstep_w1 import w1_nstep, w1_report  # noqa: E402

FRAME = (3, 84, 84)
ACT = 6
ENVS = 4
EPISODE = 500
OFFSET = 125  # env e starts at step e * OFFSET of its first episode (staggered ends)
N = 3
GAMMA = 0.99
BATCH = 256
CHUNK = 125  # steps per [ENVS, CHUNK] write
POOL = 1024  # distinct random frames, reused
FRAME_BYTES = int(np.prod(FRAME))
RAW_BYTES = 2 * FRAME_BYTES + ACT * 4 + 4 + 3  # obs + next obs + action + reward + 3 flags

log = logger('nstep')


# --------------------------------------------------------------------- workload
def reward_of(e, k, i):
    """Reward of step ``i`` of episode ``k`` of env ``e`` (exact in float32 up to rounding)."""
    return ((e * 31 + k * 17 + i * 7) % 101).to(torch.float32) / 100


def terminated_episode(e, k):
    """Episodes alternate: (k + e) even ends terminated, odd ends truncated."""
    return (k + e) % 2 == 0


class Stream:
    """Deterministic pixel episodes of ``ENVS`` envs, generated in ``[envs, T]`` chunks.

    Step ``t`` of env ``e`` is position ``p = e * OFFSET + t`` of its life:
    episode ``k = p // EPISODE``, step ``i = p % EPISODE``. Observation frames come
    from a pool of random frames; the first 4 bytes carry (e, k, i // 256, i % 256),
    next observations the same with ``i + 1``, so obs of step t+1 == next obs of
    step t inside an episode, and a new episode starts from a different frame.
    """

    def __init__(self, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.pool = torch.randint(0, 256, (POOL, *FRAME), dtype=torch.uint8, generator=g)

    def _frames(self, e, k, i):
        ids = (e * 7919 + k * 1009 + i) % POOL
        f = self.pool.index_select(0, ids.reshape(-1)).reshape(*ids.shape, *FRAME)
        hdr = f[..., 0, 0, :4]
        hdr[..., 0] = e
        hdr[..., 1] = k
        hdr[..., 2] = i // 256
        hdr[..., 3] = i % 256
        return f

    def chunk(self, t0: int, T: int, envs=None) -> dict[str, torch.Tensor]:
        envs = torch.arange(ENVS) if envs is None else torch.as_tensor(envs).view(-1)
        e = envs.view(-1, 1).expand(-1, T)
        p = e * OFFSET + t0 + torch.arange(T)
        k, i = p // EPISODE, p % EPISODE
        last = i == EPISODE - 1
        term = last & terminated_episode(e, k)
        trunc = last & ~terminated_episode(e, k)
        return {
            "obs": self._frames(e, k, i),
            "next_obs": self._frames(e, k, i + 1),
            "action": torch.stack([i, k, e], -1).float().repeat(1, 1, 2),
            "reward": reward_of(e, k, i).unsqueeze(-1),
            "terminated": term.unsqueeze(-1),
            "truncated": trunc.unsqueeze(-1),
            "done": (term | trunc).unsqueeze(-1),
        }

    def chunks(self, steps: int, envs=None):
        for t0 in range(0, steps, CHUNK):
            yield self.chunk(t0, min(CHUNK, steps - t0), envs)


def to_td(c):
    from tensordict import TensorDict

    return TensorDict({
        "pixels": c["obs"], "action": c["action"],
        "next": {"pixels": c["next_obs"], "reward": c["reward"], "done": c["done"],
                 "terminated": c["terminated"], "truncated": c["truncated"]},
    }, c["reward"].shape[:2])


# --------------------------------------------------------------------- adapters
class Impl:
    key = label = ""
    n = N  # expected window length (1 for the one-step buffer)
    write_s = 0.0

    def fill(self, stream: Stream, steps: int) -> None:
        for c in stream.chunks(steps):
            t0 = time.perf_counter()
            self.write(c)
            self.write_s += time.perf_counter() - t0

    def decode(self, s) -> dict:  # obs, next_obs [B, ...] uint8; ret, disc [B]
        raise NotImplementedError


class Ours(Impl):
    key, label = "ours", "ours: make_replay_buffer(n_step=3)"

    def build(self, cap):
        from torchrl_ext import make_replay_buffer

        self.rb = make_replay_buffer(cap, batch_size=BATCH, n_step=N, gamma=GAMMA, seed=0)

    def write(self, c):
        self.rb.extend(to_td(c))

    def sample(self):
        return self.rb.sample()

    def decode(self, s):
        return {"obs": s["pixels"], "next_obs": s["next", "pixels"],
                "ret": s["next", "reward"].view(-1), "disc": s["discount"].view(-1)}


class OursOneStep(Ours):
    key, label, n = "ours1", "ours: make_replay_buffer (one-step)", 1

    def build(self, cap):
        from torchrl_ext import make_replay_buffer

        self.rb = make_replay_buffer(cap, batch_size=BATCH, seed=1)

    def decode(self, s):
        term = s["next", "terminated"].view(-1).float()
        return {"obs": s["pixels"], "next_obs": s["next", "pixels"],
                "ret": s["next", "reward"].view(-1), "disc": GAMMA * (1 - term)}


class SB3(Impl):
    key, label = "sb3", "SB3 NStepReplayBuffer"

    def build(self, cap):
        import warnings

        from gymnasium import spaces
        from stable_baselines3.common.buffers import NStepReplayBuffer

        np.random.seed(0)
        with warnings.catch_warnings():  # "not enough memory" estimate warning
            warnings.simplefilter("ignore")
            self.rb = NStepReplayBuffer(
                cap, spaces.Box(0, 255, FRAME, np.uint8), spaces.Box(-1, 1, (ACT,), np.float32),
                device="cpu", n_envs=ENVS, optimize_memory_usage=False,
                handle_timeout_termination=True, n_steps=N, gamma=GAMMA)

    def write(self, c):
        obs, nxt, act = c["obs"].numpy(), c["next_obs"].numpy(), c["action"].numpy()
        rew, done, trunc = c["reward"][..., 0].numpy(), c["done"][..., 0].numpy(), c["truncated"][..., 0].numpy()
        empty = [{} for _ in range(ENVS)]
        for t in range(obs.shape[1]):
            infos = empty if not trunc[:, t].any() else [{"TimeLimit.truncated": bool(x)} for x in trunc[:, t]]
            self.rb.add(obs[:, t], nxt[:, t], act[:, t], rew[:, t], done[:, t], infos)

    def sample(self):
        return self.rb.sample(BATCH)

    def decode(self, s):
        return {"obs": s.observations, "next_obs": s.next_observations, "ret": s.rewards.view(-1),
                "disc": (s.discounts * (1 - s.dones)).view(-1)}


class Cpprb(Impl):
    key, label = "cpprb", "cpprb ReplayBuffer(Nstep=3)"

    def build(self, cap):
        import cpprb

        np.random.seed(0)
        self.rb = cpprb.ReplayBuffer(cap, {
            "obs": {"shape": FRAME, "dtype": np.uint8}, "act": {"shape": ACT},
            "rew": {}, "next_obs": {"shape": FRAME, "dtype": np.uint8}, "done": {},
        }, Nstep={"size": N, "gamma": GAMMA, "rew": "rew", "next": "next_obs"})

    def fill(self, stream, steps):
        # cpprb's n-step queue is a single stream: add env by env, episode by episode
        for e in range(ENVS):
            for c in stream.chunks(steps, envs=[e]):
                ends = torch.nonzero(c["done"][0, :, 0]).view(-1).tolist()
                t0 = time.perf_counter()
                a = 0
                for b in ends + [c["done"].shape[1] - 1]:
                    if b >= a:
                        self.rb.add(obs=c["obs"][0, a:b + 1].numpy(), act=c["action"][0, a:b + 1].numpy(),
                                    rew=c["reward"][0, a:b + 1].numpy(), next_obs=c["next_obs"][0, a:b + 1].numpy(),
                                    done=c["done"][0, a:b + 1].numpy())
                        if b in ends:
                            self.rb.on_episode_end()
                    a = b + 1
                self.write_s += time.perf_counter() - t0
            self.rb.on_episode_end()  # the env's stream stops here: flush its n-step queue

    def sample(self):
        return self.rb.sample(BATCH)

    def decode(self, s):
        done = torch.from_numpy(s["done"]).view(-1)
        # cpprb returns no per-sample window length: the bootstrap uses gamma ** n
        return {"obs": torch.from_numpy(s["obs"]), "next_obs": torch.from_numpy(s["next_obs"]),
                "ret": torch.from_numpy(s["rew"]).view(-1), "disc": GAMMA ** N * (1 - done)}


class TorchRLMultiStep(Impl):
    key, label = "torchrl", "TorchRL TDRB + MultiStepTransform"

    def build(self, cap):
        from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
        from torchrl.envs.transforms import MultiStepTransform

        self.rb = TensorDictReplayBuffer(storage=LazyTensorStorage(cap, ndim=2),
                                         transform=MultiStepTransform(n_steps=N, gamma=GAMMA),
                                         batch_size=BATCH)

    def write(self, c):
        self.rb.extend(to_td(c))  # time-last [envs, T]: the transform works per env

    def sample(self):
        return self.rb.sample()

    def decode(self, s):
        k = s["steps_to_next_obs"].view(-1).double()
        term = s["next", "terminated"].view(-1).double()
        return {"obs": s["pixels"], "next_obs": s["next", "pixels"],
                "ret": s["next", "reward"].view(-1), "disc": GAMMA ** k * (1 - term)}


class Floor(Impl):
    key, label = "floor", "floor: per-field gather"

    def __init__(self, sb3: SB3 | None = None) -> None:
        self.sb3 = sb3

    def build(self, cap):
        self.g = torch.Generator().manual_seed(0)
        if self.sb3 is not None:  # SB3's preallocated arrays, as [N, ...] torch tensors
            rb = self.sb3.rb
            f = lambda a, *s: torch.from_numpy(a).view(-1, *s)  # noqa: E731
            self.t = [f(rb.observations, *FRAME), f(rb.next_observations, *FRAME),
                      f(rb.actions, ACT), f(rb.rewards), f(rb.dones)]
        else:
            self.t = [torch.empty(cap, *FRAME, dtype=torch.uint8).random_(), torch.empty(cap, *FRAME, dtype=torch.uint8).random_(),
                      torch.zeros(cap, ACT), torch.zeros(cap), torch.zeros(cap)]
        self.rows = self.t[0].shape[0]

    def fill(self, stream, steps):
        pass

    def sample(self):
        idx = torch.randint(self.rows, (BATCH,), generator=self.g)
        return [t.index_select(0, idx) for t in self.t]


IMPLS = {c.key: c for c in (Ours, OursOneStep, SB3, Cpprb, TorchRLMultiStep)}


# ---------------------------------------------------------------------- checks
def check(impl: Impl, samples: list, steps: int) -> dict:
    """Compare sampled transitions with the exact n-step targets."""
    head = torch.arange(ENVS) * OFFSET + steps - 1  # last fed position of each env
    bad = {"next_obs": 0, "ret": 0, "disc": 0, "any": 0}
    total = 0
    for s in samples:
        d = impl.decode(s)
        h, hn = d["obs"][:, 0, 0, :4].long(), d["next_obs"][:, 0, 0, :4].long()
        e, k, i = h[:, 0], h[:, 1], h[:, 2] * 256 + h[:, 3]
        open_ep = k == head[e.clamp(0, ENVS - 1)] // EPISODE
        end = torch.where(open_ep, head[e.clamp(0, ENVS - 1)] % EPISODE + 1, torch.full_like(i, EPISODE))
        kk = torch.minimum(torch.full_like(i, impl.n), end - i)
        want_next = torch.stack([e, k, (i + kk) // 256, (i + kk) % 256], -1)
        ret = torch.zeros(len(i), dtype=torch.float64)
        for m in range(impl.n):
            ret += torch.where(m < kk, GAMMA ** m * reward_of(e, k, i + m).double(), 0.0)
        term = (i + kk == EPISODE) & terminated_episode(e, k)
        disc = GAMMA ** kk.double() * (~term).double()
        w_next = (hn != want_next).any(-1)
        w_ret = (d["ret"].double() - ret).abs() > 1e-4
        w_disc = (torch.as_tensor(d["disc"]).double() - disc).abs() > 1e-5
        for name, w in (("next_obs", w_next), ("ret", w_ret), ("disc", w_disc), ("any", w_next | w_ret | w_disc)):
            bad[name] += int(w.sum())
        total += len(i)
    return {"total": total, **bad}


# ---------------------------------------------------------------------- memory
def probe(key: str, rows: int) -> dict:
    """Build and fill one buffer in this fresh process; RSS growth after settling."""
    torch.set_num_threads(1)
    steps = rows // ENVS + CHUNK
    warm = IMPLS[key]()
    warm.build(ENVS * 300)
    warm.fill(Stream(seed=1), 300)
    warm.sample()
    del warm
    stream = Stream(seed=0)
    impl = IMPLS[key]()

    def build_and_fill():
        impl.build(rows)
        impl.fill(stream, steps)

    return {"key": key, "rows": rows, **measured_fill(build_and_fill)}


def mem_probe(key: str, rows: int) -> dict:
    from measure import run_probe

    return run_probe([sys.executable, os.path.abspath(__file__), "--probe", key, str(rows)], key, 600)


# ---------------------------------------------------------------------- report
def run(quick: bool) -> str:
    torch.set_num_threads(1)
    t_start = time.perf_counter()
    cap = 20_000 if quick else 100_000
    steps = cap // ENVS + CHUNK  # every buffer full, and wrapped
    reps, inner = (20, 4) if quick else (100, 5)

    # memory: fresh subprocess per buffer (before the big in-process fills)
    mem = {}
    for key in ("ours", "sb3"):
        log(f"memory probe {key} @ {cap:,}")
        mem[key] = mem_probe(key, cap)

    w1 = w1_nstep(quick)
    settle()

    stream = Stream(seed=0)
    impls, status = {}, {}
    for cls in IMPLS.values():
        impl = cls()
        log(f"fill {impl.key} @ {cap:,}")
        try:
            impl.build(cap)
            impl.fill(stream, steps)
            impl.sample()
            impls[impl.key], status[impl.key] = impl, "ok"
        except Exception as e:  # noqa: BLE001 -- report, keep going
            status[impl.key] = status_of(impl.key, e)
            log(f"  {impl.key}: {e!r}")
    floor = Floor(impls.get("sb3"))
    floor.build(cap)
    impls["floor"], status["floor"] = floor, "ok"
    settle()

    checks = {}
    for k, impl in impls.items():
        if k != "floor":
            try:
                checks[k] = check(impl, [impl.sample() for _ in range(8 if quick else 20)], steps)
            except Exception as e:  # noqa: BLE001
                checks[k] = {"error": status_of(k, e)}

    log(f"sampling: {reps} interleaved blocks x {inner} batches")
    samp = interleaved({k: i.sample for k, i in impls.items()}, reps, inner)
    # issue 15's ratio: our two buffers alone, interleaved (the peers' 10 ms batches
    # between blocks above make each block's cache state, and so its time, bimodal)
    pair = {k: impls[k].sample for k in ("ours", "ours1") if k in impls}
    pair_times = interleaved(pair, 2 * reps, inner) if len(pair) == 2 else {}

    # loader: only ours stays alive (fork a small process)
    rb = impls["ours"].rb if "ours" in impls else None
    fills = {k: i.write_s for k, i in impls.items()}
    impls.clear()
    del floor
    settle()
    loader = None
    if rb is not None:
        log("make_loader: training loop, num_workers 0 vs 2")
        try:
            loader = loader_rates(rb, calibrated_train_step(), 100 if quick else 150, 1 if quick else 2)
        except Exception as e:  # noqa: BLE001
            loader = {"error": status_of("ours", e)}
    del rb
    settle()
    elapsed = time.perf_counter() - t_start
    return report(quick, cap, steps, status, samp, checks, fills, mem, loader, elapsed, w1,
                  pair_times)


def report(quick, cap, steps, status, samp, checks, fills, mem, loader, elapsed, w1,
           pair) -> str:
    labels = {c.key: c.label for c in IMPLS.values()} | {"floor": Floor.label}
    L = [
        f"# W2 n-step benchmark ({'quick' if quick else 'full'})", "",
        f"- frames uint8{list(FRAME)}, action f32[{ACT}]; {ENVS} envs x {EPISODE}-step episodes "
        f"(staggered, alternately terminated / truncated); n={N}, gamma={GAMMA}, batch {BATCH}; "
        f"capacity {cap:,}, filled with {steps * ENVS:,} transitions ({steps:,} steps x {ENVS} envs)",
        f"- {machine_line()}; wall time {elapsed:.0f} s; "
        f"peak RSS {hwm_bytes() / 2**30:.1f} GiB", "",
    ]
    o = samp.get("ours")
    ours_rate = BATCH / o["median"] if o else None
    rows = []
    for key in (*IMPLS, "floor"):
        s, c = samp.get(key), checks.get(key, {})
        chk = ("-" if key == "floor" else c.get("error", "n/a")) if "total" not in c else (
            f"{c['total'] - c['any']:,}/{c['total']:,}"
            + (f" (wrong: next_obs {c['next_obs']}, return {c['ret']}, discount {c['disc']})" if c["any"] else ""))
        if not s:
            rows.append([labels[key], status.get(key, "n/a"), "", "", "n/a", chk, ""])
            continue
        rate = BATCH / s["median"]
        rows.append([labels[key], f"{rate:,.0f}", f"{s['median'] * 1e6:,.0f}",
                     f"{s['p25'] * 1e6:,.0f}-{s['p75'] * 1e6:,.0f}",
                     "-" if key == "ours" else (f"{ours_rate / rate:.2f}x" if ours_rate else "n/a"), chk,
                     f"{fills[key]:.1f}" if key in fills and key != "floor" else ""])
    n1, o1 = pair.get("ours"), pair.get("ours1")
    cost = (f"{n1['median'] / o1['median']:.2f}x (minimums: {n1['min'] / o1['min']:.2f}x; "
            f"the two alone, {n1['n']} interleaved blocks)" if n1 and o1 else "n/a")
    L += [f"## 6. N-step sampling (W2 pixels, batch {BATCH} from a full buffer)", "",
          table(["impl", "samples/s", "us/batch (median)", "us/batch p25-p75", "ours/peer (rate; >1 = ours faster)",
                 "exact n-step targets", "write s"], rows), "",
          f"**ours n-step / ours one-step sample time: {cost}** (target <= 1.3x).", "",
          f"Median over {o['n'] if o else 'n/a'} interleaved blocks. Exact targets: sampled transitions whose next "
          "observation, n-step return and bootstrap discount gamma**k * (1 - terminated) (k = window length, "
          "cut at episode ends and at each env's last written step) all match. Discount as each buffer exposes it: "
          "ours `discount`; SB3 `discounts * (1 - dones)`; TorchRL `gamma ** steps_to_next_obs * (1 - next.terminated)`; "
          "cpprb returns no window length, so `gamma ** n * (1 - done)`; one-step: `gamma * (1 - next.terminated)`. "
          "cpprb's known issue: its n-step queue mishandles episode ends (next_obs/done of windows that reach an "
          "episode end are wrong, and one `done` flag cannot tell truncation from termination); TorchRL's "
          "MultiStepTransform keeps `terminated` at the window's first step, so windows reaching a termination "
          "bootstrap through it. SB3 returns torch tensors (includes a numpy->torch copy) and stores next_obs "
          "separately; cpprb returns numpy; floor = 5 `t.index_select(0, idx)` gathers over SB3's arrays "
          "(`t[idx]` on uint8 frames takes a slow torch advanced-indexing path, ~9 ms/batch here). "
          "Write s = time in the buffer's write calls for the whole fill (SB3: one `add` per vector step; "
          "cpprb: `add` per env and episode segment).", ""]
    L += w1_report(*w1)

    raw = cap * RAW_BYTES
    om = mem.get("ours", {}).get("held_bytes")
    rows = [["raw transition bytes", f"{raw / 1e6:,.0f} MB", f"{RAW_BYTES:,}", "1.00", "", "", ""]]
    for key, label in (("ours", "ours: make_replay_buffer(n_step=3)"),
                       ("sb3", "SB3 NStepReplayBuffer (optimize_memory_usage=False)")):
        m = mem.get(key, {})
        if "held_bytes" not in m:
            rows.append([label, m.get("error", "n/a"), "", "", "", "", "n/a"])
            continue
        h, pk = m["held_bytes"], m.get("peak_extra_bytes")
        rows.append([label, f"{h / 1e6:,.0f} MB", f"{h / cap:,.0f}", f"{h / raw:.2f}",
                     "n/a" if pk is None else f"{pk / 1e6:,.0f} MB", f"{m['fill_s']:.1f}",
                     "-" if key == "ours" else (f"{om / h:.2f}x" if om else "n/a")])
    L += [f"## 7. N-step memory held by a full buffer ({cap:,} transitions)", "",
          table(["impl", "RSS growth", "bytes/transition", "x raw", "peak RSS growth during fill", "fill s",
                 "ours/peer (bytes; <1 = ours smaller; target <= 0.55x)"], rows), "",
          f"One fresh subprocess per buffer (`nstep.py --probe KEY ROWS`), imports and first calls warmed up on a "
          f"small instance before the baseline; RSS after gc.collect()+malloc_trim(0). Raw = {cap:,} x "
          f"(2 frames + action + reward + 3 flags) = {RAW_BYTES:,} B/transition.", ""]

    if loader is None or "error" in loader:
        L += ["## 8. make_loader feeding a training loop", "",
              f"{'ours unavailable' if loader is None else loader['error']}", ""]
    else:
        base = loader[0]
        rows = [["train step alone (batch reused, no sampling)", f"{loader['train only']:,.0f}",
                 f"{1e3 / loader['train only']:.2f}", ""],
                ["make_loader(rb, num_workers=0) (sample in the loop)", f"{base:,.0f}", f"{1e3 / base:.2f}", "1.00x"],
                ["make_loader(rb, num_workers=2, fork)", f"{loader[2]:,.0f}", f"{1e3 / loader[2]:.2f}",
                 f"{loader[2] / base:.2f}x"],
                ["control: plain torch DataLoader, 2 fork workers, dict of the same tensors",
                 f"{loader['plain']:,.0f}", f"{1e3 / loader['plain']:.2f}", f"{loader['plain'] / base:.2f}x"]]
        L += ["## 8. make_loader feeding a training loop (ours n-step buffer, full)", "",
              table(["config", "training-loop batches/s", "ms/iteration", "vs num_workers=0"], rows), "",
              f"Training step = ~2 ms chain of 64x128 @ 128x128 matmuls + tanh (single thread) that reads the batch. "
              f"Median of {1 if quick else 2} rounds of {100 if quick else 150} batches after 10 warm-up batches "
              f"(worker start-up excluded); batches of {BATCH} n-step transitions (~11 MB); {os.cpu_count()} CPUs "
              "shared by the training process and the workers. The control isolates PyTorch's cost of moving "
              "each batch from a worker through shared memory (no replay buffer in the worker).", ""]
    return "\n".join(L)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="20k transitions, few repetitions")
    ap.add_argument("--out", default=None, help="also write the tables to this file")
    ap.add_argument("--append", action="store_true", help="append to --out instead of overwriting")
    ap.add_argument("--probe", nargs=2, metavar=("KEY", "ROWS"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.probe:
        probe_main(probe, *a.probe)
        return
    out = run(a.quick)
    print(out)
    write_tables(out, a.out, a.append)


if __name__ == "__main__":
    main()
