"""GPU benchmark: sampling rows that live on the GPU, ours vs TorchRL vs a bare gather.

    .venv/bin/python benchmarks/gpu.py                    # W1 at 1M rows, W2 n-step pixels at 100k
    .venv/bin/python benchmarks/gpu.py --quick            # 100k / 20k rows, few repetitions
    .venv/bin/python benchmarks/gpu.py --out FILE --append   # (what run.py does)

Prints ``no CUDA device: skipped`` (and writes nothing) without a GPU.

Workloads, every buffer filled with the same episodes (4 envs, 1000-step
episodes, alternating terminated / truncated), written from CUDA tensors:

- W1: observation f32[17], action f32[6], 1M rows, batch 256 and 4096, one-step
  transitions.
- W2: pixels u8[3, 84, 84], action f32[6], 100k rows, batch 256 and 4096, n = 3,
  gamma = 0.99.

Buffers:

- ``ours``: ``make_replay_buffer(cap, device="cuda")`` (+ ``n_step=3`` for W2):
  rows on the GPU, the episode index on the CPU, one index transfer per batch;
- ``torchrl``: ``TensorDictReplayBuffer(LazyTensorStorage(cap, device=DEVICE),
  sampler=RandomSampler())`` (W2: ``LazyTensorStorage(cap, ndim=2, device=DEVICE)``
  with ``MultiStepTransform(3, 0.99)``, write-time n-step, as in nstep.py);
- ``floor``: ``index_select`` of every field from preallocated CUDA tensors at
  ``torch.randint`` indices drawn on the GPU (no episode logic, no n-step sum).

Each timed call is one ``sample()`` followed by ``torch.cuda.synchronize()``;
calls are interleaved across buffers (benchmarks/measure.py), medians reported,
``torch.set_num_threads(1)``. Goal (issue 16): faster than TorchRL, within 2x of
the floor at batch 4096.
"""
from __future__ import annotations

import threads  # noqa: F401 -- first: one thread per native pool (threads.py)

import argparse
import os
import sys
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
if __name__ == "__main__":
    sys.path[:0] = [HERE, os.path.dirname(HERE)]  # benchmarks/, repo root
os.environ.setdefault("RL_LOGGING_LEVEL", "WARNING")

import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402

from measure import interleaved, logger, table, write_tables  # noqa: E402

log = logger("gpu")
ENVS, EPISODE, CHUNK, GAMMA, N = 4, 1000, 500, 0.99, 3
BATCHES = (256, 4096)


def chunks(rows: int, obs_shape: tuple[int, ...], obs_dtype: torch.dtype, device: str):
    """``[ENVS, CHUNK]`` TensorDicts of consecutive steps, ``rows`` transitions in all, on ``device``."""
    g = torch.Generator(device=device).manual_seed(0)
    flag = torch.zeros(ENVS, CHUNK, 1, dtype=torch.bool, device=device)
    for start in range(0, rows // ENVS, CHUNK):
        t = torch.arange(start, start + CHUNK, device=device)
        end = ((t + 1) % EPISODE == 0).view(1, CHUNK, 1).expand(ENVS, CHUNK, 1)
        odd = (t // EPISODE % 2 == 1).view(1, CHUNK, 1)
        if obs_dtype == torch.uint8:
            obs = torch.randint(0, 256, (ENVS, CHUNK + 1, *obs_shape), generator=g, device=device,
                                dtype=torch.uint8)
        else:
            obs = torch.randn(ENVS, CHUNK + 1, *obs_shape, generator=g, device=device)
        yield TensorDict(
            {
                "observation": obs[:, :-1],
                "action": torch.randn(ENVS, CHUNK, 6, generator=g, device=device),
                "next": {
                    "observation": obs[:, 1:],
                    "reward": torch.randn(ENVS, CHUNK, 1, generator=g, device=device),
                    "done": end.clone(),
                    "terminated": end & ~odd,
                    "truncated": end & odd,
                },
            },
            [ENVS, CHUNK],
            device=device,
        )


DEVICE = "cuda"  # --device: e.g. "cpu" to check this script on a machine without a GPU


def ours(cap: int, batch: int, n_step: int | None, data: list[TensorDict]) -> Callable[[], Any]:
    from torchrl_ext import make_replay_buffer

    rb = make_replay_buffer(cap, batch_size=batch, n_step=n_step, gamma=GAMMA, device=DEVICE, seed=0)
    for td in data:
        rb.extend(td)
    return rb.sample


def torchrl(cap: int, batch: int, n_step: int | None, data: list[TensorDict]) -> Callable[[], Any]:
    from torchrl.data import LazyTensorStorage, RandomSampler, TensorDictReplayBuffer
    from torchrl.envs.transforms import MultiStepTransform

    if n_step is None:
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(cap, device=DEVICE),
                                    sampler=RandomSampler(), batch_size=batch)
        for td in data:
            rb.extend(td.reshape(-1))
    else:  # write-time n-step: the transform works per env on time-last [envs, T] data
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(cap, ndim=2, device=DEVICE),
                                    transform=MultiStepTransform(n_steps=n_step, gamma=GAMMA),
                                    batch_size=batch)
        for td in data:
            rb.extend(td)
    return rb.sample


