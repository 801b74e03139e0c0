"""What one compiled read over our own rows costs, beside our read and cpprb (issues 10, 15).

    .venv/bin/python benchmarks/compiled_read.py --out FILE [--append] [--quick]

The per-call gaps left in issue 15 (W1-sized n-step at 3x a one-step sample)
and issue 10 (W5 at B = 32) are not in the bytes copied but in the number of
Python, numpy and torch operations a sample runs, each paying cold caches
after the previous batch's copy. This table measures the alternative: the
same sample as one compiled pass (numba) over the same storage's packed rows.

- ``floor: compiled read``: draws the rows as our sampler does (the episode index's
  ``draw_rows``), then one kernel per sample computes each window's length,
  its n-step return and bootstrap discount, and copies every entry our batch
  holds (observation or 4-frame stacks of it, action, next observation, the
  last step's done flags) into fresh arrays, which become a TensorDict of
  views. It reads private attributes of our storage, checks no input, takes
  no lock, does not redraw a stack the ring overwrote, and knows one layout (W1-sized float32 rows; W5's uint8 frames):
  it is a floor for a design where the storage computes returns, not code to
  ship. Checked: every transition the buffer holds, read by ours and by the
  floor, gives the same entries (every entry of ours, ``"index"`` included;
  returns within 1e-5), also on a buffer of short episodes with terminations.
- ``ours``: ``make_replay_buffer(..., n_step=3)`` (and ``n_frames=4`` in W5):
  ``rb.sample()``.
- ``cpprb`` (W5): ``ReplayBuffer`` with ``stack_compress`` and ``next_of``
  (no n-step), as in ``frames.py``.

One process, ``torch.set_num_threads(1)``, interleaved blocks (median over
blocks). W1-sized: 200,000 rows of 16 envs, 1000-step episodes, batch 256,
n = 3; W5: 200,000 transitions of 4 envs, 500-step episodes, frames
u8[1, 84, 84], batches 32 and 256 (``--quick``: 20,000 rows, fewer blocks).
"""
from __future__ import annotations

import threads  # noqa: F401 -- first: one thread per native pool (threads.py)

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
os.environ.setdefault("RL_LOGGING_LEVEL", "WARNING")

import numba  # noqa: E402
import numpy as np  # noqa: E402

from torchrl_ext.core.kernels.frames import frame_rows  # noqa: E402
from measure import interleaved, logger, machine_line, table, table_args, write_tables  # noqa: E402

log = logger("compiled-read")
GAMMA, N = 0.99, 3


@numba.njit(nogil=True, cache=True)
def _read(rows, is_step, C, n, gamma, rewards, terminated, words, obs_lo, obs_hi, step_lo, step_hi,
          F, E, written, row_episode, episode_start, frames, lost, out, index):  # pragma: no cover
    """One sample, whole: each row's window (to its episode's end, at most ``n`` steps), return,
    discount, frame rows (``F > 0``), every entry's words copied into ``out`` (see CompiledRead), and
    the sample's ``index`` (row, window length), as ours has it."""
    B = rows.shape[0]
    ow, sw = obs_hi - obs_lo, step_hi - step_lo
    stack = max(F, 1)
    at_step = 2 * stack * ow
    scalars = out.view(np.float32)
    counts = out.view(np.int64)
    for b in range(B):
        r = rows[b]
        base, slot = r - r % C, r % C
        k = 1
        while k < n and is_step[base + (slot + k) % C]:
            k += 1
        g, total, row = 1.0, 0.0, r
        for i in range(k):
            row = base + (slot + i) % C
            total += g * rewards[row]
            g *= gamma
        after = base + (slot + k) % C
        for w in range(sw):  # the first step's words (action), then the last step's (done flags)
            out[b, at_step + w] = words[r, step_lo + w]
            out[b, at_step + sw + w] = words[row, step_lo + w]
        scalars[b, 2 * (at_step + 2 * sw)] = total
        scalars[b, 2 * (at_step + 2 * sw) + 1] = 0.0 if terminated[row] else g
        counts[b, at_step + 2 * sw + 1] = k
        index[b, 0], index[b, 1] = r, k
        if F == 0:
            for w in range(ow):
                out[b, w] = words[r, obs_lo + w]
                out[b, ow + w] = words[after, obs_lo + w]
        else:
            frame_rows(rows[b:b + 1], counts[b, at_step + 2 * sw + 1:at_step + 2 * sw + 2], F, C, E,
                       written, row_episode, episode_start, frames, lost)
            for j in range(F):
                a, c = frames[0, 0, j], frames[0, 1, j]
                for w in range(ow):
                    out[b, j * ow + w] = words[a, obs_lo + w]
                    out[b, (F + j) * ow + w] = words[c, obs_lo + w]


