"""EpisodePool against a slow loop reference: a dict ``slot -> per-step ids``.

Every step written carries a unique ``id``; its other entries derive from it
(``x = (id, step)``, ``flag = id % 3 == 0``), so any gathered or sampled
value tells which episode and step it comes from.
"""
from __future__ import annotations

import os
import random
import re
import signal
import threading
import time
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import event, given
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from tensordict import TensorDict
from torch.utils.data import DataLoader, IterableDataset

from conftest import CountingSource
from torchrl_ext.core.windows import draw_windows, valid_window
from torchrl_ext.storages.pool import EpisodePool

SPEC = TensorDict(
    {
        "id": torch.zeros((), dtype=torch.int64),
        "x": torch.zeros(2),
        "flag": torch.zeros((), dtype=torch.bool),
        "nested": {"y": torch.zeros(3, dtype=torch.int32)},
    },
    [],
)


def episode(ids: list[int]) -> TensorDict:
    """``[L]`` steps with the given ids."""
    id_ = torch.tensor(ids, dtype=torch.int64)
    step = torch.arange(len(ids), dtype=torch.float32)
    return TensorDict(
        {
            "id": id_,
            "x": torch.stack([id_.float(), step], -1),
            "flag": id_ % 3 == 0,
            "nested": {"y": id_.to(torch.int32)[:, None].expand(-1, 3).clone()},
        },
        [len(ids)],
    )


def check_entries(td: TensorDict, ids: torch.Tensor, steps: torch.Tensor) -> None:
    """Entries of ``td`` (any batch shape) are those of steps ``ids`` at ``steps``."""
    assert torch.equal(td["id"], ids)
    assert td["x"].dtype == torch.float32
    assert torch.equal(td["x"], torch.stack([ids.float(), steps.float()], -1))
    assert torch.equal(td["flag"], ids % 3 == 0)
    assert torch.equal(td["nested", "y"], ids.to(torch.int32)[..., None].expand(*ids.shape, 3))


