"""W3 HER benchmark: hindsight goal relabelling, side by side.

    .venv/bin/python benchmarks/her.py                  # full: capacity 1M transitions
    .venv/bin/python benchmarks/her.py --quick          # 100k transitions, few repetitions
    .venv/bin/python benchmarks/her.py --out FILE --append   # (what run.py does)
    .venv/bin/python benchmarks/her.py --probe KEY ROWS # one memory probe (subprocess)

Workload: dict observation {observation f32[25], achieved_goal f32[3], desired_goal f32[3]},
action f32[4], 8 envs in lockstep x 50-step episodes ending by time limit (done = truncated),
capacity 1,000,000 transitions, batch 1024, strategy "future", k = 4 (4/5 of a batch relabelled),
reward = -(||achieved - desired|| > 0.05). Step i of episode k of env e has
observation[:3] = (e, k, i) and achieved_goal = (e, k, i) (next: (e, k, i + 1)); the episode's
desired goal is (e, k, 50). Every goal therefore names the env, episode and step it came from,
and relabelled goals and rewards are checked exactly.

Buffers (all filled with the same episodes, each through its own API):

- ``ours``: ``make_her_replay_buffer(cap, reward_fn, strategy="future", num_goals=4)``,
  ``[8, T]`` TensorDicts in the TorchRL layout;
- ``sb3``: ``stable_baselines3.HerReplayBuffer(n_envs=8, n_sampled_goal=4, "future")`` with a
  minimal VecEnv stand-in providing ``env_method("compute_reward", ...)``; one ``add`` per step;
- ``torchrl``: ``torchrl.data.replay_buffers.HERReplayBuffer(reward_fn, her_ratio=0.8,
  strategy="future", storage=LazyTensorStorage(cap))``, fed ``[8, T]`` chunks flattened env by
  env (episodes stay contiguous); filled to ``cap - 4000`` rows (it crashes once full with extend);
- ``cpprb``: ``cpprb.HindsightReplayBuffer(cap, max_episode_len=50, strategy="future",
  additional_goals=4, prioritized=False)``: relabels at write time, storing k + 1 = 5 copies of
  every transition, so its ``cap`` rows hold ``cap / 5`` real transitions;
- ``floor``: per-field gather of the 10 fields plus the goal field at future steps from
  preallocated tensors, relabel and reward (what any HER sample must do at least).
"""
from __future__ import annotations

import threads  # noqa: F401 -- first: one thread per native pool (threads.py)

import argparse
import itertools
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
    run_probe,
    settle,
    status_of,
    table,
    write_tables,
)

OBS, GOAL, ACT = 25, 3, 4
ENVS = 8
EPISODE = 50
K = 4
BATCH = 1024
CHUNK = 500  # steps per [ENVS, CHUNK] bulk write (10 whole episodes)
THRESH = 0.05
# obs + next obs (observation, achieved, desired each) + action + reward (f32) + done/terminated/truncated
RAW_BYTES = 2 * (OBS + 2 * GOAL) * 4 + ACT * 4 + 4 + 3

log = logger('her')


def reward_t(a, d, info=None):
    return -(torch.linalg.norm(a - d, dim=-1) > THRESH).float()


def reward_np(a, d):
    return -(np.linalg.norm(a - d, axis=-1) > THRESH).astype(np.float32)


# --------------------------------------------------------------------- workload
def chunk(t0: int, T: int) -> dict[str, torch.Tensor]:
    """Steps ``t0 .. t0+T-1`` of the ``ENVS`` lockstep envs, ``[ENVS, T, ...]``."""
    e = torch.arange(ENVS).view(-1, 1).expand(-1, T)
    t = t0 + torch.arange(T).view(1, -1).expand(ENVS, -1)
    k, i = t // EPISODE, t % EPISODE
    eki = torch.stack([e, k, i], -1).float()
    nxt = torch.stack([e, k, i + 1], -1).float()
    desired = torch.stack([e, k, torch.full_like(i, EPISODE)], -1).float()
    g = torch.Generator().manual_seed(t0)
    noise = torch.randn(ENVS, T + 1, OBS - 3, generator=g)
    last = (i == EPISODE - 1).unsqueeze(-1)
    return {
        "observation": torch.cat([eki, noise[:, :-1]], -1), "achieved_goal": eki, "desired_goal": desired,
        "next_observation": torch.cat([nxt, noise[:, 1:]], -1), "next_achieved_goal": nxt,
        "action": torch.randn(ENVS, T, ACT, generator=g),
        "reward": reward_t(nxt, desired).unsqueeze(-1),
        "done": last, "truncated": last.clone(), "terminated": torch.zeros_like(last),
    }


