"""Sequence sampling: golden cases and properties against the loop reference.

Golden episodes are numbered so every value tells where it comes from: step
``t`` of episode ``e`` (from 1) of env ``v`` has observation
``100000 * v + 100 * e + t``; an episode that ends (terminated or truncated)
has the final observation ``... + 90``, one still running the pending
observation ``... + n``.
"""
from __future__ import annotations

import re
from collections import Counter

import pytest
import torch
from hypothesis import event, given
from hypothesis import strategies as st
from tensordict import TensorDict
from torchrl.data import TensorDictReplayBuffer

from conftest import CountingSource, run, steps, workloads
from reference import sequence_reference
from torchrl_ext import TransitionStorage, TransitionWriter, TransitionReplayBuffer, make_replay_buffer
from torchrl_ext.samplers import SequenceSampler
from torchrl_ext.core import windows
from torchrl_ext.samplers import sequence as sequence_module

MASK = ("collector", "mask")


# ---------------------------------------------------------------- helpers
def env_steps(episodes, env=0):
    """Flat ``(obs, next_obs, terminated, truncated)`` lists of one env.

    ``episodes``: ``(steps, end)`` pairs, ``end`` in ``"term"``, ``"trunc"``,
    ``"open"`` (the last episode only).
    """
    obs, nxt, term, trunc = [], [], [], []
    for e, (n, end) in enumerate(episodes, start=1):
        base = 100000 * env + 100 * e
        for t in range(n):
            last = t == n - 1
            obs.append(base + t)
            nxt.append(base + 90 if last and end != "open" else base + t + 1)
            term.append(last and end == "term")
            trunc.append(last and end == "trunc")
    return obs, nxt, term, trunc


def extend(rb, *envs):
    """Write the episodes of each env (``env_steps`` specs, equal step counts) in one ``[N, T]`` write."""
    cols = [env_steps(episodes, env) for env, episodes in enumerate(envs)]
    obs, nxt, term, trunc = (
        torch.tensor([c[i] for c in cols]).unsqueeze(-1) for i in range(4)
    )
    rb.extend(steps(obs.float(), nxt.float(), terminated=term, truncated=trunc))
    return rb


def make(sampler, *envs, capacity=512, seed=0, cls=TransitionReplayBuffer):
    rb = cls(
        storage=TransitionStorage(capacity),
        writer=TransitionWriter(),
        sampler=sampler,
        generator=torch.Generator().manual_seed(seed),
    )
    return extend(rb, *envs) if envs else rb


def decode(batch, tight=False):
    """The sequences of a ``[B, L]`` sample, checked for well-formedness.

    Returns one ``(steps, is_init)`` pair per sequence: the tuple of its real
    ``(obs, action, reward, next_obs, terminated, truncated)`` steps and
    whether its step 0 is marked as an episode start. Checks the mask is a
    prefix, padding repeats the last real step (every entry), and
    ``is_init`` marks at most the first step. ``tight``: the batch is as wide
    as its longest sequence (whole episodes).
    """
    B, L = batch.batch_size
    assert batch["index"].shape == (B, L)
    assert batch["is_init"].shape == (B, L, 1) and batch["is_init"].dtype == torch.bool
    mask = batch.get(MASK, None)
    if mask is None:
        mask = torch.ones(B, L, dtype=torch.bool)
    else:
        assert mask.shape == (B, L) and mask.dtype == torch.bool
    assert bool(mask[:, 0].all())
    assert bool((mask[:, 1:] <= mask[:, :-1]).all()), "mask is not a prefix"
    width = mask.sum(1).tolist()
    if tight:
        assert max(width) == L, "the batch is wider than its longest sequence"
    cols = [
        batch["observation"][..., 0], batch["action"][..., 0], batch["next", "reward"][..., 0],
        batch["next", "observation"][..., 0], batch["next", "terminated"][..., 0],
        batch["next", "truncated"][..., 0],
    ]
    cols = [c.tolist() for c in cols]
    init = batch["is_init"][..., 0]
    assert not bool(init[:, 1:].any()), "is_init set after a sequence's first step"
    init = init[:, 0].tolist()
    out = []
    for b in range(B):
        w = width[b]
        seq = tuple(zip(*(c[b] for c in cols)))  # L step tuples
        assert all(s == seq[w - 1] for s in seq[w:]), "padding does not repeat the last step"
        out.append((seq[:w], init[b]))
    return out


