"""Bootstrap masks: fixed per transition, seeded by the buffer, never global RNG."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conftest import steps
from torchrl_ext import make_replay_buffer
from torchrl_ext.samplers import BootstrapMaskSampler, bootstrap_masks


def filled(seed=0, T=40, envs=2, **kwargs):
    """``envs`` streams of one ``T``-step episode each, written whole (obs = unique ids)."""
    obs = (torch.arange(envs * T, dtype=torch.float32) + 1).view(envs, T, 1)
    rb = make_replay_buffer(4 * envs * T, seed=seed, mask_size=4, **kwargs)
    rb.extend(steps(obs, obs + 1000))
    return rb


def masks_by_obs(rb, draws=30, batch=32):
    out: dict[float, tuple] = {}
    for _ in range(draws):
        b = rb.sample(batch)
        obs = b["observation"].reshape(b.shape[0], -1)[:, -1]
        for o, m in zip(obs.tolist(), b["mask"].tolist()):
            assert out.setdefault(o, tuple(m)) == tuple(m)  # same transition, same bits
    return out


def test_masks_shape_and_dtype():
    batch = filled().sample(8)
    assert batch["mask"].shape == (8, 4) and batch["mask"].dtype == torch.bool


def test_d1_whole_episodes_get_masks():
    # the transitions above were written as whole [env, T] episodes: every one has bits
    seen = masks_by_obs(filled())
    assert len(seen) == 80 and all(len(m) == 4 for m in seen.values())


def test_masks_fixed_for_life_across_writes_and_checkpoints(tmp_path):
    rb = filled()
    before = masks_by_obs(rb)
    rb.extend(steps(torch.full((2, 1), 5000.0), torch.full((2, 1), 5001.0)))
    rb.dumps(tmp_path)
    other = make_replay_buffer(rb.storage.max_size, seed=123, mask_size=4)
    other.loads(tmp_path)
    after = masks_by_obs(other)
    assert all(after[o] == m for o, m in before.items() if o in after)


def test_d10_reproducible_from_buffer_seed_and_independent_of_global_rng():
    torch.manual_seed(0)
    np.random.seed(0)
    a = masks_by_obs(filled(seed=7))
    state_torch, state_np = torch.get_rng_state(), np.random.get_state()[1].copy()
    torch.manual_seed(99)
    b = masks_by_obs(filled(seed=7))
    assert all(b[o] == m for o, m in a.items() if o in b)
    c = masks_by_obs(filled(seed=8))
    assert any(c[o] != m for o, m in a.items() if o in c)
    torch.set_rng_state(state_torch)


def test_global_numpy_rng_untouched():
    np.random.seed(3)
    expected = np.random.random()
    np.random.seed(3)
    masks_by_obs(filled(), draws=3)
    assert np.random.random() == expected


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9, 1.0])
def test_p_is_the_bit_probability(p):
    bits = bootstrap_masks(11, np.repeat(np.arange(4), 5000), np.tile(np.arange(5000), 4), 3, p)
    assert abs(float(bits.mean()) - p) < 0.01
    # members and neighbouring transitions are uncorrelated
    x = bits.astype(np.float64)
    if p < 1.0:
        assert abs(np.corrcoef(x[:, 0], x[:, 1])[0, 1]) < 0.03
        assert abs(np.corrcoef(x[:-1, 0], x[1:, 0])[0, 1]) < 0.03


@given(st.integers(0, 2**62), st.integers(0, 7), st.integers(0, 10**9), st.integers(1, 6))
def test_bits_depend_only_on_key_stream_tau(key, stream, tau, size):
    one = bootstrap_masks(key, np.array([stream]), np.array([tau]), size, 0.5)
    batch = bootstrap_masks(key, np.array([stream, 0, stream]), np.array([tau, 1, tau]), size, 0.5)
    assert (one[0] == batch[0]).all() and (batch[0] == batch[2]).all()


def test_masks_compose_with_frames_and_nstep():
    rb = filled(n_frames=3, n_step=2)
    batch = rb.sample(16)
    assert batch["mask"].shape == (16, 4) and batch["observation"].shape == (16, 3, 1)
    plain = masks_by_obs(filled())
    for o, m in zip(batch["observation"][:, -1, 0].tolist(), batch["mask"].tolist()):
        assert plain[o] == tuple(m)  # the window's first transition's bits


def test_mask_errors():
    with pytest.raises(ValueError, match=r"mask_size=0, expected an integer >= 1"):
        BootstrapMaskSampler(0)
    with pytest.raises(ValueError, match=r"p=0.0, expected a probability in \(0, 1\]"):
        BootstrapMaskSampler(2, 0.0)
    from torchrl.data import TensorDictReplayBuffer
    from torchrl_ext import TransitionStorage, TransitionWriter

    rb = TensorDictReplayBuffer(storage=TransitionStorage(16), writer=TransitionWriter(),
                                sampler=BootstrapMaskSampler(2))
    rb.extend(steps(torch.zeros(2, 1), torch.ones(2, 1)))
    with pytest.raises(ValueError, match=r"no seed and no generator to draw the mask key from"):
        rb.sample(2)


def test_masks_do_not_change_which_rows_are_sampled():
    obs = torch.arange(30, dtype=torch.float32).view(1, 30, 1)
    with_masks = make_replay_buffer(64, seed=5, mask_size=2)
    without = make_replay_buffer(64, seed=5)
    for rb in (with_masks, without):
        rb.extend(steps(obs, obs + 1))
    assert torch.equal(with_masks.sample(10)["observation"], without.sample(10)["observation"])