# ---------------------------------------------------------------- reference
class Reference:
    """The pool as a dict ``slot -> list of step ids``, in step order."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.episodes: dict[int, list[int]] = {}
        self.step_of: dict[int, int] = {}  # id -> its step in its episode
        self.next_id = 0

    def new_ids(self, length: int) -> list[int]:
        ids = list(range(self.next_id, self.next_id + length))
        self.next_id += length
        return ids

    def append(self, slot: int, ids: list[int]) -> None:
        assert slot not in self.episodes, f"slot {slot} handed out while live"
        self.episodes[slot] = ids
        self.step_of.update({i: t for t, i in enumerate(ids)})

    def evict(self, slot: int) -> None:
        del self.episodes[slot]

    def clear(self) -> None:
        self.episodes.clear()

    @property
    def num_free(self) -> int:
        return self.capacity - sum(len(e) for e in self.episodes.values())

    def windows(self, width: int, pad: bool) -> set[tuple[tuple[int, ...], tuple[bool, ...] | None]]:
        """Every valid window as ``(ids, mask)``; mask None without ``pad``."""
        out = set()
        for ids in self.episodes.values():
            n = len(ids)
            for s in range(n - width + 1):
                out.add((tuple(ids[s : s + width]), (True,) * width if pad else None))
            if pad and n < width:
                padded = ids + [ids[-1]] * (width - n)
                out.add((tuple(padded), (True,) * n + (False,) * (width - n)))
        return out

    def whole(self) -> set[tuple[int, ...]]:
        return {tuple(ids) for ids in self.episodes.values()}


def check_against(pool: EpisodePool, ref: Reference) -> None:
    live = pool.live_slots()
    assert sorted(live.tolist()) == sorted(ref.episodes)
    assert pool.num_free == ref.num_free
    seen = np.zeros(pool.capacity, dtype=bool)
    for slot, ids in ref.episodes.items():
        rows = pool.episode_rows(slot)
        assert rows.shape == (len(ids),)
        r = rows.numpy()
        assert ((0 <= r) & (r < pool.capacity)).all()
        assert not seen[r].any(), f"row shared by two live episodes: {r[seen[r]]}"
        assert len(set(r.tolist())) == len(ids), "row used twice in one episode"
        seen[r] = True
        check_entries(pool.gather(r), torch.tensor(ids), torch.arange(len(ids)))
        # what the rejection sampler reads for each row
        assert (pool.row_slot[rows] == slot).all()
        assert torch.equal(pool.row_step[rows], torch.arange(len(ids)))
    assert (pool.row_slot[torch.from_numpy(~seen)] == -1).all(), "free row still owned"


# ---------------------------------------------------------------- workloads
# (operation, argument): append 1 + arg % 8 steps, evict live slot number arg % live, or clear
OPS = st.tuples(
    st.sampled_from(["append"] * 5 + ["evict"] * 4 + ["clear"]), st.integers(0, 2**16)
)


@st.composite
def workloads(draw, max_ops: int = 40):
    capacity = draw(st.integers(4, 24))
    ops = draw(st.lists(OPS, min_size=max_ops // 4, max_size=max_ops))
    return capacity, ops


def note(what: str) -> None:
    """Hypothesis event (statistics), ignored outside a Hypothesis test."""
    try:
        event(what)
    except InvalidArgument:
        pass


def apply(pool: EpisodePool, ref: Reference, op: str, arg: int) -> None:
    if op == "append":
        length = 1 + arg % 8
        ids = ref.new_ids(length)
        if length > ref.num_free:
            before = {k: v.clone() for k, v in pool.state_dict().items()}
            with pytest.raises(ValueError, match=rf"needs {length} free rows, {ref.num_free} are free"):
                pool.append(episode(ids))
            after = pool.state_dict()
            for k, v in before.items():
                assert (v == after[k]).all(), f"failed append changed {k}"
            note("append refused: no room")
            return
        ref.append(pool.append(episode(ids)), ids)
    elif op == "evict":
        if not ref.episodes:
            with pytest.raises(KeyError, match="holds no episode"):
                pool.evict(arg % pool.capacity)
            return
        live = sorted(ref.episodes)
        slot = live[arg % len(live)]
        if slot != min(ref.episodes, key=lambda s: ref.episodes[s][0]):
            note("evicted a non-oldest episode")
        pool.evict(slot)
        ref.evict(slot)
    else:
        pool.clear()
        ref.clear()


def build(capacity: int, ops, check: bool = False) -> tuple[EpisodePool, Reference]:
    pool, ref = EpisodePool(capacity, SPEC), Reference(capacity)
    for op, arg in ops:
        apply(pool, ref, op, arg)
        if check:
            check_against(pool, ref)
    return pool, ref


@given(workloads(max_ops=80))
def test_pool_matches_reference_after_every_operation(workload):
    build(*workload, check=True)


def test_compaction_with_evictions_in_any_order():
    """Directed: evict the oldest, a middle or the newest episode; the table compacts often."""
    pool, ref = EpisodePool(8, SPEC), Reference(8)
    rng = random.Random(0)
    written = 0
    for _ in range(300):
        length = rng.randint(1, 4)
        while ref.num_free < length:
            by_age = sorted(ref.episodes, key=lambda s: ref.episodes[s][0])
            slot = by_age[rng.choice([0, len(by_age) // 2, -1])]
            pool.evict(slot)
            ref.evict(slot)
            check_against(pool, ref)
        ids = ref.new_ids(length)
        ref.append(pool.append(episode(ids)), ids)
        written += length
        check_against(pool, ref)
    # the table has 2 * capacity = 16 entries and keeps at most 8 live after a
    # compaction, so every 8 steps written past the first 16 needed one
    assert (written - 16) // 8 >= 20


def test_evict_free_slot_raises_and_clear_resets():
    pool = EpisodePool(4, SPEC)
    slot = pool.append(episode([1, 2]))
    pool.evict(slot)
    with pytest.raises(KeyError, match=f"slot {slot} holds no episode"):
        pool.evict(slot)
    pool.append(episode([3, 4, 5]))
    pool.clear()
    assert pool.num_free == 4 and pool.live_slots().size == 0
    assert_empty_then_usable(pool)


def assert_empty_then_usable(pool: EpisodePool) -> None:
    """An empty 4-slot pool refuses to sample, then serves a new episode like the reference."""
    with pytest.raises(ValueError, match="no episode is stored"):
        pool.sample(1, None)
    ref = Reference(4)
    ids = ref.new_ids(4)
    ref.append(pool.append(episode(ids)), ids)
    check_against(pool, ref)


def test_failed_append_of_empty_episode_leaves_pool_unchanged():
    """Regression: an empty episode is refused before the index is touched.

    It used to raise numpy's "zero-size array" ValueError only *after* popping
    a slot (``slot_top`` decremented, never given back): the pool counted a
    phantom episode, and ``sample(n, None)`` on a pool without live episodes
    then looped forever in ``draw_episodes``.
    """
    pool = EpisodePool(4, SPEC)
    pool.evict(pool.append(episode([1, 2])))
    before = {k: v.clone() for k, v in pool.state_dict().items()}
    with pytest.raises(ValueError, match="EpisodePool.append"):
        pool.append(episode([]))
    after = pool.state_dict()
    changed = [k for k, v in before.items() if not (v == after[k]).all()]
    assert not changed, f"the refused empty episode changed {changed}"
    # checked only once the index is intact: otherwise this never returns
    assert_empty_then_usable(pool)


# ---------------------------------------------------------------- sampling
def as_windows(out: TensorDict, pad: bool) -> list[tuple[tuple[int, ...], tuple[bool, ...] | None]]:
    ids = out["id"]
    mask = out.get("mask", None)
    assert (mask is not None) == pad, "mask present exactly when padded"
    return [
        (tuple(row), None if mask is None else tuple(m))
        for row, m in zip(ids.tolist(), mask.tolist() if mask is not None else [None] * len(ids))
    ]


def check_steps(out: TensorDict, ref: Reference) -> None:
    """x / flag / nested of every sampled position agree with its id."""
    steps = torch.tensor([[ref.step_of[i] for i in row] for row in out["id"].tolist()])
    check_entries(out.exclude("mask"), out["id"], steps.view_as(out["id"]))


def sample_windows(pool, ref, count, width, pad, seed, max_rounds=16):
    g = torch.Generator().manual_seed(seed)
    out = pool.sample(count, width, pad=pad, generator=g, max_rounds=max_rounds)
    assert out.batch_size == (count, width)
    check_steps(out, ref)
    return as_windows(out, pad)


def longest(ref: Reference) -> int:
    return max((len(e) for e in ref.episodes.values()), default=0)


@given(workloads(), st.integers(1, 5), st.booleans(), st.sampled_from([16, 1, 0]), st.integers(0, 2**31))
def test_windows_are_valid_and_cover_every_window(workload, width, pad, max_rounds, seed):
    pool, ref = build(*workload)
    expected = ref.windows(width, pad)
    if not expected:
        msg = rf"cannot sample sequences of {width} steps: no stored episode has that many live steps \(longest: {longest(ref)}\)"
        with pytest.raises(ValueError, match=msg):
            pool.sample(3, width, pad=pad, generator=torch.Generator().manual_seed(seed), max_rounds=max_rounds)
        note("no valid window")
        return
    count = 64 * len(expected)  # P(miss one of k uniform windows) ~ exp(-64)
    got = sample_windows(pool, ref, count, width, pad, seed, max_rounds)
    bad = set(got) - expected
    assert not bad, f"invalid windows {sorted(bad)[:3]}"
    assert set(got) == expected, f"never drawn: {sorted(expected - set(got))[:3]}"


@given(workloads(), st.integers(0, 2**31))
def test_whole_episodes_are_reference_episodes_padded(workload, seed):
    pool, ref = build(*workload)
    g = torch.Generator().manual_seed(seed)
    if not ref.episodes:
        with pytest.raises(ValueError, match=re.escape("cannot sample: no episode is stored.")):
            pool.sample(2, None, generator=g)
        return
    count = 64 * len(ref.episodes)
    out = pool.sample(count, None, generator=g)
    mask = out["mask"]
    real = mask.sum(1)
    width = int(real.max())
    assert out.batch_size == (count, width) and mask.dtype == torch.bool
    check_steps(out, ref)
    drawn = set()
    for ids, m, n in zip(out["id"].tolist(), mask.tolist(), real.tolist()):
        assert m == [True] * n + [False] * (width - n)
        assert ids[n:] == [ids[n - 1]] * (width - n), "padding repeats the last step"
        drawn.add(tuple(ids[:n]))
    assert drawn == ref.whole()


def test_exact_fallback_is_used_and_exact():
    """max_rounds=0 samples by counting windows per episode only; small max_rounds mixes both."""
    pool, ref = EpisodePool(16, SPEC), Reference(16)
    slots = []
    for length in (1, 5, 2, 4):
        ids = ref.new_ids(length)
        slots.append(pool.append(episode(ids)))
        ref.append(slots[-1], ids)
    pool.evict(slots[2])
    ref.evict(slots[2])
    for pad in (False, True):
        got = sample_windows(pool, ref, 2000, 3, pad, seed=1, max_rounds=0)
        assert set(got) == ref.windows(3, pad)
    got = sample_windows(pool, ref, 2000, 3, True, seed=2, max_rounds=1)
    assert set(got) == ref.windows(3, True)
    for max_rounds, rejection in ((0, False), (1, True)):
        counted = CountingSource(pool)
        draw_windows(counted, 2000, 3, True, torch.Generator().manual_seed(2), max_rounds)
        assert counted.exact_counts == 1 and (counted.candidates > 0) == rejection


@pytest.mark.parametrize("max_rounds", [16, 0])
def test_windows_uniform_chi_square(max_rounds):
    pool, ref = EpisodePool(24, SPEC), Reference(24)
    slots = []
    for length in (7, 1, 3, 6, 2, 4):
        ids = ref.new_ids(length)
        slots.append(pool.append(episode(ids)))
        ref.append(slots[-1], ids)
    pool.evict(slots[3])
    ref.evict(slots[3])
    expected = ref.windows(3, True)
    n = len(expected)
    got = Counter(sample_windows(pool, ref, 400 * n, 3, True, seed=3, max_rounds=max_rounds))
    assert set(got) == expected
    mean = 400
    chi2 = sum((c - mean) ** 2 / mean for c in got.values())
    assert chi2 < 3 * n


def test_whole_episodes_uniform_chi_square():
    pool, ref = build(12, [("append", 6), ("append", 0), ("append", 2), ("evict", 0), ("append", 3)])
    n = len(ref.episodes)
    out = pool.sample(600 * n, None, generator=torch.Generator().manual_seed(4))
    _, counts = torch.unique(out["id"][:, 0], return_counts=True)
    assert counts.numel() == n
    assert float(((counts - 600.0) ** 2 / 600).sum()) < 3 * n


def test_sampling_errors():
    pool = EpisodePool(8, SPEC)
    with pytest.raises(ValueError, match=re.escape("cannot sample: no episode is stored.")):
        pool.sample(1, None)
    for pad in (False, True):
        with pytest.raises(ValueError, match=r"no stored episode has that many live steps \(longest: 0\)"):
            pool.sample(1, 2, pad=pad)
    pool.append(episode([0, 1]))
    pool.append(episode([2, 3, 4]))
    with pytest.raises(ValueError, match=re.escape(
            "cannot sample sequences of 4 steps: no stored episode has that many live steps "
            "(longest: 3); wait for longer episodes or lower sequence_length, or pad shorter "
            "episodes (pad=True).")):
        pool.sample(1, 4, pad=False, generator=torch.Generator().manual_seed(0))
    out = pool.sample(4, 4, pad=True, generator=torch.Generator().manual_seed(0), mask_key="valid")
    assert "mask" not in out.keys() and out["valid"].shape == (4, 4)
    assert "mask" not in pool.sample(4, 2).keys()


def test_valid_window():
    step = np.array([0, 1, 2, 0, 0])
    length = np.array([3, 3, 3, 2, 5])
    assert valid_window(step, length, 2, False).tolist() == [True, True, False, True, True]
    assert valid_window(step, length, 3, False).tolist() == [True, False, False, False, True]
    assert valid_window(step, length, 3, True).tolist() == [True, False, False, True, True]


# ---------------------------------------------------------------- golden
def test_half_precision_storage():
    pool = EpisodePool(8, SPEC, half_precision=True)
    assert pool.rows["x"].dtype == torch.float16
    assert pool.rows["id"].dtype == torch.int64
    assert pool.rows["flag"].dtype == torch.bool
    assert pool.rows["nested", "y"].dtype == torch.int32
    ref = Reference(8)
    for length in (3, 4):
        ids = ref.new_ids(length)
        ref.append(pool.append(episode(ids)), ids)
    check_against(pool, ref)  # gather: float32 again, exact for these small values
    out = pool.sample(16, 2, generator=torch.Generator().manual_seed(0))
    assert out["x"].dtype == torch.float32
    check_steps(out, ref)
    # values are rounded to float16 on the way in
    rounded = EpisodePool(2, TensorDict({"v": torch.zeros(())}, []), half_precision=True)
    rounded.append(TensorDict({"v": torch.tensor([0.1])}, [1]))
    assert rounded.gather(np.array([0]))["v"].item() == torch.tensor(0.1).half().float().item()


def test_half_precision_keeps_other_dtypes():
    """Only float32 entries are stored as float16: a float16 or float64 entry keeps its dtype."""
    spec = TensorDict({"h": torch.zeros(2, dtype=torch.float16), "d": torch.zeros((), dtype=torch.float64)}, [])
    pool = EpisodePool(4, spec, half_precision=True)
    pool.append(TensorDict({"h": torch.ones(2, 2, dtype=torch.float16),
                            "d": torch.ones(2, dtype=torch.float64)}, [2]))
    out = pool.gather(np.array([0, 1]))
    assert out["d"].dtype == torch.float64
    assert out["h"].dtype == torch.float16, "a float16 entry comes back as float32"


def test_state_dict_round_trip():
    pool, ref = build(10, [("append", 3), ("append", 1), ("append", 2), ("evict", 1),
                           ("append", 3), ("append", 0), ("evict", 0), ("append", 4)])
    state = pool.state_dict()
    fresh = EpisodePool(10, SPEC)
    fresh.load_state_dict(state)
    check_against(fresh, ref)
    assert fresh.table.is_shared() and fresh.rows["x"].is_shared()
    for width, pad in [(None, False), (1, False), (3, False), (3, True), (5, True)]:
        a = pool.sample(50, width, pad=pad, generator=torch.Generator().manual_seed(7))
        b = fresh.sample(50, width, pad=pad, generator=torch.Generator().manual_seed(7))
        assert (a == b).all(), (width, pad)
    # the state is a copy; both pools go on identically
    pool.evict(int(pool.live_slots()[0]))
    assert (state["length"] != pool.length).any()
    fresh.evict(int(fresh.live_slots()[0]))
    for p in (pool, fresh):
        p.append(episode([900, 901, 902]))
        p.append(episode([903]))
    assert np.array_equal(pool.live_slots(), fresh.live_slots())
    for s in pool.live_slots():
        assert torch.equal(pool.episode_rows(s), fresh.episode_rows(s))
    a = pool.sample(30, 2, pad=True, generator=torch.Generator().manual_seed(8))
    b = fresh.sample(30, 2, pad=True, generator=torch.Generator().manual_seed(8))
    assert (a == b).all()


def test_getstate_setstate_share_the_same_memory():
    pool = EpisodePool(6, SPEC)
    pool.append(episode([0, 1]))
    copy = EpisodePool.__new__(EpisodePool)
    copy.__setstate__(pool.__getstate__())
    assert "_np" not in pool.__getstate__()
    slot = pool.append(episode([5, 6, 7]))  # written by one, seen by the other
    assert sorted(copy.live_slots().tolist()) == sorted(pool.live_slots().tolist())
    check_entries(copy.gather(copy.episode_rows(slot).numpy()), torch.tensor([5, 6, 7]), torch.arange(3))
    copy.evict(slot)
    assert pool.num_free == 4


class PoolStream(IterableDataset):
    def __init__(self, pool: EpisodePool) -> None:
        self.pool = pool

    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        while True:
            yield self.pool.sample(8, None, generator=g)["id"][:, 0]


@pytest.mark.timeout(60)
def test_forked_worker_sees_appends_and_evictions():
    pool = EpisodePool(16, SPEC)
    old = pool.append(episode([0, 1, 2]))
    loader = DataLoader(PoolStream(pool), batch_size=None, num_workers=1,
                        multiprocessing_context="fork", prefetch_factor=1)
    it = iter(loader)
    try:
        assert set(next(it).tolist()) == {0}  # the worker is running
        pool.append(episode([100, 101]))
        deadline = time.monotonic() + 20
        seen: set[int] = set()
        while 100 not in seen and time.monotonic() < deadline:
            batch = set(next(it).tolist())
            assert batch <= {0, 100}
            seen |= batch
        assert 100 in seen, "the worker never sampled the episode appended after it started"
        pool.evict(old)
        while time.monotonic() < deadline:
            batch = set(next(it).tolist())
            assert batch <= {0, 100}
            if batch == {100}:
                break
        else:
            pytest.fail("the worker still samples an evicted episode")
        for _ in range(3):  # nothing in flight any more: only the survivor
            assert set(next(it).tolist()) == {100}
    finally:
        del it


@pytest.mark.timeout(60)
def test_a_process_forked_while_another_thread_appends_can_append():
    """A fork in the middle of another thread's append left the child the writers' thread
    lock held by a thread it does not have: the child's first append hung."""
    pool = EpisodePool(64, SPEC)
    inside, leave = threading.Event(), threading.Event()

    def append_slowly() -> None:
        with pool._writing():  # an append under way: its write holds the lock
            inside.set()
            leave.wait(10)

    writer = threading.Thread(target=append_slowly)
    writer.start()
    inside.wait(10)
    threading.Timer(0.3, leave.set).start()  # the fork below waits for the write to end
    pid = os.fork()
    if pid == 0:  # the child: append, or be stopped by the alarm if the lock never frees
        code = 1
        try:
            signal.alarm(10)
            pool.append(episode([7, 8]))
            code = 0 if len(pool.live_slots()) == 1 else 2
        finally:
            os._exit(code)
    writer.join()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"the child's append failed or hung ({status})"