def observations(batch):
    """Each sequence's real observations, as tuples of ints."""
    return [tuple(int(s[0]) for s in seq) for seq, _ in decode(batch)]


def uniform(counts: Counter, support: list) -> bool:
    """``counts`` cover ``support`` exactly, and a loose chi-square test of uniformity passes.

    The threshold is far in the tail (mean ``len(support) - 1``): seeds are
    fixed and a length-weighted or episode-weighted draw misses it by far.
    """
    total = sum(counts.values())
    expected = total / len(support)
    chi2 = sum((counts.get(w, 0) - expected) ** 2 / expected for w in support)
    return sorted(counts) == sorted(support) and chi2 < 3 * len(support) + 10


# ---------------------------------------------------------------- windows
def test_windows_never_cross_an_episode_end():
    rb = make(SequenceSampler(2), [(3, "term"), (4, "trunc"), (2, "term")])
    seen = Counter()
    for seq, _ in decode(rb.sample(400)):
        obs = [int(s[0]) for s in seq]
        seen[tuple(obs)] += 1
        assert obs[1] == obs[0] + 1 and obs[0] // 100 == obs[1] // 100
        # only a window's last step may end the episode
        assert not seq[0][4] and not seq[0][5]
    assert sorted(seen) == [
        (100, 101), (101, 102), (200, 201), (201, 202), (202, 203), (300, 301),
    ]


def test_last_window_of_each_episode_is_sampled():
    rb = make(SequenceSampler(3), [(4, "term")])
    assert set(observations(rb.sample(200))) == {(100, 101, 102), (101, 102, 103)}
    rb.sampler.sequence_length = 1  # an attribute: it can change between samples
    batch = rb.sample(200)
    assert batch.batch_size == (200, 1)
    assert set(observations(batch)) == {(100,), (101,), (102,), (103,)}
    rb.sampler.sequence_length = 4  # the whole episode is its one window
    assert set(observations(rb.sample(20))) == {(100, 101, 102, 103)}


def test_is_init_marks_each_sequence_start_as_torchrl_slices():
    # a recurrent module starts every sampled sequence from a fresh state; no
    # sequence crosses an episode start, so no later step is marked (decode checks)
    rb = make(SequenceSampler(3), [(5, "term"), (3, "trunc"), (4, "term")])
    assert all(init for _, init in decode(rb.sample(400)))


@pytest.mark.parametrize("end", ["term", "trunc"])
def test_next_observation_is_the_true_next_obs(end):
    rb = make(SequenceSampler(3), [(4, end), (3, end)])
    windows = {}
    for seq, _ in decode(rb.sample(300)):
        windows[tuple(int(s[0]) for s in seq)] = seq
    assert set(windows) == {(100, 101, 102), (101, 102, 103), (200, 201, 202)}
    final = windows[(101, 102, 103)]
    assert [s[3] for s in final] == [102.0, 103.0, 190.0]  # the final obs, not the reset obs
    assert [(s[4], s[5]) for s in final[:2]] == [(False, False)] * 2
    assert (final[2][4], final[2][5]) == ((True, False) if end == "term" else (False, True))
    assert [s[3] for s in windows[(200, 201, 202)]] == [201.0, 202.0, 290.0]
    # action and reward come from the same step as the observation
    assert all(s[1] == s[0] and s[2] == s[0] for seq in windows.values() for s in seq)


