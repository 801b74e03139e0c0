"""
Sequence replay for a recurrent model
=====================================

A GRU infers CartPole's hidden velocities from positions only. Run with
``.venv/bin/python examples/sequence_replay.py`` (``--quick`` for a few-second run,
``--help`` for options).

A TorchRL ``Collector`` steps ``SerialEnv(4, CartPole-v1)`` with a random
policy. Each ``[4, T]`` batch it yields is written step by step into an
:class:`torchrl_ext.EpisodeReplayBuffer` over a :class:`torchrl_ext.RingBufferDataset`::

    rb.add_step({"observation": ..., "action": ..., ...}, is_last=td["next", "done"][:, t, 0])

(``is_last``: this step ends its env's episode; TorchRL's ``("next", ...)``
entries hold the true final observation). ``rb.sample()`` then returns
``[batch, length]`` sequences of consecutive steps, each inside one episode.

The task needs memory: the model sees only the cart position ``x``, the pole
angle ``theta`` and the action taken, never the velocities, and must predict
the velocities ``(x_dot, theta_dot)`` of the current state. One position says
nothing about the velocity; two consecutive positions and the action between
them determine it (CartPole integrates with Euler steps of 0.02 s). A GRU over
the sequence can learn this; a feed-forward network on the same per-step
inputs cannot, and stays near the variance of the targets. Both are trained on
the same sampled batches and evaluated on sequences of held-out episodes
(another collector run, another seed); the first ``BURN_IN`` steps of each
sequence are not scored (no history yet).

Every sampled sequence is checked to stay within one episode: one TorchRL
trajectory id along it, ``next_observation[t] == observation[t + 1]``, and no
episode end before its last step.
"""
from __future__ import annotations

import argparse
import logging
import time
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.envs import GymEnv, SerialEnv
from tqdm import tqdm

with warnings.catch_warnings():
    # torchrl 0.14 warns about its own weight updaters when torchrl.collectors is imported
    warnings.filterwarnings(
        "ignore", message=r"Creating \w+ which inherits from WeightUpdaterBase",
        category=DeprecationWarning,
    )
    from torchrl.collectors import Collector

from torchrl_ext import EpisodeReplayBuffer, RingBufferDataset

logging.getLogger("torchrl").setLevel(logging.WARNING)

NUM_ENVS = 4
FRAMES_PER_BATCH = 256  # 64 steps of each env per collector batch
SEQUENCE_LENGTH = 16
BATCH_SIZE = 64
BURN_IN = 2  # steps at the start of a sequence left out of the loss (no history yet)
EVAL_BATCHES = 8  # held-out batches, sampled once
EVAL_SEED_OFFSET = 10_000  # SerialEnv seeds env i with seed + i: keep the held-out envs apart
POSITIONS, VELOCITIES = [0, 2], [1, 3]  # CartPole obs: x, x_dot, theta, theta_dot
DEFAULT_PLOT = Path("sequence_replay.png")  # in the current directory


# ------------------------------------------------------------------ collection
def fill(rb: EpisodeReplayBuffer, frames: int, seed: int) -> int:
    """Collect ``frames`` random-policy frames into ``rb``, one ``add_step`` per time step.

    Returns the number of distinct TorchRL trajectories (episodes) seen.
    """
    torch.manual_seed(seed)  # the collector's random policy draws from torch's global RNG
    env = SerialEnv(NUM_ENVS, lambda: GymEnv("CartPole-v1"))
    env.set_seed(seed)
    collector = Collector(env, policy=None, frames_per_batch=FRAMES_PER_BATCH,
                          total_frames=frames)
    trajectories: set[int] = set()
    threads = torch.get_num_threads()
    try:
        for td in collector:  # [NUM_ENVS, T]
            add_batch(rb, td)
            trajectories.update(td["collector", "traj_ids"].unique().tolist())
    finally:
        collector.shutdown()
        # closing a SerialEnv raises torch's thread count (torchrl 0.14 gives its
        # workers' threads back even when it ran none): keep ours
        torch.set_num_threads(threads)
    rb.flush()  # the episodes still running when collection stopped
    return len(trajectories)


