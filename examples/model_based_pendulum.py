"""
Model-based control of Pendulum-v1
==================================

Model-based control of Pendulum-v1: a learned ensemble dynamics model and a CEM planner.

Run with ``.venv/bin/python examples/model_based_pendulum.py`` (``--help`` for
options, ``--quick`` for a short smoke run).

1. A TorchRL ``Collector`` steps ``SerialEnv(4, Pendulum-v1)`` with random actions
   and its batches go into :class:`torchrl_ext.MBReplayBuffer` (pytorchrl's API)
   with ``insert_data_slice``. TorchRL keeps each episode's true final
   observation in ``("next", "observation")``, so every stored step is a real
   transition.
2. Each iteration trains an ensemble of 5 MLPs on ``generate_batches`` (epochs of
   normalised ``(obs, action) -> next_obs - obs`` pairs, one permutation per
   member, 10% of the transitions held out), reports the model's held-out
   one-step error, then lets a CEM planner that rolls the model forward control
   the pendulum (the collector now uses the planner as its policy), and
   evaluates the planner on full 200-step episodes against random actions
   (about -1200).
3. M1, pytorchrl's episode-boundary bug: the same model is trained on the same
   steps stored the way pytorchrl's vector envs give them, where the step that
   ends an episode points at the next episode's reset observation. Those few
   impossible jumps raise the held-out error on real transitions.

Data is collected in 50-step episodes (more varied starts; evaluation uses the
standard 200). A plot is written to ``--plot`` (matplotlib, PNG).
"""
from __future__ import annotations

import argparse
import logging
import math
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from torchrl.envs import GymEnv, SerialEnv
from torchrl.envs.utils import RandomPolicy

with warnings.catch_warnings():
    # torchrl 0.14 warns about its own weight updaters when torchrl.collectors is imported
    warnings.filterwarnings(
        "ignore", message=r"Creating \w+ which inherits from WeightUpdaterBase",
        category=DeprecationWarning,
    )
    from torchrl.collectors import Collector

from torchrl_ext import MBReplayBuffer
from torchrl_ext.transforms import StandardScaler

logging.getLogger("torchrl").setLevel(logging.WARNING)  # storage allocation logs

DEFAULT_PLOT = Path("model_based_pendulum.png")  # in the current directory
OBS_DIM, ACT_DIM, MAX_TORQUE = 3, 1, 2.0


@dataclass
class Config:
    num_envs: int = 4
    random_frames: int = 2_000
    iterations: int = 3
    frames_per_iteration: int = 400  # planner-driven frames added per iteration
    epochs: int = 40
    ensemble: int = 5
    hidden: int = 64
    horizon: int = 15
    population: int = 250  # split among the members: each rolls out 1 / ensemble of the plans
    elites: int = 25
    cem_iters: int = 3
    eval_envs: int = 3
    eval_steps: int = 200
    m1_epochs: int = 40

    @classmethod
    def quick(cls) -> Config:
        return cls(num_envs=2, random_frames=600, iterations=1, frames_per_iteration=100,
                   epochs=60, ensemble=3, hidden=32, horizon=8, population=30, elites=6,
                   cem_iters=2, eval_envs=1, eval_steps=50, m1_epochs=60)