def test_multi_env_sequences_stay_in_one_env():
    envs = ([(3, "term"), (3, "open")], [(6, "trunc")], [(1, "term"), (5, "term")])
    rb = make(SequenceSampler(3), *envs, capacity=3 * 64)
    got = set()
    for seq, _ in decode(rb.sample(600)):
        obs = [int(s[0]) for s in seq]
        assert len({o // 100 for o in obs}) == 1  # one env, one episode
        assert obs == list(range(obs[0], obs[0] + 3))
        got.add(tuple(obs))
    expected = {(100, 101, 102), (200, 201, 202)}
    expected |= {tuple(range(100100 + t, 100103 + t)) for t in range(4)}  # env 1
    expected |= {tuple(range(200200 + t, 200203 + t)) for t in range(3)}  # env 2
    assert got == expected


def test_windows_of_an_episode_in_progress_cover_written_steps_only():
    rb = make(SequenceSampler(3), [(3, "open")])
    batch = rb.sample(50)
    assert set(observations(batch)) == {(100, 101, 102)}
    assert set(batch["next", "observation"][:, -1, 0].tolist()) == {103.0}  # the pending obs
    rb.sampler.sequence_length = 4
    with pytest.raises(ValueError, match="pad=True"):
        rb.sample(5)
    rb.extend(steps(torch.tensor([[103.0]]), torch.tensor([[104.0]])))  # one more step
    assert set(observations(rb.sample(100))) == {(100, 101, 102, 103)}
    rb.sampler.sequence_length = 3
    assert set(observations(rb.sample(200))) == {(100, 101, 102), (101, 102, 103)}


def test_uniform_over_windows_chi_square():
    # lengths 4 and 10 with L=3: 2 + 8 windows; uniform over windows, not episodes
    rb = make(SequenceSampler(3), [(4, "term"), (10, "trunc")])
    counts = Counter(observations(rb.sample(20000)))
    support = [(100 + t, 101 + t, 102 + t) for t in range(2)] + [
        (200 + t, 201 + t, 202 + t) for t in range(8)
    ]
    assert uniform(counts, support)


# ---------------------------------------------------------------- ring wrap-around
def ring_buffer(sampler):
    """One env, 8 rows: episode 1 (6 steps, 7 rows) loses its first 3 rows to episode 2 (3 steps)."""
    rb = make(sampler, capacity=8)
    obs, nxt, term, trunc = env_steps([(6, "term"), (3, "term")])
    for lo, hi in ((0, 6), (6, 9)):
        rb.extend(steps(
            torch.tensor([obs[lo:hi]]).float().unsqueeze(-1),
            torch.tensor([nxt[lo:hi]]).float().unsqueeze(-1),
            terminated=torch.tensor([term[lo:hi]]).unsqueeze(-1),
            truncated=torch.tensor([trunc[lo:hi]]).unsqueeze(-1),
        ))
    return rb


def test_ring_windows_never_reach_overwritten_rows():
    rb = ring_buffer(SequenceSampler(2))
    batch = rb.sample(300)
    assert set(observations(batch)) == {(103, 104), (104, 105), (200, 201), (201, 202)}
    assert all(rb.storage.contains(r) for r in batch["index"].reshape(-1).tolist())
    # episode 1 still has 6 steps written, but no live window of 4
    rb.sampler.sequence_length = 4
    with pytest.raises(ValueError, match="pad=True"):
        rb.sample(4)


def test_ring_error_reports_the_longest_live_episode():
    # episode 1 was written with 6 steps but only 3 are live: the message must not
    # say "no episode has 4 steps (longest: 6)"
    rb = ring_buffer(SequenceSampler(4))
    with pytest.raises(ValueError, match=r"longest: (\d+)") as error:
        rb.sample(4)
    longest = int(re.search(r"longest: (\d+)", str(error.value)).group(1))
    assert longest == 3, str(error.value)


def test_ring_cut_episode_is_never_served_whole():
    rb = ring_buffer(SequenceSampler(None))
    batch = rb.sample(100)
    assert batch.batch_size == (100, 3)
    assert set(observations(batch)) == {(200, 201, 202)}


def test_ring_cut_episode_is_never_padded():
    rb = ring_buffer(SequenceSampler(5, pad=True))
    batch = rb.sample(100)
    assert set(observations(batch)) == {(200, 201, 202)}  # episode 1 has no step 0 left
    assert batch[MASK][0].tolist() == [True, True, True, False, False]


# ---------------------------------------------------------------- whole episodes
def test_whole_episodes_pad_to_longest_and_skip_the_open_one():
    rb = make(SequenceSampler(None), [(2, "term"), (4, "trunc"), (3, "open")])
    batch = rb.sample(200)
    assert batch.batch_size == (200, 4)
    got = Counter()
    for seq, init in decode(batch, tight=True):
        got[tuple(int(s[0]) for s in seq)] += 1
        assert init
    assert set(got) == {(100, 101), (200, 201, 202, 203)}  # never episode 3 (running)
    short = batch[batch["observation"][:, 0, 0] == 100]
    assert short[MASK][0].tolist() == [True, True, False, False]
    assert short["observation"][0, :, 0].tolist() == [100, 101, 101, 101]
    assert short["next", "observation"][0, :, 0].tolist() == [101, 190, 190, 190]
    assert short["is_init"][0, :, 0].tolist() == [True, False, False, False]
    # a batch of only the short episode is as wide as it
    rb = make(SequenceSampler(None), [(2, "term"), (3, "open")])
    assert rb.sample(8).batch_size == (8, 2)


def test_whole_episodes_uniform_over_episodes_not_steps():
    rb = make(SequenceSampler(None), [(1, "term"), (9, "term"), (2, "trunc")])
    counts = Counter(o[0] for o in observations(rb.sample(6000)))
    assert uniform(counts, [100, 200, 300])


def test_whole_episodes_end_at_a_new_trajectory():
    # no done flag: a change of ("collector", "traj_ids") ends an episode
    rb = make(SequenceSampler(None))
    data = steps(torch.arange(5.0).view(1, 5, 1), torch.arange(1.0, 6.0).view(1, 5, 1),
                 traj_ids=torch.tensor([[7, 7, 7, 8, 8]]))
    rb.extend(data)
    batch = rb.sample(20)
    assert set(observations(batch)) == {(0, 1, 2)}
    assert batch["next", "observation"][0, :, 0].tolist() == [1.0, 2.0, 3.0]


# ---------------------------------------------------------------- pad=True
def test_pad_serves_a_short_episode_once_from_step_0():
    rb = make(SequenceSampler(4, pad=True), [(2, "term"), (5, "trunc")])
    batch = rb.sample(3000)
    counts = Counter(observations(batch))
    support = [(100, 101), (200, 201, 202, 203), (201, 202, 203, 204)]
    assert uniform(counts, support)  # one window each
    short = batch[batch["observation"][:, 0, 0] == 100][0]
    assert short[MASK].tolist() == [True, True, False, False]
    assert short["observation"][:, 0].tolist() == [100, 101, 101, 101]
    assert short["next", "observation"][:, 0].tolist() == [101, 190, 190, 190]
    assert short["next", "terminated"][:, 0].tolist() == [False, True, True, True]
    assert short["is_init"][:, 0].tolist() == [True, False, False, False]
    full = batch[batch["observation"][:, 0, 0] == 201][0]
    assert full[MASK].tolist() == [True] * 4
    assert full["is_init"][:, 0].tolist() == [True, False, False, False]


def test_without_pad_no_mask_and_short_episodes_skipped():
    rb = make(SequenceSampler(4), [(2, "term"), (5, "trunc")])
    batch = rb.sample(100)
    assert MASK not in batch.keys(include_nested=True)
    assert set(observations(batch)) == {(200, 201, 202, 203), (201, 202, 203, 204)}


def test_custom_mask_and_init_keys():
    sampler = SequenceSampler(3, pad=True, mask_key="valid", init_key=("rnn", "first"))
    rb = make(sampler, [(2, "term"), (3, "term")])
    batch = rb.sample(50)
    assert MASK not in batch.keys(include_nested=True) and "is_init" not in batch.keys()
    short = batch[batch["observation"][:, 0, 0] == 100][0]
    assert short["valid"].tolist() == [True, True, False]
    assert short["rnn", "first"][:, 0].tolist() == [True, False, False]
    assert bool(batch["rnn", "first"][:, 0].all())  # every window starts an episode here


# ---------------------------------------------------------------- errors
def test_error_when_no_episode_is_long_enough():
    rb = make(SequenceSampler(5), [(2, "term"), (3, "term"), (4, "open")])
    with pytest.raises(ValueError, match="pad=True"):
        rb.sample(4)
    rb.sampler.pad = True
    assert rb.sample(4).batch_size == (4, 5)


def test_error_when_no_episode_is_complete():
    rb = make(SequenceSampler(None), [(6, "open")])
    with pytest.raises(ValueError, match="no complete episode"):
        rb.sample(2)
    rb.extend(steps(torch.tensor([[106.0]]), torch.tensor([[190.0]]),
                    terminated=torch.tensor([[True]])))
    assert set(observations(rb.sample(4))) == {(100, 101, 102, 103, 104, 105, 106)}


@pytest.mark.parametrize("length", [0, -1])
def test_sequence_length_below_1_is_rejected(length):
    with pytest.raises(ValueError, match="sequence_length"):
        SequenceSampler(length)


@pytest.mark.parametrize("length", [0, -1, 2.5, True, "3"])
def test_sequence_length_set_between_samples_is_checked_like_the_constructor_s(length):
    # sequence_length=0 set between samples used to fail in numpy (IndexError),
    # and the constructor truncated 2.5 to 2
    rb = make(SequenceSampler(2), [(4, "term")])
    message = rf"SequenceSampler: sequence_length={re.escape(repr(length))}, expected an integer >= 1 or None"
    with pytest.raises(ValueError, match=message):
        SequenceSampler(length)
    with pytest.raises(ValueError, match=message):
        rb.sampler.sequence_length = length
    assert rb.sampler.sequence_length == 2 and rb.sample(3).batch_size == (3, 2)
    rb.sampler.sequence_length = None  # whole episodes
    assert rb.sample(3).batch_size == (3, 4)


def test_empty_buffer_and_bad_batch_size():
    rb = make(SequenceSampler(2))
    with pytest.raises(ValueError, match="no transition"):
        rb.sample(2)
    extend(rb, [(3, "term")])
    with pytest.raises(ValueError, match="batch_size"):
        rb.sample(0)


# ---------------------------------------------------------------- buffers
@pytest.mark.parametrize("sampler", [lambda: SequenceSampler(3), lambda: SequenceSampler(None),
                                     lambda: SequenceSampler(5, pad=True)])
def test_same_indices_in_our_buffer_and_torchrl_buffer(sampler):
    envs = ([(4, "term"), (6, "trunc")], [(2, "term"), (8, "open")])
    ours = make(sampler(), *envs, seed=3)
    plain = make(sampler(), *envs, seed=3, cls=TensorDictReplayBuffer)
    for _ in range(3):
        a, b = ours.sample(16), plain.sample(16)
        assert torch.equal(a["index"], b["index"])
        assert a.batch_size == b.batch_size == a["index"].shape
        assert (a == b).all()


# ---------------------------------------------------------------- exact fallback
def test_rejection_fallback_when_windows_are_rare():
    # one 10-step episode among 300 one-step episodes: 3 windows of 8 among 310 steps,
    # under the 1 in 64 acceptance where rejection gives way to the exact count
    rb = make(SequenceSampler(8), [(10, "term")] + [(1, "term")] * 300, capacity=1024)
    counted = CountingSource(rb.storage.index)
    windows.draw_windows(counted, 100, 8, False, torch.Generator().manual_seed(0))
    assert counted.exact_counts == 1, "rare windows fall back to counting per episode"
    batch = rb.sample(3000)
    counts = Counter()
    for seq, init in decode(batch):
        obs = tuple(int(s[0]) for s in seq)
        counts[obs] += 1
        assert init
        last_next = 190 if obs[-1] == 109 else obs[-1] + 1  # step 9 ends the episode
        assert [s[3] for s in seq] == [o + 1 for o in obs[:-1]] + [last_next]
    support = [tuple(range(100 + t, 108 + t)) for t in range(3)]
    assert uniform(counts, support)


def test_exact_windows_multi_env_with_ring_wrap():
    # env 0: one-step episodes only; env 1: a long episode partly overwritten, then a running one
    short = [(1, "term")] * 22
    long = [(14, "term"), (8, "open")]
    rb = make(SequenceSampler(10), short, long, capacity=2 * 18)
    # 18 rows per env. env 0 keeps episodes 14..22 whole; env 1 keeps steps 6..13
    # of episode 1 (14 rows gone) and its final obs, and the 8 steps of episode 2
    index, g = rb.storage.index, torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="pad=True"):  # straight to the exact draw
        sequence_module.draw_windows(index, 10, 10, False, g, max_rounds=0)
    tau, stream, step, width = sequence_module.draw_windows(index, 1000, 5, False, g, max_rounds=0)
    assert set(zip(stream.tolist(), step.tolist())) == {(1, k) for k in (6, 7, 8, 9, 0, 1, 2, 3)}
    assert (width == 5).all()
    assert set(tau[step == 0].tolist()) == {15}  # episode 2 starts after episode 1's 14 steps + final obs
    rb.sampler.sequence_length = 5
    got = set(observations(rb.sample(1000)))
    assert got == {tuple(range(100106 + t, 100111 + t)) for t in range(4)} | {
        tuple(range(100200 + t, 100205 + t)) for t in range(4)
    }
    rb.sampler.sequence_length, rb.sampler.pad, rb.sampler.max_rounds = 7, True, 0  # exact draw
    got = set(observations(rb.sample(2000)))
    assert got == {tuple(range(100106 + t, 100113 + t)) for t in range(2)} | {
        tuple(range(100200 + t, 100207 + t)) for t in range(2)
    } | {(100 * e,) for e in range(14, 23)}


# ---------------------------------------------------------------- properties
def reference_sequences(ref, length, pad):
    out = {}
    for rows in ref.rows:
        out.update(sequence_reference(rows, ref.capacity, length, pad))
    return out


def sample_sequences(rb, sampler, batch_size):
    """``rb.sample`` with ``sampler``, as the buffer does it."""
    rows, info = sampler.sample(rb.storage, batch_size)
    data = rb.storage.get(rows)
    data.set("index", rows)
    for key, value in info.items():
        data.set(key, value)
    return data


@given(workloads(), st.integers(1, 4), st.booleans(), st.booleans(), st.integers(0, 2**31))
def test_windows_match_reference(workload, length, pad, exact, seed):
    rb, ref = run(*workload)
    expected = reference_sequences(ref, length, pad)
    # exact: skip the rejection rounds, draw from the per-episode window counts
    sampler = SequenceSampler(length, pad=pad, max_rounds=0 if exact else 16,
                              generator=torch.Generator().manual_seed(seed))
    event("no valid window" if not expected else f"{len(expected)} windows")
    if not expected:  # the hint to pad is given only when not padding yet
        with pytest.raises(ValueError, match=r"live steps" if pad else r"pad shorter episodes \(pad=True\)"):
            sampler.sample(rb.storage, 8)
        return
    batch = sample_sequences(rb, sampler, 60 * len(expected) + 100)
    got = decode(batch)
    for seq, init in got:
        assert seq in expected, f"{seq} is not a valid window of {length} steps"
        assert init
    # uniform over at most ~40 windows, 60 draws each: missing one has odds < 1e-24
    assert {seq for seq, _ in got} == set(expected)


@given(workloads(), st.booleans(), st.integers(0, 2**31))
def test_whole_episodes_match_reference(workload, single_sample, seed):
    rb, ref = run(*workload)
    expected = reference_sequences(ref, None, False)
    sampler = SequenceSampler(None, generator=torch.Generator().manual_seed(seed))
    event("no complete episode" if not expected else f"{len(expected)} episodes")
    if not expected:
        with pytest.raises(ValueError, match="no complete episode"):
            sampler.sample(rb.storage, 4)
        return
    if single_sample:  # a batch of one episode is exactly as long as it
        seq, init = decode(sample_sequences(rb, sampler, 1), tight=True)[0]
        assert seq in expected and init
        return
    got = decode(sample_sequences(rb, sampler, 60 * len(expected) + 100), tight=True)
    assert all(init for _, init in got)
    assert {seq for seq, _ in got} == set(expected)


def test_max_rounds_must_not_be_negative():
    with pytest.raises(ValueError, match=r"SequenceSampler: max_rounds=-1, expected an integer >= 0\."):
        SequenceSampler(3, max_rounds=-1)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(pad="no"), TypeError, r"SequenceSampler: pad='no' \(str\), expected True or False\."),
    (dict(pad=None), TypeError, r"SequenceSampler: pad=None \(NoneType\), expected True or False\."),
    (dict(max_rounds=2.5), ValueError, r"SequenceSampler: max_rounds=2.5, expected an integer >= 0\."),
])
def test_pad_and_max_rounds_are_checked_not_converted(kwargs, error, message):
    # pad="no" was bool("no") == True: short episodes were padded, silently;
    # max_rounds=2.5 was truncated to 2
    with pytest.raises(error, match=message):
        SequenceSampler(3, **kwargs)


