"""Data lost: checkpoints survive ``kill -9`` and keep the state they need (issue 13)."""
from __future__ import annotations

import multiprocessing
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from torchrl_ext import MBReplayBuffer, NStepReplayStorage
from torchrl_ext.transforms import StandardScaler

OBS = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
ACT = gym.spaces.Discrete(2)
SAVE_EVERY = 7

# Saves in a loop: step t stores obs (t, t) and next obs (t + 1, t + 1); a snapshot
# that mixed two saves would pair an observation with another time's next one.
def nstep_writer(snap: str, ready) -> None:
    store = NStepReplayStorage(OBS, ACT, storage_size=100_000, num_workers=0, n_step=1,
                               save_snapshot=True, snapshot_dir=snap, seed=0)
    t = len(store)
    ready.send(t)
    while True:
        for _ in range(SAVE_EVERY):
            obs = np.full((1, 2), t, np.float32)
            store.add(obs, np.zeros(1, np.int64), np.ones(1), np.zeros(1, bool),
                      np.zeros(1, bool), {}, obs + 1)
            t += 1
        store.save()


def reopen(snapshot_dir, **kwargs):
    return NStepReplayStorage(OBS, ACT, storage_size=100_000, num_workers=0, n_step=1, batch_size=512,
                              save_snapshot=True, snapshot_dir=snapshot_dir, seed=0, **kwargs)


def check_consistent(store) -> int:
    n = len(store)
    assert n % SAVE_EVERY == 0, n  # only whole saves
    if n:
        batch = store.sample()
        obs, nxt = batch.observations[:, 0], batch.next_observations[:, 0]
        assert torch.equal(nxt, obs + 1)  # never another time's next observation
        assert bool((obs < n).all()) and bool((obs == batch.observations[:, 1]).all())
    return n


def forked(writer, snap: str, ready) -> None:
    """``writer(snap, ready)`` in a forked child: on one thread, as DataLoader's forked workers
    (the parent's OpenMP pool does not survive a fork: a parallel op there never returns)."""
    torch.set_num_threads(1)
    writer(snap, ready)


def kill_while_saving(writer, snap: Path, load) -> list[int]:
    """Run ``writer(snap, ready)`` (saving to ``snap`` in a loop, resuming from it, after
    sending ``ready`` the steps it resumed with) four times in a child process, each
    killed with SIGKILL at a random moment; ``load(snap)`` checks the checkpoint left and
    returns how many steps it holds. Returns those counts.

    The child is forked from this process, which has imported everything it needs: the
    kill is the same, without a new interpreter's seconds of imports each time."""
    rng = random.Random(0)
    context = multiprocessing.get_context("fork")
    reached: list[int] = []
    for _ in range(4):
        ready, child_end = context.Pipe(duplex=False)
        child = context.Process(target=forked, args=(writer, str(snap), child_end), daemon=True)
        child.start()
        child_end.close()
        try:
            assert ready.poll(120), "the writer did not start"
            assert ready.recv() == (reached[-1] if reached else 0)  # it resumed
            time.sleep(rng.uniform(0.5, 2.5))
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.join()
            ready.close()
        assert child.exitcode == -signal.SIGKILL
        reached.append(load(snap))
    assert reached == sorted(reached) and reached[-1] > 0
    return reached


def test_atomic_checkpoints_survive_kill_9(tmp_path):
    def load(snap):
        store = reopen(snap)
        n = check_consistent(store)
        del store
        return n

    kill_while_saving(nstep_writer, tmp_path / "snap", load)


# MBReplayBuffer.dumps in a loop: step t holds observation t and next observation t + 1
def mb_writer(snap: str, ready) -> None:
    actor = SimpleNamespace(action_space=ACT, dynamics_model=SimpleNamespace(
        standard_scaler=StandardScaler(), reward_function=None))
    buffer = MBReplayBuffer(100_000, "cpu", actor, None, None, seed=0)
    if os.path.exists(snap):
        buffer.loads(snap)
    t = len(buffer)
    ready.send(t)
    while True:
        for _ in range(SAVE_EVERY):
            obs = np.full((1, 2), t, np.float32)
            buffer.insert_transition({"Observation": obs, "Action": np.zeros((1, 1), np.int64),
                "Reward": np.ones((1, 1), np.float32), "NextObservation": obs + 1,
                "Done": np.zeros((1, 1)), "NextDone": np.zeros((1, 1))})
            t += 1
        buffer.dumps(snap)