def chunks(steps: int, t0: int = 0):
    for s in range(t0, t0 + steps, CHUNK):
        yield chunk(s, min(CHUNK, t0 + steps - s))


def to_td(c):
    from tensordict import TensorDict

    return TensorDict({
        "observation": c["observation"], "achieved_goal": c["achieved_goal"], "desired_goal": c["desired_goal"],
        "action": c["action"],
        "next": {"observation": c["next_observation"], "achieved_goal": c["next_achieved_goal"],
                 "desired_goal": c["desired_goal"].clone(), "reward": c["reward"], "done": c["done"],
                 "terminated": c["terminated"], "truncated": c["truncated"]},
    }, c["reward"].shape[:2])


def step_views(c):
    return [{k: v[:, t] for k, v in c.items()} for t in range(c["reward"].shape[1])]


# --------------------------------------------------------------------- adapters
class Impl:
    key = label = ""
    write_s = 0.0
    rows_per_transition = 1  # cpprb stores k + 1 copies

    def fill(self, steps: int) -> None:
        for c in chunks(steps):
            t0 = time.perf_counter()
            self.fill_chunk(c)
            self.write_s += time.perf_counter() - t0


class Ours(Impl):
    key, label = "ours", "ours: make_her_replay_buffer(future, k=4)"

    def build(self, cap):
        from torchrl_ext import make_her_replay_buffer

        self.rb = make_her_replay_buffer(cap, reward_t, strategy="future", num_goals=K, batch_size=BATCH, seed=0)

    def fill_chunk(self, c):
        self.rb.extend(to_td(c))

    def prep_steps(self, c):
        td = to_td(c)
        return [td[:, t] for t in range(td.shape[1])]  # td[8]

    def write(self, s):
        self.rb.extend(s)

    def sample(self):
        return self.rb.sample()

    def decode(self, s):  # obs [B, 3] (e, k, i), goal, next goal, reward [B]
        return {"obs": s["observation"][:, :3], "goal": s["desired_goal"], "next_goal": s["next", "desired_goal"],
                "next_ag": s["next", "achieved_goal"], "reward": s["next", "reward"].view(-1)}


class _GoalVecEnv:
    """What SB3's HerReplayBuffer needs of its env: ``env_method("compute_reward", ...)``."""

    num_envs = ENVS

    def env_method(self, name, achieved, desired, infos, indices=None):
        assert name == "compute_reward"
        return [reward_np(achieved, desired)]


class SB3(Impl):
    key, label = "sb3", "SB3 HerReplayBuffer(future, k=4, n_envs=8)"

    def build(self, cap):
        import warnings

        from gymnasium import spaces
        from stable_baselines3 import HerReplayBuffer

        np.random.seed(0)
        box = lambda n: spaces.Box(-np.inf, np.inf, (n,), np.float32)  # noqa: E731
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.rb = HerReplayBuffer(
                cap, spaces.Dict({"observation": box(OBS), "achieved_goal": box(GOAL), "desired_goal": box(GOAL)}),
                spaces.Box(-1, 1, (ACT,), np.float32), env=_GoalVecEnv(), device="cpu", n_envs=ENVS,
                optimize_memory_usage=False, handle_timeout_termination=True, n_sampled_goal=K,
                goal_selection_strategy="future")

    def prep_steps(self, c):
        out = []
        for s in step_views({k: v.numpy() for k, v in c.items()}):
            obs = {"observation": s["observation"], "achieved_goal": s["achieved_goal"],
                   "desired_goal": s["desired_goal"]}
            nxt = {"observation": s["next_observation"], "achieved_goal": s["next_achieved_goal"],
                   "desired_goal": s["desired_goal"]}
            trunc = s["truncated"][:, 0]
            infos = [{"TimeLimit.truncated": bool(x)} for x in trunc] if trunc.any() else [{} for _ in range(ENVS)]
            out.append((obs, nxt, s["action"], s["reward"][:, 0], s["done"][:, 0], infos))
        return out

    def fill_chunk(self, c):
        for s in self.prep_steps(c):
            self.rb.add(*s)

    def write(self, s):
        self.rb.add(*s)

    def sample(self):
        return self.rb.sample(BATCH)

    def decode(self, s):
        o, n = s.observations, s.next_observations
        return {"obs": o["observation"][:, :3], "goal": o["desired_goal"], "next_goal": n["desired_goal"],
                "next_ag": n["achieved_goal"], "reward": s.rewards.view(-1)}


