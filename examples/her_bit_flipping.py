"""
Hindsight experience replay on bit flipping
===========================================

DQN with and without hindsight experience replay on the bit-flipping task.

The task of the HER paper (Andrychowicz et al., 2017, §3.1): a state of ``n``
bits and a goal of ``n`` bits, both random; an action flips one bit; the
reward is ``0`` when the state equals the goal and ``-1`` otherwise; an
episode terminates on success and is truncated after ``n`` steps. With 15 bits
a random policy almost never sees a reward of ``0``, so plain DQN learns
nothing, while DQN over :class:`torchrl_ext.HerReplayStorage` (``"future"``
goals, ``k = 4``) solves it.

Run::

    python examples/her_bit_flipping.py --n-bits 15

(``--quick`` for a run of a few seconds on 6 bits, ``--help`` for options). The
greedy success rate of both agents is measured at ``--stages`` points of
training and plotted (``--plot``, by default ``her_bit_flipping.png`` in the current directory;
the figure stays open for notebooks and the docs' gallery). The last two lines
are the final success rates, e.g. ``HER success: 0.98`` then ``DQN success: 0.00``.
"""
from __future__ import annotations

import argparse
import copy
import logging
import time
from pathlib import Path

import gymnasium as gym
import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from torchrl_ext import HerReplayStorage

logging.getLogger("torchrl").setLevel(logging.WARNING)  # storage allocation logs

DEFAULT_PLOT = Path("her_bit_flipping.png")  # in the current directory