def add_batch(rb: EpisodeReplayBuffer, td: TensorDictBase) -> None:
    """Write a collector batch ``[num_envs, T]`` to ``rb``, time step by time step."""
    observation, next_observation = td["observation"], td["next", "observation"]
    action = td["action"].argmax(-1)  # GymEnv's CartPole actions are one-hot
    reward, done = td["next", "reward"], td["next", "done"]
    traj_id = td["collector", "traj_ids"]
    for t in range(td.shape[1]):
        rb.add_step(
            {
                "observation": observation[:, t],
                "action": action[:, t],
                "reward": reward[:, t],
                "next_observation": next_observation[:, t],
                "done": done[:, t],
                "traj_id": traj_id[:, t],
            },
            is_last=done[:, t, 0],
        )


def within_one_episode(batch: TensorDictBase) -> torch.Tensor:
    """``[B]`` bool: each sampled sequence is consecutive steps of a single episode."""
    same_traj = (batch["traj_id"] == batch["traj_id"][:, :1]).all(-1)
    chained = (batch["next_observation"][:, :-1] == batch["observation"][:, 1:]).all(-1).all(-1)
    no_early_end = ~batch["done"][:, :-1].reshape(batch.shape[0], -1).any(-1)
    return same_traj & chained & no_early_end


# ---------------------------------------------------------------------- models
def features(batch: TensorDictBase) -> torch.Tensor:
    """``[B, L, 3]`` model input: x, theta (velocities masked out) and the action as +-1."""
    positions = batch["observation"][..., POSITIONS]
    action = batch["action"].to(positions.dtype).unsqueeze(-1) * 2 - 1
    return torch.cat([positions * 10.0, action], -1)  # positions are ~0.1: scale them up


def targets(batch: TensorDictBase) -> torch.Tensor:
    """``[B, L, 2]``: the hidden velocities x_dot, theta_dot."""
    return batch["observation"][..., VELOCITIES]


