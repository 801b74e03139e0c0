"""W4 sequence benchmark: fixed-length sequences inside episodes, with writes in between.

    .venv/bin/python benchmarks/sequence.py               # full: 1M rows; scale 10k / 1M / 10M
    .venv/bin/python benchmarks/sequence.py --quick       # 100k rows, few repetitions, no 10M (< 1 min)
    .venv/bin/python benchmarks/sequence.py --no-scale    # full run without the 10M-row buffer
    .venv/bin/python benchmarks/sequence.py --out FILE --append   # (what run.py does)

Workload: observation f32[17], action f32[6], ("next", "reward") f32[1],
("next", "done" / "terminated" / "truncated") bool[1] (TorchRL layout); 16 envs
step in lockstep through 1000-step episodes that end by time limit, staggered
by 62 steps per env so the envs' episode ends do not line up; capacity 1M rows,
filled completely; batches of 64 sequences x 50 steps. Observation entries 0-2
carry (env, episode, step), so every sampled sequence is checked: 50 consecutive
steps of one episode of one env, each with its true next observation.

Buffers (each filled with the same episodes in bulk ``[16, 1000]`` chunks, then
written one vector-env step ``[16]`` at a time while timed):

- ``ours``: ``make_replay_buffer(cap, batch_size=64, sampler=SequenceSampler(50))``
  (a ``TransitionReplayBuffer`` over ``TransitionStorage`` + ``TransitionWriter``);
  ``rb.sample()`` returns a ``[64, 50]`` TensorDict;
- ``torchrl*``: ``TensorDictReplayBuffer(storage=LazyTensorStorage(cap),
  sampler=SliceSampler(slice_len=50, ...), batch_size=64 * 50)`` fed the same data
  flattened env-major (``td.reshape(-1)``) with ``("collector", "traj_ids")`` (one id
  per env and episode) and ``"step_count"``; sampler variants: ``traj_key``,
  ``traj_key`` + ``cache_values=True``, ``end_key=("next", "done")`` and
  ``fragmented=True`` (trajectory ids + step counts, TorchRL's mode for interleaved
  writes);
- episodic facades (``torchrl_ext.facades.episodic``, the maltemosbach/buffers API):
  ``RingBufferDataset`` / ``IndividualFileDataset`` + ``EpisodeReplayBuffer``, filled
  with whole episodes through ``dataset.add_episode`` (rows read "not available yet"
  while the module does not exist).

Measured: time per (one ``[16]`` extend + one sample) and per sample alone, all
buffers interleaved; the sequence check; our sample time at 10k, 1M and 10M rows.
"""
from __future__ import annotations

import threads  # noqa: F401 -- first: one thread per native pool (threads.py)

import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if __name__ == "__main__":
    sys.path[:0] = [HERE, os.path.dirname(HERE)]  # benchmarks/, repo root
os.environ.setdefault("RL_LOGGING_LEVEL", "WARNING")

import torch  # noqa: E402

from measure import (  # noqa: E402
    hwm_bytes,
    interleaved,
    logger,
    machine_line,
    settle,
    status_of,
    table,
    write_tables,
)

OBS, ACT = 17, 6
ENVS = 16
EPISODE = 1000
STAGGER = 62  # env e starts at step e * STAGGER of its first episode
SEQ = 50
BATCH = 64  # sequences per batch
CHUNK = 1000  # steps per bulk [ENVS, CHUNK] write
CHECK_BATCHES = 16  # 16 x 64 = 1,024 sequences checked per buffer
SLOW_S = 0.02  # calls slower than this are timed in their own, shorter, interleaved group

log = logger('seq')
OURS = ("ours", "ring", "files")  # keys of our buffers (status_of)


# --------------------------------------------------------------------- workload
def _codes(e, k, i):
    return torch.stack([e, k, i], -1).to(torch.float32)


def _noise(e, p):
    """Observation entries 3.. of env ``e`` at life position ``p``: cheap, deterministic."""
    j = torch.arange(OBS - 3, dtype=torch.float32)
    return torch.sin((p % 9973).unsqueeze(-1) * 0.37 + e.unsqueeze(-1) * 1.3 + j * 0.71)


