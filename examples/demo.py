"""torchrl_ext demo: episode-aware replay fed by gymnasium and by a TorchRL collector.

Run with ``make demo`` (or ``.venv/bin/python examples/demo.py``). It

1. fills a buffer from a gymnasium vector env loop (CartPole, 8 envs, NextStep
   autoreset) through ``GymVectorAdapter``;
2. fills another buffer with a TorchRL ``Collector`` over ``SerialEnv(4, CartPole)``
   and ``replay_buffer=rb``;
3. samples both, checks that terminated transitions carry the true terminal
   observation, and round-trips each buffer through a checkpoint;
4. runs ``examples/sequence_replay.py --quick``: a collector feeding an
   ``EpisodeReplayBuffer`` step by step, ``[batch, length]`` sequences for a GRU;
5. runs ``examples/model_based_pendulum.py --quick``: a collector filling pytorchrl's
   ``MBReplayBuffer`` API, an ensemble dynamics model trained on ``generate_batches``
   and a CEM planner on Pendulum.
6. fills d3rlpy's ``BatchReplayBuffer`` API from a gymnasium loop, samples
   4-frame stacks of 3-step windows (each frame stored once) and checks every
   stack against the step counter in the observation, then exports the held
   episodes (our format, reloaded; d3rlpy's ``MDPDataset`` when installed).

``--help`` lists the options (the sizes of the fills).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import logging
import math
import tempfile
import time
import warnings

import gymnasium as gym
import numpy as np
import torch
from torchrl.envs import GymEnv, SerialEnv
from tqdm import tqdm

with warnings.catch_warnings():
    # torchrl 0.14 warns about its own weight updaters when torchrl.collectors is imported
    warnings.filterwarnings(
        "ignore", message=r"Creating \w+ which inherits from WeightUpdaterBase",
        category=DeprecationWarning,
    )
    from torchrl.collectors import Collector

from torchrl_ext import BatchReplayBuffer, make_replay_buffer
from torchrl_ext.envs import GymVectorAdapter
from torchrl_ext.export import episodes_of, load_buffer, save_episodes

import model_based_pendulum  # examples/model_based_pendulum.py, next to this script
import sequence_replay  # examples/sequence_replay.py, next to this script

# torchrl logs storage allocations at INFO level; keep the output to the table
logging.getLogger("torchrl").setLevel(logging.WARNING)

CAPACITY = 50_000
BATCH = 256
SEED = 0
# CartPole terminates when the cart leaves |x| <= 2.4 or the pole |theta| <= 12 deg
X_LIMIT, THETA_LIMIT = 2.4, 12 * 2 * math.pi / 360


def fill_from_gymnasium(num_envs: int = 8, steps: int = 2_000, n_step: int | None = None):
    """A plain gymnasium training loop; returns the buffer and seconds spent writing."""
    env = gym.make_vec(
        "CartPole-v1", num_envs=num_envs, vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP},
    )
    adapter = GymVectorAdapter(num_envs, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
    rb = make_replay_buffer(CAPACITY, batch_size=BATCH, seed=SEED, n_step=n_step)
    env.action_space.seed(SEED)
    obs, _ = env.reset(seed=SEED)
    write_s = 0.0
    for _ in tqdm(range(steps), unit="step", disable=None, leave=False):  # on a terminal only
        action = env.action_space.sample()
        next_obs, reward, terminated, truncated, infos = env.step(action)
        steps = adapter.step(obs, action, reward, terminated, truncated, infos, next_obs)
        start = time.perf_counter()
        rb.extend(steps)
        write_s += time.perf_counter() - start
        obs = next_obs
    env.close()
    return rb, write_s


def fill_from_collector(num_envs: int = 4, frames: int = 8_192):
    """A TorchRL collector writing into the buffer; returns it and seconds spent writing."""
    env = SerialEnv(num_envs, lambda: GymEnv("CartPole-v1"))
    env.set_seed(SEED)
    torch.manual_seed(SEED)  # the collector's random policy
    rb = make_replay_buffer(CAPACITY, batch_size=BATCH, seed=SEED)
    handed_over = []  # the collector calls this hook right before rb.extend(batch)
    collector = Collector(
        env, policy=None, frames_per_batch=256, total_frames=frames, replay_buffer=rb,
        post_collect_hook=lambda batch: handed_over.append(time.perf_counter()),
    )
    write_s = 0.0
    progress = tqdm(total=frames, unit="frame", disable=None, leave=False)
    for _ in collector:  # each iteration yields once rb.extend has returned
        write_s += time.perf_counter() - handed_over[-1]
        progress.update(256)
    progress.close()
    collector.shutdown()
    return rb, write_s


def sample_rate(rb, rounds: int = 100, repeats: int = 3) -> float:
    """Samples per second: best of ``repeats`` timings of ``rounds`` ``rb.sample()``."""
    rb.sample()  # warm-up
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(rounds):
            rb.sample()
        best = min(best, time.perf_counter() - start)
    return rounds * BATCH / best


def terminal_check(rb) -> str:
    """Terminated transitions whose next observation is out of CartPole's bounds."""
    stored = rb.storage.get(slice(None))
    terminated = stored["next", "terminated"].view(-1)
    final = stored["next", "observation"][terminated]
    ok = (final[:, 0].abs() > X_LIMIT) | (final[:, 2].abs() > THETA_LIMIT)
    return f"{int(ok.sum())}/{int(terminated.sum())}"