class GRUEstimator(nn.Module):
    """GRU over the sequence, a linear read-out of the velocities at each step."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.gru = nn.GRU(3, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.gru(x)[0])


def mlp_estimator(hidden: int) -> nn.Module:
    """Feed-forward baseline: each step's velocities from that step's input only."""
    return nn.Sequential(nn.Linear(3, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, 2))


def scored_mse(model: nn.Module, batch: TensorDictBase) -> torch.Tensor:
    """Mean squared velocity error over the steps after ``BURN_IN``."""
    error = model(features(batch)) - targets(batch)
    return error[:, BURN_IN:].pow(2).mean()


# ------------------------------------------------------------------------ plot
def plot(path: Path, steps: list[int], curves: dict[str, list[float]], title: str) -> plt.Figure:
    """Held-out MSE (log scale) against training steps, one line per model; saved to ``path``."""
    fig, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
    for name, curve in curves.items():
        ax.plot(steps, curve, label=name, linestyle="--" if name == "mean predictor" else "-")
    ax.set(xlabel="training steps", ylabel="held-out velocity MSE", yscale="log", title=title)
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return fig


# ------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(
        description="Sequence replay: a GRU infers CartPole's hidden velocities "
        "from positions only."
    )
    parser.add_argument("--frames", type=int, help="training env frames (default 8,192; "
                        "held-out: a quarter as many more)")
    parser.add_argument("--steps", type=int, help="gradient steps per model (default 1,000)")
    parser.add_argument("--quick", action="store_true",
                        help="a few-second run: defaults of 2,048 frames and 150 steps")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT, help="image file to write")
    parser.add_argument("--no-plot", action="store_true", help="draw no plot")
    args = parser.parse_args(argv)
    if args.frames is None:
        args.frames = 2_048 if args.quick else 8_192
    if args.steps is None:
        args.steps = 150 if args.quick else 1_000
    # one intra-op thread: tiny networks gain nothing from more threads
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return run(args)
    finally:
        torch.set_num_threads(threads)


def run(args: argparse.Namespace) -> dict[str, float]:
    started = time.perf_counter()
    frames = -(-args.frames // FRAMES_PER_BATCH) * FRAMES_PER_BATCH  # whole collector batches
    eval_frames = max(frames // 4, 2 * FRAMES_PER_BATCH)
    # capacity = every collected frame: no episode is evicted
    rb = EpisodeReplayBuffer(RingBufferDataset(frames), batch_size=BATCH_SIZE,
                             sequence_length=SEQUENCE_LENGTH, seed=args.seed)
    eval_rb = EpisodeReplayBuffer(RingBufferDataset(eval_frames), batch_size=BATCH_SIZE,
                                  sequence_length=SEQUENCE_LENGTH, seed=args.seed + 1)
    trajectories = fill(rb, frames, args.seed)
    fill(eval_rb, eval_frames, args.seed + EVAL_SEED_OFFSET)
    collect_s = time.perf_counter() - started
    print(f"collected {rb.num_timesteps:,} frames, {rb.num_episodes:,} episodes "
          f"({trajectories:,} collector trajectories); held out {eval_rb.num_timesteps:,} "
          f"frames, {eval_rb.num_episodes:,} episodes  [{collect_s:.1f} s]", flush=True)

    checked = within = 0

    def sample(buffer: EpisodeReplayBuffer) -> TensorDictBase:
        nonlocal checked, within
        batch = buffer.sample()
        ok = within_one_episode(batch)
        checked += ok.numel()
        within += int(ok.sum())
        return batch

    eval_set = [sample(eval_rb) for _ in range(EVAL_BATCHES)]
    mean_mse = torch.stack([
        (targets(b) - targets(b).flatten(0, 1).mean(0))[:, BURN_IN:].pow(2).mean()
        for b in eval_set
    ]).mean().item()  # predicting the mean velocity: the floor without information

    torch.manual_seed(args.seed)
    models = {"GRU": GRUEstimator(args.hidden), "MLP": mlp_estimator(args.hidden)}
    optims = {name: torch.optim.Adam(m.parameters(), lr=args.lr) for name, m in models.items()}

    def evaluate() -> dict[str, float]:
        with torch.no_grad():
            return {name: torch.stack([scored_mse(m, b) for b in eval_set]).mean().item()
                    for name, m in models.items()}

    eval_every = max(args.steps // 10, 1)
    history_steps, history = [0], {name: [v] for name, v in evaluate().items()}
    print(f"{'step':>6}  {'GRU MSE':>9}  {'MLP MSE':>9}  {'time':>6}")
    train_started = time.perf_counter()
    # on a terminal only (disable=None); the table lines go above the bar
    for step in tqdm(range(1, args.steps + 1), unit="step", disable=None, leave=False):
        batch = sample(rb)  # the same batch for both models
        for name, model in models.items():
            loss = scored_mse(model, batch)
            optims[name].zero_grad()
            loss.backward()
            optims[name].step()
        if step % eval_every == 0 or step == args.steps:
            scores = evaluate()
            history_steps.append(step)
            for name, value in scores.items():
                history[name].append(value)
            tqdm.write(f"{step:>6}  {scores['GRU']:>9.4f}  {scores['MLP']:>9.4f}  "
                       f"{time.perf_counter() - train_started:>5.1f}s")
    rb.close()
    eval_rb.close()

    result = {
        "gru_mse": history["GRU"][-1],
        "mlp_mse": history["MLP"][-1],
        "mean_mse": mean_mse,
        "sequences_checked": checked,
        "sequences_within_episode": within,
        "episodes": rb.num_episodes,
        "trajectories": trajectories,
        "frames": rb.num_timesteps,
        "seconds": time.perf_counter() - started,
    }
    if not args.no_plot:
        history["mean predictor"] = [mean_mse] * len(history_steps)
        plot(args.plot, history_steps, history,
             f"CartPole velocities from positions ({frames:,} frames, seed {args.seed})")
        print(f"plot: {args.plot}")
    print(f"held-out velocity MSE after {args.steps} steps (sequences of {SEQUENCE_LENGTH}, "
          f"first {BURN_IN} steps unscored):")
    print(f"  GRU over positions + actions   {result['gru_mse']:.4f}")
    print(f"  MLP, same inputs, per step     {result['mlp_mse']:.4f}")
    print(f"  mean velocity (no information) {mean_mse:.4f}")
    print(f"  GRU / MLP                      {result['gru_mse'] / result['mlp_mse']:.3f}")
    print(f"within one episode: {within}/{checked} sampled sequences")
    print(f"done in {result['seconds']:.1f} s")
    return result


if __name__ == "__main__":
    main()