def chunk(t0: int, T: int) -> dict[str, torch.Tensor]:
    """Steps ``t0 .. t0+T-1`` of every env, ``[ENVS, T, ...]``.

    Step ``t`` of env ``e`` is life position ``p = e * STAGGER + t``: episode
    ``k = p // EPISODE``, step ``i = p % EPISODE``. ``observation[:3] = (e, k, i)``;
    the next observation is ``(e, k, i + 1)`` (at an episode's last step the final
    observation, the next step being ``(e, k + 1, 0)``).
    """
    e = torch.arange(ENVS).view(-1, 1).expand(-1, T)
    p = e * STAGGER + t0 + torch.arange(T)
    k, i = p // EPISODE, p % EPISODE
    g = torch.Generator().manual_seed(t0)
    last = (i == EPISODE - 1).unsqueeze(-1)
    return {
        "obs": torch.cat([_codes(e, k, i), _noise(e, p)], -1),
        "next_obs": torch.cat([_codes(e, k, i + 1), _noise(e, p + 1)], -1),
        "action": torch.rand(ENVS, T, ACT, generator=g) * 2 - 1,
        "reward": ((e * 31 + p * 7) % 101).to(torch.float32).unsqueeze(-1) / 100,
        "done": last, "terminated": torch.zeros_like(last), "truncated": last.clone(),
        "traj": k * ENVS + e,  # one id per env and episode
        "step": i,
    }


def chunks(t0: int, steps: int):
    for s in range(t0, t0 + steps, CHUNK):
        yield chunk(s, min(CHUNK, t0 + steps - s))


def to_td(c, ids: bool = False):
    from tensordict import TensorDict

    td = TensorDict({
        "observation": c["obs"], "action": c["action"],
        "next": {"observation": c["next_obs"], "reward": c["reward"], "done": c["done"],
                 "terminated": c["terminated"], "truncated": c["truncated"]},
    }, c["reward"].shape[:-1])
    if ids:  # what a TorchRL collector (+ StepCounter) writes
        td["collector", "traj_ids"] = c["traj"]
        td["step_count"] = c["step"]
    return td