def test_negative_or_out_of_range_slots_are_refused():
    pool = EpisodePool(4, SPEC)
    pool.append(episode([1, 2]))
    for slot in (-1, 4, 1):
        with pytest.raises(KeyError, match=f"slot {slot} holds no episode"):
            pool.evict(slot)
        with pytest.raises(KeyError, match=f"slot {slot} holds no episode"):
            pool.episode_rows(slot)
    assert pool.num_free == 2


def test_windows_outside_the_episode_table_are_an_index_error():
    # An unlocked read (a loader worker) that meets a write may pair a slot's length
    # read before an eviction with its offset read after the slot was reused: the
    # run it asks for can reach past the table (8 entries here). That is an
    # IndexError, which sample() takes for a torn read and reads again; never a
    # read of the memory after the table.
    pool = EpisodePool(4, SPEC)
    slot = pool.append(episode([1, 2, 3]))  # table entries 0, 1, 2
    assert pool.window_rows(np.array([slot]), np.array([1]), np.array([2]), 3).tolist() == [[1, 2, 2]]
    for step, real in ((6, 3), (0, 0)):  # entries 6..8; a window of no real step
        with pytest.raises(IndexError, match="EpisodePool.window_rows: a window reaches outside "
                                             "the episode table"):
            pool.window_rows(np.array([slot]), np.array([step]), np.array([real]), 3)