def floor(cap: int, batch: int, n_step: int | None, data: list[TensorDict]) -> Callable[[], Any]:
    flat = torch.cat([td.reshape(-1) for td in data])[:cap]
    fields = [flat["observation"], flat["next", "observation"], flat["action"],
              flat["next", "reward"], flat["next", "done"]]
    g = torch.Generator(device=DEVICE).manual_seed(0)

    def sample() -> list[torch.Tensor]:
        idx = torch.randint(flat.shape[0], (batch,), generator=g, device=DEVICE)
        return [f.index_select(0, idx) for f in fields]

    return sample


IMPLS = {"ours": ours, "torchrl": torchrl, "floor": floor}


def synced(fn: Callable[[], Any]) -> Callable[[], None]:
    def call() -> None:
        fn()
        if DEVICE == "cuda":
            torch.cuda.synchronize()

    return call


def workload(name: str, cap: int, obs_shape, obs_dtype, n_step, reps: int) -> str:
    log(f"{name}: filling {cap:,} rows")
    data = list(chunks(cap, obs_shape, obs_dtype, DEVICE))
    rows = []
    for batch in BATCHES:
        fns = {}
        for key, build in IMPLS.items():
            try:
                fns[key] = synced(build(cap, batch, n_step, data))
            except Exception as e:  # noqa: BLE001 -- reported as a row
                rows.append([key, f"{batch}", f"failed: {type(e).__name__}: {str(e)[:80]}", "", ""])
        stats = interleaved(fns, reps, 1)
        for key in fns:
            med = stats[key]["median"]
            rows.append([key, f"{batch}", f"{med * 1e6:,.0f}", f"{batch / med:,.0f}",
                         f"{med / stats['floor']['median']:.2f}" if "floor" in stats else "n/a"])
        del fns
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
    header = ["impl", "batch", "us/batch (median)", "samples/s", "time / floor"]
    return f"### {name}\n\n" + table(header, rows) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--append", action="store_true")
    ap.add_argument("--device", default="cuda", help="cuda (default), or cpu to check the script")
    a = ap.parse_args(argv)
    global DEVICE
    DEVICE = a.device
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: skipped")
        return
    torch.set_num_threads(1)
    reps = 20 if a.quick else 200
    w1 = 100_000 if a.quick else 1_000_000
    w2 = 20_000 if a.quick else 100_000
    name = torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE
    out = [f"## Device-resident sampling ({name})\n",
           workload(f"W1 obs f32[17], {w1:,} rows", w1, (17,), torch.float32, None, reps),
           workload(f"W2 n-step pixels u8[3,84,84], {w2:,} rows", w2, (3, 84, 84), torch.uint8, N, reps)]
    text = "\n".join(out)
    print(text)
    write_tables(text, a.out, a.append)


if __name__ == "__main__":
    main()
