"""Writers and samplers at the same time: threads in one process, DataLoader workers.

Synthetic steps that carry who wrote them: the observation of step ``t`` of
env ``e`` of writer ``w`` in its episode ``k`` is ``[w, e, k, t]``, its action
``w * 1000 + e * 100 + t`` and its next observation ``[w, e, k, t + 1]`` (the
episode ends after ``t = L - 1``, ``L`` varying). A transition from two
writers, two episodes or a half-written row shows in its numbers, so every
sampled transition is checked.
"""
from __future__ import annotations

import threading

import pytest
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl_ext import make_loader, make_replay_buffer

NUM_ENVS, T = 2, 8


class SyntheticEnvs:
    """``NUM_ENVS`` envs of writer ``w``; :meth:`batch` gives their next ``[NUM_ENVS, T]`` steps."""

    def __init__(self, w: int) -> None:
        self.w = w
        self.t = torch.zeros(NUM_ENVS, dtype=torch.int64)
        self.k = torch.zeros(NUM_ENVS, dtype=torch.int64)

    def length(self, k: torch.Tensor) -> torch.Tensor:
        return 5 + (k * 7 + self.w) % 11  # episodes of 5 to 15 steps

    def batch(self) -> TensorDict:
        obs, done = [], []
        for _ in range(T):
            env = torch.arange(NUM_ENVS)
            obs.append(torch.stack([torch.full_like(env, self.w), env, self.k, self.t], -1))
            end = self.t + 1 == self.length(self.k)
            done.append(end)
            self.t = torch.where(end, 0, self.t + 1)
            self.k = self.k + end
        o = torch.stack(obs, 1).float()  # [envs, T, 4]
        d = torch.stack(done, 1).unsqueeze(-1)  # [envs, T, 1]
        return TensorDict(
            {
                "observation": o,
                "action": (o[..., 0] * 1000 + o[..., 1] * 100 + o[..., 3]).unsqueeze(-1),
                "next": {
                    "observation": o + torch.tensor([0.0, 0.0, 0.0, 1.0]),
                    "reward": o[..., 3:4].clone(),
                    "done": d,
                    "terminated": d.clone(),
                },
            },
            [NUM_ENVS, T],
        )


def broken(batch: TensorDictBase) -> int:
    """Transitions (any batch shape) whose entries are not one writer's one step."""
    obs, nxt = batch["observation"], batch["next", "observation"]
    ok = (nxt[..., :3] == obs[..., :3]).all(-1) & (nxt[..., 3] == obs[..., 3] + 1)
    ok &= batch["action"][..., 0] == obs[..., 0] * 1000 + obs[..., 1] * 100 + obs[..., 3]
    ok &= batch["next", "reward"][..., 0] == obs[..., 3]
    return int((~ok).sum())


def broken_windows(batch: TensorDictBase, gamma: float) -> int:
    """n-step windows: ``k`` steps of one episode from the start step, exact return."""
    obs, nxt = batch["observation"], batch["next", "observation"]
    k = batch["steps_to_next_obs"][:, 0]
    ok = (nxt[:, :3] == obs[:, :3]).all(-1) & (nxt[:, 3] == obs[:, 3] + k)
    steps = torch.arange(int(k.max()))
    rewards = (obs[:, 3:4] + steps) * gamma**steps * (steps < k[:, None])
    ok &= (batch["next", "reward"][:, 0] - rewards.sum(-1)).abs() < 1e-3
    return int((~ok).sum())


def test_writer_threads_and_a_sampling_thread():
    """Two writer threads (own handles) and a sampler until the ring wrapped twice and 2,048 windows were checked."""
    gamma = 0.5
    rb = make_replay_buffer(2048, num_streams=2 * NUM_ENVS, n_step=3, gamma=gamma, seed=0)
    first = rb.writer_handle()
    first.extend(SyntheticEnvs(9).batch())  # fixes the entries; then leaves its streams
    first.release()
    index = rb.storage.index
    stop = threading.Event()
    errors: list[BaseException] = []
    checked = [0, 0]

    def write(w: int) -> None:
        try:
            handle, envs = rb.writer_handle(w), SyntheticEnvs(w)
            while not stop.is_set():
                handle.extend(envs.batch())
        except BaseException as e:  # reported by the main thread
            errors.append(e)
            stop.set()

    def sample() -> None:
        # stops everything once enough happened (counts, not time: a slow machine only takes longer)
        try:
            while not stop.is_set():
                if len(rb) < 256:  # the writers are starting
                    continue
                batch = rb.sample(256)
                checked[0] += broken_windows(batch, gamma)
                checked[1] += 256
                if checked[1] >= 2048 and index.written.min() > 2 * index.stream_capacity:
                    stop.set()
        except BaseException as e:
            errors.append(e)
            stop.set()

    threads = [threading.Thread(target=write, args=(w,)) for w in (2, 3)]
    threads.append(threading.Thread(target=sample))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert checked[1] >= 2048 and checked[0] == 0
    assert index.written.min() > 2 * index.stream_capacity  # every ring wrapped twice, read meanwhile


@pytest.mark.parametrize("capacity", [60_000, 4096], ids=["filling", "wrapping"])
def test_dataloader_workers_sample_while_two_writers_write(capacity):
    """make_loader workers (processes) sample while the main process writes as two writers."""
    rb = make_replay_buffer(capacity, num_streams=2 * NUM_ENVS, batch_size=256, seed=0)
    writers = [(rb.writer_handle(), SyntheticEnvs(w)) for w in (0, 1)]
    for _ in range(16):  # 512 transitions before the workers start
        for handle, envs in writers:
            handle.extend(envs.batch())
    loader = make_loader(rb, num_workers=2, seed=0, prefetch_factor=2)
    it = iter(loader)
    seen, bad, writes = 0, 0, 0
    # bursts of writes, each followed by a batch, until 20 batches came and half the
    # capacity was written (filling: it stays below capacity) or twice it (wrapping)
    target = capacity // 2 if capacity > 10_000 else 2 * capacity
    try:
        while seen < 256 * 20 or writes < target:
            if writes < target:
                for handle, envs in writers:
                    for _ in range(8):
                        handle.extend(envs.batch())
                        writes += NUM_ENVS * T
            batch = next(it)
            bad += broken(batch)
            seen += batch.numel()
    finally:
        del it, loader
    assert seen >= 256 * 20
    assert writes >= target
    assert bad == 0, f"{bad} of {seen} sampled transitions are torn"
