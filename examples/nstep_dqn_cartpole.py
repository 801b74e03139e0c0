"""
n-step DQN on CartPole-v1
=========================

A TorchRL collector writing into an n-step replay buffer. Run with
``.venv/bin/python examples/nstep_dqn_cartpole.py`` (``--quick`` for a run of a few
seconds, ``--help`` for options).

A TorchRL ``Collector`` steps ``SerialEnv(4, CartPole-v1)`` with an epsilon-greedy
``QValueActor`` and writes every batch into ``make_replay_buffer(..., n_step=3)``
(``replay_buffer=rb``). Each sample is a 3-step transition in TorchRL's layout:
``("next", "reward")`` is the discounted return over the window, ``("next",
"observation")`` the observation after it and ``"steps_to_next_obs"`` its length
``k`` (shorter at an episode's end). TorchRL's ``DQNLoss`` with a TD(0) value
estimator reads ``"steps_to_next_obs"``, so its target is

    ("next", "reward") + gamma**k * (1 - ("next", "terminated")) * max_a Q_target(("next", "observation"), a)

i.e. ``reward + rb_sample["discount"] * max Q_target``: the true n-step target. A
truncated episode (500 steps) still bootstraps; only a termination cuts it.

At ``--stages`` evenly spaced points the greedy policy is evaluated on a separate
env (mean return over ``--eval-episodes``, 500 at most); one table line is printed
per stage and the curve is drawn with matplotlib and saved (``--plot``, by default
``nstep_dqn_cartpole.png`` in the current directory; the figure stays open
for notebooks and the docs' gallery).
"""
from __future__ import annotations

import argparse
import logging
import time
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from tensordict.nn import TensorDictSequential
from torchrl.envs import GymEnv, SerialEnv
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import MLP, EGreedyModule, QValueActor
from torchrl.objectives import DQNLoss, SoftUpdate, ValueEstimators
from tqdm import tqdm

with warnings.catch_warnings():
    # torchrl 0.14 warns about its own weight updaters when torchrl.collectors is imported
    warnings.filterwarnings(
        "ignore", message=r"Creating \w+ which inherits from WeightUpdaterBase",
        category=DeprecationWarning,
    )
    from torchrl.collectors import Collector

from torchrl_ext import make_replay_buffer

logging.getLogger("torchrl").setLevel(logging.WARNING)  # storage allocation logs

N_STEP, GAMMA = 3, 0.99
NUM_ENVS = 4
FRAMES_PER_BATCH = 64  # 16 steps of each of the 4 envs
UPDATES_PER_BATCH = 8  # one gradient step per 8 frames
BATCH_SIZE = 128
WARMUP_FRAMES = 1_024  # frames collected (at epsilon ~1) before the first update
DEFAULT_PLOT = Path("nstep_dqn_cartpole.png")  # in the current directory


def make_env() -> GymEnv:
    return GymEnv("CartPole-v1")


def make_loss(actor: QValueActor) -> DQNLoss:
    """DQN loss whose target is ``reward + gamma**k * (1 - terminated) * max_a Q_target(next)``.

    TorchRL's TD(0) estimator raises gamma to the batch's ``"steps_to_next_obs"``
    (``k``, written by the n-step buffer); ``delay_value`` keeps a target copy of
    the Q-network, ``double_dqn=False`` bootstraps with its max.
    """
    loss_fn = DQNLoss(actor, loss_function="smooth_l1", delay_value=True, double_dqn=False)
    loss_fn.make_value_estimator(ValueEstimators.TD0, gamma=GAMMA)
    return loss_fn


def evaluate(actor, env, episodes: int) -> float:
    """Mean return of the greedy policy over ``episodes`` full episodes."""
    returns = []
    with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
        for _ in range(episodes):
            rollout = env.rollout(500, actor, break_when_any_done=True)
            returns.append(rollout["next", "reward"].sum().item())
    return sum(returns) / len(returns)


