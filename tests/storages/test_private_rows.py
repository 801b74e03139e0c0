"""Rows start in the process's own memory, on huge pages, and move to shared memory before a worker needs them.

A sample reads rows at random: on 4 KB pages nearly every row read is also a
TLB miss, and shared memory (``memfd``) gets no transparent huge pages by
default. So a storage's rows start private (``reserve_private``) and move to
shared memory once (``TransitionStorage.share_memory_``): before this process
forks, and when the storage is pickled for another process. These tests hold
each half of that: the huge pages, and that no worker ever reads a private copy.
"""
from __future__ import annotations

import multiprocessing
import pickle
import re

import pytest
import torch
from multiprocessing.reduction import ForkingPickler

import torch.multiprocessing  # noqa: F401 -- registers torch's reductions with ForkingPickler

from conftest import steps
from torchrl_ext import make_replay_buffer
from torchrl_ext.storages._memory import reserve_private

THP = "/sys/kernel/mm/transparent_hugepage/enabled"


def thp_mode() -> str:
    """The kernel's transparent huge page mode (``always`` / ``madvise`` / ``never``), ``never`` if unknown."""
    try:
        with open(THP) as f:
            return re.search(r"\[(\w+)\]", f.read()).group(1)
    except (OSError, AttributeError):
        return "never"


def huge_kb(address: int) -> int:
    """``AnonHugePages`` (kB) of this process's mapping holding ``address``."""
    with open("/proc/self/smaps") as f:
        text = f.read()
    for block in re.split(r"\n(?=[0-9a-f]+-[0-9a-f]+ )", text):
        lo, hi = (int(x, 16) for x in block.split(" ", 1)[0].split("-"))
        if lo <= address < hi:
            return int(re.search(r"AnonHugePages:\s+(\d+) kB", block).group(1))
    raise AssertionError(f"no mapping holds {address:#x}")


def burst(t0: int, T: int) -> torch.Tensor:
    """One env's steps ``t0 .. t0 + T - 1`` of one running episode: observation ``t``, next ``t + 1``."""
    obs = torch.arange(t0, t0 + T, dtype=torch.float32).view(1, T, 1)
    return steps(obs, obs + 1)


def observations(storage) -> list[float]:
    """The observation of every live transition, sorted."""
    return sorted(storage[:]["observation"].view(-1).tolist())


def _read_after(rb, ready, wrote, out) -> None:
    # a forked child: waits for the parent's writes after the fork, then reads every transition
    ready.set()
    wrote.wait(60)
    out.put(observations(rb.storage))


@pytest.mark.skipif(thp_mode() == "never", reason="the kernel gives no transparent huge pages")
def test_rows_start_private_on_huge_pages():
    rb = make_replay_buffer(100_000)
    wide = torch.arange(5000, dtype=torch.float32).view(1, 5000, 1).expand(1, 5000, 256)
    rb.extend(steps(wide.contiguous(), wide + 1))  # ~10 MB of rows: whole aligned 2 MB pages
    packed = rb.storage.packed
    assert not packed.shared
    assert huge_kb(packed.buffers.get("rows").data_ptr()) >= 2048


def test_reserve_private_is_zero_and_lazy():
    rows = reserve_private((1 << 20, 1 << 16), torch.uint8)  # 64 GB reserved, nothing committed
    assert rows.shape == (1 << 20, 1 << 16) and int(rows[123_456].sum()) == 0
    rows[7, :4] = 9
    assert rows[7, :5].tolist() == [9, 9, 9, 9, 0]


@pytest.mark.parametrize("compress", [None, {"observation": "lz4"}])
def test_a_forked_worker_reads_the_rows_written_after_the_fork(compress):
    # without the move before the fork the child would read its copy-on-write snapshot:
    # the rows written after the fork would read as zeros there
    rb = make_replay_buffer(10_000, compress=compress)
    rb.extend(burst(0, 10))
    assert not rb.storage.packed.shared
    ctx = multiprocessing.get_context("fork")
    ready, wrote, out = ctx.Event(), ctx.Event(), ctx.SimpleQueue()
    child = ctx.Process(target=_read_after, args=(rb, ready, wrote, out))
    child.start()
    try:
        assert rb.storage.packed.shared  # moved before the fork
        assert ready.wait(60)
        rb.extend(burst(10, 10))
        wrote.set()
        seen = out.get()
    finally:
        child.join(60)
    assert seen == [float(t) for t in range(20)]
    assert child.exitcode == 0


def test_share_memory_keeps_every_row_and_later_writes():
    a, b = make_replay_buffer(1000, seed=3), make_replay_buffer(1000, seed=3)
    for rb in (a, b):
        rb.extend(burst(0, 50))
    assert b.storage.share_memory_() is b.storage and b.storage.packed.shared
    b.storage.share_memory_()  # once only: a no-op now
    for rb in (a, b):
        rb.extend(burst(50, 50))
    assert (a.sample(64) == b.sample(64)).all()
    assert observations(a.storage) == observations(b.storage) == [float(t) for t in range(100)]


def test_pickling_for_another_process_moves_the_rows_first():
    # what a spawned worker gets: the rows by their shared memory, so it sees later writes
    rb = make_replay_buffer(1000)
    rb.extend(burst(0, 10))
    copy = pickle.loads(ForkingPickler.dumps(rb.storage))
    assert rb.storage.packed.shared and copy.packed.shared
    rb.extend(burst(10, 10))
    assert observations(copy) == [float(t) for t in range(20)]