# --------------------------------------------------------------------- adapters
class Impl:
    key = label = ""
    fill_s = 0.0
    check_next = True  # the sample carries ("next", "observation")

    def fill(self, t0: int, steps: int) -> None:
        for c in chunks(t0, steps):
            start = time.perf_counter()
            self.write_chunk(c)
            self.fill_s += time.perf_counter() - start

    def prep_steps(self, c) -> list:
        """Per-step write arguments (one ``[ENVS]`` vector-env step each), built untimed."""
        td = self.chunk_td(c)
        return [td[:, t].clone() for t in range(td.shape[1])]

    def write(self, s) -> None:
        self.rb.extend(s)

    def sample(self):
        return self.rb.sample()

    def codes(self, s) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(e, k, i)`` of every sampled step and of its next observation, ``[B, L, 3]``."""
        obs, nxt = s["observation"], s["next", "observation"]
        return obs[..., :3].long(), nxt[..., :3].long()


class Ours(Impl):
    key, label = "ours", "ours: make_replay_buffer(sampler=SequenceSampler(50))"

    def build(self, cap: int) -> None:
        from torchrl_ext import make_replay_buffer
        from torchrl_ext.samplers import SequenceSampler

        self.rb = make_replay_buffer(cap, batch_size=BATCH, sampler=SequenceSampler(SEQ), seed=0)

    def chunk_td(self, c):
        return to_td(c)

    def write_chunk(self, c) -> None:
        self.rb.extend(to_td(c))  # collector-shaped [16, T], time last


class TorchRLSlice(Impl):
    key, label = "torchrl", "TorchRL SliceSampler(traj_key)"
    options: dict = {"traj_key": ("collector", "traj_ids")}

    def build(self, cap: int) -> None:
        from torchrl.data import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer

        torch.manual_seed(0)
        self.rb = TensorDictReplayBuffer(storage=LazyTensorStorage(cap),
                                         sampler=SliceSampler(slice_len=SEQ, **self.options),
                                         batch_size=BATCH * SEQ)

    def chunk_td(self, c):
        return to_td(c, ids=True)

    def write_chunk(self, c) -> None:
        self.rb.extend(to_td(c, ids=True).reshape(-1))  # env-major: each env's segment contiguous

    def codes(self, s):
        obs, nxt = super().codes(s)  # flat [B * L]: SliceSampler returns slices back to back
        return obs.view(-1, SEQ, 3), nxt.view(-1, SEQ, 3)


class TorchRLCached(TorchRLSlice):
    key, label = "torchrl_cache", "TorchRL SliceSampler(traj_key, cache_values=True)"
    options = {"traj_key": ("collector", "traj_ids"), "cache_values": True}


class TorchRLEndKey(TorchRLSlice):
    key, label = "torchrl_end", "TorchRL SliceSampler(end_key=(next, done))"
    options = {"end_key": ("next", "done")}


class TorchRLFragmented(TorchRLSlice):
    key, label = "torchrl_frag", "TorchRL SliceSampler(traj_key, step_key, fragmented=True)"
    options = {"traj_key": ("collector", "traj_ids"), "step_key": "step_count", "fragmented": True}


IMPLS = {c.key: c for c in (Ours, TorchRLSlice, TorchRLCached, TorchRLEndKey, TorchRLFragmented)}


# ---------------------------------------------------------------------- checks
def check(impl: Impl, batches: list, fresh_from: int) -> dict:
    """Every sequence: one env, one episode, ``SEQ`` consecutive steps, true next observations.

    ``fresh``: sequences that reach a step written at or after step ``fresh_from``
    (the one-step writes of the timed loop).
    """
    out = {"total": 0, "wrong": 0, "env": 0, "episode": 0, "steps": 0, "next": 0, "fresh": 0}
    for s in batches:
        c, n = impl.codes(s)
        e, k, i = c.unbind(-1)
        mixed_env = (e != e[:, :1]).any(1)
        mixed_ep = (k != k[:, :1]).any(1)
        gaps = (i != i[:, :1] + torch.arange(c.shape[1])).any(1)
        wrong_next = torch.zeros_like(gaps)
        if impl.check_next and n is not None:
            wrong_next = (n != torch.stack([e, k, i + 1], -1)).any(-1).any(1)
        bad = mixed_env | mixed_ep | gaps | wrong_next | (c.shape[1] != SEQ)
        t_last = k[:, -1] * EPISODE + i[:, -1] - e[:, -1] * STAGGER  # step time of the last step
        out["total"] += c.shape[0]
        out["wrong"] += int(bad.sum())
        out["env"] += int(mixed_env.sum())
        out["episode"] += int((mixed_ep & ~mixed_env).sum())
        out["steps"] += int((gaps & ~mixed_ep & ~mixed_env).sum())
        out["next"] += int((wrong_next & ~gaps & ~mixed_ep & ~mixed_env).sum())
        out["fresh"] += int((t_last >= fresh_from).sum())
    return out


def check_text(c: dict) -> str:
    if "total" not in c:
        return c.get("error", "n/a")
    txt = f"{c['total'] - c['wrong']:,}/{c['total']:,} ok"
    if c["wrong"]:
        kinds = {"env": "mixed envs", "episode": "crossed an episode end", "steps": "non-consecutive steps",
                 "next": "wrong next obs"}
        txt += " (" + ", ".join(f"{c[n]} {w}" for n, w in kinds.items() if c[n]) + ")"
    if "fresh" in c:
        txt += f"; {c['fresh']} reach the one-step writes"
    return txt


# ------------------------------------------------------- episodic facades (later rows)
def episode(j: int) -> dict[str, torch.Tensor]:
    """Whole episode ``j`` (env ``j % ENVS``, episode ``j // ENVS``): obs codes (e, k, i)."""
    e, k = torch.tensor(j % ENVS), torch.tensor(j // ENVS)
    i = torch.arange(EPISODE)
    g = torch.Generator().manual_seed(10_000 + j)
    return {
        "obs": torch.cat([_codes(e.expand(EPISODE), k.expand(EPISODE), i), _noise(e.expand(EPISODE), i)], -1),
        "action": torch.rand(EPISODE, ACT, generator=g) * 2 - 1,
        "reward": torch.rand(EPISODE, 1, generator=g),
    }


class Episodic(Impl):
    """``EpisodeReplayBuffer`` over one of the facade's datasets, filled episode by episode."""

    dataset_cls = ""
    check_next = False  # a step dict with no next observation

    def __init__(self, workdir: str) -> None:
        self.workdir = workdir

    def make_dataset(self, capacity: int):
        from torchrl_ext.facades import episodic

        return getattr(episodic, self.dataset_cls)(capacity)

    def build(self, capacity: int) -> None:
        from torchrl_ext.facades.episodic import EpisodeReplayBuffer

        self.dataset = self.make_dataset(capacity)
        self.rb = EpisodeReplayBuffer(self.dataset, batch_size=BATCH, sequence_length=SEQ)
        self.next_env_step = 0

    def fill_episodes(self, n: int) -> None:
        for j in range(n):
            ep = episode(j)
            start = time.perf_counter()
            self.dataset.add_episode(ep)
            self.fill_s += time.perf_counter() - start

    def prep_steps(self, c) -> list:
        # vectorised add_step: done[b] marks the first step of a new episode of env b
        # (the original's rule)
        steps = []
        for t in range(c["obs"].shape[1]):
            steps.append(({"obs": c["obs"][:, t].clone(), "action": c["action"][:, t].clone(),
                           "reward": c["reward"][:, t].clone()}, c["step"][:, t] == 0))
        return steps

    def write(self, s) -> None:
        self.rb.add_step(*s)

    def sample(self):
        return self.rb.sample()

    def codes(self, s):
        return s["obs"][..., :3].long(), None


class EpisodicRing(Episodic):
    key, label, dataset_cls = "ring", "ours: facades.episodic RingBufferDataset", "RingBufferDataset"


class EpisodicFiles(Episodic):
    key, label, dataset_cls = "files", "ours: facades.episodic IndividualFileDataset", "IndividualFileDataset"

    def make_dataset(self, capacity: int):
        from torchrl_ext.facades.episodic import IndividualFileDataset

        return IndividualFileDataset(capacity, directory=os.path.join(self.workdir, "episodes"))


EPISODIC = (EpisodicRing, EpisodicFiles)


def episodic_buffers(n_episodes: int, workdir: str) -> tuple[dict[str, Impl], dict[str, str]]:
    """Build and fill the facade buffers; ``({key: impl}, {key: status})``.

    If ``torchrl_ext.facades.episodic`` does not import, its rows read
    "unavailable (import failed)" and everything else runs.
    """
    try:
        import torchrl_ext.facades.episodic  # noqa: F401
    except ImportError:
        return {}, {cls.key: "unavailable (import failed)" for cls in EPISODIC}
    impls, status = {}, {}
    for cls in EPISODIC:
        impl = cls(workdir)
        log(f"fill {impl.key}: {n_episodes:,} episodes x {EPISODE} steps")
        try:
            impl.build(n_episodes * EPISODE)
            impl.fill_episodes(n_episodes)
            impl.sample()
            impls[impl.key], status[impl.key] = impl, "ok"
        except Exception as e:  # noqa: BLE001 -- report, keep going
            status[impl.key] = status_of(impl.key, e, OURS)
            log(f"  {impl.key}: {e!r}")
    return impls, status


# ---------------------------------------------------------------------- timing
def timed(fns: dict, reps: int, inner: int, slow_reps: int, slow_inner: int) -> dict[str, dict]:
    """``interleaved`` over ``fns``, calls slower than ``SLOW_S`` in their own shorter group."""
    cost = {}
    for name, f in fns.items():
        f()  # warm
        start = time.perf_counter()
        f()
        cost[name] = time.perf_counter() - start
    fast = {n: f for n, f in fns.items() if cost[n] < SLOW_S}
    slow = {n: f for n, f in fns.items() if cost[n] >= SLOW_S}
    out = interleaved(fast, reps, inner) if fast else {}
    if slow:
        log(f"  slow group ({', '.join(slow)}): {slow_reps} blocks x {slow_inner}")
        out |= interleaved(slow, slow_reps, slow_inner, warmup=1)
    return out


def scale_buffers(sizes: list[int], ours_at: dict[int, Impl]) -> tuple[dict, dict]:
    """Ours at every size (``ours_at``: buffers already built); TorchRL's traj_key sampler
    at the smallest size only, as a reference. ``({(key, rows): sample}, {(key, rows): status})``."""
    fns, status = {}, {}
    todo = [(Ours, n) for n in sizes] + [(TorchRLSlice, sizes[0])]
    for cls, n in todo:
        name = (cls.key, n)
        if cls is Ours and ours_at.get(n) is not None:
            fns[name] = ours_at[n].sample
            continue
        log(f"scale fill {cls.key} @ {n:,}")
        try:
            impl = cls()
            impl.build(n)
            impl.fill(0, n // ENVS)
            impl.sample()
            fns[name] = impl.sample
        except Exception as e:  # noqa: BLE001
            status[name] = status_of(cls.key, e, OURS)
            log(f"  {name}: {e!r}")
    return fns, status


# ---------------------------------------------------------------------- run
def run(quick: bool, big: bool) -> str:
    torch.set_num_threads(1)
    t_start = time.perf_counter()
    cap = 100_000 if quick else 1_000_000
    steps = cap // ENVS
    reps, inner = (20, 3) if quick else (100, 5)
    slow_reps, slow_inner = (3, 1) if quick else (10, 1)
    scale_reps, scale_inner = (20, 3) if quick else (100, 5)
    n_episodes = cap // EPISODE
    workdir = tempfile.mkdtemp(prefix="w4_seq_")

    impls, status = {}, {}
    for cls in IMPLS.values():
        impl = cls()
        log(f"fill {impl.key} @ {cap:,}")
        try:
            impl.build(cap)
            impl.fill(0, steps)
            impl.sample()
            impls[impl.key], status[impl.key] = impl, "ok"
        except Exception as e:  # noqa: BLE001 -- report, keep going
            status[impl.key] = status_of(impl.key, e, OURS)
            log(f"  {impl.key}: {e!r}")
    facades, fstatus = episodic_buffers(n_episodes, workdir)
    impls |= facades
    status |= fstatus
    settle()

    # one-step writes continuing the stream: distinct steps, never cycled (TorchRL's
    # fragmented index rejects a repeated (trajectory, step) pair)
    need = 16 + reps * inner
    raw = chunk(steps, need)
    step_lists = {}
    for k, impl in impls.items():
        try:
            step_lists[k] = iter(impl.prep_steps(raw))
        except Exception as e:  # noqa: BLE001
            log(f"  {k} prep_steps: {e!r}")
    del raw

    log(f"sample alone: {reps} interleaved blocks x {inner} batches")
    alone = timed({k: i.sample for k, i in impls.items()}, reps, inner, slow_reps, slow_inner)

    pairs, pair_err = {}, {}
    for k, impl in impls.items():
        if k not in step_lists:
            continue
        try:
            impl.write(next(step_lists[k]))
            impl.sample()
        except Exception as e:  # noqa: BLE001 -- e.g. a facade without add_step
            pair_err[k] = status_of(k, e, OURS)
            continue
        pairs[k] = (lambda w, it, smp: (lambda: (w(next(it)), smp())))(impl.write, step_lists[k], impl.sample)
    log(f"extend + sample: {reps} interleaved blocks x {inner}")
    pair = timed(pairs, reps, inner, slow_reps, slow_inner)

    checks = {}
    for k, impl in impls.items():
        try:
            checks[k] = check(impl, [impl.sample() for _ in range(CHECK_BATCHES)], steps)
            if k in facades:
                checks[k].pop("fresh")
        except Exception as e:  # noqa: BLE001
            checks[k] = {"error": status_of(k, e, OURS)}
    fills = {k: i.fill_s for k, i in impls.items()}

    # scale: keep ours at cap, free the rest
    ours = impls.get("ours")
    impls.clear()
    facades.clear()
    del pairs, step_lists
    settle()
    shutil.rmtree(workdir, ignore_errors=True)
    sizes = [10_000, cap] + ([10_000_000] if big else [])
    sfns, sstatus = scale_buffers(sizes, {cap: ours})
    log(f"scale sampling: {scale_reps} interleaved blocks x {scale_inner}")
    sc = interleaved(sfns, scale_reps, scale_inner)
    sfns.clear()
    elapsed = time.perf_counter() - t_start
    return report(quick, big, cap, reps, inner, slow_reps, status, alone, pair, pair_err, checks, fills, sizes,
                  sc, sstatus, elapsed)


# ---------------------------------------------------------------------- report
def report(quick, big, cap, reps, inner, slow_reps, status, alone, pair, pair_err, checks, fills, sizes, sc,
           sstatus, elapsed) -> str:
    labels = {c.key: c.label for c in (*IMPLS.values(), *EPISODIC)}
    L = [
        f"# W4 sequence benchmark ({'quick' if quick else 'full'})", "",
        f"- obs f32[{OBS}], action f32[{ACT}], reward f32[1], done/terminated/truncated bool[1] (TorchRL layout); "
        f"{ENVS} lockstep envs x {EPISODE}-step episodes (time limit, staggered by {STAGGER} steps per env); "
        f"capacity {cap:,} rows, filled with {cap:,} transitions; batch {BATCH} sequences x {SEQ} steps",
        f"- {machine_line()}; wall time {elapsed:.0f} s; peak RSS {hwm_bytes() / 2**30:.1f} GiB", "",
    ]

    def us(s):
        return f"{s['median'] * 1e6:,.0f}", f"{s['p25'] * 1e6:,.0f}-{s['p75'] * 1e6:,.0f}"

    op, oa = pair.get("ours"), alone.get("ours")
    rows = []
    for key in (*IMPLS, *(c.key for c in EPISODIC)):
        p, a = pair.get(key), alone.get(key)
        if not a:
            rows.append([labels[key], status.get(key, "n/a"), "", "", "", "", "", "", "", ""])
            continue
        pm, pq = us(p) if p else (pair_err.get(key, "n/a"), "")
        am, aq = us(a)
        rows.append([
            labels[key], pm, pq,
            f"{BATCH / p['median']:,.0f}" if p else "",
            "-" if key == "ours" else (f"{p['median'] / op['median']:.1f}x" if p and op else "n/a"),
            am, aq,
            "-" if key == "ours" else (f"{a['median'] / oa['median']:.1f}x" if oa else "n/a"),
            check_text(checks.get(key, {})),
            f"{fills.get(key, 0):.2f}",
        ])
    peer = pair.get("torchrl")
    verdict = (f"{peer['median'] / op['median']:.1f}x" if op and peer else "n/a")
    L += [f"## 12. Sequence sampling with writes (W4, {BATCH} x {SEQ} steps, {cap:,} rows)", "",
          table(["impl", "us per extend+sample (median)", "p25-p75", "sequences/s in the loop",
                 "ours/peer (rate; >1 = ours faster)", "us per sample alone (median)", "p25-p75",
                 "ours/peer (sample alone)", f"sequence check ({CHECK_BATCHES * BATCH:,} sampled)", "fill s"],
                rows), "",
          f"**ours vs TorchRL SliceSampler(traj_key), extend+sample: {verdict} the rate** (target >= 15x, issue 15).", "",
          f"extend+sample = one vector-env step (`[{ENVS}]` TensorDict; facades: `add_step` of a `[{ENVS}]` step "
          f"dict) then one batch of {BATCH} sequences x {SEQ} steps; steps continue the stream, pre-built outside "
          f"the timed region, never repeated. Median over {op['n'] if op else 'n/a'} interleaved blocks of "
          f"{inner} calls (calls over {SLOW_S * 1e3:.0f} ms: their own group of {slow_reps} one-call blocks); "
          "sample alone: the same, before the one-step writes. Facade rows: the ratio columns compare them with "
          "the SequenceSampler buffer (both ours). TorchRL returns the "
          f"{BATCH * SEQ:,} steps flat (`[B*T]`), checked "
          f"as [{BATCH}, {SEQ}]; it draws a trajectory uniformly, then a start in it (ours: uniform over windows). "
          f"TorchRL rows are fed env-major flattened `[16*T]` chunks, then flat `[16]` steps, so each env's "
          "one-step writes are 16 rows apart: `traj_key` sees them as 1-step runs (never sampled), `end_key` "
          "as one run mixing all envs up to the next done (and each env's chunk segment runs on into the next "
          "env's segment unless it ends on a done), `fragmented=True` reorders by "
          "(trajectory, step) and re-sorts the whole storage after each write. `cache_values=True` caches "
          "the boundary scan until the next write. Check: every sampled sequence must be "
          f"{SEQ} consecutive steps of one episode of one env (observation[:3] = (env, episode, step)) with "
          "each step's true next observation (facades: no next observation); the last column is the number "
          "of those sequences that reach a step written by the one-step loop. Fill s: time in the bulk "
          f"`[{ENVS}, {CHUNK}]` extends (facades: `dataset.add_episode` of {cap // EPISODE:,} "
          f"{EPISODE}-step episodes).", ""]

    rows = []
    for key in ("ours", "torchrl"):
        base = sc.get((key, sizes[0]))
        for n in sizes:
            s = sc.get((key, n))
            if not s:
                if (key, n) in sstatus:
                    rows.append([labels[key], f"{n:,}", sstatus[(key, n)], "", "", ""])
                continue
            rows.append([labels[key], f"{n:,}", f"{s['median'] * 1e6:,.0f}",
                         f"{s['p25'] * 1e6:,.0f}-{s['p75'] * 1e6:,.0f}", f"{BATCH / s['median']:,.0f}",
                         f"{s['median'] / base['median']:.2f}x" if base else "n/a"])
    got = [n for n in sizes if ("ours", n) in sc]
    flat = (f"{sc[('ours', got[-1])]['median'] / sc[('ours', got[0])]['median']:.2f}x "
            f"({got[-1]:,} / {got[0]:,} rows)" if len(got) > 1 else "n/a")
    L += ["## 13. Sequence sample time vs buffer size", "",
          table(["impl", "rows", "us/batch (median)", "p25-p75", "sequences/s", f"time / time@{sizes[0]:,}"], rows),
          "", f"**ours, largest / smallest: {flat}** (target <= 1.3x).", "",
          "Sample alone, full buffers; all sizes interleaved with each other only (compare within this table). "
          f"The {cap:,}-row buffer is the one of table 12 (with its one-step writes); the others are filled "
          f"in bulk. TorchRL: reference at {sizes[0]:,} rows only (its cost grows with the rows it rescans; "
          f"see table 12 for {cap:,})." + ("" if big else " 10M rows skipped (--quick / --no-scale)."), ""]
    return "\n".join(L)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100k rows, few repetitions, no 10M")
    ap.add_argument("--scale", action="store_true", help="include 10M rows even with --quick")
    ap.add_argument("--no-scale", action="store_true", help="skip the 10M-row buffer (~1.7 GB)")
    ap.add_argument("--out", default=None, help="also write the tables to this file")
    ap.add_argument("--append", action="store_true", help="append to --out instead of overwriting")
    a = ap.parse_args()
    out = run(a.quick, big=not a.no_scale and (a.scale or not a.quick))
    print(out)
    write_tables(out, a.out, a.append)


if __name__ == "__main__":
    main()
