"""DataLoader workers (fork and spawn) sampling a buffer in shared memory or memmap.

Step ``v`` of every env has observation ``v`` and next observation ``v + 1``,
so any batch can be checked on its own and shows which writes it has seen.
"""
from __future__ import annotations

import sys
import threading
import time

import pytest
import torch
from tensordict import TensorDict

from conftest import killed_workers
from test_concurrent_writers import SyntheticEnvs, broken
from torchrl_ext import make_loader, make_replay_buffer

NUM_ENVS = 2


def step(v: int, n: int = NUM_ENVS) -> TensorDict:
    return TensorDict(
        {
            "observation": torch.full((n, 3), float(v)),
            "action": torch.full((n, 1), float(v)),
            "next": {
                "observation": torch.full((n, 3), float(v + 1)),
                "reward": torch.ones(n, 1),
                "done": torch.zeros(n, 1, dtype=torch.bool),
            },
        },
        [n],
    )


def filled(backend: str, steps: int, tmp_path, seed: int = 0):
    rb = make_replay_buffer(1000, batch_size=32, seed=seed, backend=backend, scratch_dir=tmp_path)
    for v in range(steps):
        rb.extend(step(v))
    return rb


def check_batch(batch: TensorDict) -> None:
    obs = batch["observation"]
    assert batch.batch_size == (32,)
    assert (obs == obs[:, :1]).all()
    assert (batch["next", "observation"] == obs + 1).all()
    assert (batch["action"][:, 0] == obs[:, 0]).all()


@pytest.mark.parametrize("backend", ["tensor", "memmap"])
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers_see_rows_written_after_start(context, backend, tmp_path):
    rb = filled(backend, 20, tmp_path)
    loader = make_loader(
        rb, num_workers=2, multiprocessing_context=context, num_batches=400,
        seed=0, prefetch_factor=1,
    )
    it = iter(loader)
    first, second = next(it), next(it)  # one batch of each worker, both running
    for batch in (first, second):
        check_batch(batch)
        assert (batch["observation"] < 20).all()
    # distinct random streams per worker
    assert not torch.equal(first["index"], second["index"])
    for v in range(20, 70):
        rb.extend(step(v))
    seen: set[float] = set()
    deadline = time.monotonic() + 20
    for batch in it:
        check_batch(batch)
        seen.update(batch["observation"][:, 0].tolist())
        if max(seen) >= 60 or time.monotonic() > deadline:
            break
    del it, loader
    assert max(seen) >= 60, f"workers never saw the new rows: {sorted(seen)[-5:]}"


def test_workers_forked_while_another_thread_writes_sample(tmp_path):
    # a collector thread keeps writing while the training loop starts its workers:
    # a fork in the middle of an extend used to leave each worker a copy of the
    # buffer's lock held by a thread it does not have (most loaders hung)
    rb = filled("tensor", 20, tmp_path)
    stop = threading.Event()

    def collect() -> None:
        v = 20
        while not stop.is_set():
            rb.extend(step(v))
            v += 1

    writer = threading.Thread(target=collect)
    writer.start()
    try:
        for _ in range(5):
            loader = make_loader(rb, num_workers=2, multiprocessing_context="fork", prefetch_factor=1)
            loader.timeout = 30  # a hung worker fails the test instead of stalling the suite
            it = iter(loader)
            for _ in range(2):
                check_batch(next(it))
            del it, loader
    finally:
        stop.set()
        writer.join()


def test_workers_draw_different_batches(tmp_path):
    context = "fork"  # spawn is covered by the first test (slow to start)
    rb = filled("tensor", 50, tmp_path)
    loader = make_loader(
        rb, num_workers=2, multiprocessing_context=context, num_batches=2,
        seed=0, prefetch_factor=1,
    )
    batches = list(loader)  # worker 0 and 1 alternate
    assert len(batches) == 4
    for batch in batches:
        check_batch(batch)
    index = [b["index"] for b in batches]
    for i in range(4):
        for j in range(i + 1, 4):
            assert not torch.equal(index[i], index[j]), (i, j)