# --------------------------------------------------------------------------- model
class EnsembleMLP(torch.nn.Module):
    """``E`` MLPs evaluated together: ``[E, B, in] -> [E, B, out]`` with batched matmuls."""

    def __init__(self, members: int, inputs: int, outputs: int, hidden: int) -> None:
        super().__init__()
        sizes = [inputs, hidden, hidden, outputs]
        self.weights = torch.nn.ParameterList()
        self.biases = torch.nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            w = torch.empty(members, fan_in, fan_out)
            for e in range(members):
                torch.nn.init.kaiming_uniform_(w[e].T, a=math.sqrt(5))
            self.weights.append(torch.nn.Parameter(w))
            self.biases.append(torch.nn.Parameter(torch.zeros(members, 1, fan_out)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            x = torch.baddbmm(b, x, w)
            if i < len(self.weights) - 1:
                x = torch.nn.functional.silu(x)
        return x


class DynamicsModel:
    """The ensemble plus its scaler: ``next_obs = obs + inverse_transform(net(normalise(obs, a)))``.

    Laid out as pytorchrl's world models are: the buffer reads
    ``standard_scaler`` and ``reward_function`` (known here, so the targets are
    the observation deltas only).
    """

    def __init__(self, cfg: Config, seed: int) -> None:
        torch.manual_seed(seed)
        self.net = EnsembleMLP(cfg.ensemble, OBS_DIM + ACT_DIM, OBS_DIM, cfg.hidden)
        self.optim = torch.optim.Adam(self.net.parameters(), lr=1e-3)
        self.standard_scaler = StandardScaler()
        self.reward_function = pendulum_reward

    def train_epochs(self, buffer: MBReplayBuffer, epochs: int, batch_size: int = 256) -> float:
        """Fit on ``epochs`` epochs of ``generate_batches``; the last epoch's mean loss."""
        losses: list[float] = []
        for batch in buffer.generate_batches(1, batch_size, num_epochs=epochs):
            loss = torch.nn.functional.mse_loss(self.net(batch["train_input"]), batch["train_label"])
            self.optim.zero_grad()
            loss.backward()
            self.optim.step()
            if batch["epoch"] == epochs - 1:
                losses.append(loss.item())
        return float(np.mean(losses))

    @property
    def members(self) -> int:
        return self.net.weights[0].shape[0]

    @torch.no_grad()
    def predict_delta(self, obs: torch.Tensor, action: torch.Tensor, split: bool = False) -> torch.Tensor:
        """``next_obs - obs`` in raw units, ``[..., OBS_DIM]``: the ensemble mean, or with
        ``split`` each member predicting its own share of the rows (``[E, rows / E, ...]``,
        rows divisible by ``E``; the planner's particles)."""
        shape = obs.shape[:-1]
        x, _ = self.standard_scaler.transform(torch.cat([obs, action], -1).reshape(-1, OBS_DIM + ACT_DIM))
        if split:
            out = self.net(x.reshape(self.members, -1, OBS_DIM + ACT_DIM))
        else:
            out = self.net(x.expand(self.members, -1, -1)).mean(0)
        return self.standard_scaler.inverse_transform(out.reshape(-1, OBS_DIM)).reshape(*shape, OBS_DIM)


def pendulum_reward(obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """Pendulum-v1's reward for taking ``action`` in ``obs = (cos th, sin th, th_dot)``."""
    theta = torch.atan2(obs[..., 1], obs[..., 0])
    torque = action[..., 0].clamp(-MAX_TORQUE, MAX_TORQUE)
    return -(theta**2 + 0.1 * obs[..., 2] ** 2 + 0.001 * torque**2)


# ------------------------------------------------------------------------- planner
class CEMPlanner(torch.nn.Module):
    """Cross-entropy method over action sequences, rolled out in the learned model."""

    def __init__(self, model: DynamicsModel, cfg: Config, seed: int) -> None:
        super().__init__()
        self.model, self.cfg = model, cfg
        self.generator = torch.Generator().manual_seed(seed)

    @torch.no_grad()
    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        obs = observation.reshape(-1, OBS_DIM).float()  # [N, 3]
        n = obs.shape[0]
        mean = torch.zeros(n, cfg.horizon, ACT_DIM)
        std = torch.full_like(mean, MAX_TORQUE)
        for _ in range(cfg.cem_iters):
            noise = torch.randn(n, cfg.population, cfg.horizon, ACT_DIM, generator=self.generator)
            plans = (mean[:, None] + std[:, None] * noise).clamp(-MAX_TORQUE, MAX_TORQUE)
            returns = self._returns(obs, plans)  # [N, P]
            elite = returns.topk(cfg.elites, dim=1).indices  # [N, K]
            chosen = plans.gather(1, elite[..., None, None].expand(-1, -1, cfg.horizon, ACT_DIM))
            mean, std = chosen.mean(1), chosen.std(1) + 1e-3
        return mean[:, 0].reshape(*observation.shape[:-1], ACT_DIM)

    def _returns(self, obs: torch.Tensor, plans: torch.Tensor) -> torch.Tensor:
        # plans [N, P, H, 1]; member e rolls out plans e, e + E, ... (P divisible by E)
        members = self.model.members
        state = obs[:, None].expand(-1, plans.shape[1], -1)  # [N, P, 3]
        total = torch.zeros(plans.shape[:2])
        for h in range(plans.shape[2]):
            action = plans[:, :, h]
            total += pendulum_reward(state, action)
            order = lambda t: t.reshape(t.shape[0], -1, members, t.shape[-1]).transpose(0, 2)  # noqa: E731
            delta = self.model.predict_delta(order(state), order(action), split=True)
            state = state + delta.transpose(0, 2).reshape(state.shape)
        return total


# ------------------------------------------------------------------------ plumbing
def make_env(max_steps: int) -> GymEnv:
    return GymEnv("Pendulum-v1", max_episode_steps=max_steps)


def pytorchrl_slice(batch: TensorDictBase) -> dict[str, np.ndarray]:
    """A collector batch ``[N, T]`` as pytorchrl's ``[T, N, ...]`` transition slice."""
    def tn(key: Any) -> np.ndarray:
        return batch.get(key).transpose(0, 1).numpy()

    return {"Observation": tn("observation"), "Action": tn("action"),
            "Reward": tn(("next", "reward")), "NextObservation": tn(("next", "observation")),
            "Done": tn("done"), "NextDone": tn(("next", "done"))}


def with_reset_jumps(data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What pytorchrl's vector envs store: a done step's next observation is the reset one."""
    out = {k: None if v is None else v.copy() for k, v in data.items() if k != "Boundary"}
    done = out["NextDone"][:-1, :, 0] != 0  # [T - 1, N]; the last step keeps its own
    out["NextObservation"][:-1][done] = out["Observation"][1:][done]
    return out


def new_buffer(capacity: int, model: DynamicsModel, seed: int) -> MBReplayBuffer:
    actor = SimpleNamespace(dynamics_model=model, action_space=make_env(50).action_space)
    # "Disabled": every stored step is a transition (a collector keeps true final observations)
    return MBReplayBuffer(capacity, "cpu", actor, None, None, autoreset_mode="Disabled",
                          holdout_fraction=0.1, ensemble_size=len(model.net.weights[0]), seed=seed)


def heldout_error(model: DynamicsModel, inputs: torch.Tensor, deltas: torch.Tensor) -> float:
    """Mean squared one-step error of the predicted ``next_obs - obs``, raw units."""
    pred = model.predict_delta(inputs[:, :OBS_DIM], inputs[:, OBS_DIM:])
    return float(((pred - deltas) ** 2).mean())


def raw_holdout(buffer: MBReplayBuffer, model: DynamicsModel) -> tuple[torch.Tensor, torch.Tensor]:
    batch = next(buffer.generate_batches(1, 1))
    scaler = model.standard_scaler
    inputs = batch["holdout_input"] * scaler.input_std + scaler.input_mu
    return inputs, scaler.inverse_transform(batch["holdout_label"])


@torch.no_grad()
def mean_return(policy: Any, cfg: Config, seed: int) -> float:
    """Mean return of ``policy`` (``None``: random actions) over ``eval_envs`` episodes."""
    env = SerialEnv(cfg.eval_envs, lambda: make_env(cfg.eval_steps))
    env.set_seed(seed)
    policy = RandomPolicy(env.action_spec) if policy is None else policy
    rollout = env.rollout(cfg.eval_steps, policy, break_when_any_done=False)
    env.close()
    return float(rollout["next", "reward"].sum(-2).mean())


# ---------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description='Model-based control of Pendulum-v1: a learned ensemble dynamics model and a CEM planner.')
    parser.add_argument("--quick", action="store_true", help="a short smoke run (~20 s)")
    parser.add_argument("--iterations", type=int, help="train / plan / collect rounds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT, help="PNG file to write")
    parser.add_argument("--no-plot", action="store_true", help="skip the plot")
    parser.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    args = parser.parse_args(argv)
    cfg = Config.quick() if args.quick else Config()
    if args.iterations is not None:
        cfg.iterations = args.iterations
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small MLPs: more threads only add overhead
    # trained weights and activations drift into denormal floats, which make the
    # planner's matmuls many times slower on CPUs: flush them to zero
    torch.set_flush_denormal(True)
    try:
        return run(cfg, args)
    finally:
        torch.set_num_threads(threads)
        torch.set_flush_denormal(False)


def run(cfg: Config, args: argparse.Namespace) -> dict[str, Any]:
    from tqdm import tqdm

    started = time.perf_counter()
    model = DynamicsModel(cfg, args.seed)
    capacity = (cfg.random_frames + cfg.iterations * cfg.frames_per_iteration) // cfg.num_envs + 1
    buffer = new_buffer(capacity, model, args.seed)
    planner = TensorDictModule(CEMPlanner(model, cfg, args.seed), in_keys=["observation"],
                               out_keys=["action"])

    collect(cfg, None, cfg.random_frames, buffer, args.seed)
    random_return = mean_return(None, cfg, args.seed + 1000)

    history: list[dict[str, float]] = []
    bar = tqdm(range(1, cfg.iterations + 1), desc="train/plan", disable=args.no_progress,
               leave=False)
    print(f"random actions: mean return {random_return:.1f}")
    print(HEADER, flush=True)
    for it in bar:
        buffer.before_gradients()  # new data: refit the normaliser, once
        loss = model.train_epochs(buffer, cfg.epochs)
        error = heldout_error(model, *raw_holdout(buffer, model))
        score = mean_return(planner, cfg, args.seed + it)
        history.append({"iteration": it, "transitions": float(buffer.size * cfg.num_envs),
                        "loss": loss, "heldout_error": error, "return": score})
        bar.set_postfix(heldout=f"{error:.2e}", ret=f"{score:.0f}")
        bar.write(row(history[-1]))
        sys.stdout.flush()
        if it < cfg.iterations:
            collect(cfg, planner, cfg.frames_per_iteration, buffer, args.seed + it)
    bar.close()

    m1 = m1_effect(buffer, cfg, args.seed)
    print("M1: held-out one-step MSE on real transitions, same model and steps:")
    for name, value in m1.items():
        print(f"  trained on {name:<22} {value:.2e}")
    print(f"total time {time.perf_counter() - started:.0f}s")
    if not args.no_plot:
        plot(args.plot, history, random_return, m1)
        print(f"plot: {args.plot}")
    return {"history": history, "random_return": random_return, "m1": m1}


def collect(cfg: Config, policy: Any, frames: int, buffer: MBReplayBuffer, seed: int) -> None:
    """Step ``num_envs`` Pendulums with ``policy`` (``None``: random) through a TorchRL
    collector, inserting each batch into ``buffer``."""
    env = SerialEnv(cfg.num_envs, lambda: make_env(50))
    env.set_seed(seed)
    policy = RandomPolicy(env.action_spec) if policy is None else policy
    per_batch = 20 * cfg.num_envs
    collector = Collector(env, policy=policy, frames_per_batch=per_batch,
                          total_frames=max(per_batch, frames // per_batch * per_batch),
                          auto_register_policy_transforms=False)
    for batch in collector:
        buffer.insert_data_slice(pytorchrl_slice(batch))
    collector.shutdown()


def m1_effect(buffer: MBReplayBuffer, cfg: Config, seed: int) -> dict[str, float]:
    """Held-out error on real transitions: trained on real ones vs with reset jumps kept."""
    data = buffer.get_all_buffer_data()
    errors = {}
    clean_model = DynamicsModel(cfg, seed)
    clean = new_buffer(buffer.max_size, clean_model, seed)
    clean.insert_data_slice(data)
    clean_model.train_epochs(clean, cfg.m1_epochs)
    inputs, deltas = raw_holdout(clean, clean_model)
    errors["real transitions"] = heldout_error(clean_model, inputs, deltas)
    jumpy_model = DynamicsModel(cfg, seed)
    jumpy = new_buffer(buffer.max_size, jumpy_model, seed)
    jumpy.insert_data_slice(with_reset_jumps(data))
    jumpy_model.train_epochs(jumpy, cfg.m1_epochs)
    errors["with reset jumps (M1)"] = heldout_error(jumpy_model, inputs, deltas)
    return errors


HEADER = f"{'iter':>4}  {'transitions':>11}  {'train loss':>10}  {'held-out MSE':>12}  {'CEM return':>10}"


def row(h: dict[str, float]) -> str:
    return (f"{h['iteration']:>4.0f}  {h['transitions']:>11.0f}  {h['loss']:>10.4f}  "
            f"{h['heldout_error']:>12.2e}  {h['return']:>10.1f}")


def plot(path: Path, history: list[dict[str, float]], random_return: float, m1: dict[str, float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    x = [h["transitions"] for h in history]
    axes[0].plot(x, [h["heldout_error"] for h in history], "o-")
    axes[0].set(xlabel="stored transitions", ylabel="held-out one-step MSE", yscale="log",
                title="dynamics model")
    axes[1].plot(x, [h["return"] for h in history], "o-", label="CEM with learned model")
    axes[1].axhline(random_return, color="gray", linestyle="--", label="random actions")
    axes[1].set(xlabel="stored transitions", ylabel="mean episode return", title="Pendulum-v1")
    axes[1].legend(loc="lower right")
    axes[2].bar(list(m1), list(m1.values()), color=["tab:blue", "tab:red"])
    axes[2].set(ylabel="held-out one-step MSE", title="M1: episode-boundary rows")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
