"""Facades write added steps in chunks: same contents as step-by-step writes."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import transitions_of
from torchrl_ext import NStepReplayStorage, make_replay_buffer
from torchrl_ext.envs import GymVectorAdapter

SPACE = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_chunked_adds_store_what_direct_writes_store(mode):
    store = NStepReplayStorage(SPACE, gym.spaces.Discrete(2), num_envs=3, batch_size=4,
                               num_workers=0, n_step=1, autoreset_mode=mode, seed=0)
    direct = make_replay_buffer(store.rb.storage.max_size, seed=0)
    adapter = GymVectorAdapter(3, autoreset_mode=mode)
    rng = np.random.default_rng(0)
    obs = np.zeros((3, 1), np.float32)
    for t in range(150):  # over two chunks, episodes ending at random
        done = rng.random(3) < 0.1
        nxt = obs + 1
        infos = {}
        if mode == "SameStep" and done.any():
            infos = {"final_obs": np.array([o + 0.5 for o in obs], dtype=object), "_final_obs": done}
        args = (obs, rng.integers(0, 2, 3), np.ones(3, np.float32), done, np.zeros(3, bool), infos, nxt)
        store.add(*args)
        direct.extend(adapter.step(*args))
        obs = np.where(done[:, None], nxt + 100, nxt).astype(np.float32)
    assert len(store) == len(direct)  # len() flushes the held steps
    assert transitions_of(store.rb.storage.get(slice(None))) == transitions_of(direct.storage.get(slice(None)))


def test_bad_step_raises_at_its_add():
    store = NStepReplayStorage(SPACE, gym.spaces.Discrete(2), num_envs=1, batch_size=1, num_workers=0)
    for _ in range(3):
        store.add(np.zeros((1, 1), np.float32), np.array([0]), np.ones(1), np.zeros(1, bool),
                  np.zeros(1, bool), {}, np.zeros((1, 1), np.float32))
    with pytest.raises(ValueError, match=r"observations has shape \(1, 2\), expected \(1, 1\)"):
        store.add(np.zeros((1, 2), np.float32), np.array([0]), np.ones(1), np.zeros(1, bool),
                  np.zeros(1, bool), {}, np.zeros((1, 2), np.float32))
    assert len(store) == 3  # the good steps before it were written


def _follows_by_loop(obs: np.ndarray, nxt: np.ndarray, last: np.ndarray | None) -> np.ndarray:
    """The slow reference: each row against the one before it, equal values or equal bytes."""
    n, T = obs.shape[:2]
    out = np.ones((n, T), dtype=bool)
    for e in range(n):
        for t in range(T):
            if t == 0 and last is None:  # no step seen yet: follows on
                continue
            before = last[e] if t == 0 else nxt[e, t - 1]
            a, b = obs[e, t], before
            out[e, t] = bool(np.all(a == b)) or a.tobytes() == b.tobytes()
    return out


@given(
    data=st.data(),
    n=st.integers(1, 3),
    T=st.integers(1, 6),
    dtype=st.sampled_from([np.float32, np.float64, np.int8, np.uint8, np.bool_]),
    shape=st.sampled_from([(), (1,), (3,), (2, 3), (5,)]),
    obs_time_major=st.booleans(),
    next_time_major=st.booleans(),
    has_last=st.booleans(),
)
def test_follow_on_matches_a_loop_over_rows(data, n, T, dtype, shape, obs_time_major, next_time_major,
                                            has_last):
    """Bytes first, values where bytes differ: NaN follows NaN, -0.0 follows 0.0, any layout."""
    from torchrl_ext.envs._chunk import follow_on

    if np.dtype(dtype).kind == "f":
        nan2 = np.frombuffer(np.array([0x7FF8000000000001], np.uint64).tobytes(), np.float64)[0]
        pool = np.array([0.0, -0.0, np.nan, nan2, 2.0]).astype(dtype)  # two NaN payloads (float64)
    else:
        pool = np.array([0, 1, 2, 3, 4]).astype(dtype)
    pick = lambda dims: pool[np.array(data.draw(st.lists(st.integers(0, 4), min_size=int(np.prod(dims)),
                                                          max_size=int(np.prod(dims))))).reshape(dims)]
    chain = pick((T + 1, n, *shape))  # time-major, as a facade holds its chunk
    obs_tm, nxt_tm = chain[:-1].copy(), chain[1:].copy()
    breaks = data.draw(st.lists(st.tuples(st.integers(0, T - 1), st.integers(0, n - 1)), max_size=4))
    for t, e in breaks:  # some steps do not start at the next observation before them
        obs_tm[t, e] = pick(shape)
    # a facade's chunk is a view of time-major steps; other callers pass [n, T] arrays
    obs = obs_tm.swapaxes(0, 1) if obs_time_major else np.ascontiguousarray(obs_tm.swapaxes(0, 1))
    nxt = nxt_tm.swapaxes(0, 1) if next_time_major else np.ascontiguousarray(nxt_tm.swapaxes(0, 1))
    last = pick((n, *shape)) if has_last else None
    expected = _follows_by_loop(obs, nxt, last)
    assert follow_on(obs, nxt, last).tolist() == expected.tolist()


def test_follow_on_compares_next_observations_of_another_dtype_by_value():
    """An env whose next observations come in another dtype: the values decide, nothing is viewed as bytes."""
    from torchrl_ext.envs._chunk import follow_on

    obs = np.array([[[0.0, 1.0], [1.0, 2.0], [7.0, 7.0]]], np.float32)  # one env, three steps
    nxt = np.array([[[1.0, 2.0], [2.0, 3.0], [8.0, 8.0]]], np.float64)
    assert follow_on(obs, nxt, None).tolist() == [[True, True, False]]