def test_atomic_checkpoints_of_the_model_based_facade_survive_kill_9(tmp_path):
    """MBReplayBuffer had no checkpoint; its dumps is all or nothing too."""
    def load(snap):
        actor = SimpleNamespace(action_space=ACT, dynamics_model=SimpleNamespace(
            standard_scaler=StandardScaler(), reward_function=None))
        buffer = MBReplayBuffer(100_000, "cpu", actor, None, None)
        buffer.loads(snap)
        n = len(buffer)
        assert n % SAVE_EVERY == 0, n  # only whole saves
        data = buffer.get_all_buffer_data()
        t = np.arange(n, dtype=np.float32)[:, None, None]
        np.testing.assert_array_equal(data["Observation"], np.broadcast_to(t, (n, 1, 2)))
        np.testing.assert_array_equal(data["NextObservation"], data["Observation"] + 1)
        return n

    kill_while_saving(mb_writer, tmp_path / "snap", load)


def test_atomic_checkpoints_name_an_incomplete_snapshot(tmp_path):
    (tmp_path / "buffer").mkdir()
    (tmp_path / "buffer" / "meta.json").write_text("")  # what a non-atomic save left
    with pytest.raises(ValueError, match="buffer is not a complete snapshot"):
        reopen(tmp_path)


def cartpole_steps(num_envs=2, steps=120):
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * num_envs)
    obs, _ = envs.reset(seed=3)
    rng = np.random.default_rng(0)
    out = []
    for _ in range(steps):
        action = rng.integers(0, 2, num_envs)
        nxt, reward, term, trunc, infos = envs.step(action)
        out.append((obs, action, reward, term, trunc, {}, nxt))
        obs = nxt
    envs.close()
    return out


def test_state_a_checkpoint_forgets(tmp_path):
    steps = cartpole_steps()
    ends = [i for i, s in enumerate(steps) if (s[3] | s[4]).any()]
    assert ends, "CartPole with random actions ends episodes within 120 steps"
    cuts = {ends[0] + 1, ends[0] + 2, len(steps) // 2, ends[-1] + 1}  # right after an end, too

    def make(name):
        return NStepReplayStorage(gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), ACT, storage_size=1000,
                                  num_envs=2, batch_size=8, num_workers=0, n_step=3,
                                  save_snapshot=True, snapshot_dir=tmp_path / name, seed=1)

    original, restored = make("a"), make("b")
    for i, step in enumerate(steps):
        if i in cuts:
            restored.save()
            del restored
            restored = make("b")
            assert torch.equal(original.sample().observations, restored.sample().observations)
        original.add(*step)
        restored.add(*step)
    assert len(original) == len(restored)
    a, b = original.rb.storage.state_dict(), restored.rb.storage.state_dict()
    assert (a["rows"] == b["rows"]).all()
    # the torn-read counters count write calls, which the cuts split; the index is the same
    seqlock = ("write_seq", "row_version")
    assert (a["index"].exclude(*seqlock) == b["index"].exclude(*seqlock)).all()
    for _ in range(5):
        x, y = original.sample(), restored.sample()
        assert torch.equal(x.observations, y.observations) and torch.equal(x.rewards, y.rewards)


def test_atomic_checkpoints_export_is_whole_or_absent(tmp_path):
    from torchrl_ext.export.native import load_episodes

    (tmp_path / "steps").mkdir()  # a save_episodes killed before meta.json
    with pytest.raises(ValueError, match="holds no complete export"):
        load_episodes(tmp_path)


