"""W5 frame-stack benchmark: 4-frame stacks of 3-step windows over u8[1, 84, 84] frames.

    .venv/bin/python benchmarks/frames.py                  # full: 200k transitions
    .venv/bin/python benchmarks/frames.py --quick          # 20k transitions, few repetitions
    .venv/bin/python benchmarks/frames.py --out FILE --append   # (what run.py does)

Workload: 4 envs step in lockstep through 500-step episodes (env ``e`` starts
``125 * e`` steps into its first one, so episode ends do not line up); every
frame is u8[1, 84, 84] and carries its own identity in its first pixels
(step in episode, low and high byte; episode and env code), so every sampled
stack is checked. Buffers hold ``--rows`` transitions; batches of 32 and 256,
``n_frames=4``, ``n_steps=3`` (gamma 0.99).

Each buffer is built and filled in its own fresh process (memory is the RSS
the filled buffer holds, as in the other workloads), one after the other. The
processes then stay alive and are timed interleaved: in each round every live
buffer samples ``ROUND`` batches in turn (in an order shuffled anew each
time), so drift of the machine falls on all of them alike; samples/s is the median over all timed
batches. Two buffers are timed in a phase of their own before the others,
each interleaved the same way with a second ``ours`` process, and their ratios
are against that one: SB3's stacked layout (about 11 GB at 200k transitions) does
not fit beside the others in 24 GB, and TorchRL's batches take 0.2-2 s each, so
in the rotation its turns would leave every other process idle for seconds at a
time, after which their batches cost 2-5x on this machine (cpprb read 30k-51k
samples/s with TorchRL in the rotation, 154k-182k without it, in the same
hour). (A buffer timed alone never waits while others sample, so it would be
timed warm and the others cold: on this machine a batch of ours taken after a
50 ms wait costs about 4x one taken right after another; a bare torch gather,
about 2x.) The "huge pages" column is the share of each buffer's memory the
kernel holds in 2 MB pages (random reads over 4 KB pages miss the TLB).

- ``ours``: ``make_replay_buffer(rows, n_frames=4, n_step=3)``: frames stored
  once, stacks gathered by index at sample time;
- ``ours-d3rlpy``: the ``BatchReplayBuffer`` facade (d3rlpy 1.0's API) over the
  same components, ``sample(B, n_frames=4, n_steps=3)``;
- ``torchrl``: TorchRL's ``CatFrames(N=4).make_rb_transform_and_sampler``: single
  frames (and next frames) in a ``LazyTensorStorage``, slices of 4 sampled by a
  ``SliceSampler`` and stacked by the transform (no n-step: TorchRL has no n-step
  for that pipeline);
- ``sb3``: Stable-Baselines3's ``NStepReplayBuffer`` (``n_steps=3``) storing the
  stacked observations that SB3's ``VecFrameStack`` makes (its
  ``StackedObservations``, zero padding at episode starts), observation and next
  observation both stored (SB3's n-step buffer refuses ``optimize_memory_usage``);
- ``d3rlpy-1.0``: d3rlpy 1.0.0's ``BatchReplayBuffer`` (Cython; built in a
  throwaway venv with ``cython<3`` by ``build_d3rlpy1.sh DIR``, which ``make bench``
  runs, installed with ``--target DIR`` and put on ``PYTHONPATH`` for its process
  only: ``--d3rlpy1-path DIR`` or ``$D3RLPY1_PATH``).

"exact at starts": the share of sampled stacks whose last frame is one of the
first 3 steps of its episode (so the stack reaches back past the episode
start) that equal d3rlpy's definition: earlier frames repeat the episode's
first frame, never a frame of another episode, never zeros.
"""
from __future__ import annotations

import threads  # noqa: F401 -- first: one thread per native pool (threads.py)

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if __name__ == "__main__":
    sys.path[:0] = [HERE, os.path.dirname(HERE)]  # benchmarks/, repo root
os.environ.setdefault("RL_LOGGING_LEVEL", "WARNING")

import numpy as np  # noqa: E402

from measure import (  # noqa: E402
    block_orders, huge_page_bytes, logger, machine_line, rss_bytes, settle, table, write_tables,
)

