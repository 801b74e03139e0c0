"""Writers in several processes at once: one lock for them all, and the streams of those that exit.

A multi-process collector's workers write into the shared rows and episode
index at the same time. Without a lock shared by the processes, two of them
could claim the same free stream at their first write (their episodes were
stitched together) and open writes at once (the write sequence number that
readers check lost counts, and so did ``write_count``). The streams of a
worker that exited stayed claimed: a second collector on the same buffer was
refused for want of free streams.
"""
from __future__ import annotations

import multiprocessing
import os
import threading
import time
import warnings

import pytest
import torch

with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message=r"Creating \w+ which inherits from WeightUpdaterBase",
        category=DeprecationWarning,
    )
    from torchrl.collectors import MultiSyncCollector

from cartpole import broken_transitions
from conftest import steps
from test_many_writers import FRAMES_PER_BATCH, make_serial_env
from torchrl_ext import make_replay_buffer


def _hold_the_lock_then_write(rb, held, value: float) -> None:
    with rb.storage.writing():
        held.set()
        time.sleep(0.5)  # the other process tries to write meanwhile
        obs = torch.tensor([[value]])
        rb.extend(steps(obs, obs + 1))


@pytest.mark.parametrize("method, backend", [("fork", "tensor"), ("spawn", "tensor"), ("fork", "memmap")])
def test_a_write_waits_for_another_process_s_write(method, backend, tmp_path):
    """The lock reaches a forked child and a child spawned with the buffer: the
    parent's write, started while the child holds it, comes after the child's.
    Rows in a file are shared from the start; the lock comes with the fork too."""
    rb = make_replay_buffer(64, num_streams=3, batch_size=2, seed=0, backend=backend,
                            scratch_dir=tmp_path if backend == "memmap" else None)
    rb.extend(steps(torch.tensor([[0.0]]), torch.tensor([[1.0]])))  # stream 0, rows shared
    ctx = multiprocessing.get_context(method)
    held = ctx.Event()
    child = ctx.Process(target=_hold_the_lock_then_write, args=(rb, held, 500.0))
    child.start()
    index = _parent_writes_after_the_child(rb, child, held)
    assert int(index.write_seq[0]) == 2 * 3 and len(rb) == 3


def _parent_writes_after_the_child(rb, child, held):
    """Write while ``child`` holds the lock (``held``); check the write came after the child's."""
    assert held.wait(120)
    rb.extend(steps(torch.tensor([[1.0]]), torch.tensor([[2.0]])))
    child.join(60)
    assert child.exitcode == 0
    index = rb.storage.index
    versions = index.row_version.view(index.num_streams, -1)
    child_stream = int(torch.nonzero(index.stream_writer >= 2**32)[0])
    # the parent's step stamped its next row (row 2 of stream 0) in the write after the child's
    assert int(versions[0, 2]) > int(versions[child_stream, 0])
    return index


def _write_many(rb, k: int, start: float) -> None:
    while time.time() < start:  # every process starts writing at once
        pass
    for t in range(200):
        obs = torch.tensor([[1000.0 * k + t]])
        rb.extend(steps(obs, obs + 1))


def test_writers_in_four_processes_claim_their_own_streams_and_every_write_counts():
    """Four forked writers start together; each first write claims a stream.
    Every process owns one stream, holds its 200 steps as one episode, and each
    write counts once in the write sequence and in write_count."""
    rb = make_replay_buffer(4096, num_streams=5, batch_size=8, seed=0)
    rb.extend(steps(torch.tensor([[-10.0]]), torch.tensor([[-9.0]])))
    ctx = multiprocessing.get_context("fork")
    start = time.time() + 1.0
    children = [ctx.Process(target=_write_many, args=(rb, k, start)) for k in range(1, 5)]
    for child in children:
        child.start()
    for child in children:
        child.join(120)
        assert child.exitcode == 0
    index = rb.storage.index
    owners = index.stream_writer.tolist()
    assert owners[0] == 0 and len(set(owners)) == 5
    assert index.written.tolist() == [2] + [201] * 4  # 200 steps and the last next observation
    assert index.episode_count.tolist() == [1] * 5
    assert int(index.write_seq[0]) == 2 * (1 + 4 * 200)
    assert len(rb) == rb.write_count == 801
    everything = rb.storage.get(slice(None))
    assert torch.equal(everything["next", "observation"], everything["observation"] + 1)


def _collect(rb, total_frames: int) -> None:
    collector = MultiSyncCollector(
        [make_serial_env, make_serial_env], policy=None, frames_per_batch=2 * FRAMES_PER_BATCH,
        total_frames=total_frames, replay_buffer=rb,
    )
    try:
        for _ in collector:
            pass
    finally:
        collector.shutdown()


def test_a_second_collector_finds_the_streams_of_the_first_one_s_workers_free():
    """Two MultiSyncCollectors, one after the other, on a buffer with streams for
    one (2 workers x 2 envs): the second was refused, the first one's workers
    (exited) still owning every stream. Their episodes end where they stopped."""
    rb = make_replay_buffer(8192, num_streams=4, seed=0, batch_size=256)
    _collect(rb, 4 * FRAMES_PER_BATCH)
    first = set(rb.storage.index.stream_writer.tolist())
    _collect(rb, 4 * FRAMES_PER_BATCH)
    index = rb.storage.index
    second = set(index.stream_writer.tolist())
    assert len(first) == len(second) == 2 and not first & second  # the new workers' streams
    assert min(second) >= 2**32
    assert len(rb) == 8 * FRAMES_PER_BATCH
    everything = rb.storage.get(slice(None))
    assert broken_transitions(everything) == 0  # no episode of the first runs into the second's
    assert broken_transitions(rb.sample()) == 0