def plot(path: Path, frames: list[int], returns: list[float], title: str) -> plt.Figure:
    """Evaluation return against env frames, saved to ``path``; returns the figure."""
    fig, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
    ax.plot(frames, returns, marker="o")
    ax.set(xlabel="env frames", ylabel="evaluation return", ylim=(0, 510), title=title)
    ax.grid(alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return fig


def main(argv: list[str] | None = None) -> list[tuple[int, float]]:
    parser = argparse.ArgumentParser(
        description="n-step DQN on CartPole-v1: a TorchRL collector writing into "
        "an n-step replay buffer."
    )
    parser.add_argument("--frames", type=int, default=32_000, help="total env frames")
    parser.add_argument("--stages", type=int, default=6, help="evaluation points")
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--quick", action="store_true",
                        help="a run of a few seconds: 4,096 frames, 2 stages, 2 eval episodes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT, help="image file to write")
    parser.add_argument("--no-plot", action="store_true", help="draw no plot")
    args = parser.parse_args(argv)
    if args.quick:
        args.frames, args.stages, args.eval_episodes = 4_096, 2, 2
    if args.no_plot:
        args.plot = None
    # one intra-op thread: a 128-wide MLP gains nothing from more, and on a busy
    # machine torch's thread pool makes each tiny op ~100x slower
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train(args)
    finally:
        torch.set_num_threads(threads)


def train(args: argparse.Namespace) -> list[tuple[int, float]]:
    torch.manual_seed(args.seed)

    env = SerialEnv(NUM_ENVS, make_env)
    env.set_seed(args.seed)
    eval_env = make_env()
    eval_env.set_seed(args.seed + 1)

    # Q-network: observation -> one Q-value per action; the actor picks the argmax
    actor = QValueActor(MLP(in_features=4, out_features=2, num_cells=[128, 128],
                            activation_class=torch.nn.ReLU),
                        in_keys=["observation"], spec=env.action_spec)
    exploration = EGreedyModule(env.action_spec, eps_init=1.0, eps_end=0.05,
                                annealing_num_steps=max(args.frames // 3, 1))
    policy = TensorDictSequential(actor, exploration)

    loss_fn = make_loss(actor)
    target_updater = SoftUpdate(loss_fn, eps=0.995)
    optim = torch.optim.Adam(loss_fn.parameters(), lr=1e-3)

    rb = make_replay_buffer(50_000, batch_size=BATCH_SIZE, n_step=N_STEP, gamma=GAMMA,
                            seed=args.seed)
    total = -(-args.frames // FRAMES_PER_BATCH) * FRAMES_PER_BATCH  # whole batches
    # auto_register_policy_transforms=False: the policy is not recurrent, needs no InitTracker
    collector = Collector(env, policy=policy, frames_per_batch=FRAMES_PER_BATCH,
                          total_frames=total, replay_buffer=rb,
                          auto_register_policy_transforms=False)

    stage_every = total / args.stages
    history: list[tuple[int, float]] = []
    print(f"{'stage':>5}  {'frames':>7}  {'epsilon':>7}  {'eval return':>11}  {'time':>6}")
    started, frames = time.perf_counter(), 0
    # on a terminal only (disable=None); the stage lines go above the bar
    progress = tqdm(total=total, unit="frame", disable=None, leave=False)
    for _ in collector:  # yields None once each batch of frames is written to rb
        frames += FRAMES_PER_BATCH
        progress.update(FRAMES_PER_BATCH)
        exploration.step(FRAMES_PER_BATCH)
        if frames >= WARMUP_FRAMES:
            for _ in range(UPDATES_PER_BATCH):
                loss = loss_fn(rb.sample())["loss"]
                optim.zero_grad()
                loss.backward()
                optim.step()
                target_updater.step()
        due = frames >= stage_every * (len(history) + 1) - 1e-9 or frames >= total
        if due and len(history) < args.stages:
            score = evaluate(actor, eval_env, args.eval_episodes)
            history.append((frames, score))
            tqdm.write(f"{len(history):>5}  {frames:>7}  {exploration.eps.item():>7.3f}  "
                       f"{score:>11.1f}  {time.perf_counter() - started:>5.1f}s")
    progress.close()
    collector.shutdown()
    eval_env.close()

    if args.plot is not None:
        plot(args.plot, [f for f, _ in history], [r for _, r in history],
             f"{N_STEP}-step DQN on CartPole-v1 ({NUM_ENVS} envs, seed {args.seed})")
        print(f"plot: {args.plot}")
    return history


if __name__ == "__main__":
    main()
