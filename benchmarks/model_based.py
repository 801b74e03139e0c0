"""W6 model-based benchmark: epochs of normalised dynamics-model batches, side by side.

    .venv/bin/python benchmarks/model_based.py                 # 1M transitions
    .venv/bin/python benchmarks/model_based.py --quick         # 100k transitions, few repetitions
    .venv/bin/python benchmarks/model_based.py --out FILE --append   # (what run.py does)

Workload: obs f32[17], action f32[6] (HalfCheetah-sized), reward f32, 1000-step episodes ending
by time limit; 1,000,000 transitions in the buffer, mini-batches of B = 256. One *epoch* is
every transition once, in a fresh random order, as normalised
``inputs = concat(obs, action)`` [B, 23] and ``targets = concat(next_obs - obs, reward)``
[B, 18] float32 tensors on the CPU; the *ensemble* epoch gives each of 5 members its own
permutation ([5, B, ...] batches).

- ``ours``: ``torchrl_ext.MBReplayBuffer(size, "cpu", actor, ...)`` (pytorchrl's API) holding
  16 env streams, ``generate_batches(1, 256)``; the scaler is fitted once (M9: refit only when
  asked), so an epoch is: gather the training rows once, build and normalise the pairs, then one
  ``index_select`` per batch;
- ``ours (TensorDicts)``: ``ModelEpochDataset`` over ``make_model_based_buffer`` (batches as
  TensorDicts), same data;
- ``pytorchrl``: ``pytorchrl.agent.storages.model_based.mb_buffer.MBReplayBuffer``
  (3.2.15) filled with one env (its batches keep a ``[b, N, dim]`` env axis for N > 1: M7),
  ``generate_batches(1, 256)``: builds and normalises every pair and refits the scaler at each
  call (its design), no ensemble support;
- ``mbrl``: mbrl-lib 0.2.0 ``ReplayBuffer`` + ``TransitionIterator(shuffle_each_epoch=True)``
  (ensemble: ``BootstrapIterator(ensemble_size=5, permute_indices=True)``, its per-member
  permutations) over ``get_all()``; each numpy batch becomes normalised tensors the way its
  ``OneDTransitionRewardModel`` does (concat, delta, ``Normalizer.normalize``);
- ``floor``: prebuilt normalised ``[n, 23]`` / ``[n, 18]`` tensors, ``randperm`` + two
  ``index_select`` per batch: what any epoch must do at least.

Insertion: one step of 16 envs (distinct pre-built steps, cycled) into a full buffer: ours
``insert_transition`` (staged and written 1024 steps at a time, writes included), ours
``rb.extend`` of a ``[16]`` TensorDict (a collector's step, written at once), pytorchrl's
``insert_transition``, mbrl's ``add_batch`` and Stable-Baselines3's ``ReplayBuffer.add``.
"""
from __future__ import annotations

import threads  # noqa: F401 -- first: one thread per native pool (threads.py)

import argparse
import itertools
import os
import sys
import time
from types import SimpleNamespace
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
if __name__ == "__main__":
    sys.path[:0] = [HERE, os.path.dirname(HERE)]  # benchmarks/, repo root
os.environ.setdefault("RL_LOGGING_LEVEL", "WARNING")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from measure import interleaved, logger, machine_line, settle, status_of, table, write_tables  # noqa: E402

OBS, ACT, B, E, ENVS, EPISODE = 17, 6, 256, 5, 16, 1000
log = logger("mb")


