"""The compiled write kernels (core/kernels/writes.py) against plain numpy, and the writes built on them.

The flag, ownership and range passes are held to the numpy expressions
they replace; writes read in place (time-first batches, masked steps read
at their positions, time chunks) are held to the same steps written env-major.
"""
from __future__ import annotations

import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

from conftest import steps
from torchrl_ext import make_replay_buffer
from torchrl_ext.core.kernels.writes import any_outside, any_set, owned_streams
from torchrl_ext.storages._host import byte_table


@given(st.lists(st.lists(st.booleans(), min_size=5, max_size=5), min_size=1, max_size=4))
def test_any_set_is_the_or_of_the_flags(flags):
    tensors = [torch.tensor(f)[:, None] for f in flags]
    out = np.empty(5, bool)
    table, kept = byte_table([(t, 1) for t in tensors])
    any_set(table, out)
    assert np.array_equal(out, np.logical_or.reduce([t[:, 0].numpy() for t in tensors]))


def test_byte_table_reads_host_rows_in_place_and_copies_the_others():
    x = torch.arange(24, dtype=torch.float32).view(4, 6)
    step = x[:, 2:5]  # rows apart, each row's elements contiguous: in place
    grad = x.clone().requires_grad_()  # its bytes are its values: in place
    spread = x[:, ::2]  # a row's elements apart: copied
    half = x.to(torch.bfloat16).T.contiguous().T  # a dtype numpy lacks, a row's elements apart: copied
    table, kept = byte_table([(x, 24), (step, 12), (grad, 24), (spread, 12), (half, 12)])
    assert table.dtype == np.int64 and table.shape == (5, 4)
    assert table[:3].tolist() == [[x.data_ptr(), 4, 24, 24], [step.data_ptr(), 4, 12, 24],
                                  [grad.data_ptr(), 4, 24, 24]]
    assert kept[0] is x and kept[1] is step and kept[2] is grad
    for value, copy, (address, rows, width, stride) in zip((spread, half), kept[3:], table[3:].tolist()):
        assert copy.is_contiguous() and address == copy.data_ptr() and (rows, stride) == (4, width)
        assert torch.equal(copy, value) and copy.dtype == value.dtype


def test_steps_are_stored_as_their_values_strided_conjugate_negative_or_bfloat16():
    """Entries are read by address: a step of a [envs, T] batch (strided), conjugate and negative
    views (their bytes are not their values) and a dtype numpy lacks must all be stored as their values."""
    batch = torch.arange(2 * 5 * 3, dtype=torch.float32).view(2, 5, 3)
    cplx = torch.complex(batch, -batch)
    rb = make_replay_buffer(64, num_streams=2)
    for t in range(4):
        step = steps(batch[:, t], batch[:, t + 1], action=batch[:, t, :1].to(torch.bfloat16))
        step["z"] = cplx[:, t].conj()
        step["y"] = cplx[:, t, :1].conj().imag  # float, with torch's negative bit: its bytes are -y
        rb.extend(step)
    stored = rb.storage.get(rb.storage.live_transition_rows())
    first = stored["observation"][:, 0]
    assert sorted(first.tolist()) == sorted(batch[:, :4, 0].reshape(-1).tolist())  # every step, once
    assert torch.equal(stored["observation"], first[:, None] + torch.arange(3.0))
    assert torch.equal(stored["z"], torch.complex(stored["observation"], stored["observation"]))  # conj resolved
    assert torch.equal(stored["y"], stored["observation"][:, :1])  # the negative view's values
    assert torch.equal(stored["action"].float(), stored["observation"][:, :1])
    assert torch.equal(stored["next", "observation"], stored["observation"] + 3)


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


def test_each_write_kernel_has_one_compiled_signature():
    """Every call site gives each kernel C-contiguous arrays of one dtype (see core.kernels):
    one-step, masked, time-first, chunked and trajectory writes, starts or not."""
    from torchrl_ext.core.kernels import writes

    rb = make_replay_buffer(12, num_streams=2, seed=0)  # 6-row rings: longer writes go in chunks
    obs = torch.arange(10.0).view(2, 5, 1)
    data = steps(obs, obs + 1, terminated=(obs > 6).view(2, 5, 1),
                 traj_ids=torch.tensor([[0, 0, 1, 1, 1], [5, 5, 5, 5, 5]]))
    data.set(("collector", "mask"), torch.tensor([[True, True, False, True, True]] * 2))
    rb.extend(data)
    time_first = data[:, 3:].transpose(0, 1).contiguous()
    time_first["collector", "traj_ids"] += 10  # new trajectories: no continuation to check
    time_first.names = ["time", None]
    rb.extend(time_first)
    plain = make_replay_buffer(12, seed=0)
    for t in range(3):  # one [N] step at a time, an episode ending at the second
        plain.extend(steps(torch.full((2, 1), float(t)), torch.full((2, 1), t + 1.0),
                           terminated=torch.full((2, 1), t == 1)))
    # a facade's Discrete action range check (any_outside), int64 actions and numpy ints
    import gymnasium as gym

    from torchrl_ext import NStepReplayStorage

    box = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    facade = NStepReplayStorage(box, gym.spaces.Discrete(3), storage_size=8, num_envs=2, num_workers=0)
    obs, no = np.zeros((2, 1), np.float32), np.zeros(2, bool)
    for action in (np.array([0, 2]), np.array([1, 1], np.int32), torch.tensor([2, 0])):
        facade.add(obs, action, np.zeros(2), no, no, {}, obs)
    for name in writes.__all__:
        kernel = getattr(writes, name)
        if hasattr(kernel, "signatures"):
            assert len(kernel.signatures) <= 1, (name, kernel.signatures)
    assert len(writes.any_outside.signatures) == 1  # exercised above, once compiled