class BitFlippingVecEnv(gym.vector.VectorEnv):
    """``num_envs`` bit-flipping envs stepped together in numpy (SAME_STEP autoreset).

    Observations are ``Dict(observation, achieved_goal, desired_goal)`` of
    ``MultiBinary(n)`` (int8); ``achieved_goal`` is the state. A done env is
    reset inside the step, its true final observation goes to
    ``infos["final_obs"]`` (gymnasium's ``SAME_STEP`` mode).
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, n_bits: int, num_envs: int) -> None:
        self.n_bits, self.num_envs = n_bits, num_envs
        bits = gym.spaces.MultiBinary(n_bits)
        self.single_observation_space = gym.spaces.Dict(
            observation=bits, achieved_goal=bits, desired_goal=bits
        )
        self.single_action_space = gym.spaces.Discrete(n_bits)
        batch_space = gym.vector.utils.batch_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._rng = np.random.default_rng()
        self.state = np.zeros((num_envs, n_bits), np.int8)
        self.goal = np.zeros((num_envs, n_bits), np.int8)
        self.t = np.zeros(num_envs, np.int64)

    def _obs(self) -> dict[str, np.ndarray]:
        return {"observation": self.state.copy(), "achieved_goal": self.state.copy(),
                "desired_goal": self.goal.copy()}

    def _reset_envs(self, mask: np.ndarray) -> None:
        k = int(mask.sum())
        self.state[mask] = self._rng.integers(0, 2, (k, self.n_bits), dtype=np.int8)
        self.goal[mask] = self._rng.integers(0, 2, (k, self.n_bits), dtype=np.int8)
        self.t[mask] = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._reset_envs(np.ones(self.num_envs, bool))
        return self._obs(), {}

    def step(self, actions):
        actions = np.asarray(actions, np.int64).reshape(self.num_envs)
        self.state[np.arange(self.num_envs), actions] ^= 1
        self.t += 1
        success = (self.state == self.goal).all(-1)
        reward = np.where(success, 0.0, -1.0).astype(np.float32)
        terminated = success
        truncated = ~success & (self.t >= self.n_bits)
        done = terminated | truncated
        infos: dict = {}
        if done.any():
            final = self._obs()
            infos["final_obs"] = np.array(
                [{k: v[i] for k, v in final.items()} if done[i] else None
                 for i in range(self.num_envs)], dtype=object)
            infos["_final_obs"] = done.copy()
            self._reset_envs(done)
        return self._obs(), reward, terminated, truncated, infos


def q_input(obs) -> torch.Tensor:
    """concat(observation, desired_goal) as float."""
    return torch.cat([torch.as_tensor(obs["observation"]), torch.as_tensor(obs["desired_goal"])],
                     -1).float()


def train(args: argparse.Namespace, her: bool) -> list[tuple[int, float]]:
    """Train DQN (over HER replay if ``her``); returns ``(episodes, greedy success rate)``
    at each of ``args.stages`` evaluation points."""
    torch.manual_seed(args.seed)
    n, num_envs = args.n_bits, args.num_envs
    env = BitFlippingVecEnv(n, num_envs)
    storage = HerReplayStorage(
        env.single_observation_space, env.single_action_space,
        storage_size=args.buffer_size, num_envs=num_envs, batch_size=args.batch_size,
        goal_selection_strategy="future", num_goals=4 if her else 0,
        # relabelled successes end their episode: no bootstrap past them
        terminated_fn=lambda achieved, desired, infos: (achieved == desired).all(-1),
        autoreset_mode="SameStep", seed=args.seed,
        native=True,  # stored dtypes: int64 actions for gather, bool flags
    )
    q = nn.Sequential(nn.Linear(2 * n, args.hidden), nn.ReLU(),
                      nn.Linear(args.hidden, args.hidden), nn.ReLU(), nn.Linear(args.hidden, n))
    target = copy.deepcopy(q).requires_grad_(False)
    optim = torch.optim.Adam(q.parameters(), lr=args.lr)
    rng = np.random.default_rng(args.seed)
    obs, _ = env.reset(seed=args.seed)
    total_steps = args.episodes * n // num_envs  # vector steps (an episode is at most n steps)
    stage_at = {round(total_steps * (i + 1) / args.stages) for i in range(args.stages)}
    history: list[tuple[int, float]] = []
    # on a terminal only (disable=None)
    progress = tqdm(range(1, total_steps + 1), desc="HER" if her else "DQN", unit="step",
                    disable=None, leave=False)
    for it in progress:
        eps = max(args.eps_end, 1.0 - it / (args.eps_decay * total_steps))
        with torch.no_grad():
            greedy = q(q_input(obs)).argmax(-1).numpy()
        explore = rng.random(num_envs) < eps
        action = np.where(explore, rng.integers(0, n, num_envs), greedy)
        nxt, reward, terminated, truncated, infos = env.step(action)
        storage.add(obs, action, reward, terminated, truncated, infos, nxt)
        obs = nxt
        if it in stage_at:
            history.append((it * num_envs // n, evaluate(q, n, num_envs, args.eval_episodes,
                                                         args.seed + 1)))
        if len(storage) < args.batch_size:
            continue
        for _ in range(args.updates_per_step):
            batch = storage.sample()
            with torch.no_grad():
                next_q = target(q_input(batch.next_observations)).max(-1, keepdim=True).values
                y = batch.rewards + args.gamma * (~batch.terminateds) * next_q
                y = y.clamp(-1.0 / (1.0 - args.gamma), 0.0)
            pred = q(q_input(batch.observations)).gather(-1, batch.actions)
            loss = nn.functional.smooth_l1_loss(pred, y)
            optim.zero_grad()
            loss.backward()
            optim.step()
            with torch.no_grad():
                for p, tp in zip(q.parameters(), target.parameters()):
                    tp.lerp_(p, args.tau)
    return history


def evaluate(q: nn.Module, n: int, num_envs: int, episodes: int, seed: int) -> float:
    """Greedy success rate over ``episodes`` episodes."""
    env = BitFlippingVecEnv(n, num_envs)
    obs, _ = env.reset(seed=seed)
    successes = done_count = 0
    while done_count < episodes:
        with torch.no_grad():
            action = q(q_input(obs)).argmax(-1).numpy()
        obs, _, terminated, truncated, _ = env.step(action)
        successes += int(terminated.sum())
        done_count += int((terminated | truncated).sum())
    return successes / done_count


def plot(path: Path, curves: dict[str, list[tuple[int, float]]], title: str) -> plt.Figure:
    """Greedy success rate against training episodes, one line per agent; saved to ``path``."""
    fig, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
    for name, curve in curves.items():
        ax.plot([e for e, _ in curve], [r for _, r in curve], marker="o", label=name)
    ax.set(xlabel="training episodes", ylabel="greedy success rate", ylim=(-0.02, 1.02),
           title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return fig


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(
        description="DQN with and without hindsight experience replay on the bit-flipping task."
    )
    parser.add_argument("--n-bits", type=int, default=15)
    parser.add_argument("--episodes", type=int, default=2000, help="training episodes per agent")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--updates-per-step", type=int, default=1)
    parser.add_argument("--buffer-size", type=int, default=200_000)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--gamma", type=float, default=0.98)
    parser.add_argument("--tau", type=float, default=0.05)
    parser.add_argument("--eps-end", type=float, default=0.05)
    parser.add_argument("--eps-decay", type=float, default=0.3,
                        help="fraction of training over which epsilon decays to --eps-end")
    parser.add_argument("--eval-episodes", type=int, default=256)
    parser.add_argument("--stages", type=int, default=5, help="evaluation points")
    parser.add_argument("--quick", action="store_true",
                        help="a run of a few seconds: 6 bits, 600 episodes, 64 eval episodes")
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT, help="image file to write")
    parser.add_argument("--no-plot", action="store_true", help="draw no plot")
    args = parser.parse_args(argv)
    if args.quick:
        args.n_bits, args.episodes, args.eval_episodes, args.stages = 6, 600, 64, 3
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small networks: one thread is fastest
    curves = {}
    try:
        for name, her in (("HER", True), ("DQN", False)):
            start = time.perf_counter()
            curves[name] = train(args, her)
            print(f"{name}: {args.episodes} episodes of {args.n_bits} bits in "
                  f"{time.perf_counter() - start:.1f} s", flush=True)
    finally:
        torch.set_num_threads(threads)
    if not args.no_plot:
        plot(args.plot, curves, f"DQN on {args.n_bits}-bit flipping, with and without HER")
        print(f"plot: {args.plot}")
    results = {name: curve[-1][1] for name, curve in curves.items()}
    print(f"HER success: {results['HER']:.2f}")
    print(f"DQN success: {results['DQN']:.2f}")
    return results


if __name__ == "__main__":
    main()