def _indices(loader) -> list[torch.Tensor]:
    return [batch["index"] for batch in loader]


def test_seeded_loader_with_workers_is_reproducible(tmp_path):
    rb = filled("tensor", 50, tmp_path)
    runs = [
        _indices(make_loader(rb, num_workers=2, multiprocessing_context="fork",
                             num_batches=2, seed=seed, prefetch_factor=1))
        for seed in (7, 7, 8)
    ]
    assert all(torch.equal(a, b) for a, b in zip(runs[0], runs[1]))
    assert not all(torch.equal(a, b) for a, b in zip(runs[0], runs[2]))


def test_seeded_buffers_give_identical_runs_in_process(tmp_path):
    """num_workers=0: batches come from the buffer's own seeded generator."""
    runs = []
    for _ in range(2):
        rb = filled("tensor", 50, tmp_path, seed=3)
        runs.append(_indices(make_loader(rb, num_batches=4, seed=0)))
    assert all(torch.equal(a, b) for a, b in zip(*runs))
    assert not torch.equal(runs[0][0], runs[0][1])


def test_loader_seed_makes_runs_identical_in_process(tmp_path):
    rb = filled("tensor", 50, tmp_path)
    first = _indices(make_loader(rb, num_batches=4, seed=0))
    second = _indices(make_loader(rb, num_batches=4, seed=0))
    assert all(torch.equal(a, b) for a, b in zip(first, second))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_each_epoch_of_a_seeded_loader_draws_new_batches(num_workers, tmp_path):
    """``for batch in loader`` twice: the second epoch goes on drawing, in process as with workers."""
    rb = filled("tensor", 50, tmp_path)
    loader = make_loader(rb, num_batches=2, seed=0, num_workers=num_workers,
                         prefetch_factor=1 if num_workers else None)
    first, second = _indices(loader), _indices(loader)
    assert not any(torch.equal(a, b) for a, b in zip(first, second))


def test_worker_batches_keep_every_entry_dtype_and_shape(tmp_path):
    """Worker batches cross to the main process packed by value: nothing is lost on the way."""
    rb = make_replay_buffer(1000, batch_size=32, seed=0, n_step=3, terminated_key=("next", "done"),
                            done_keys=[("next", "done")])
    for v in range(50):
        rb.extend(step(v))
    expected = rb.sample()
    loader = make_loader(rb, num_workers=2, multiprocessing_context="fork", num_batches=1,
                         seed=0, prefetch_factor=1)
    for batch in loader:
        assert isinstance(batch, TensorDict) and batch.batch_size == (32,)
        steps = batch["steps_to_next_obs"].float()  # [32, 1]
        assert (batch["next", "observation"] == batch["observation"] + steps).all()
        assert set(batch.keys(True, True)) == set(expected.keys(True, True))
        for key in expected.keys(True, True):
            assert (batch[key].dtype, batch[key].shape) == (expected[key].dtype, expected[key].shape), key
        # a window of k steps of reward 1 returns sum(gamma**i), i < k
        k = batch["steps_to_next_obs"].view(-1).double()
        assert torch.allclose(batch["next", "reward"].view(-1).double(), (1 - 0.99**k) / 0.01, atol=1e-5)


def _through_pipe(batch: TensorDict):
    """``batch`` as a worker sends it (packed, pickled as DataLoader's queues do) and the main process receives it."""
    import pickle
    from multiprocessing.reduction import ForkingPickler

    from torchrl_ext._worker_batches import _Packed

    packed = _Packed.of(batch)
    assert packed is not None
    return packed, pickle.loads(ForkingPickler.dumps(packed))


