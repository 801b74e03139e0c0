"""``make_loader`` feeding a training loop: batches per second with 0 and 2 workers (W2, ``nstep.py``).

A calibrated CPU "training step" (a chain of small matmuls, about 2 ms) reads
each batch; the rates of sampling in the loop, of two fork workers, and of a
control (a plain torch ``DataLoader`` of the same tensors, isolating PyTorch's
cost of moving a batch from a worker) are measured in rounds.
"""
from __future__ import annotations

import time

import numpy as np
import torch


def calibrated_train_step(target_s: float = 2e-3):
    """A CPU 'training step' of about ``target_s``: a chain of small matmuls."""
    w = torch.randn(128, 128) / 128 ** 0.5
    x0 = torch.randn(64, 128)

    def run(iters):
        x = x0
        for _ in range(iters):
            x = torch.tanh(x @ w)
        return x

    iters = 10
    while True:
        t0 = time.perf_counter()
        for _ in range(5):
            run(iters)
        dt = (time.perf_counter() - t0) / 5
        if dt > target_s / 4:
            break
        iters *= 2
    iters = max(1, round(iters * target_s / dt))
    for _ in range(2):  # refine on warm measurements
        t0 = time.perf_counter()
        for _ in range(20):
            run(iters)
        iters = max(1, round(iters * target_s / ((time.perf_counter() - t0) / 20)))

    def step(batch):
        run(iters)
        return float(batch["next", "reward"][0])  # consume the batch

    return step


class _PlainBatches(torch.utils.data.IterableDataset):
    """Control: a plain torch Dataset yielding a dict copy of one pre-sampled batch."""

    def __init__(self, batch) -> None:
        self.batch = batch

    def __iter__(self):
        while True:
            yield {k: v.clone() for k, v in self.batch.items()}


class _Td(dict):
    def __getitem__(self, key):  # the training step reads batch["next", "reward"]
        return dict.__getitem__(self, "/".join(key) if isinstance(key, tuple) else key)


def loader_rates(rb, train, batches: int, rounds: int) -> dict:
    from torch.utils.data import DataLoader

    from torchrl_ext import make_loader

    plain = {"/".join(k) if isinstance(k, tuple) else k: v
             for k, v in rb.sample().items(include_nested=True, leaves_only=True)}

    def timed(loader):
        it = iter(loader)
        for _ in range(10):  # workers started and warm
            train(next(it))
        t0 = time.perf_counter()
        for _ in range(batches):
            train(next(it))
        dt = time.perf_counter() - t0
        del it
        return batches / dt

    def plain_rate(num_workers):
        return timed(DataLoader(_PlainBatches(plain), batch_size=None, num_workers=num_workers,
                                multiprocessing_context="fork", collate_fn=_Td))

    def rate(num_workers):
        return timed(make_loader(rb, num_workers=num_workers, seed=0,
                                 multiprocessing_context="fork" if num_workers else None,
                                 prefetch_factor=2 if num_workers else None))

    def train_only():
        b = rb.sample()
        t0 = time.perf_counter()
        for _ in range(batches):
            train(b)
        return batches / (time.perf_counter() - t0)

    out = {"train only": [], 0: [], 2: [], "plain": []}
    for _ in range(rounds):
        out["train only"].append(train_only())
        out[0].append(rate(0))
        out[2].append(rate(2))
        out["plain"].append(plain_rate(2))
    return {k: float(np.median(v)) for k, v in out.items()}


