"""
Frame-stack DQN on velocity-free CartPole
=========================================

DQN on CartPole without velocities: frame stacks from the replay buffer make it solvable.

Run with ``.venv/bin/python examples/frame_stack_dqn.py`` (``--help`` for options).

CartPole-v1's observation is (cart position, cart velocity, pole angle, pole
angular velocity); here the velocities are removed, so a single observation
does not say where the pole is going. The agent stores each observation once
in :class:`torchrl_ext.BatchReplayBuffer` (d3rlpy's API) and samples stacks of
the last ``n_frames`` observations of the same episode (frames before the
episode start repeat its first observation, the rule it also uses when
acting). With ``n_frames=4`` the velocities can be read off the stack and DQN
learns to balance (mean greedy return >= 195); with ``n_frames=1`` it cannot.

Both runs are trained with the same seed and settings (3-step returns, double
DQN, a soft-updated target network); their evaluation curves are plotted with
matplotlib (``--plot``, by default ``frame_stack_dqn.png`` in the current directory).
``--quick`` is a tiny run used by the tests.
"""
from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from tqdm import tqdm

from torchrl_ext import BatchReplayBuffer

DEFAULT_PLOT = Path("frame_stack_dqn.png")  # in the current directory
KEEP = [0, 2]  # cart position, pole angle: the velocities are dropped
SCALE = np.array([1 / 2.4, 1 / 0.21], np.float32)  # both to about [-1, 1] (termination bounds)
GAMMA, N_STEPS = 0.99, 3


class NoVelocity(gym.ObservationWrapper):
    """CartPole's observation without its two velocity entries, scaled to about [-1, 1]."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        box = env.observation_space
        self.observation_space = gym.spaces.Box(
            box.low[KEEP] * SCALE, box.high[KEEP] * SCALE, dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return (observation[KEEP] * SCALE).astype(np.float32)


def make_env() -> gym.Env:
    return NoVelocity(gym.make("CartPole-v1"))


class Stacks:
    """The agent's own stacks of the last ``n`` observations per env, padded as the buffer pads."""

    def __init__(self, first: np.ndarray, n: int) -> None:
        self.frames = np.repeat(first[:, None], n, axis=1)  # [envs, n, 2]

    def push(self, obs: np.ndarray, restart: np.ndarray) -> None:
        self.frames[:, :-1] = self.frames[:, 1:]
        self.frames[:, -1] = obs
        # an episode's first observation fills the whole stack
        self.frames[restart] = obs[restart][:, None]

    def tensor(self) -> torch.Tensor:
        return torch.from_numpy(self.frames.reshape(len(self.frames), -1))


def q_network(n_frames: int) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(2 * n_frames, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 2),
    )


def evaluate(q: torch.nn.Module, n_frames: int, episodes: int, seed: int) -> float:
    """Mean return of the greedy policy over ``episodes`` episodes (500 at most)."""
    env = make_env()
    returns = []
    for e in range(episodes):
        obs, _ = env.reset(seed=seed + e)
        stacks = Stacks(obs[None], n_frames)
        total, done = 0.0, False
        while not done:
            with torch.no_grad():
                action = int(q(stacks.tensor()).argmax(-1))
            obs, reward, terminated, truncated, _ = env.step(action)
            stacks.push(obs[None], np.zeros(1, bool))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns))


