"""
Offline export to d3rlpy
========================

Fill a replay buffer online, export it, and train an offline d3rlpy algorithm on the export.

Run with ``.venv/bin/python examples/offline_export.py`` (``--help`` for options;
needs the ``d3rlpy`` extra, which ``make test`` installs).

1. A noisy heuristic controller plays CartPole-v1 in 4 envs; every step goes
   into :class:`torchrl_ext.BatchReplayBuffer` (d3rlpy 1.0's online API). The
   buffer is smaller than what is played, so old episodes are dropped, and
   each env's last episode is still running when we stop.
2. :meth:`~torchrl_ext.BatchReplayBuffer.to_mdp_dataset` exports exactly the
   held episodes to a d3rlpy 2.x ``MDPDataset`` (running episodes end with a
   timeout: not marked finished).
3. d3rlpy's ``DiscreteCQL`` trains on the export for ``--steps`` gradient steps
   and its greedy policy is evaluated in the env, next to the behaviour policy.
"""
from __future__ import annotations

import argparse
import warnings

import gymnasium as gym
import numpy as np

from torchrl_ext import BatchReplayBuffer


def behaviour(obs: np.ndarray, rng: np.random.Generator, noise: float) -> np.ndarray:
    """Push toward where the pole is falling; a random action with probability ``noise``."""
    greedy = (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)
    return np.where(rng.random(len(obs)) < noise, rng.integers(0, 2, len(obs)), greedy)


def collect(args: argparse.Namespace) -> tuple[BatchReplayBuffer, float]:
    """Play ``args.collect`` vector steps into a buffer; returns it and the behaviour's mean return."""
    rng = np.random.default_rng(args.seed)
    env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(4)])
    buffer = BatchReplayBuffer(args.capacity, env, seed=args.seed)
    obs, _ = env.reset(seed=args.seed)
    reward = np.zeros(4, np.float32)
    terminal = clip = np.zeros(4, bool)
    returns, running = [], np.zeros(4)
    for _ in range(args.collect):
        action = behaviour(obs, rng, args.noise)
        buffer.append(obs, action, reward, terminal, clip)
        obs, reward, terminated, truncated, _ = env.step(action)
        running += reward
        ended = terminated | truncated
        returns += running[ended].tolist()
        running[ended] = 0.0
        terminal, clip = terminated, ended
    env.close()
    return buffer, float(np.mean(returns))


def evaluate(algo, episodes: int, seed: int) -> float:
    env = gym.make("CartPole-v1")
    returns = []
    for e in range(episodes):
        obs, _ = env.reset(seed=seed + e)
        total, done = 0.0, False
        while not done:
            action = int(algo.predict(obs[None].astype(np.float32))[0])
            obs, reward, terminated, truncated, _ = env.step(action)
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description='Fill a replay buffer online, export it, and train an offline d3rlpy algorithm on the export.')
    parser.add_argument("--collect", type=int, default=5_000, help="vector-env steps (4 envs)")
    parser.add_argument("--capacity", type=int, default=15_000, help="buffer maxlen (transitions)")
    parser.add_argument("--noise", type=float, default=0.3, help="behaviour's random-action rate")
    parser.add_argument("--steps", type=int, default=5_000, help="offline gradient steps")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a tiny run (for the tests)")
    args = parser.parse_args(argv)
    if args.quick:
        args.collect, args.capacity, args.steps, args.eval_episodes = 300, 600, 50, 1

    buffer, behaviour_return = collect(args)
    dataset = buffer.to_mdp_dataset()
    finished = sum(bool(e.terminated) for e in dataset.episodes)
    print(f"buffer: {len(buffer)} transitions held (maxlen {buffer.maxlen}); export: "
          f"{len(dataset.episodes)} episodes, {finished} ended by termination, "
          f"{dataset.transition_count} transitions")

    import d3rlpy  # the `d3rlpy` extra
    import torch

    torch.set_num_threads(1)  # small networks: more threads only contend
    d3rlpy.seed(args.seed)
    cql = d3rlpy.algos.DiscreteCQLConfig(batch_size=64, learning_rate=3e-4, alpha=1.0,
                                         target_update_interval=500).create(device="cpu:0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # d3rlpy's notices about its logger and gym
        cql.fit(dataset, n_steps=args.steps, n_steps_per_epoch=args.steps, show_progress=True,
                logger_adapter=d3rlpy.logging.NoopAdapterFactory(), save_interval=10**9)
    cql_return = evaluate(cql, args.eval_episodes, seed=args.seed + 1000)
    print(f"behaviour policy (noise {args.noise}): mean return {behaviour_return:.1f}")
    print(f"DiscreteCQL after {args.steps} offline steps: mean greedy return {cql_return:.1f}")
    return {"behaviour": behaviour_return, "cql": cql_return, "transitions": len(buffer),
            "exported": dataset.transition_count}


if __name__ == "__main__":
    main()