def nstep_check(rb) -> str:
    """n-step windows that end in a termination must not bootstrap (discount 0)."""
    if "discount" not in rb.sample().keys():
        return "-"
    batch = rb.sample()
    terminated = batch["next", "terminated"].view(-1)
    ok = (batch["discount"].view(-1)[terminated] == 0).all() and (
        batch["discount"].view(-1)[~terminated] > 0
    ).all()
    return "cut at terminals" if ok else "WRONG"


def checkpoint_round_trip(rb, n_step=None) -> str:
    """dumps into a directory, loads into a fresh buffer, compare the next sample."""
    with tempfile.TemporaryDirectory() as tmp:
        rb.dumps(tmp)
        restored = make_replay_buffer(CAPACITY, batch_size=BATCH, n_step=n_step)
        restored.loads(tmp)
    same = len(restored) == len(rb) and (rb.sample() == restored.sample()).all()
    return "same sample" if same else "MISMATCH"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="torchrl_ext demo: episode-aware replay fed by gymnasium "
        "and by a TorchRL collector."
    )
    parser.add_argument("--steps", type=int, default=2_000,
                        help="vector steps of each gymnasium fill (8 envs)")
    parser.add_argument("--frames", type=int, default=8_192,
                        help="frames of the collector fill (4 envs, batches of 256)")
    args = parser.parse_args(argv)
    rows = []
    started = time.perf_counter()
    for name, fill in [
        ("gymnasium 8 x CartPole (NextStep)", lambda: fill_from_gymnasium(steps=args.steps)),
        ("Collector SerialEnv(4 x CartPole)", lambda: fill_from_collector(frames=args.frames)),
        ("gymnasium 8 x CartPole, n-step 3",
         lambda: fill_from_gymnasium(steps=args.steps, n_step=3)),
    ]:
        print(f"filling: {name} ...", flush=True)
        n_step = 3 if "n-step" in name else None
        rb, write_s = fill()
        n = len(rb)
        rows.append(
            (
                name,
                f"{n:,}",
                f"{int(rb.storage.index.episode_count.sum()):,}",
                f"{n / write_s:,.0f}",
                f"{sample_rate(rb):,.0f}",
                terminal_check(rb),
                nstep_check(rb),
                checkpoint_round_trip(rb, n_step),
            )
        )
    header = (
        "source", "transitions", "episodes", "writes/s", "samples/s", "terminal obs",
        "n-step", "checkpoint",
    )
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]

    def line(cells) -> str:  # first column left-aligned, numbers right-aligned
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        )

    print()
    print(line(header))
    print(line(["-" * w for w in widths]))
    for r in rows:
        print(line(r))
    print()
    notes = [
        ("writes/s", "transitions per second of time spent in rb.extend (env steps excluded)"),
        ("samples/s", f"transitions per second drawn by rb.sample() in batches of {BATCH}"),
        ("terminal obs", "terminated transitions whose next observation is the true,"),
        ("", "out-of-bounds terminal state (not the next episode's reset obs)"),
        ("n-step", "make_replay_buffer(n_step=3): windows ending in a termination get"),
        ("", "discount 0, all others gamma**k (they bootstrap)"),
        ("checkpoint", "rb.dumps(dir), make_replay_buffer(...).loads(dir), same next sample"),
        ("more", "examples/nstep_dqn_cartpole.py (n-step DQN), examples/her_bit_flipping.py (HER)"),
    ]
    show_rows(notes)
    sequence_section()
    model_based_section()
    frames_section()
    print(f"done in {time.perf_counter() - started:.1f} s")


def sequence_section() -> None:
    """Sequences of whole episodes: the quick run of examples/sequence_replay.py, summarized."""
    print()
    print("sequences: Collector SerialEnv(4 x CartPole) -> EpisodeReplayBuffer.add_step"
          "(is_last=...) -> rb.sample() [64, 16] ...", flush=True)
    with contextlib.redirect_stdout(io.StringIO()):  # its own table: see the script
        result = sequence_replay.main(["--quick", "--no-plot", "--seed", str(SEED)])
    rows = [
        ("stored", f"{result['frames']:,} steps in {result['episodes']:,} episodes "
                   f"({result['trajectories']:,} collector trajectories)"),
        ("in-episode", f"{result['sequences_within_episode']:,}/{result['sequences_checked']:,} "
                       "sampled sequences stay inside one episode"),
        ("velocity MSE", f"GRU {result['gru_mse']:.4f}  vs  per-step MLP {result['mlp_mse']:.4f} "
                         f"(mean {result['mean_mse']:.4f}): CartPole velocities from positions"),
        ("", f"only, held-out episodes ({result['seconds']:.1f} s; full run: "
             "examples/sequence_replay.py)"),
    ]
    show_rows(rows)