ENVS, EPISODE, STAGGER = 4, 500, 125
FRAME = (1, 84, 84)
N_FRAMES, N_STEPS, GAMMA = 4, 3, 0.99
BATCHES = (32, 256)
CHUNK = 250  # steps per bulk [ENVS, CHUNK] write
KEYS = ("ours", "ours-d3rlpy", "torchrl", "sb3", "d3rlpy-1.0", "cpprb")

log = logger("frames")


# --------------------------------------------------------------------- workload
def episode_code(k: np.ndarray, e: np.ndarray) -> np.ndarray:
    """The code in a frame's third pixel of episode ``k`` of env ``e``: ``1 + e`` for
    each env's first episode, ``ENVS + 1 + (k * ENVS + e) % (251 - ENVS)`` after
    it, so a first episode is told apart however many episodes the buffer
    holds (the code wraps), and consecutive episodes of an env differ."""
    return np.where(k == 0, 1 + e, ENVS + 1 + (k * ENVS + e) % (251 - ENVS))


def chunk(t0: int, T: int) -> dict[str, np.ndarray]:
    """Steps ``t0 .. t0+T-1`` of every env: frames ``[ENVS, T, 1, 84, 84]`` and the rest.

    Step ``t`` of env ``e`` is life position ``p = e * STAGGER + t``: episode
    ``k = p // EPISODE``, step ``i = p % EPISODE``; its frame's first pixels are
    ``(i % 256, i // 256, episode_code(k, e))``. The next frame of the last
    step is the final frame ``(EPISODE, same episode)``.
    """
    e = np.arange(ENVS)[:, None]
    p = e * STAGGER + t0 + np.arange(T)[None]
    k, i = p // EPISODE, p % EPISODE
    code = episode_code(k, e)

    def frames(step: np.ndarray) -> np.ndarray:
        out = np.zeros((ENVS, T, *FRAME), np.uint8)
        out[..., 0, 0, 0], out[..., 0, 0, 1], out[..., 0, 0, 2] = step % 256, step // 256, code
        return out

    last = i == EPISODE - 1
    return {"obs": frames(i), "next_obs": frames(i + 1), "step": i, "last": last, "episode": k,
            "action": (p % 6).astype(np.int64), "reward": ((p * 7) % 11 / 10).astype(np.float32)}


def chunks(rows: int):
    steps = rows // ENVS
    for t0 in range(0, steps, CHUNK):
        yield chunk(t0, min(CHUNK, steps - t0))


def check(stacks: np.ndarray) -> tuple[int, int, int]:
    """``(exact, at_starts, exact_at_starts)`` of ``[B, 4, 84, 84]`` stacks (oldest first)."""
    step = stacks[:, :, 0, 0].astype(np.int64) + 256 * stacks[:, :, 0, 1].astype(np.int64)  # [B, F]
    code = stacks[:, :, 0, 2].astype(np.int64)
    t = step[:, -1]
    # an env's first episode starts STAGGER * env steps in: the buffer holds nothing earlier
    first_episode = code[:, -1] <= ENVS  # its code is 1 + env
    first = np.where(first_episode, (code[:, -1] - 1) * STAGGER, 0)
    expected = np.maximum(t[:, None] - np.arange(N_FRAMES - 1, -1, -1), first[:, None])
    exact = (step == expected).all(1) & (code == code[:, -1:]).all(1)
    start = t - first < N_FRAMES - 1
    return int(exact.sum()), int(start.sum()), int((exact & start).sum())