def episodes(n: int, envs: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``n`` transitions as a pytorchrl ``[T, envs, ...]`` slice of 1000-step episodes."""
    rng = np.random.default_rng(seed)
    T = n // envs
    obs = rng.standard_normal((T + 1, envs, OBS), dtype=np.float32).cumsum(0) * 0.1
    done = ((np.arange(T) + 1) % EPISODE == 0)[:, None, None].repeat(envs, 1).astype(np.float32)
    start = np.concatenate([np.zeros((1, envs, 1), np.float32), done[:-1]])
    return {"Observation": obs[:-1], "NextObservation": obs[1:],
            "Action": rng.uniform(-1, 1, (T, envs, ACT)).astype(np.float32),
            "Reward": rng.standard_normal((T, envs, 1), dtype=np.float32),
            "Done": start, "NextDone": done}


def box():
    import gymnasium as gym

    return gym.spaces.Box(-1.0, 1.0, (ACT,), np.float32)


# ------------------------------------------------------------------------ buffers
def ours(data: dict, ensemble: int | None):
    from torchrl_ext import MBReplayBuffer
    from torchrl_ext.transforms import StandardScaler

    actor = SimpleNamespace(action_space=box(), dynamics_model=SimpleNamespace(
        standard_scaler=StandardScaler(), reward_function=None))
    T = data["Observation"].shape[0]
    buffer = MBReplayBuffer(T, "cpu", actor, None, None, autoreset_mode="Disabled",
                            ensemble_size=ensemble, seed=0)
    for lo in range(0, T, 5000):
        buffer.insert_data_slice({k: v[lo:lo + 5000] for k, v in data.items()})
    list(buffer.generate_batches(1, B))  # first call fits the scaler (M9)
    return lambda: sum(1 for _ in buffer.generate_batches(1, B))


def ours_td(data: dict, ensemble: int | None):
    from tensordict import TensorDict

    from torchrl_ext import ModelEpochDataset, make_model_based_buffer
    from torchrl_ext.transforms import StandardScaler

    T, N = data["Observation"].shape[:2]
    rb = make_model_based_buffer(N * (T + T // EPISODE + 1), batch_size=B, ensemble_size=ensemble,
                                 scaler=StandardScaler(), seed=0)
    tn = {k: torch.from_numpy(np.ascontiguousarray(v.swapaxes(0, 1))) for k, v in data.items()}
    for lo in range(0, T, 5000):
        part = {k: v[:, lo:lo + 5000] for k, v in tn.items()}
        rb.extend(TensorDict({"observation": part["Observation"], "action": part["Action"], "next": {
            "observation": part["NextObservation"], "reward": part["Reward"],
            "done": part["NextDone"] != 0}}, part["Reward"].shape[:2]))
    dataset = ModelEpochDataset(rb)
    dataset.fit_scaler()
    return lambda: sum(1 for _ in dataset)


def pytorchrl(data: dict, ensemble: int | None):
    if ensemble:
        raise NotImplementedError("no ensemble support (one permutation for every member)")
    from pytorchrl.agent.actors.world_models.utils import StandardScaler
    from pytorchrl.agent.storages.model_based.mb_buffer import MBReplayBuffer

    flat = {k: v.swapaxes(0, 1).reshape(-1, 1, v.shape[-1]) for k, v in data.items()}  # one env
    actor = SimpleNamespace(action_space=box(), dynamics_model=SimpleNamespace(
        standard_scaler=StandardScaler("cpu"), reward_function=None))
    buffer = MBReplayBuffer(flat["Observation"].shape[0], "cpu", actor, None, None)
    buffer.insert_data_slice(flat)
    return lambda: sum(1 for _ in buffer.generate_batches(1, B))


def mbrl(data: dict, ensemble: int | None):
    import mbrl.util.math as mbrl_math
    from mbrl.util.replay_buffer import BootstrapIterator, ReplayBuffer, TransitionIterator

    flat = {k: v.swapaxes(0, 1).reshape(-1, v.shape[-1]) for k, v in data.items()}
    n = flat["Observation"].shape[0]
    rng = np.random.default_rng(0)
    buffer = ReplayBuffer(n, (OBS,), (ACT,), rng=rng)
    done = flat["NextDone"][:, 0] != 0
    buffer.add_batch(flat["Observation"], flat["Action"], flat["NextObservation"],
                     flat["Reward"][:, 0], np.zeros(n, bool), done)
    normalizer = mbrl_math.Normalizer(OBS + ACT, torch.device("cpu"))
    everything = buffer.get_all()
    normalizer.update_stats(np.concatenate([everything.obs, everything.act], -1))
    if ensemble:
        iterator: Any = BootstrapIterator(everything, B, ensemble, permute_indices=True, rng=rng)
    else:
        iterator = TransitionIterator(everything, B, shuffle_each_epoch=True, rng=rng)
    target_mu = target_std = None

    def epoch() -> int:
        nonlocal target_mu, target_std
        count = 0
        for batch in iterator:  # OneDTransitionRewardModel._process_batch, per batch
            obs, act, nxt, rew, *_ = batch.astuple()
            obs_t, nxt_t = torch.from_numpy(obs), torch.from_numpy(nxt)
            model_in = normalizer.normalize(torch.cat([obs_t, torch.from_numpy(act)], -1))
            target = torch.cat([nxt_t - obs_t, torch.from_numpy(rew).unsqueeze(-1)], -1)
            if target_mu is None:  # mbrl learns in target units; we standardise like the others
                target_mu, target_std = target.mean(tuple(range(target.ndim - 1))), target.std() + 1e-8
            _ = model_in, (target - target_mu) / target_std
            count += 1
        return count

    return epoch


def floor(data: dict, ensemble: int | None):
    n = data["Observation"].shape[0] * data["Observation"].shape[1]
    x = torch.randn(n, OBS + ACT)
    y = torch.randn(n, OBS + 1)
    g = torch.Generator().manual_seed(0)

    def epoch() -> int:
        order = (torch.stack([torch.randperm(n, generator=g) for _ in range(ensemble)])
                 if ensemble else torch.randperm(n, generator=g))
        count = 0
        for lo in range(0, n, B):
            idx = order[..., lo:lo + B].reshape(-1)
            _ = x.index_select(0, idx), y.index_select(0, idx)
            count += 1
        return count

    return epoch


EPOCHS: dict[str, Callable] = {"ours": ours, "ours (TensorDicts)": ours_td, "pytorchrl": pytorchrl,
                               "mbrl": mbrl, "floor": floor}


# ---------------------------------------------------------------------- insertion
def inserters(steps: list[dict]) -> dict[str, Callable]:
    """One-step 16-env inserts into a full buffer of 4096 steps, per library."""
    out: dict[str, Callable] = {}
    cycle: dict[str, Any] = {}

    def add(name: str, make: Callable) -> None:
        try:
            insert = make()
            it = itertools.cycle(steps)
            for _ in range(5000):  # fill past capacity: steady state
                insert(next(it))
            cycle[name] = it
            out[name] = lambda: insert(next(cycle[name]))
        except Exception as e:  # noqa: BLE001 -- reported as a row
            out[name] = e  # type: ignore[assignment]

    def make_ours():
        from torchrl_ext import MBReplayBuffer
        from torchrl_ext.transforms import StandardScaler

        actor = SimpleNamespace(action_space=box(), dynamics_model=SimpleNamespace(
            standard_scaler=StandardScaler(), reward_function=None))
        return MBReplayBuffer(4096, "cpu", actor, None, None, autoreset_mode="Disabled").insert_transition

    def make_ours_extend():
        from tensordict import TensorDict

        from torchrl_ext import make_model_based_buffer

        rb = make_model_based_buffer(ENVS * 4200, seed=0)
        tds = {id(s): TensorDict({  # what a TorchRL collector step gives: a [16] TensorDict
            "observation": torch.from_numpy(s["Observation"]), "action": torch.from_numpy(s["Action"]),
            "next": {"observation": torch.from_numpy(s["NextObservation"]),
                     "reward": torch.from_numpy(s["Reward"]),
                     "done": torch.from_numpy(s["NextDone"] != 0)}}, [ENVS]) for s in steps}
        return lambda s: rb.extend(tds[id(s)])

    def make_pytorchrl():
        from pytorchrl.agent.actors.world_models.utils import StandardScaler
        from pytorchrl.agent.storages.model_based.mb_buffer import MBReplayBuffer

        actor = SimpleNamespace(action_space=box(), dynamics_model=SimpleNamespace(
            standard_scaler=StandardScaler("cpu"), reward_function=None))
        buffer = MBReplayBuffer(4096, "cpu", actor, None, None)
        # its insert_transition moves torch values to the CPU (.cpu()): a collector gives tensors
        return lambda s: buffer.insert_transition({k: torch.from_numpy(v) for k, v in s.items()})

    def make_mbrl():
        from mbrl.util.replay_buffer import ReplayBuffer

        buffer = ReplayBuffer(4096 * ENVS, (OBS,), (ACT,))
        no = np.zeros(ENVS, bool)
        return lambda s: buffer.add_batch(s["Observation"], s["Action"], s["NextObservation"],
                                          s["Reward"][:, 0], no, s["NextDone"][:, 0] != 0)

    def make_sb3():
        import gymnasium as gym
        from stable_baselines3.common.buffers import ReplayBuffer

        space = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
        buffer = ReplayBuffer(4096, space, box(), device="cpu", n_envs=ENVS)
        infos = [{} for _ in range(ENVS)]
        return lambda s: buffer.add(s["Observation"], s["NextObservation"], s["Action"],
                                    s["Reward"][:, 0], s["NextDone"][:, 0], infos)

    for name, make in (("ours", make_ours), ("ours (rb.extend [16])", make_ours_extend), ("pytorchrl", make_pytorchrl), ("mbrl", make_mbrl),
                       ("sb3", make_sb3)):
        add(name, make)
    return out


# --------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100k transitions, few repetitions")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "latest.md"))
    ap.add_argument("--append", action="store_true")
    ap.add_argument("--rows", type=int, help="transitions (default: 1M, 100k with --quick)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    n = a.rows or (100_000 if a.quick else 1_000_000)
    reps = 3 if a.quick else 5
    data = episodes(n, ENVS)
    lines = [f"## W6 model-based epochs ({n:,} transitions, obs f32[{OBS}], action f32[{ACT}], "
             f"B = {B})", "", machine_line(), ""]
    rows = []
    results: dict[str, dict[str, Any]] = {}
    for ensemble in (None, E):
        label = "1 model" if ensemble is None else f"ensemble of {E}"
        fns, status = {}, {}
        for name, build in EPOCHS.items():
            log(f"build {name} ({label})")
            settle()
            try:
                t0 = time.perf_counter()
                fns[name] = build(data, ensemble)
                log(f"  built in {time.perf_counter() - t0:.1f}s")
            except NotImplementedError as e:
                status[name] = f"n/a: {e}"
            except Exception as e:  # noqa: BLE001 -- reported as a row
                status[name] = status_of(name, e)
        log(f"time epochs ({label})")
        stats = interleaved(fns, reps=reps, inner=1, warmup=1)
        results[label] = {**{k: v["median"] for k, v in stats.items()}, **status}
        del fns
        settle()
    floor_times = {label: r.get("floor") for label, r in results.items()}
    for name in EPOCHS:
        cells = [name]
        for label, r in results.items():
            value = r.get(name)
            if isinstance(value, float):
                cells += [f"{value * 1e3:,.0f}", f"{value / floor_times[label]:.2f}x"]
            else:
                cells += [str(value), ""]
        rows.append(cells)
    lines.append(table(["buffer", "epoch, 1 model (ms)", "vs floor", f"epoch, ensemble of {E} (ms)",
                        "vs floor"], rows))
    for label, r in results.items():
        mine = r.get("ours")
        for peer in ("pytorchrl", "mbrl"):
            if isinstance(mine, float) and isinstance(r.get(peer), float):
                lines.append(f"\n{label}: ours is {r[peer] / mine:.1f}x faster than {peer}.")

    log("time one 16-env insert")
    steps = [{k: v[t] for k, v in data.items()} for t in range(min(2000, data["Observation"].shape[0]))]
    ins = inserters(steps)
    failed = {k: v for k, v in ins.items() if isinstance(v, Exception)}
    ok = {k: v for k, v in ins.items() if not isinstance(v, Exception)}
    # 1024 steps per round: ours writes every 1024 staged steps, so each round holds one write
    stats = interleaved(ok, reps=10 if a.quick else 40, inner=1024, warmup=1)
    sb3 = stats.get("sb3", {}).get("median")
    rows = []
    for name in ins:
        if name in failed:
            rows.append([name, status_of(name, failed[name]), ""])
            continue
        t = stats[name]["median"]
        rows.append([name, f"{t * 1e6:,.1f}", f"{t / sb3:.2f}x" if sb3 else "n/a"])
    lines += ["", f"Insert one step of {ENVS} envs into a full buffer (median µs per step, "
              "1024-step rounds, writes included)", "", table(["buffer", "µs / step", "vs sb3"], rows)]
    out = "\n".join(lines)
    print(out)
    write_tables(out, a.out, a.append)


if __name__ == "__main__":
    main()