def show_rows(rows: list[tuple[str, str]]) -> None:
    """A section's results, one labelled line each."""
    for label, text in rows:
        print(f"{label:<14}{text}")


def model_based_section() -> None:
    """Model-based replay: the quick run of examples/model_based_pendulum.py, summarized."""
    print()
    print("model-based: Collector SerialEnv(2 x Pendulum) -> MBReplayBuffer.insert_data_slice "
          "-> generate_batches -> ensemble MLP + CEM ...", flush=True)
    with contextlib.redirect_stdout(io.StringIO()):  # its own table: see the script
        result = model_based_pendulum.main(["--quick", "--no-plot", "--no-progress",
                                            "--seed", str(SEED)])
    (last,) = result["history"][-1:]
    clean, jumps = result["m1"].values()
    rows = [
        ("model", f"held-out one-step MSE {last['heldout_error']:.2e} after "
                  f"{last['transitions']:,.0f} transitions (quick run)"),
        ("planner", f"CEM {last['return']:.0f} vs random {result['random_return']:.0f} on 50-step "
                    "episodes: a smoke test (too short to swing up, weak model); the"),
        ("", "full run, examples/model_based_pendulum.py (~3 CPU-minutes), compares them on 200 steps"),
        ("M1", f"held-out MSE {clean:.2e} trained on real transitions, {jumps:.2e} with "
               "pytorchrl's final -> reset jumps kept"),
    ]
    show_rows(rows)


def frames_section(num_envs: int = 4, steps: int = 3_000, n_frames: int = 4) -> None:
    """Frame stacks and export through d3rlpy's BatchReplayBuffer API."""
    print()
    print(f"frame stacks: gymnasium {num_envs} x CartPole (+ time step) -> BatchReplayBuffer"
          f".append -> sample(256, n_frames={n_frames}, n_steps=3) ...", flush=True)
    # the last observation entry is the step in the episode: stacks can be checked
    env = gym.vector.SyncVectorEnv([
        lambda: gym.wrappers.TimeAwareObservation(gym.make("CartPole-v1"), normalize_time=False)
        for _ in range(num_envs)])
    buffer = BatchReplayBuffer(8_000, env, create_mask=True, mask_size=5, seed=SEED)
    env.action_space.seed(SEED)
    obs, _ = env.reset(seed=SEED)
    reward = np.zeros(num_envs, np.float32)
    terminal = clip = np.zeros(num_envs, bool)
    for _ in range(steps):
        action = env.action_space.sample()
        buffer.append(obs, action, reward, terminal, clip)
        obs, reward, terminal, truncated, _ = env.step(action)
        clip = terminal | truncated
    exact = total = 0
    for _ in range(20):
        batch = buffer.sample(256, n_frames=n_frames, n_steps=3)
        t = batch.observations[:, -1, -1]  # step of o_t
        expected = (t[:, None] - torch.arange(n_frames - 1, -1, -1)).clamp(min=0)
        exact += int((batch.observations[..., -1] == expected).all(-1).sum())
        total += t.numel()
    rows = [
        ("stored", f"{len(buffer):,} transitions (maxlen {buffer.maxlen:,}), each frame once"),
        ("sample", f"observations {tuple(batch.observations.shape)}, masks "
                   f"{tuple(batch.masks.shape)}, n_steps up to {int(batch.n_steps.max())}"),
        ("exact stacks", f"{exact:,}/{total:,} stacks are the true last {n_frames} steps "
                         "(episode starts padded with the first observation)"),
    ]
    with tempfile.TemporaryDirectory() as path:
        save_episodes(buffer.rb, path)
        back = load_buffer(path, seed=SEED)
        held = episodes_of(buffer.rb)
        rows.append(("export", f"{len(held)} episodes ({sum(not e.finished for e in held)} still "
                               f"running), reloaded: {len(back):,} transitions"))
    try:
        dataset = buffer.to_mdp_dataset()
        steps = sum(len(e.rewards) for e in dataset.episodes)
        rows.append(("d3rlpy", f"MDPDataset: {len(dataset.episodes)} episodes, {steps:,} steps "
                               "(running episodes end with a timeout, not terminal)"))
    except ImportError as error:
        rows.append(("d3rlpy", f"skipped: {error}"))
    show_rows(rows)


if __name__ == "__main__":
    main()