# --------------------------------------------------------------------- adapters
class Ours:
    """make_replay_buffer(n_frames=4, n_step=3)."""

    def build(self, rows: int) -> None:
        from torchrl_ext import make_replay_buffer

        # an episode of L steps uses L + 1 rows: room for every live episode's final frame
        self.rb = make_replay_buffer(rows + 2 * ENVS * (rows // (ENVS * EPISODE) + 2),
                                     n_frames=N_FRAMES, n_step=N_STEPS, gamma=GAMMA, seed=0)

    def fill(self, c: dict[str, np.ndarray]) -> None:
        import torch
        from tensordict import TensorDict

        last = torch.from_numpy(c["last"]).unsqueeze(-1)
        self.rb.extend(TensorDict({
            "pixels": torch.from_numpy(c["obs"]), "action": torch.from_numpy(c["action"]),
            "next": {"pixels": torch.from_numpy(c["next_obs"]),
                     "reward": torch.from_numpy(c["reward"]).unsqueeze(-1),
                     "done": last, "terminated": torch.zeros_like(last), "truncated": last.clone()},
        }, batch_size=c["last"].shape))

    def sample(self, batch: int) -> np.ndarray:
        return self.rb.sample(batch)["pixels"].numpy()


def appends(j0: int, J: int) -> dict[str, np.ndarray]:
    """Appends ``j0 .. j0+J-1`` of every env in d3rlpy's convention, ``[ENVS, J]``.

    An episode of ``EPISODE`` steps is ``EPISODE + 1`` appends: its observations
    with the action taken there and the reward received on arriving, then its
    final frame with ``clip_episodes=1`` (a timeout: not terminal). Env ``e``
    starts ``STAGGER * e`` appends into its first episode.
    """
    slots = EPISODE + 1
    u = np.arange(ENVS)[:, None] * STAGGER + j0 + np.arange(J)[None]
    k, slot = u // slots, u % slots
    code = episode_code(k, np.arange(ENVS)[:, None])
    obs = np.zeros((ENVS, J, *FRAME), np.uint8)
    obs[..., 0, 0, 0], obs[..., 0, 0, 1], obs[..., 0, 0, 2] = slot % 256, slot // 256, code
    arrival = np.where(slot == 0, 0.0, ((k * slots + slot) * 7 % 11) / 10).astype(np.float32)
    return {"obs": obs, "action": (u % 6).astype(np.int64), "reward": arrival,
            "clip": slot == EPISODE}


class D3rlpyAppends:
    """Fills a d3rlpy-style buffer (``append(obs, act, rew, terminal, clip)``) append by append."""

    def fill_all(self, rows: int) -> None:
        total = rows // ENVS * (EPISODE + 1) // EPISODE
        for j0 in range(0, total, CHUNK):
            a = appends(j0, min(CHUNK, total - j0))
            for j in range(a["clip"].shape[1]):
                self.buf.append(a["obs"][:, j], a["action"][:, j], a["reward"][:, j],
                                np.zeros(ENVS), a["clip"][:, j].astype(np.float64))

    def sample(self, batch: int) -> np.ndarray:
        out = self.buf.sample(batch, n_frames=N_FRAMES, n_steps=N_STEPS, gamma=GAMMA).observations
        return np.asarray(out)


class OursD3rlpy(D3rlpyAppends):
    """torchrl_ext.BatchReplayBuffer: d3rlpy 1.0's API over our components."""

    def build(self, rows: int) -> None:
        import gymnasium as gym

        from torchrl_ext import BatchReplayBuffer

        # maxlen transitions in all, as d3rlpy's FIFO: rows / ENVS per env
        self.buf = BatchReplayBuffer(rows, None, n_envs=ENVS, seed=0,
                                     observation_space=gym.spaces.Box(0, 255, FRAME, np.uint8),
                                     action_space=gym.spaces.Discrete(6))


class D3rlpy1(D3rlpyAppends):
    """d3rlpy 1.0.0's BatchReplayBuffer (its d3rlpy on PYTHONPATH in this process only)."""

    def build(self, rows: int) -> None:
        import gym
        from d3rlpy.online.buffers import BatchReplayBuffer

        class BatchEnv:  # what d3rlpy 1.0 reads from its BatchEnv: spaces and len()
            observation_space = gym.spaces.Box(0, 255, FRAME, np.uint8)
            action_space = gym.spaces.Discrete(6)

            def __len__(self) -> int:
                return ENVS

        self.buf = BatchReplayBuffer(rows, BatchEnv())


class TorchRLCatFrames:
    """TorchRL: CatFrames(N=4).make_rb_transform_and_sampler over single stored frames."""

    def build(self, rows: int) -> None:
        from torchrl.data import LazyTensorStorage, ReplayBuffer
        from torchrl.envs.transforms import CatFrames

        # make_rb_transform_and_sampler adds ("next", "pixels") itself
        # distinct out_keys: the transform excludes them from what is stored
        cat = CatFrames(N=N_FRAMES, dim=-3, in_keys=["pixels"], out_keys=["stack"], done_key="done",
                        reset_key="_reset")
        self.transforms = {}
        for batch in BATCHES:
            transform, sampler = cat.make_rb_transform_and_sampler(
                batch_size=batch, traj_key=("collector", "traj_ids"), strict_length=False,
                cache_values=True)  # no writes between samples here: its fastest mode
            self.transforms[batch] = (transform, sampler)
        self.storage = LazyTensorStorage(rows)
        # a plain ReplayBuffer, as TorchRL's catframes-in-buffer example (the transform
        # turns B * 4 sampled rows into B stacks)
        self.rbs = {b: ReplayBuffer(storage=self.storage, sampler=s, transform=t, batch_size=b)
                    for b, (t, s) in self.transforms.items()}
        self.writer = self.rbs[BATCHES[0]]

    def fill(self, c: dict[str, np.ndarray]) -> None:
        import torch
        from tensordict import TensorDict

        last = torch.from_numpy(c["last"]).unsqueeze(-1)
        traj = torch.from_numpy((c["obs"][..., 0, 0, 2]).astype(np.int64))
        td = TensorDict({
            "pixels": torch.from_numpy(c["obs"]), "action": torch.from_numpy(c["action"]),
            "collector": {"traj_ids": traj},
            "next": {"pixels": torch.from_numpy(c["next_obs"]), "done": last,
                     "reward": torch.from_numpy(c["reward"]).unsqueeze(-1)},
        }, batch_size=c["last"].shape)
        self.writer.extend(td.reshape(-1))  # env-major fragments, as a collector's batch

    def sample(self, batch: int) -> np.ndarray:
        return self.rbs[batch].sample()["stack"].numpy()


class SB3VecFrameStack:
    """SB3 NStepReplayBuffer storing VecFrameStack's stacked observations."""

    def build(self, rows: int) -> None:
        from gymnasium import spaces
        from stable_baselines3.common.buffers import NStepReplayBuffer
        from stable_baselines3.common.vec_env.stacked_observations import StackedObservations

        space = spaces.Box(0, 255, FRAME, np.uint8)
        self.stacker = StackedObservations(ENVS, N_FRAMES, space, channels_order="first")
        # SB3's buffer_size counts transitions of all envs (it keeps buffer_size // n_envs steps)
        self.rb = NStepReplayBuffer(rows, self.stacker.stacked_observation_space,
                                    spaces.Discrete(6), device="cpu", n_envs=ENVS,
                                    n_steps=N_STEPS, gamma=GAMMA)
        self.stacked = None

    def fill(self, c: dict[str, np.ndarray]) -> None:
        for t in range(c["last"].shape[1]):
            if self.stacked is None:
                self.stacked = self.stacker.reset(c["obs"][:, t])
            done = c["last"][:, t]
            # what the VecEnv returns: the next frame, or at an episode end the next
            # episode's first frame, with the final frame in the infos
            raw = c["next_obs"][:, t].copy()
            raw[done, 0, 0, :3] = 0
            raw[done, 0, 0, 2] = episode_code(c["episode"][done, t] + 1, np.flatnonzero(done))
            infos = [{"terminal_observation": c["next_obs"][e, t], "TimeLimit.truncated": True}
                     if done[e] else {} for e in range(ENVS)]
            new, infos = self.stacker.update(raw, done, infos)
            next_stack = new.copy()  # as SB3's off-policy loop: the stacked final frame at ends
            for e in np.flatnonzero(done):
                next_stack[e] = infos[e]["terminal_observation"]
            self.rb.add(self.stacked, next_stack, c["action"][:, t, None], c["reward"][:, t], done, infos)
            self.stacked = new

    def sample(self, batch: int) -> np.ndarray:
        return self.rb.sample(batch).observations.numpy().astype(np.uint8)


class CpprbStackCompress:
    """cpprb's ``ReplayBuffer`` with ``stack_compress`` and ``Nstep``.

    cpprb keeps one sliding window of frames per stored entry (the stack axis
    last; each add writes its whole stack over the frames it shares with its
    neighbours) and has no notion of envs, so each env's steps are held until
    its episode ends and then added as one run, followed by
    ``on_episode_end()`` (as cpprb's docs do for one env); the 4 episodes still
    running at the end are added last. The stacks it is given are exact
    (``[o_0] * 4`` at a start, as d3rlpy); what it serves is measured.

    ``next_of="obs"`` (next observations sharing the observations' memory) is
    not used: with ``Nstep``, cpprb 11.0's ``sample()`` then returns no
    ``next_obs`` at all, which n-step targets need. ``next_obs`` is stored as
    its own stack-compressed entry instead.
    """

    def build(self, rows: int) -> None:
        from cpprb import ReplayBuffer

        stacked = {"shape": (*FRAME[1:], N_FRAMES), "dtype": np.uint8}  # stack axis last
        self.rb = ReplayBuffer(
            rows + 2 * ENVS * (rows // (ENVS * EPISODE) + 2),
            {"obs": stacked, "next_obs": stacked, "act": {"dtype": np.int64}, "rew": {}, "done": {}},
            stack_compress=["obs", "next_obs"],
            Nstep={"size": N_STEPS, "gamma": GAMMA, "rew": "rew", "next": "next_obs"},
        )
        self.held: list[list[dict[str, np.ndarray]]] = [[] for _ in range(ENVS)]

    def _add(self, env: int, end: bool) -> None:
        steps = self.held[env]
        if not steps:
            return
        self.held[env] = []
        frames = np.concatenate([s["obs"] for s in steps] + [steps[-1]["next_obs"][-1:]])[:, 0]
        first = np.concatenate([s["step"] for s in steps])  # step in episode of each obs
        t = np.arange(len(first) + 1)
        # frame j of the stack at position p: position max(p - 3 + j, episode start),
        # the start clamped to the first held step (an env's first episode began earlier)
        start = max(t[0] - first[0], 0)
        lags = np.maximum(t[:, None] - np.arange(N_FRAMES - 1, -1, -1), start) - t[0]
        stacks = np.moveaxis(frames[lags], 1, -1)  # [T + 1, 84, 84, 4]
        self.rb.add(obs=stacks[:-1], next_obs=stacks[1:],
                    act=np.concatenate([s["action"] for s in steps]),
                    rew=np.concatenate([s["reward"] for s in steps]),
                    done=np.zeros(len(first)))  # timeouts: not terminal
        if end:
            self.rb.on_episode_end()

    def fill(self, c: dict[str, np.ndarray]) -> None:
        for e in range(ENVS):
            ends = np.flatnonzero(c["last"][e]) + 1
            for lo, hi in zip(np.r_[0, ends], np.r_[ends, c["last"].shape[1]]):
                if hi > lo:
                    self.held[e].append({k: c[k][e, lo:hi] for k in
                                         ("obs", "next_obs", "step", "action", "reward")})
                    if c["last"][e, hi - 1]:
                        self._add(e, end=True)

    def finish(self) -> None:
        for e in range(ENVS):  # the episodes still running
            self._add(e, end=False)

    def sample(self, batch: int) -> np.ndarray:
        return self.rb.sample(batch)["obs"]  # the sample holds next_obs, rew, ... too

    @staticmethod
    def channels_first(stacks: np.ndarray) -> np.ndarray:
        return np.moveaxis(stacks, -1, 1)


ADAPTERS = {"ours": Ours, "ours-d3rlpy": OursD3rlpy, "torchrl": TorchRLCatFrames,
            "sb3": SB3VecFrameStack, "d3rlpy-1.0": D3rlpy1, "cpprb": CpprbStackCompress}


# ----------------------------------------------------------------------- probes
ROUND = 5  # batches a buffer samples in turn per round of the interleaved timing
# timed in a phase of their own, beside a second ours, and why
ALONE = {"sb3": "its stacked layout does not fit beside them all",
         "torchrl": "its slow batches would leave the others idle for seconds between turns"}


def serve(key: str, rows: int) -> None:
    """Build and fill one buffer in this (fresh) process, then sample on request.

    Prints its memory as a ``JSON:`` line, then answers each stdin line
    ``"B count"`` with the seconds of ``count`` timed ``sample(B)`` calls and
    the exactness counts of what they served (checked untimed).
    """
    import torch

    torch.set_num_threads(1)
    ADAPTERS[key]().build(ENVS * EPISODE)  # imports (and their memory) before measuring
    impl = ADAPTERS[key]()
    settle()
    before, huge_before = rss_bytes(), huge_page_bytes()
    started = time.perf_counter()
    impl.build(rows)
    if isinstance(impl, D3rlpyAppends):
        impl.fill_all(rows)
    else:
        for c in chunks(rows):
            impl.fill(c)
        getattr(impl, "finish", lambda: None)()
    fill_s = time.perf_counter() - started
    gc.collect()
    settle()
    for batch in BATCHES:
        for _ in range(3):
            impl.sample(batch)  # warm-up
    print("JSON:" + json.dumps({"key": key, "mem": rss_bytes() - before, "fill_s": fill_s,
                                "huge": huge_page_bytes() - huge_before}), flush=True)
    for line in sys.stdin:
        batch, count = map(int, line.split())
        times, counts = [], np.zeros(3, np.int64)
        for _ in range(count):
            t0 = time.perf_counter()
            stacks = impl.sample(batch)
            times.append(time.perf_counter() - t0)
            stacks = getattr(impl, "channels_first", lambda x: x)(stacks)  # untimed
            counts += check(stacks.reshape(batch, N_FRAMES, *FRAME[1:]))
        print("JSON:" + json.dumps({"times": times, "counts": counts.tolist()}), flush=True)


class Probe:
    """One :func:`serve` process: started, filled, then asked for timed batches."""

    def __init__(self, key: str, rows: int, d3rlpy1_path: str | None) -> None:
        self.key, self.proc, self.error = key, None, None
        self.result: dict = {"key": key}
        self.times: dict[int, list[float]] = {b: [] for b in BATCHES}
        self.counts = {b: np.zeros(3, np.int64) for b in BATCHES}
        env = dict(os.environ)
        if key == "d3rlpy-1.0":
            if not d3rlpy1_path:
                self.error = "not built (pass --d3rlpy1-path, see the module docs)"
                return
            env["PYTHONPATH"] = os.pathsep.join([d3rlpy1_path, env.get("PYTHONPATH", "")])
        cmd = [sys.executable, os.path.abspath(__file__), "--serve", key, "--rows", str(rows)]
        self.stderr = tempfile.TemporaryFile("w+")  # a pipe could fill and stall the process
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True, env=env)
        self.result.update(self._reply())

    def _reply(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith("JSON:"):
                return json.loads(line[5:])
        self.proc.wait()
        self.stderr.seek(0)
        tail = (self.stderr.read().strip().splitlines() or ["no output"])[-1]
        self.error = tail[:160]
        return {}

    def time(self, batch: int, count: int) -> None:
        if self.error:
            return
        self.proc.stdin.write(f"{batch} {count}\n")
        self.proc.stdin.flush()
        reply = self._reply()
        if reply:
            self.times[batch] += reply["times"]
            self.counts[batch] += reply["counts"]

    def close(self) -> dict:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait()
        if self.error:
            return {"key": self.key, "error": self.error}
        out = dict(self.result)
        for b in BATCHES:
            exact, starts, exact_starts = self.counts[b].tolist()
            out[f"rate{b}"] = b / float(np.median(self.times[b]))
            out[f"exact{b}"] = exact / max(len(self.times[b]) * b, 1)
            out[f"starts{b}"] = (exact_starts, starts)
        return out


def time_interleaved(probes: list[Probe], reps: int) -> None:
    """``reps`` timed batches of each size per probe, ``ROUND`` at a time, in shuffled order (``block_orders``)."""
    rounds = -(-reps // ROUND)
    orders = block_orders(probes, rounds * len(BATCHES))
    for _ in range(rounds):
        for b in BATCHES:
            for p in next(orders):
                p.time(b, ROUND)


def report(results: list[dict], rows: int) -> str:
    ours = next((r for r in results if r["key"] == "ours" and "error" not in r), None)
    stacked_bytes = rows * 2 * N_FRAMES * int(np.prod(FRAME))  # obs + next obs, stacked
    header = ["buffer"] + [f"samples/s B={b}" for b in BATCHES] + \
        [f"vs ours B={b}" for b in BATCHES] + ["memory", "vs stacked layout", "huge pages",
                                                "exact stacks", "exact at starts"]
    lines = []
    for r in results:
        if "error" in r:
            lines.append([r["key"]] + [r["error"]] + [""] * (len(header) - 2))
            continue
        rates = [f"{r[f'rate{b}']:,.0f}" for b in BATCHES]
        # a buffer timed in a phase of its own is compared with the ours timed beside it
        mine = r.get("ours_beside") or ({b: ours[f"rate{b}"] for b in BATCHES} if ours else None)
        ratios = [f"{r[f'rate{b}'] / mine[b]:.2f}x" if mine else "n/a" for b in BATCHES]
        es, s = (sum(r[f"starts{b}"][i] for b in BATCHES) for i in (0, 1))
        lines.append([r["key"], *rates, *ratios, f"{r['mem'] / 2**20:,.0f} MiB",
                      f"{r['mem'] / stacked_bytes:.2f}x", f"{r['huge'] / max(r['mem'], 1):.0%}",
                      f"{min(r[f'exact{b}'] for b in BATCHES):.1%}",
                      f"{es}/{s} ({es / max(s, 1):.0%})"])
    return table(header, lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="20k transitions, few repetitions")
    ap.add_argument("--rows", type=int, default=None, help="transitions held (default 200k)")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--only", nargs="+", choices=KEYS, default=list(KEYS))
    ap.add_argument("--d3rlpy1-path", default=os.environ.get("D3RLPY1_PATH"))
    ap.add_argument("--serve", choices=KEYS, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "frames.md"))
    ap.add_argument("--append", action="store_true")
    a = ap.parse_args()
    rows = a.rows or (20_000 if a.quick else 200_000)
    reps = a.reps or (20 if a.quick else 100)
    if a.serve:
        serve(a.serve, rows)
        return
    results = {}
    for key in [k for k in a.only if k in ALONE]:
        # interleaved with a second ours (when ours runs): timed alone, it would never wait
        # while others sample, so it would be timed warm and the others cold
        pair = [Probe(key, rows, a.d3rlpy1_path)]
        if "ours" in a.only:
            pair.append(Probe("ours", rows, a.d3rlpy1_path))
        log(f"{key}: {rows:,} transitions, timed interleaved with {[p.key for p in pair[1:]]}")
        time_interleaved(pair, reps)
        results[key] = pair[0].close()
        if len(pair) > 1:
            partner = pair[1].close()
            if "error" not in partner:
                results[key]["ours_beside"] = {b: partner[f"rate{b}"] for b in BATCHES}
        log(f"{key}: {results[key]}")
    probes = []
    for key in [k for k in a.only if k not in ALONE]:
        log(f"{key}: {rows:,} transitions")
        probes.append(Probe(key, rows, a.d3rlpy1_path))
        log(f"{key}: {probes[-1].result} {probes[-1].error or ''}")
    log(f"timing {len(probes)} buffers interleaved")
    time_interleaved(probes, reps)
    results.update((p.key, p.close()) for p in probes)
    results = [results[k] for k in a.only]
    alone = [(r["key"], r["ours_beside"]) for r in results if "ours_beside" in r]
    phase = "" if not alone else (
        "; " + " and ".join(f"{key} ({ALONE[key]})" for key, _ in alone)
        + (" are" if len(alone) > 1 else " is") + " timed before them, interleaved the same way "
        "with a second ours process, and compared with that ours ("
        + "; ".join(f"beside {key}: " + ", ".join(f"B={b}: {beside[b]:,.0f}" for b in BATCHES)
                    for key, beside in alone) + " samples/s)")
    out = (f"\n## W5 frame stacks: u8{list(FRAME)}, {ENVS} envs, {EPISODE}-step episodes, "
           f"{rows:,} transitions, n_frames={N_FRAMES}, n_steps={N_STEPS}\n\n{machine_line()}\n\n"
           + report(results, rows)
           + "\n\nEach buffer in its own process (torch.set_num_threads(1)), timed interleaved "
             f"with the others ({ROUND} batches each in turn){phase}; samples/s: median of {reps} timed batches; "
             "memory: RSS held by the filled buffer; huge pages: the share of that memory the "
             "kernel holds in 2 MB pages; stacked "
             "layout: observation and next observation stored as 4-frame stacks; torchrl: no "
             "n-step (slices of 4 frames, CatFrames); sb3: VecFrameStack's zero padding at starts; "
             "cpprb: stacks returned channels-last ([B, 84, 84, 4]), as it stores them (the "
             "check moves the axis, untimed), each env's episode added whole.\n")
    print(out)
    write_tables(out, a.out, a.append)


if __name__ == "__main__":
    main()