def test_packed_batches_keep_values_dtypes_shapes_and_nested_batch_sizes():
    """Every leaf crosses bit for bit, whatever its dtype, layout or view kind.

    Leaves of mixed item sizes (1 to 16 bytes, listed narrow first), a strided
    column, a zero-stride expansion, a zero-size entry, negative and conjugate
    views (whose bytes are not their values), and a nested TensorDict with
    more batch dims than its parent.
    """
    window = torch.arange(24.0).view(4, 3, 2)
    batch = TensorDict({
        "flag": torch.tensor([True, False, True, True]).unsqueeze(-1),
        "half": torch.arange(4, dtype=torch.float16),
        "column": torch.arange(8).view(4, 2)[:, 1],  # stride 2
        "expanded": torch.tensor(3.0).expand(4),  # stride 0
        "empty": torch.zeros(4, 0),
        "negated": torch._neg_view(torch.arange(4.0)),
        "conjugate": torch.arange(4.0, dtype=torch.float64).mul(1 + 2j).conj(),
        "n_step": TensorDict({"reward": window, "mask": window > 5}, [4, 3]),
        "next": {"observation": torch.randn(4, 5)},
    }, [4])
    packed, back = _through_pipe(batch)
    assert packed.reduced[1][2].__class__.__name__ == "ndarray"  # small: by value, no shared memory
    assert back.batch_size == (4,) and back["n_step"].batch_size == (4, 3) and back.device == batch.device
    assert set(back.keys(True, True)) == set(batch.keys(True, True))
    for key in batch.keys(True, True):
        sent, got = batch[key], back[key]
        assert (got.dtype, got.shape) == (sent.dtype, sent.shape), key
        assert not got.is_neg() and not got.is_conj(), key
        assert torch.equal(got.resolve_neg().resolve_conj(), sent.resolve_neg().resolve_conj()), key


def test_packed_batches_above_one_mib_cross_in_shared_memory():
    batch = TensorDict({"pixels": torch.arange(2**21, dtype=torch.uint8).view(8, -1),
                        "reward": torch.ones(8, 1)}, [8])
    packed, back = _through_pipe(batch)
    assert packed.reduced[1][2].is_shared() and back["pixels"].is_shared()
    assert torch.equal(back["pixels"], batch["pixels"]) and torch.equal(back["reward"], batch["reward"])


def test_packed_batches_of_a_leaf_that_requires_grad_arrive_as_data():
    batch = TensorDict({"w": torch.ones(2, 3, requires_grad=True)}, [2])
    _, back = _through_pipe(batch)
    assert not back["w"].requires_grad and torch.equal(back["w"], torch.ones(2, 3))


@pytest.mark.parametrize("kind", ["one-step", "n-step", "hindsight", "frames", "sequences"])
def test_every_sampled_batch_kind_is_packed(kind):
    """What the buffers serve holds only tensors and TensorDicts: workers pack it (no slow per-tensor path)."""
    from torchrl_ext import make_her_replay_buffer
    from torchrl_ext._worker_batches import _Packed
    from torchrl_ext.samplers import SequenceSampler

    if kind == "hindsight":
        rb = make_her_replay_buffer(1000, lambda a, d, info: -(a - d).abs().sum(-1), batch_size=8, seed=0,
                                    terminated_key=("next", "done"))
        for v in range(12):
            data = step(v)
            for where in ((), ("next",)):
                obs = data[(*where, "observation")]
                data[(*where, "achieved_goal")], data[(*where, "desired_goal")] = obs[:, :1], obs[:, 1:2]
            rb.extend(data)
    else:
        done = {"terminated_key": ("next", "done"), "done_keys": [("next", "done")]}
        options = {"one-step": {}, "n-step": {"n_step": 3, **done}, "frames": {"n_frames": 3, "n_step": 2, **done},
                   "sequences": {"sampler": SequenceSampler(4)}}[kind]
        rb = make_replay_buffer(1000, batch_size=8, seed=0, **options)
        for v in range(12):
            rb.extend(step(v))
    assert _Packed.of(rb.sample()) is not None


def test_batches_with_other_entries_are_sent_as_they_are():
    """A non-tensor entry (or a lazy stack): not packed, DataLoader sends the TensorDict itself."""
    from tensordict import LazyStackedTensorDict, NonTensorData

    from torchrl_ext._worker_batches import _Packed

    tagged = TensorDict({"x": torch.zeros(2, 1), "tag": NonTensorData("run-1", batch_size=[2])}, [2])
    stacked = TensorDict({"x": torch.zeros(2, 1), "sub": LazyStackedTensorDict(
        TensorDict({"y": torch.zeros(1)}, []), TensorDict({"y": torch.ones(1)}, []), stack_dim=0)}, [2])
    assert _Packed.of(tagged) is None and _Packed.of(stacked) is None