class TorchRL(Impl):
    key, label = "torchrl", "TorchRL HERReplayBuffer(future, her_ratio=0.8)"
    fill_margin = 4000  # stay below capacity: extend crashes once the storage is full

    def build(self, cap):
        from torchrl.data import LazyTensorStorage
        from torchrl.data.replay_buffers import HERReplayBuffer

        def rfn(td):
            return reward_t(td["next", "achieved_goal"], td["desired_goal"]).unsqueeze(-1)

        torch.manual_seed(0)
        self.rb = HERReplayBuffer(rfn, her_ratio=K / (K + 1), strategy="future",
                                  storage=LazyTensorStorage(cap), batch_size=BATCH)

    def fill(self, steps):
        cap = self.rb._storage.max_size
        super().fill(min(steps, (cap - min(self.fill_margin, cap // 5)) // ENVS))

    def fill_chunk(self, c):
        self.rb.extend(to_td(c).reshape(-1))  # env-major: each env's whole episodes stay contiguous

    def sample(self):
        return self.rb.sample()

    decode = Ours.decode


class Cpprb(Impl):
    key, label = "cpprb", "cpprb HindsightReplayBuffer(future, k=4)"
    rows_per_transition = K + 1

    def build(self, cap):
        import cpprb

        np.random.seed(0)
        self.rb = cpprb.HindsightReplayBuffer(
            cap, {"obs": {"shape": OBS + GOAL}, "act": {"shape": ACT}, "next_obs": {"shape": OBS + GOAL}},
            max_episode_len=EPISODE, reward_func=lambda s, a, g: reward_np(s[:, OBS:], g),
            goal_func=lambda s: s[:, OBS:], goal_shape=(GOAL,), strategy="future", additional_goals=K,
            prioritized=False)
        self.rb.rng = np.random.default_rng(0)

    def fill(self, steps):
        # write-time relabelling: k + 1 rows per transition, so cap / (k + 1) transitions fill it
        cap = self.rb.rb.get_buffer_size()
        super().fill(min(steps, cap // self.rows_per_transition // ENVS))

    def fill_chunk(self, c):
        obs = torch.cat([c["observation"], c["achieved_goal"]], -1).numpy()
        nxt = torch.cat([c["next_observation"], c["next_achieved_goal"]], -1).numpy()
        act, des = c["action"].numpy(), c["desired_goal"].numpy()
        T = obs.shape[1]
        for e in range(ENVS):  # one episode stream: env by env, episode by episode
            for a in range(0, T, EPISODE):
                b = a + EPISODE
                self.rb.add(obs=obs[e, a:b], act=act[e, a:b], next_obs=nxt[e, a:b])
                self.rb.on_episode_end(des[e, a])

    def sample(self):
        return self.rb.sample(BATCH)

    def decode(self, s):
        g = torch.from_numpy(s["goal"])
        return {"obs": torch.from_numpy(s["obs"][:, :3]), "goal": g, "next_goal": g,
                "next_ag": torch.from_numpy(s["next_obs"][:, OBS:]), "reward": torch.from_numpy(s["rew"]).view(-1)}


class Floor(Impl):
    key, label = "floor", "floor: per-field gather + future goal + reward"

    def build(self, cap):
        f = lambda *s: torch.randn(cap, *s)  # noqa: E731
        self.f = {"observation": f(OBS), "achieved_goal": f(GOAL), "desired_goal": f(GOAL),
                  "next_observation": f(OBS), "next_achieved_goal": f(GOAL), "next_desired_goal": f(GOAL),
                  "action": f(ACT), "reward": f(1), "done": torch.zeros(cap, 3, dtype=torch.bool)}
        self.cap = cap
        self.g = torch.Generator().manual_seed(0)

    def fill(self, steps):
        pass

    def sample(self):
        idx = torch.randint(self.cap, (BATCH,), generator=self.g)
        out = {k: v.index_select(0, idx) for k, v in self.f.items()}
        nv = BATCH * K // (K + 1)
        vi = idx[BATCH - nv:]
        step = vi % EPISODE  # flat episodes of EPISODE contiguous rows
        off = (torch.rand(nv, generator=self.g) * (EPISODE - step)).long()
        goal = self.f["next_achieved_goal"].index_select(0, vi + off)
        for k in ("desired_goal", "next_desired_goal"):
            out[k][BATCH - nv:] = goal
        out["reward"][BATCH - nv:, 0] = reward_t(out["next_achieved_goal"][BATCH - nv:], goal)
        return out


IMPLS = {c.key: c for c in (Ours, SB3, TorchRL, Cpprb)}


# --------------------------------------------------------------------- checks
def check(impl, batches) -> dict:
    """Relabelled goals: same env and episode, achieved at a later-or-same step; rewards exact."""
    bad = {"goal": 0, "next_goal": 0, "reward": 0, "real": 0}
    total = relabelled = 0
    for s in batches:
        d = impl.decode(s)
        obs, goal = d["obs"].long(), d["goal"]
        e, k, i = obs.unbind(-1)
        ge, gk, gj = goal.long().unbind(-1)
        if impl.key == "torchrl":
            # its goals are the root achieved_goal of step j >= i (the state before step j's action)
            ok = (ge == e) & (gk == k) & (gj >= i) & (gj <= EPISODE - 1)
        else:  # ("next", achieved_goal) of step j >= i
            ok = (ge == e) & (gk == k) & (gj >= i + 1) & (gj <= EPISODE)
        ok &= (goal == goal.round()).all(-1)
        want_r = reward_t(d["next_ag"], goal)
        orig = gj == EPISODE  # the episode's own desired goal (ambiguous with the final step's goal)
        n = obs.shape[0]
        if impl.key == "cpprb":  # real and relabelled copies are mixed, not ordered
            virt = torch.ones(n, dtype=torch.bool)
        else:
            nv = int(n * K / (K + 1))
            virt = torch.zeros(n, dtype=torch.bool)
            if impl.key == "torchrl":
                virt[:nv] = True  # TorchRL relabels the first rows
            else:
                virt[n - nv:] = True  # ours, SB3: real rows first
            real = ~virt
            bad["real"] += int((real & ~(orig & (ge == e) & (gk == k))).sum())
        bad["goal"] += int((virt & ~ok).sum())
        bad["next_goal"] += int((virt & (d["next_goal"] != goal).any(-1)).sum())
        bad["reward"] += int((virt & (d["reward"] != want_r)).sum())
        total += n
        relabelled += int((virt & ~orig).sum())
    return {"total": total, "relabelled": relabelled, **bad}


def torchrl_full_crash() -> str:
    """Does TorchRL's HERReplayBuffer sample once its storage is full (written with extend)?"""
    try:
        from torchrl.data import LazyTensorStorage
        from torchrl.data.replay_buffers import HERReplayBuffer

        rb = HERReplayBuffer(lambda td: reward_t(td["next", "achieved_goal"], td["desired_goal"]).unsqueeze(-1),
                             her_ratio=0.8, storage=LazyTensorStorage(2_000), batch_size=64)
        for c in chunks(600, 0):  # 4,800 rows into 2,000: wraps
            rb.extend(to_td(c).reshape(-1))
            rb.sample()
        return "samples after wrapping (no crash)"
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {str(e).splitlines()[0][:90] if str(e) else ''}"


# ---------------------------------------------------------------------- memory
def probe(key: str, rows: int) -> dict:
    torch.set_num_threads(1)
    steps = rows // ENVS
    warm = IMPLS[key]()
    warm.build(ENVS * 5 * EPISODE * 2)
    warm.fill(5 * EPISODE)
    warm.sample()
    del warm
    impl = IMPLS[key]()

    def build_and_fill():
        impl.build(rows)
        impl.fill(steps)

    return {"key": key, "rows": rows, **measured_fill(build_and_fill)}


def mem_probe(key: str, rows: int) -> dict:
    return run_probe([sys.executable, os.path.abspath(__file__), "--probe", key, str(rows)], key, 600)


# ---------------------------------------------------------------------- run
def run(quick: bool) -> str:
    torch.set_num_threads(1)
    t_start = time.perf_counter()
    cap = 100_000 if quick else 1_000_000
    steps = cap // ENVS
    s_reps, s_inner = (20, 3) if quick else (100, 5)
    w_reps, w_inner = (40, 20) if quick else (200, 20)
    l_reps, l_inner = (20, 3) if quick else (80, 5)

    mem = {}
    for key in IMPLS:
        log(f"memory probe {key} @ {cap:,}")
        mem[key] = mem_probe(key, cap)

    impls, status = {}, {}
    for cls in (*IMPLS.values(), Floor):
        impl = cls()
        log(f"fill {impl.key} @ {cap:,}")
        try:
            impl.build(cap)
            impl.fill(steps)
            impl.sample()
            impls[impl.key], status[impl.key] = impl, "ok"
        except Exception as e:  # noqa: BLE001 -- report, keep going
            status[impl.key] = status_of(impl.key, e)
            log(f"  {impl.key}: {e!r}")
    settle()

    checks = {}
    for k, impl in impls.items():
        if k != "floor":
            try:
                checks[k] = check(impl, [impl.sample() for _ in range(5 if quick else 20)])
            except Exception as e:  # noqa: BLE001
                checks[k] = {"error": status_of(k, e)}
    log("TorchRL HERReplayBuffer after wrap (small buffer)")
    crash = torchrl_full_crash()

    log(f"sampling: {s_reps} interleaved blocks x {s_inner} batches")
    samp = interleaved({k: i.sample for k, i in impls.items()}, s_reps, s_inner)

    # write cost and add+sample loop: ours vs SB3, one [8]-env step continuing the stream
    fresh = chunk(steps, 2000)
    writers, loops = {}, {}
    for k in ("ours", "sb3"):
        if k in impls:
            it = itertools.cycle(impls[k].prep_steps(fresh))
            w = impls[k].write
            writers[k] = (lambda w, it: (lambda: w(next(it))))(w, it)
            smp = impls[k].sample
            loops[k] = (lambda w, it, smp: (lambda: (w(next(it)), smp())))(w, it, smp)
    log(f"writing: {w_reps} interleaved blocks x {w_inner} steps")
    wr = interleaved(writers, w_reps, w_inner)
    log(f"add+sample loop: {l_reps} interleaved blocks x {l_inner}")
    lp = interleaved(loops, l_reps, l_inner)
    fills = {k: i.write_s for k, i in impls.items()}
    impls.clear()
    settle()
    elapsed = time.perf_counter() - t_start
    return report(quick, cap, status, samp, checks, crash, wr, lp, fills, mem, elapsed)


def report(quick, cap, status, samp, checks, crash, wr, lp, fills, mem, elapsed) -> str:
    labels = {c.key: c.label for c in (*IMPLS.values(), Floor)}
    L = [
        f"# W3 HER benchmark ({'quick' if quick else 'full'})", "",
        f"- dict obs {{observation f32[{OBS}], achieved_goal f32[{GOAL}], desired_goal f32[{GOAL}]}}, action "
        f"f32[{ACT}]; {ENVS} lockstep envs x {EPISODE}-step episodes (time limit); capacity {cap:,}; batch {BATCH}; "
        f"strategy future, k={K}; reward -(||a - d|| > {THRESH})",
        f"- {machine_line()}; wall time {elapsed:.0f} s; "
        f"peak RSS {hwm_bytes() / 2**30:.1f} GiB", "",
    ]
    o = samp.get("ours")
    ours_rate = BATCH / o["median"] if o else None
    rows = []
    for key in (*IMPLS, "floor"):
        s, c = samp.get(key), checks.get(key, {})
        if key == "floor":
            chk = "-"
        elif "total" not in c:
            chk = c.get("error", "n/a")
        else:
            wrong = {n: c[n] for n in ("goal", "next_goal", "reward", "real") if c[n]}
            chk = f"{c['relabelled']:,} relabelled / {c['total']:,}: " + (
                "all correct" if not wrong else "wrong " + ", ".join(f"{n} {v}" for n, v in wrong.items()))
        if not s:
            rows.append([labels[key], status.get(key, "n/a"), "", "", "n/a", chk, ""])
            continue
        rate = BATCH / s["median"]
        rows.append([labels[key], f"{rate:,.0f}", f"{s['median'] * 1e6:,.0f}",
                     f"{s['p25'] * 1e6:,.0f}-{s['p75'] * 1e6:,.0f}",
                     "-" if key == "ours" else (f"{ours_rate / rate:.2f}x" if ours_rate else "n/a"), chk,
                     "" if key == "floor" else f"{fills.get(key, 0):.1f}"])
    tr_rows = (cap - TorchRL.fill_margin) // ENVS * ENVS
    L += [f"## 9. HER sample rate (W3, batch {BATCH}, k={K} future)", "",
          table(["impl", "samples/s", "us/batch (median)", "us/batch p25-p75", "ours/peer (rate; >1 = ours faster)",
                 "relabel check (20 batches)", "fill s"], rows), "",
          f"Median over {o['n'] if o else 'n/a'} interleaved blocks. Buffers hold {cap:,} rows: ours and SB3 "
          f"{cap:,} transitions (full); TorchRL {tr_rows:,} (kept below capacity: once full, sampling after "
          f"`extend` fails: {crash}); cpprb relabels at write time and stores k+1 = {K + 1} copies per transition, "
          f"so its {cap:,} rows hold {cap // (K + 1):,} transitions. Check: relabelled goals must be an achieved "
          "goal of the same env and episode at the same or a later step (ours, SB3, cpprb: `(\"next\", achieved_goal)` "
          "of step j >= i; TorchRL uses the root `achieved_goal` of step j >= i, its documented convention), with "
          "`(\"next\", desired_goal)` equal and the reward recomputed exactly; real rows must keep the episode's "
          "own goal. Relabelled count excludes rows whose drawn goal equals the original one. cpprb mixes real "
          "and relabelled copies, so every row is checked as relabelled. Floor: 9 `index_select` gathers + goal "
          "gather at future rows + reward over preallocated tensors. Fill s: time in the buffer's write calls "
          "(SB3: one `add` per step; cpprb: `add` + `on_episode_end` per episode).", ""]

    rows = []
    ow, ol = wr.get("ours"), lp.get("ours")
    for key in ("ours", "sb3"):
        w, l_ = wr.get(key), lp.get(key)
        if not w:
            rows.append([labels[key], status.get(key, "n/a"), "", "", "", "n/a"])
            continue
        rows.append([labels[key], f"{w['median'] / ENVS * 1e6:.2f}", f"{w['median'] * 1e6:.1f}",
                     "-" if key == "ours" else f"{ow['median'] / w['median']:.2f}x" if ow else "n/a",
                     f"{l_['median'] * 1e3:.2f}",
                     "-" if key == "ours" else f"{ol['median'] / l_['median']:.2f}x" if ol else "n/a"])
    L += [f"## 10. HER write cost and add+sample loop (one {ENVS}-env step into the full buffer)", "",
          table(["impl", "us/transition", "us/step (median)", "ours/peer (cost; <1 = ours cheaper)",
                 f"ms per add-step + sample({BATCH})", "ours/peer (loop time)"], rows), "",
          f"Ours `rb.extend(td[{ENVS}])` (TorchRL layout), SB3 `add` with n_envs={ENVS}; 2,000 pre-built steps "
          f"continuing the stream (40 episodes), cycled. Loop = one step then one batch of {BATCH}. "
          "TorchRL (fails once full) and cpprb (episode-at-a-time writes) are not in this table.", ""]

    raw = cap * RAW_BYTES
    om = mem.get("ours", {}).get("held_bytes")
    rows = [["raw transition bytes", f"{raw / 1e6:,.0f} MB", f"{RAW_BYTES}", "1.00", "", "", ""]]
    for key in IMPLS:
        m = mem.get(key, {})
        if "held_bytes" not in m:
            rows.append([labels[key], m.get("error", "n/a"), "", "", "", "", "n/a"])
            continue
        h, pk = m["held_bytes"], m.get("peak_extra_bytes")
        rows.append([labels[key], f"{h / 1e6:,.0f} MB", f"{h / cap:,.0f}", f"{h / raw:.2f}",
                     "n/a" if pk is None else f"{pk / 1e6:,.0f} MB", f"{m['fill_s']:.1f}",
                     "-" if key == "ours" else (f"{om / h:.2f}x" if om else "n/a")])
    L += [f"## 11. HER memory held by a full buffer ({cap:,} rows)", "",
          table(["impl", "RSS growth", "bytes/row", "x raw", "peak RSS growth during fill", "fill s",
                 "ours/peer (bytes; <1 = ours smaller)"], rows), "",
          f"One fresh subprocess per buffer (`her.py --probe KEY ROWS`), warmed up on a small instance; RSS after "
          f"gc.collect()+malloc_trim(0). Raw = {cap:,} x (2 x (25+3+3) obs + 4 action + 1 reward) x 4 B + 3 flag B "
          f"= {RAW_BYTES} B/transition; target for ours <= 1.1x raw. TorchRL is filled to {tr_rows:,} rows; cpprb's "
          f"{cap:,} rows are {cap // (K + 1):,} transitions x {K + 1} copies (plus goal and reward per row). "
          "SB3 also keeps a per-row `infos` object array of dicts and int64 episode start/length arrays.", ""]
    return "\n".join(L)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100k transitions, few repetitions")
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