def test_state_a_checkpoint_forgets_a_reset_by_hand_after_reopen(tmp_path):
    steps = cartpole_steps()
    envs = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    fresh, _ = envs.reset(seed=99)  # the user resets by hand after reopening
    envs.close()

    def make(name):
        return NStepReplayStorage(gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), ACT, storage_size=1000,
                                  num_envs=2, batch_size=8, num_workers=0, n_step=3,
                                  save_snapshot=True, snapshot_dir=tmp_path / name, seed=1)

    original, restored = make("a"), make("b")
    for step in steps[:5]:
        original.add(*step)
        restored.add(*step)
    restored.save()
    restored = make("b")
    obs, action, reward, terminated, truncated, infos, nxt = steps[5]
    len(original)  # writes the held steps
    opened = original.rb.storage.index.episode_count + 1
    for storage in (original, restored):
        storage.add(fresh, action, reward, np.zeros(2, bool), np.zeros(2, bool), {}, nxt)
    assert len(original) == len(restored)  # flushes held steps
    for storage in (original, restored):  # a new episode in each env, not glued onto the old one
        assert storage.rb.storage.index.episode_count.tolist() == opened.tolist()
    a, b = original.rb.storage.state_dict(), restored.rb.storage.state_dict()
    seqlock = ("write_seq", "row_version")
    assert (a["index"].exclude(*seqlock) == b["index"].exclude(*seqlock)).all()


def test_state_a_checkpoint_forgets_refuses_another_env_count_or_mode():
    from torchrl_ext.envs import GymVectorAdapter

    state = GymVectorAdapter(2).state_dict()
    with pytest.raises(ValueError, match=r"the checkpoint has \(num_envs, autoreset_mode\)=\(2, "
                                         r"'NextStep'\), this adapter \(3, 'NextStep'\)"):
        GymVectorAdapter(3).load_state_dict(state)


def test_atomic_checkpoints_storage_refuses_a_torn_directory(tmp_path):
    from torchrl_ext import TransitionStorage

    (tmp_path / "storage").mkdir()
    (tmp_path / "storage" / "meta.json").write_text("")  # what a non-atomic dumps left
    with pytest.raises(ValueError, match="TransitionStorage.loads: .*storage holds no complete snapshot"):
        TransitionStorage(64).loads(tmp_path / "storage")


# Extends and saves in a loop; step t of env e stores obs 1000 e + t, next obs + 1.
SAVER = textwrap.dedent(
    """
    import sys, torch
    from tensordict import TensorDict
    from torchrl_ext import make_replay_buffer
    rb = make_replay_buffer(4000, batch_size=4, seed=1)
    def extend(t0):
        obs = (torch.arange(t0, t0 + 50.0) + 1000 * torch.arange(2.0)[:, None]).unsqueeze(-1)
        done = torch.zeros(2, 50, 1, dtype=torch.bool)
        rb.extend(TensorDict({"observation": obs, "action": obs.clone(), "next": {
            "observation": obs + 1, "reward": obs.clone(), "done": done}}, [2, 50]))
    for t in range(0, 1500, 50):
        extend(t)
    rb.dumps(sys.argv[1])
    print("ready", flush=True)
    for t in range(1500, 3000, 50):
        extend(t)
        rb.dumps(sys.argv[1])
    """
)


def test_atomic_checkpoints_read_by_another_process_while_saving(tmp_path):
    """An evaluation process reloads the checkpoint a training process keeps saving:
    each load gets one whole snapshot, and the saves go on undisturbed."""
    from torchrl_ext import make_replay_buffer

    saver = subprocess.Popen([sys.executable, "-c", SAVER, str(tmp_path / "ckpt")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert saver.stdout is not None and saver.stdout.readline().startswith("ready")
    loads = 0
    while saver.poll() is None or not loads:
        rb = make_replay_buffer(4000, batch_size=4, seed=1)
        rb.loads(tmp_path / "ckpt")
        td = rb.storage.get(slice(None))
        assert torch.equal(td["next", "observation"], td["observation"] + 1)  # rows of one save
        assert rb.write_count == 2 * (int(td["observation"].max()) - 999)  # cursors of that save
        loads += 1
    _, errors = saver.communicate()
    assert saver.returncode == 0, errors[-2000:]