def test_large_worker_batches_arrive_whole(tmp_path):
    """A batch above 1 MiB crosses as one shared-memory block; its values are intact."""
    rb = make_replay_buffer(1000, batch_size=32, seed=0)
    wide = 8192  # 32 rows x 2 observations x 32 KiB = 2 MiB a batch
    for v in range(20):
        data = step(v)
        data["observation"] = torch.full((NUM_ENVS, wide), float(v))
        data["next", "observation"] = torch.full((NUM_ENVS, wide), float(v + 1))
        rb.extend(data)
    loader = make_loader(rb, num_workers=2, multiprocessing_context="fork", num_batches=1,
                         seed=0, prefetch_factor=1)
    for batch in loader:
        assert batch["observation"].shape == (32, wide)
        check_batch(batch)


@pytest.mark.parametrize("num_workers, context", [(0, None), (1, "fork"), (1, "spawn")])
def test_batches_keep_only_the_keys_asked_for(num_workers, context, tmp_path):
    rb = filled("tensor", 10, tmp_path)
    keys = ["observation", ("next", "observation"), "action"]
    loader = make_loader(rb, num_workers=num_workers, multiprocessing_context=context, num_batches=2,
                         seed=0, keys=keys)
    for batch in loader:
        assert set(batch.keys(include_nested=True, leaves_only=True)) == {
            "observation", ("next", "observation"), "action"}
        check_batch(batch)
    one = next(iter(make_loader(rb, num_batches=1, seed=0, keys="action")))
    assert list(one.keys()) == ["action"]


@pytest.mark.parametrize("num_workers", [0, 1])
def test_keys_that_batches_do_not_hold_are_named(num_workers):
    rb = filled("tensor", 10, None)
    loader = make_loader(rb, num_batches=1, keys=["observation", ("next", "rewards")],
                         num_workers=num_workers, multiprocessing_context="fork")
    with pytest.raises(KeyError, match=r"keys=\('next', 'rewards'\) is not among the entries of the "
                                       r"sampled batches \(held: .*\('next', 'reward'\)"):
        next(iter(loader))
    with pytest.raises(ValueError, match=r"keys is empty; pass keys=None to keep every entry"):
        make_loader(rb, keys=[])
    with pytest.raises(TypeError, match=r"keys holds 3, expected a key \(a string or a tuple of strings\)"):
        make_loader(rb, keys=["observation", 3])
    with pytest.raises(TypeError, match=r"keys holds \('next', 1\), expected a key"):
        make_loader(rb, keys=[("next", 1)])


def test_an_iterator_collected_by_gc_stops_its_workers_without_killing_them(monkeypatch):
    """A worker's error leaves its iterator in a reference cycle (the traceback): gc used to
    finalize the iterator's queues before the iterator, whose workers then never got the stop
    signal; the collection waited 5 s for each and killed it."""
    import gc

    rb = filled("tensor", 10, None)
    workers = []

    def fail():
        batches = iter(make_loader(rb, num_workers=2, keys=["observation", "nope"],
                                   multiprocessing_context="fork"))
        workers.extend(batches._workers)
        try:
            next(batches)
        except KeyError as err:
            return err

    assert fail() is not None
    killed = killed_workers(monkeypatch, workers)
    gc.collect()
    assert [w.exitcode for w in workers] == [0, 0] and killed == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pipe sizes are Linux's")