class CompiledRead:
    """The compiled read of an n-step (optionally frame-stacked) buffer of ours; see the module.

    A sample is one ``[B, words]`` block: the observation (or its ``F``
    frames), the next observation (frames), the first step's step words
    (action), the last step's (done flags), the return and discount (two
    float32), the window length (int64); entries are strided views of it,
    beside the sample's ``"index"`` (row, window length) as ours has it.
    """

    def __init__(self, rb, n_frames: int = 0, generator=None) -> None:
        import torch

        from torchrl_ext.samplers import NStepSampler
        from torchrl_ext.samplers.refining import sampler_of_kind
        from torchrl_ext.transforms import NStepTransform

        storage = rb._storage
        packed, self.index = storage.packed, storage.index
        cols = {c.key: c for c in (*packed.obs, *packed.step)}
        obs = packed.obs[0]
        reward = cols.get(("next", "reward"))
        # the one layout the kernel knows (any other would be read wrong, not refused by it); a
        # frame is read as whole words, so its padding would sit between the frames of a stack
        if (len(packed.obs) != 1 or obs.lo % 8 or n_frames and (obs.hi - obs.lo) % 8 or reward is None
                or reward.dtype != torch.float32 or tuple(reward.shape) != (1,)
                or ("next", "terminated") not in cols):
            raise ValueError("CompiledRead: one observation entry (of a multiple of 8 bytes, with frame "
                             f"stacks), a float32 [1] reward and a terminated flag; this buffer holds {sorted(cols)}.")
        self.n = sampler_of_kind(rb._sampler, NStepSampler).n
        self.gamma = next(t for t in rb._transform if isinstance(t, NStepTransform)).gamma
        rows = packed._rows.numpy()
        self.words = rows.view(np.uint64)  # rows are padded to 8 bytes
        self.C = packed.stream_capacity
        self.is_step = self.index._np["row_is_step"]
        self.obs_key = obs.key[0]
        self.obs_lo, self.obs_hi = obs.lo // 8, -(-obs.hi // 8)
        self.step_lo, self.step_hi = packed.step[0].lo // 8, -(-packed.row_bytes // 8)
        self.rewards = rows[:, reward.lo:].view(np.float32)[:, 0]
        self.terminated = rows[:, cols[("next", "terminated")].lo].view(bool)
        self.n_frames = F = n_frames
        self.generator = generator or torch.Generator().manual_seed(0)
        ow, sw, stack = self.obs_hi - self.obs_lo, self.step_hi - self.step_lo, max(F, 1)
        self.width = 2 * stack * ow + 2 * sw + 2  # words per sample
        shape = tuple(obs.shape)
        obs_shape = (F * shape[0], *shape[1:]) if F and len(shape) == 3 else ((F, *shape) if F else shape)
        # (key, dtype, shape per sample, byte offset in a sample's words)
        at_step = 2 * stack * ow * 8
        leaves = [((self.obs_key,), obs.dtype, obs_shape, 0),
                  (("next", self.obs_key), obs.dtype, obs_shape, stack * ow * 8)]
        for c in packed.step:
            if c.key[0] != "next":
                leaves.append((c.key, c.dtype, tuple(c.shape), at_step + c.lo - packed.step[0].lo))
            elif c.key[1] != "reward":
                leaves.append((c.key, c.dtype, tuple(c.shape), at_step + 8 * sw + c.lo - packed.step[0].lo))
        end = at_step + 16 * sw
        leaves += [(("next", "reward"), torch.float32, (1,), end), (("discount",), torch.float32, (1,), end + 4),
                   (("steps_to_next_obs",), torch.int64, (1,), end + 8)]
        self.leaves = []
        for key, dtype, leaf_shape, offset in leaves:
            size = torch.empty((), dtype=dtype).element_size()
            strides, step = [], 1
            for d in reversed(leaf_shape):
                strides.append(step)
                step *= d
            self.leaves.append((key, dtype, leaf_shape, tuple(reversed(strides)), offset // size,
                                self.width * 8 // size))
        index = self.index._np
        self.frame_args = (index["written"], index["row_episode"], index["episode_start_flat"])
        self.E = self.index.episode_capacity
        self.frames, self.lost = np.empty((1, 2, max(F, 1)), np.int64), np.empty(1, bool)

    def sample(self, B: int):
        return self.read(self.index.draw_rows(B, self.generator))

    def read(self, rows: np.ndarray):
        import torch

        from torchrl_ext.core.schema import tensordict_of

        B = rows.shape[0]
        out, index = np.empty((B, self.width), np.uint64), np.empty((B, 2), np.int64)
        _read(rows, self.is_step, self.C, self.n, self.gamma, self.rewards, self.terminated, self.words,
              self.obs_lo, self.obs_hi, self.step_lo, self.step_hi, self.n_frames, self.E,
              *self.frame_args, self.frames, self.lost, out, index)
        block = torch.from_numpy(out.view(np.uint8))
        typed: dict = {}
        root: dict = {}
        nxt: dict = {}
        for key, dtype, shape, strides, offset, row in self.leaves:
            view = typed.get(dtype)
            if view is None:
                view = typed[dtype] = block.view(dtype)
            leaf = view.as_strided((B, *shape), (row, *strides), offset)
            (nxt if key[0] == "next" else root)[key[-1]] = leaf
        root["index"] = torch.from_numpy(index)
        root["next"] = tensordict_of(nxt, torch.Size([B]), None)
        return tensordict_of(root, torch.Size([B]), None)


def check(rb, compiled: CompiledRead, batch: int = 256) -> str:
    """Every live transition read by ours and by the floor: every entry of ours must be the floor's.

    Our buffer's draw is replaced by these rows, batch after batch, so the rest
    of its sample (windows, stacks, transforms, its ``"index"``) runs as usual;
    returns and discounts are compared within 1e-5. With frame stacks, the
    few transitions whose stack the ring overwrote are left out (ours draws
    again there). Returns what was checked, counted by case.
    """
    import torch

    from torchrl_ext.samplers.refining import drawing_sampler

    index, C = compiled.index, compiled.C
    rows = np.flatnonzero(index._np["row_is_step"])
    steps = index.window_lengths(rows, compiled.n)
    cases = {"windows cut at an episode end": int((steps < compiled.n).sum()),
             "windows crossing the ring seam": int((rows % C + steps >= C).sum()),
             "terminal windows": int(compiled.terminated[(rows - rows % C) + (rows % C + steps - 1) % C].sum())}
    if compiled.n_frames:
        frames, lost = index.frame_rows(rows, steps, compiled.n_frames)
        cases["stacks reaching an episode start"] = int((frames[:, 0, :-1] == frames[:, 0, 1:]).any(1).sum())
        if lost is not None:
            rows = rows[~lost]
    draws = drawing_sampler(rb._sampler)
    differ: set = set()
    try:
        for lo in range(0, rows.size, batch):
            part = rows[lo:lo + batch]
            draws.sample = lambda storage, B, part=part: (torch.from_numpy(part.copy()), {})
            ours = rb.sample(part.size)
            mine = compiled.read(np.ascontiguousarray(part))
            for key in ours.keys(True, True):
                a, b = ours.get(key), mine.get(key, None)
                if b is None or a.shape != b.shape:
                    differ.add(str(key))
                elif a.dtype.is_floating_point and key in (("next", "reward"), "discount"):
                    if not torch.allclose(a, b.to(a.dtype), atol=1e-5):
                        differ.add(str(key))
                elif not torch.equal(a, b):
                    differ.add(str(key))
    finally:
        draws.__dict__.pop("sample", None)  # the sampler's own method again
    counted = ", ".join(f"{n:,} {case}" for case, n in cases.items())
    if differ:
        return f"differs from ours in {', '.join(sorted(differ))} ({rows.size:,} transitions: {counted})"
    return f"equals ours on all {rows.size:,} transitions held ({counted})"


def terminal_check(rows: int) -> str:
    """:func:`check` on a W1-sized buffer of 7-step episodes, every other one ending in a termination."""
    import torch

    from torchrl_ext import make_replay_buffer
    from workload import EpisodeStream, to_td

    rb = make_replay_buffer(rows, batch_size=256, n_step=N, gamma=GAMMA, seed=0)
    stream = EpisodeStream(seed=1, ep_len=7)
    for c in stream.chunks_for(rows):
        env = torch.arange(c["done"].shape[0]).view(-1, 1, 1)
        ends = c["done"] & (env % 2 == 0)  # terminations in even envs, time limits in odd ones
        c["terminated"], c["truncated"] = ends, c["done"] & ~ends
        rb.extend(to_td(c))
    return check(rb, CompiledRead(rb))


def w1_sized(rows: int, reps: int) -> list[str]:
    import torch

    from torchrl_ext import make_replay_buffer
    from workload import EpisodeStream, to_td

    log(f"W1-sized n-step: filling {rows:,} rows")
    one = make_replay_buffer(rows, batch_size=256, seed=0)
    nstep = make_replay_buffer(rows, batch_size=256, n_step=N, gamma=GAMMA, seed=0)
    for c in EpisodeStream(seed=0).chunks_for(rows):
        td = to_td(c)
        one.extend(td)
        nstep.extend(td)
    compiled = CompiledRead(nstep, generator=torch.Generator().manual_seed(0))
    checked = check(nstep, compiled)
    terminal = terminal_check(rows)
    ops = {"ours: make_replay_buffer (one-step) rb.sample()": one.sample,
           f"ours: make_replay_buffer(n_step={N}) rb.sample()": nstep.sample,
           f"floor: compiled read (numba), n_step={N}": lambda: compiled.sample(256)}
    timed = interleaved(ops, reps, 20)
    base = timed["ours: make_replay_buffer (one-step) rb.sample()"]["median"]
    out = [[k, f"{q['median'] * 1e6:,.0f}", f"{q['p25'] * 1e6:,.0f}-{q['p75'] * 1e6:,.0f}",
            f"{q['median'] / base:.2f}x"] for k, q in timed.items()]
    return [f"## Compiled read: W1-sized n-step (obs f32[17], 16 envs, {rows:,} rows, n={N}, batch 256)", "",
            machine_line(), "",
            table(["call", "us/batch (median)", "p25-p75", "time / our one-step sample"], out), "",
            f"Compiled read: {checked}; on 7-step episodes, half of them terminated: {terminal}. "
            f"Interleaved blocks of 20 batches, median over {reps} blocks. See "
            "`benchmarks/compiled_read.py`: a floor for a storage that computes returns, not shipped code.", ""]


def w5(rows: int, reps: int) -> list[str]:
    import torch

    import frames as w5_frames

    log(f"W5: filling {rows:,} transitions (ours, cpprb)")
    ours = w5_frames.Ours()
    ours.build(rows)
    for c in w5_frames.chunks(rows):
        ours.fill(c)
    try:
        peer = w5_frames.ADAPTERS["cpprb"]()
        peer.build(rows)
        for c in w5_frames.chunks(rows):
            peer.fill(c)
        getattr(peer, "finish", lambda: None)()
    except ImportError:
        peer = None
    compiled = CompiledRead(ours.rb, n_frames=w5_frames.N_FRAMES, generator=torch.Generator().manual_seed(0))
    lines = [f"## Compiled read: W5 (u8[1, 84, 84] frames, {rows:,} transitions, n_frames=4, n_steps=3)", "",
             machine_line(), ""]
    out = []
    checked = check(ours.rb, compiled)
    for B in w5_frames.BATCHES:
        ops = {"ours: rb.sample()": lambda B=B: ours.rb.sample(B),
               "floor: compiled read (numba)": lambda B=B: compiled.sample(B)}
        if peer is not None:
            ops["cpprb (stack_compress, next_of; no n-step)"] = lambda B=B: peer.sample(B)
        timed = interleaved(ops, reps, 5)
        base = timed["ours: rb.sample()"]["median"]
        for k, q in timed.items():
            out.append([str(B), k, f"{B / q['median']:,.0f}", f"{q['median'] * 1e6:,.0f}",
                        f"{q['p25'] * 1e6:,.0f}-{q['p75'] * 1e6:,.0f}", f"{base / q['median']:.2f}x"])
    lines += [table(["batch", "call", "samples/s", "us/batch (median)", "p25-p75", "rate / ours"], out), "",
              f"Compiled read: {checked}. Interleaved blocks of 5 batches, median over {reps} blocks, "
              "in one process.", ""]
    return lines


def report(argv: list[str]) -> None:
    import torch

    a = table_args(__doc__, argv, "20,000 rows, fewer blocks")
    torch.set_num_threads(1)
    rows, reps = (20_000, 20) if a.quick else (200_000, 100)
    start = time.perf_counter()
    lines = w1_sized(rows, reps)
    lines += w5(rows, reps)
    log(f"done in {time.perf_counter() - start:.0f} s")
    print("\n".join(lines))
    write_tables("\n".join(lines), a.out, a.append)


if __name__ == "__main__":
    report(sys.argv[1:])
