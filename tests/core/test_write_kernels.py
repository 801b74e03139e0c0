"""The compiled write kernels (core/kernels/writes.py) against plain numpy, and the writes built on them.

The byte scatter, the flag and ownership passes are held to the numpy
expressions they replace; writes read in place (time-first batches, masked
steps read at their positions) are held to the same steps written env-major.
"""
from __future__ import annotations

import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

from conftest import steps
from torchrl_ext import make_replay_buffer
from torchrl_ext.core.kernels.writes import any_outside, any_set, owned_streams, put_bytes


@st.composite
def scatters(draw):
    """Random sources placed in rows: widths, byte offsets (aligned or not), targets, read positions."""
    n = draw(st.integers(1, 12))
    width = 8 * draw(st.integers(2, 6))  # row bytes, padded to 8 as PackedRows pads them
    num_rows = draw(st.integers(2, 20))
    columns, sources, lo = [], [], 0
    for _ in range(draw(st.integers(1, 5))):  # at least one source (a row holds its done flags)
        w = draw(st.integers(1, 9))
        if lo + w > width:
            break
        columns.append([lo, draw(st.sampled_from([0, 1, 2]))])
        m = n + draw(st.integers(0, 3))  # sources may hold more steps than are written
        sources.append(np.frombuffer(draw(st.binary(min_size=m * w, max_size=m * w)), np.uint8).reshape(m, w))
        lo += w + draw(st.integers(0, 3))
    m = min(s.shape[0] for s in sources) if sources else n
    rows = np.array(draw(st.lists(st.integers(0, num_rows - 1), min_size=n, max_size=n, unique=True))
                    if n <= num_rows else np.arange(num_rows), dtype=np.int64)
    n = rows.size
    next_rows = (rows + 1) % num_rows
    start = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    at = np.array(draw(st.lists(st.integers(0, m - 1), min_size=n, max_size=n)), dtype=np.int64)
    gathered = draw(st.booleans())
    return num_rows, width, rows, next_rows, start, tuple(sources), np.array(columns, np.int64).reshape(-1, 2), (
        at if gathered else np.empty(0, np.int64))


@given(scatters())
def test_put_bytes_matches_numpy(case):
    num_rows, width, rows, next_rows, start, sources, columns, at = case
    dst = np.zeros((num_rows, width), np.uint8)
    expected = dst.copy()
    steps_at = at if at.size else np.arange(rows.size)
    for src, (lo, target) in zip(sources, columns):
        into = next_rows if target == 1 else rows
        keep = start if target == 2 else np.ones(rows.size, bool)
        expected[into[keep], lo:lo + src.shape[1]] = src[steps_at[keep]]
    put_bytes(dst, rows, next_rows, start, sources, columns, at)
    assert np.array_equal(dst, expected)


@given(st.lists(st.lists(st.booleans(), min_size=5, max_size=5), min_size=1, max_size=3))
def test_any_set_is_the_or_of_the_flags(flags):
    arrays = tuple(np.array(f, bool)[:, None] for f in flags)
    out = np.empty(5, bool)
    any_set(arrays, out)
    assert np.array_equal(out, np.logical_or.reduce([a[:, 0] for a in arrays]))


@given(st.lists(st.integers(-1, 3), min_size=1, max_size=10), st.integers(-1, 3))
def test_owned_streams_is_flatnonzero(owners, writer):
    owners = np.array(owners, np.int64)
    out = np.empty(owners.size, np.int64)
    assert np.array_equal(out[: owned_streams(owners, writer, out)], np.flatnonzero(owners == writer))


@given(st.lists(st.integers(-5, 12), min_size=1, max_size=10), st.integers(-3, 3), st.integers(0, 10))
def test_any_outside_is_the_range_test(values, lo, n):
    values = np.array(values, np.int64)
    assert bool(any_outside(values, lo, lo + n)) == bool(((values < lo) | (values >= lo + n)).any())


@given(
    st.integers(1, 3), st.integers(1, 6), st.integers(4, 10), st.booleans(), st.booleans(),
    st.integers(0, 2**31),
)
def test_time_first_writes_match_env_major_writes(N, T, capacity, with_ids, masked, seed):
    """Any mix of done flags, trajectory ids and masks, over rings that wrap and writes in time chunks."""
    gen = torch.Generator().manual_seed(seed)
    a, b = (make_replay_buffer(N * capacity, num_streams=N, seed=0) for _ in range(2))
    last = torch.randn(N, 1, generator=gen)
    for _ in range(3):
        obs = torch.randn(N, T, 1, generator=gen)
        obs[:, 0] = last
        ids = None
        if with_ids:  # a new trajectory now and then, as a collector numbers them
            ids = torch.cumsum(torch.rand(N, T, generator=gen) < 0.2, 1) + 100 * torch.arange(N)[:, None]
        env_major = steps(obs, obs + 1, terminated=torch.rand(N, T, 1, generator=gen) < 0.2,
                          truncated=torch.rand(N, T, 1, generator=gen) < 0.1, traj_ids=ids)
        if masked:
            keep = torch.rand(N, T, generator=gen) < 0.7
            keep[:, 0] = keep[:, -1] = True  # writes follow on: first kept step observes the last
            env_major.set(("collector", "mask"), keep)
        last = obs[:, -1] + 1
        time_first = env_major.transpose(0, 1).contiguous()
        time_first.names = ["time", None]
        assert torch.equal(a.extend(env_major).T, b.extend(time_first))
    state_a, state_b = a.storage.index.state(), b.storage.index.state()
    for key in state_a.keys():
        if key not in ("write_seq", "row_version"):  # versions count the writes, which may differ
            assert torch.equal(state_a[key], state_b[key]), key
    assert torch.equal(a.storage.packed.take(torch.arange(N * capacity)).get("rows"),
                       b.storage.packed.take(torch.arange(N * capacity)).get("rows"))