def test_batches_by_value_cross_a_pipe_that_holds_them_whole(tmp_path):
    """The workers' pipe is widened past Linux's 64 KiB (to the system's cap): 256 KiB batches fit it whole."""
    import fcntl

    from torchrl_ext._worker_batches import _BY_VALUE_BYTES

    rb = make_replay_buffer(1000, batch_size=32, seed=0)
    wide = 1024  # 32 rows x 2 observations x 4 KiB = 256 KiB a batch: by value, above 64 KiB
    for v in range(20):
        data = step(v)
        data["observation"] = torch.full((NUM_ENVS, wide), float(v))
        data["next", "observation"] = torch.full((NUM_ENVS, wide), float(v + 1))
        rb.extend(data)
    loader = make_loader(rb, num_workers=1, multiprocessing_context="fork", num_batches=3, seed=0)
    iterator = iter(loader)
    pipe = iterator._worker_result_queue._reader.fileno()
    with open("/proc/sys/fs/pipe-max-size") as f:
        cap = int(f.read())
    assert fcntl.fcntl(pipe, fcntl.F_GETPIPE_SZ) >= min(2 * _BY_VALUE_BYTES, cap, 256 << 10)
    batches = list(iterator)
    assert len(batches) == 3
    for batch in batches:
        assert batch["observation"].shape == (32, wide)
        check_batch(batch)


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers_sample_the_whole_ring_and_each_write_while_it_wraps(context):
    """The main process writes while 2 workers sample, and the ring turns over 4 times.

    Steps carry ``[writer, env, episode, t]`` (see ``SyntheticEnvs``). After each
    write, the batches in flight (``num_workers * prefetch_factor``) may predate
    it; every later batch, one per worker, is drawn from the buffer as written
    then: only live transitions (none overwritten), some from the write just
    made, some older, from both envs (the whole buffer, not a shard); no batch
    ever holds a transition spanning two episodes or two steps.
    """
    rb = make_replay_buffer(256, batch_size=64, seed=0)  # 2 envs: 128 rows each
    envs = SyntheticEnvs(0)
    for _ in range(8):
        rb.extend(envs.batch())
    workers, in_flight = 2, 2  # prefetch_factor=1
    it = iter(make_loader(rb, num_workers=workers, multiprocessing_context=context,
                          seed=0, prefetch_factor=1))
    index = rb.storage.index
    try:
        while index.written.min() < 4 * index.stream_capacity:
            written = [envs.batch() for _ in range(6)]  # 48 steps per env
            for data in written:
                rb.extend(data)
            fresh = {tuple(o) for d in written for o in d["observation"].reshape(-1, 4).tolist()}
            live = {tuple(o) for o in rb.storage.get(slice(None))["observation"].tolist()}
            for b in range(in_flight + workers):
                batch = next(it)
                assert broken(batch) == 0
                if b < in_flight:
                    continue  # drawn before this write, maybe
                drawn = [tuple(o) for o in batch["observation"].tolist()]
                assert set(drawn) <= live, "a row overwritten before the batch was drawn"
                assert fresh & set(drawn) and set(drawn) - fresh, "not drawn from the whole buffer"
                assert {o[1] for o in drawn} == {0.0, 1.0}, "one env only"
    finally:
        del it


@pytest.mark.skipif(torch.cuda.is_available(), reason="pinning works with CUDA")
def test_pin_memory_without_cuda_is_refused_not_warned(tmp_path):
    # torch only warns that pinning needs an accelerator, and serves unpinned batches
    rb = filled("tensor", 20, tmp_path)
    with pytest.raises(ValueError, match=r"make_loader: pin_memory=True needs CUDA, which is not available"):
        make_loader(rb, num_workers=2, pin_memory=True)


def test_a_killed_worker_is_found_before_the_next_batch(tmp_path):
    """``kill -9`` of one worker: the check made before each batch names it, and only it."""
    import os
    import signal

    from torchrl_ext.loader import _dead_workers

    rb = filled("tensor", 20, tmp_path)
    it = iter(make_loader(rb, num_workers=2, multiprocessing_context="fork", seed=0, prefetch_factor=1))
    try:
        next(it)
        assert _dead_workers(it) == []
        victim = it._workers[0]
        try:
            os.kill(victim.pid, signal.SIGKILL)
            victim.join(10)
        except RuntimeError:  # DataLoader's SIGCHLD handler may report it first, wherever we are
            victim.join(10)
        assert _dead_workers(it) == [victim.pid]
    finally:
        it._shutdown_workers()