def train(n_frames: int, args: argparse.Namespace) -> list[tuple[int, float]]:
    """Train DQN with ``n_frames`` stacks; returns ``(env steps, eval return)`` points."""
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    env = gym.vector.SyncVectorEnv([make_env for _ in range(args.envs)])
    buffer = BatchReplayBuffer(args.capacity, env, seed=args.seed)
    q = q_network(n_frames)
    target = copy.deepcopy(q)
    optim = torch.optim.Adam(q.parameters(), lr=args.lr)

    obs, _ = env.reset(seed=args.seed)
    stacks = Stacks(obs, n_frames)
    reward = np.zeros(args.envs, np.float32)
    terminal = clip = np.zeros(args.envs, bool)
    history: list[tuple[int, float]] = []
    eval_every = max(args.steps // args.stages, 1)
    bar = tqdm(range(1, args.steps + 1), desc=f"n_frames={n_frames}", disable=args.quiet)
    for step in bar:
        epsilon = max(0.02, 1.0 - step / (0.25 * args.steps))
        with torch.no_grad():
            greedy = q(stacks.tensor()).argmax(-1).numpy()
        action = np.where(rng.random(args.envs) < epsilon, rng.integers(0, 2, args.envs), greedy)
        # d3rlpy's convention: the observation, the action taken there, the reward of arriving
        buffer.append(obs, action, reward, terminal, clip)
        restart = clip  # envs that just ended: this step resets them (gymnasium NEXT_STEP)
        obs, reward, terminated, truncated, _ = env.step(action)
        terminal, clip = terminated, terminated | truncated
        stacks.push(obs, restart)
        if len(buffer) >= args.warmup:
            batch = buffer.sample(args.batch_size, n_frames=n_frames, n_steps=N_STEPS, gamma=GAMMA)
            flat = lambda x: x.reshape(x.shape[0], -1)  # noqa: E731  [B, F, 2] -> [B, 2F]
            with torch.no_grad():
                next_obs = flat(batch.next_observations)
                best = q(next_obs).argmax(-1, keepdim=True)  # double DQN
                bootstrap = target(next_obs).gather(-1, best)
                y = batch.td_rewards + GAMMA ** batch.n_steps * (1 - batch.terminals) * bootstrap
            q_taken = q(flat(batch.observations)).gather(-1, batch.actions.long().unsqueeze(-1))
            loss = torch.nn.functional.smooth_l1_loss(q_taken, y)
            optim.zero_grad()
            loss.backward()
            optim.step()
            with torch.no_grad():
                for p, p_target in zip(q.parameters(), target.parameters()):
                    p_target.lerp_(p, args.tau)
        if step % eval_every == 0:
            score = evaluate(q, n_frames, args.eval_episodes, seed=10_000 + step)
            history.append((step * args.envs, score))
            bar.set_postfix(eval_return=f"{score:.0f}")
            if args.quiet:
                print(f"n_frames={n_frames}  env steps {step * args.envs:>7}  "
                      f"eval return {score:6.1f}", flush=True)
    env.close()
    return history


def plot(path: Path, curves: dict[int, list[tuple[int, float]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for n_frames, history in curves.items():
        ax.plot([f for f, _ in history], [r for _, r in history], marker="o",
                label=f"n_frames={n_frames}")
    ax.axhline(195, color="grey", linestyle="--", linewidth=1, label="solved (195)")
    ax.set_xlabel("env steps")
    ax.set_ylabel("greedy evaluation return")
    ax.set_title("DQN on CartPole without velocities")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[int, list[tuple[int, float]]]:
    parser = argparse.ArgumentParser(description='DQN on CartPole without velocities: frame stacks from the replay buffer make it solvable.')
    parser.add_argument("--steps", type=int, default=20_000, help="vector-env steps per run")
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--frames", type=int, nargs="+", default=[4, 1], help="n_frames of each run")
    parser.add_argument("--stages", type=int, default=10, help="evaluation points")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--capacity", type=int, default=50_000)
    parser.add_argument("--warmup", type=int, default=1_000, help="transitions before updates")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--tau", type=float, default=0.005, help="target network update rate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT, help="PNG file to write")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--quick", action="store_true", help="a tiny run (for the tests)")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.stages, args.eval_episodes, args.warmup = 300, 2, 1, 200
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 128-wide MLP gains nothing from more threads
    try:
        curves = {}
        for n_frames in args.frames:
            started = time.perf_counter()
            curves[n_frames] = train(n_frames, args)
            last = np.mean([r for _, r in curves[n_frames][-2:]])
            print(f"n_frames={n_frames}: final eval return {curves[n_frames][-1][1]:.1f} "
                  f"(mean of the last two evaluations {last:.1f}), "
                  f"{time.perf_counter() - started:.0f}s")
    finally:
        torch.set_num_threads(threads)
    if args.plot is not None:
        plot(args.plot, curves)
        print(f"plot: {args.plot}")
    return curves


if __name__ == "__main__":
    main()