def _claim_then_wait(rb, claimed, stop) -> None:
    obs = torch.tensor([[7.0]])
    rb.extend(steps(obs, obs + 1))
    claimed.set()
    stop.wait(60)


def test_the_streams_of_a_running_process_are_kept():
    """Only exited processes lose their streams: with a child still running, a
    writer finding no free stream is refused, naming the fix."""
    rb = make_replay_buffer(64, num_streams=2, batch_size=2, seed=0)
    rb.extend(steps(torch.tensor([[0.0]]), torch.tensor([[1.0]])))
    ctx = multiprocessing.get_context("fork")
    claimed, stop = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_claim_then_wait, args=(rb, claimed, stop))
    child.start()
    try:
        assert claimed.wait(60)
        handle = rb.writer_handle()
        with pytest.raises(ValueError, match=r"writer 1 writes 1 envs .* but only 0 of the buffer's 2 streams"):
            handle.extend(steps(torch.tensor([[5.0]]), torch.tensor([[6.0]])))
    finally:
        stop.set()
        child.join(60)
    assert child.exitcode == 0
    index = rb.storage.index
    assert index.is_open.tolist() == [True, True]
    handle.extend(steps(torch.tensor([[5.0]]), torch.tensor([[6.0]])))  # the child exited: its stream is free
    assert index.stream_writer.tolist() == [0, handle.writer_id]
    assert index.episode_count.tolist() == [1, 2]  # the child's episode ended there; the handle's opened
    assert int(index.stream_pid[1]) == os.getpid()


def _write_forever(rb) -> None:
    t = 0
    while True:  # a collector's worker, killed while it writes
        obs = torch.full((1, 1), 1000.0 + t)
        rb.extend(steps(obs, obs + 1))
        t += 1


def test_a_writer_killed_mid_write_leaves_the_lock_free():
    """A worker killed while it held the writers' lock (a semaphore) left every
    other writer waiting forever; the lock is now one the kernel frees."""
    rb = make_replay_buffer(4096, num_streams=8, batch_size=2, seed=0)
    rb.extend(steps(torch.zeros(1, 1), torch.ones(1, 1)))
    ctx = multiprocessing.get_context("fork")
    for attempt in range(5):
        child = ctx.Process(target=_write_forever, args=(rb,))
        child.start()
        time.sleep(0.3)
        child.kill()  # SIGKILL, most likely in a write
        child.join(30)
        done = threading.Event()
        writer = threading.Thread(target=lambda: (rb.extend(steps(torch.ones(1, 1), torch.ones(1, 1) + 1)),
                                                   done.set()), daemon=True)
        writer.start()
        assert done.wait(30), f"attempt {attempt}: the parent's write waited for a killed process"


def _hold_the_lock_after_the_queue(queue, held) -> None:
    rb = queue.get()
    with rb.storage.writing():
        held.set()
        time.sleep(0.5)
        obs = torch.full((1, 1), 500.0)
        rb.extend(steps(obs, obs + 1))


def test_a_buffer_sent_through_a_queue_shares_the_lock():
    """Sent through a torch.multiprocessing queue, the storage's rows travel by handle
    (shared) but the lock was a new one: the two processes could write at once."""
    import torch.multiprocessing as tmp

    rb = make_replay_buffer(64, num_streams=3, batch_size=2, seed=0)
    rb.extend(steps(torch.tensor([[0.0]]), torch.tensor([[1.0]])))
    ctx = tmp.get_context("fork")
    queue, held = ctx.Queue(), ctx.Event()
    child = ctx.Process(target=_hold_the_lock_after_the_queue, args=(queue, held))
    child.start()
    queue.put(rb)
    _parent_writes_after_the_child(rb, child, held)


def test_the_streams_of_a_restored_checkpoint_s_process_copies_are_free(tmp_path):
    """A checkpoint written while worker processes owned streams, restored in another
    run: the restoring process took every stream as its own, so new workers were
    refused ('only 0 of the buffer's 4 streams are free')."""
    rb = make_replay_buffer(4096, num_streams=3, batch_size=8, seed=0)
    rb.extend(steps(torch.tensor([[-10.0]]), torch.tensor([[-9.0]])))  # this process: stream 0
    from test_many_writers import _write_in_two_forks

    _write_in_two_forks(rb)
    rb.dumps(tmp_path / "ckpt")
    restored = make_replay_buffer(4096, num_streams=3, batch_size=8, seed=0)
    restored.loads(tmp_path / "ckpt")
    index = restored.storage.index
    assert index.stream_pid.tolist()[0] == os.getpid() and index.stream_pid.tolist()[1:] == [-2, -2]
    handle = restored.writer_handle()
    handle.extend(steps(torch.tensor([[5.0]]), torch.tensor([[6.0]])))  # a stream of the old copies, freed
    assert index.writers().tolist() == [0, handle.writer_id]
    restored.extend(steps(torch.tensor([[-9.0]]), torch.tensor([[-8.0]])))  # writer 0 goes on
    assert index.episode_count.tolist()[0] == 1


def test_only_the_process_that_made_a_lock_file_removes_it():
    """A forked child that drops its copy of the lock (its finalizer runs there too)
    must not remove the file the other processes lock."""
    from torchrl_ext.core.process import FileLock

    lock = FileLock()
    pid = os.fork()
    if pid == 0:
        lock._removal()  # what collecting its copy runs in the child
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.path.exists(lock.path)
    lock._removal()
    assert not os.path.exists(lock.path)