def test_windows_and_goals_refuse_a_base_drawing_sequences():
    """make_replay_buffer(sampler=SequenceSampler(4), n_step=3) was built, then
    every sample failed with numpy's 'could not broadcast (4,4) into (4,)'."""
    from torchrl_ext import make_her_replay_buffer
    from torchrl_ext.samplers import NStepSampler

    message = r"NStepSampler: base draws sequences \(SequenceSampler\), not the \[B\] transitions"
    with pytest.raises(TypeError, match=message):
        make_replay_buffer(64, sampler=SequenceSampler(4), n_step=3)
    with pytest.raises(TypeError, match=message):
        make_her_replay_buffer(64, lambda a, d, i: -(a - d).abs().sum(-1), sampler=SequenceSampler(3))
    with pytest.raises(TypeError, match=message):
        NStepSampler(1, base=SequenceSampler(2))


def test_a_stock_storage_is_named_with_the_one_to_use():
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(16), sampler=SequenceSampler(2), batch_size=2)
    rb.extend(TensorDict({"observation": torch.zeros(4, 1)}, [4]))
    with pytest.raises(TypeError, match=r"read the episode index of a torchrl_ext.storages.TransitionStorage, "
                                        r"not a LazyTensorStorage; build the buffer with storage="):
        rb.sample()
