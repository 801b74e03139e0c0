"""PrioritizedTransitionSampler against slow, obvious references."""
from __future__ import annotations

import pickle
import re

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torchrl.data import TensorDictReplayBuffer

from conftest import steps, transitions_of
from reference import LoopReference
from torchrl_ext import (
    TransitionStorage,
    TransitionWriter,
    PrioritizedTransitionSampler,
    TransitionReplayBuffer,
)

ASSEMBLIES = [TransitionReplayBuffer, TensorDictReplayBuffer]


def build(size=40, *, seed=0, buffer=TransitionReplayBuffer, **kwargs):
    return buffer(
        storage=TransitionStorage(size),
        writer=TransitionWriter(),
        sampler=PrioritizedTransitionSampler(**kwargs),
        generator=torch.Generator().manual_seed(seed),
    )


def episodes(t0, T=6, envs=2):
    """``envs`` envs, ``T`` steps: obs are unique, a step terminates when obs % 4 == 3.

    The next obs is obs + 1 (the next step's obs), or obs + 0.5 at a termination.
    """
    obs = torch.arange(t0, t0 + T, dtype=torch.float32)
    obs = torch.stack([obs + 100_000 * e for e in range(envs)]).unsqueeze(-1)  # [envs, T, 1]
    done = obs % 4 == 3
    return steps(obs, torch.where(done, obs + 0.5, obs + 1), terminated=done)


def obs_of(rb, rows) -> list[float]:
    """Observation of the transitions at ``rows`` (each transition's unique key here)."""
    return rb.storage.get(torch.as_tensor(rows))["observation"][:, 0].tolist()


def live_rows(rb) -> torch.Tensor:
    return rb.storage.live_transition_rows()


def reference_probabilities(rb, priority: dict[float, float], alpha: float, eps: float) -> dict[float, float]:
    """Exact P(i) by a loop over live transitions (keyed by observation)."""
    mass = {obs: (priority[obs] + eps) ** alpha for obs in obs_of(rb, live_rows(rb))}
    total = sum(mass.values())
    return {obs: m / total for obs, m in mass.items()}


# --------------------------------------------------------------------- basics
@pytest.mark.parametrize("buffer", ASSEMBLIES, ids=lambda b: b.__name__)
def test_new_transitions_get_max_priority_and_final_rows_zero(buffer):
    rb = build(buffer=buffer, max_priority=2.0, alpha=1.0, eps=0.0)
    rb.extend(episodes(0))
    leaves = rb.sampler.priorities()[: rb.storage.index.num_rows]
    is_step = rb.storage.index.row_is_step
    assert torch.equal(leaves > 0, is_step)
    assert bool((leaves[is_step] == 2.0).all())
    assert rb.sampler.total == pytest.approx(2.0 * len(rb))


@pytest.mark.parametrize("buffer", ASSEMBLIES, ids=lambda b: b.__name__)
def test_sample_returns_rows_and_weights(buffer):
    rb = build(buffer=buffer)
    rb.extend(episodes(0))
    sample = rb.sample(7)
    assert sample["index"].shape == (7,) and sample["index"].dtype == torch.int64
    assert sample["priority_weight"].shape == (7,)
    assert sample["priority_weight"].dtype == torch.float32
    assert bool(rb.storage.index.row_is_step[sample["index"]].all())


def test_a_write_longer_than_the_ring_leaves_no_mass_on_observation_rows():
    # 12 steps into an 8-row ring are written in chunks of 4: the last chunk's
    # pending observation lands on a row an earlier chunk wrote as a step
    rb = build(8)
    obs = torch.arange(12.0).view(1, 12, 1)
    rb.extend(steps(obs, obs + 1))
    leaves = rb.sampler.priorities()[:8]
    assert torch.equal(leaves > 0, rb.storage.index.row_is_step)


def test_alpha_zero_is_uniform():
    rb = build(alpha=0.0)
    rb.extend(episodes(0))
    sample = rb.sample(4)
    rb.update_priority(sample["index"], torch.tensor([5.0, 0.0, 1.0, 3.0]))
    rows = live_rows(rb)
    assert bool((rb.sampler.priorities()[rows] == 1.0).all())
    assert bool((rb.sample(10)["priority_weight"] == 1.0).all())


# -------------------------------------------------- golden sampling frequencies
def test_sampling_frequencies_match_exact_probabilities():
    alpha, eps = 0.7, 1e-3
    rb = build(30, alpha=alpha, eps=eps, max_priority=1.0)
    priority: dict[float, float] = {}
    for t0 in (0, 6, 12):  # 2 streams of 15 rows: the first write is evicted in part
        rb.extend(episodes(t0))
        for obs in obs_of(rb, live_rows(rb)):
            priority.setdefault(obs, 1.0)  # new transitions: the max priority (1.0 here)
    rows = live_rows(rb)
    values = torch.linspace(0.0, 3.0, rows.numel())  # includes a zero priority (eps keeps it)
    rb.update_priority(rows, values)
    priority.update(zip(obs_of(rb, rows), values.tolist()))
    expected = reference_probabilities(rb, priority, alpha, eps)

    draws = torch.cat([rb.sample(len(rb))["observation"][:, 0] for _ in range(300)])
    keys, counts = torch.unique(draws, return_counts=True)
    observed = dict(zip(keys.tolist(), counts.tolist()))
    assert set(observed) <= set(expected)  # only live transitions
    n = draws.numel()
    chi2 = sum((observed.get(k, 0) - n * p) ** 2 / (n * p) for k, p in expected.items())
    assert chi2 < 3 * len(expected)  # loose; stratification keeps it well below df


def test_high_priority_row_dominates():
    rb = build(alpha=1.0, eps=0.0)
    rb.extend(episodes(0, T=5, envs=1))  # 5 transitions
    rows = live_rows(rb)
    rb.update_priority(rows, torch.tensor([1.0, 1.0, 96.0, 1.0, 1.0]))  # P = 0.96 for obs 2
    draws = torch.cat([rb.sample(5)["observation"][:, 0] for _ in range(100)])
    assert (draws == 2).float().mean().item() == pytest.approx(0.96, abs=0.02)


def test_importance_weights_formula():
    alpha, beta, eps = 0.6, 0.5, 1e-6
    rb = build(alpha=alpha, beta=beta, eps=eps)
    rb.extend(episodes(0))
    rows = live_rows(rb)
    values = torch.arange(1.0, rows.numel() + 1.0)
    rb.update_priority(rows, values)
    probability = reference_probabilities(rb, dict(zip(obs_of(rb, rows), values.tolist())), alpha, eps)
    sample = rb.sample(8)
    N = len(rb)
    w = torch.tensor([(N * probability[o]) ** -beta for o in sample["observation"][:, 0].tolist()])
    torch.testing.assert_close(sample["priority_weight"], (w / w.max()).float())
    rb.sampler.beta = 1.0  # annealed by the caller
    sample = rb.sample(8)
    w = torch.tensor([(N * probability[o]) ** -1.0 for o in sample["observation"][:, 0].tolist()])
    torch.testing.assert_close(sample["priority_weight"], (w / w.max()).float())


# ------------------------------------------------------------ priority updates
def test_update_with_pairs_index_equals_rows_index():
    a, b, c = build(), build(), build()
    for rb in (a, b, c):
        rb.extend(episodes(0))
    rows = live_rows(a)[:5]
    n_steps = torch.tensor([3, 1, 2, 3, 3])
    td_error = torch.tensor([[0.5], [2.0], [0.1], [4.0], [1.5]])  # [B, 1]
    a.update_priority(rows, td_error)
    b.update_priority(torch.stack([rows, n_steps], -1), td_error)  # sample["index"] of an n-step sampler
    c.sampler.update_priority((rows, n_steps), td_error.view(-1), storage=c.storage)
    assert torch.equal(a.sampler.priorities(), b.sampler.priorities())
    assert torch.equal(a.sampler.priorities(), c.sampler.priorities())
    assert a.sampler.max_priority == 4.0


def test_extend_with_a_priority_entry_sets_priorities():
    # TorchRL's extend passes the written rows ([envs, T] = [3, 2] here) and the
    # data's "td_error": a grid of rows, not (row, steps) pairs
    rb = build(alpha=1.0, eps=0.0)
    data = episodes(0, T=2, envs=3)
    data.set("td_error", torch.arange(1.0, 7.0).view(3, 2))
    rows = rb.extend(data)
    leaves = rb.sampler.priorities()
    assert leaves[rows.reshape(-1)].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def test_plain_list_and_int_indices():
    a, b = build(alpha=1.0, eps=0.0), build(alpha=1.0, eps=0.0)
    for rb in (a, b):
        rb.extend(episodes(0))
    rows = live_rows(a)[:3].tolist()
    a.update_priority(rows, [2.0, 3.0, 4.0])  # a list of rows, not (rows, steps)
    for row, value in zip(rows, [2.0, 3.0, 4.0]):
        b.update_priority(row, value)
    assert torch.equal(a.sampler.priorities(), b.sampler.priorities())


def test_duplicate_rows_last_value_wins():
    rb = build(alpha=1.0, eps=0.0)
    rb.extend(episodes(0))
    row = int(live_rows(rb)[0])
    rb.update_priority(torch.tensor([row, row, row]), torch.tensor([3.0, 7.0, 2.0]))
    assert rb.sampler.priorities()[row].item() == 2.0
    assert rb.sampler.max_priority == 7.0


def test_stale_rows_are_not_resurrected():
    rb = build(8, alpha=1.0, eps=0.0)  # one stream of 8 rows
    obs = torch.arange(3.0).view(1, 3, 1)
    rb.extend(steps(obs, obs + 1, terminated=obs == 2))  # rows 0-2 steps, row 3 final obs
    sampled = live_rows(rb)
    assert sampled.tolist() == [0, 1, 2]
    obs = torch.arange(10.0, 15.0).view(1, 5, 1)
    rb.extend(steps(obs, obs + 1))  # rows 4-7 and 0 steps; row 1 now holds the pending obs
    assert not bool(rb.storage.index.row_is_step[1])
    total = rb.sampler.total
    rb.update_priority(sampled, torch.tensor([5.0, 50.0, 5.0]))
    leaves = rb.sampler.priorities()
    assert leaves[1].item() == 0.0  # evicted: ignored
    assert leaves[0].item() == 5.0  # overwritten by a new transition: takes the update
    assert leaves[2].item() == 5.0  # still the same transition
    assert rb.sampler.max_priority == 5.0  # the ignored 50 does not count
    assert rb.sampler.total == pytest.approx(total + 4.0 + 4.0)


def test_negative_rows_are_skipped():
    rb = build(alpha=1.0, eps=0.0)
    rb.extend(episodes(0))
    before = rb.sampler.priorities()
    rb.update_priority(torch.tensor([-1, -1]), torch.tensor([3.0, 4.0]))
    assert torch.equal(rb.sampler.priorities(), before)


# ------------------------------------------------------ Hypothesis vs reference
ENDINGS = st.sampled_from([0, 0, 0, 1, 2])  # 0 = continue, 1 = terminated, 2 = truncated


@st.composite
def workloads(draw):
    num_streams = draw(st.integers(1, 3))
    stream_capacity = draw(st.integers(2, 12))
    ops = []
    for _ in range(draw(st.integers(1, 8))):
        T = draw(st.integers(1, 7))
        ops.append(("write", T, draw(st.lists(ENDINGS, min_size=num_streams * T, max_size=num_streams * T))))
        if draw(st.booleans()):
            k = draw(st.integers(1, 6))
            values = draw(st.lists(st.floats(0, 10, allow_nan=False), min_size=k, max_size=k))
            ops.append(("update", draw(st.integers(0, 2**31)), values))
    alpha = draw(st.sampled_from([0.0, 0.6, 1.0]))
    return num_streams, stream_capacity, ops, alpha


@given(workloads(), st.integers(0, 2**31))
def test_tree_matches_loop_reference(workload, seed):
    num_streams, stream_capacity, ops, alpha = workload
    eps = 1e-3
    rb = build(num_streams * stream_capacity, alpha=alpha, eps=eps, seed=seed)
    ref = LoopReference(num_streams, stream_capacity)
    priority: dict[float, float] = {}  # raw priority of every transition, by its obs
    max_priority = 1.0
    counter = iter(range(1, 10**9))
    current = [float(next(counter)) for _ in range(num_streams)]
    for op in ops:
        if op[0] == "write":
            _, T, ending = op
            ending = torch.tensor(ending).view(num_streams, T)
            obs, nxt = torch.zeros(num_streams, T), torch.zeros(num_streams, T)
            for t in range(T):
                for s in range(num_streams):
                    obs[s, t], nxt[s, t] = current[s], next(counter)
                    term, trunc = bool(ending[s, t] == 1), bool(ending[s, t] == 2)
                    ref.step(s, current[s], current[s], current[s], float(nxt[s, t]), term, trunc)
                    priority[current[s]] = max_priority
                    current[s] = float(next(counter)) if term or trunc else float(nxt[s, t])
            rb.extend(steps(obs.unsqueeze(-1), nxt.unsqueeze(-1),
                            terminated=(ending == 1).unsqueeze(-1), truncated=(ending == 2).unsqueeze(-1)))
        else:
            _, update_seed, values = op
            k = min(len(values), len(rb))
            rb.set_rng(torch.Generator().manual_seed(update_seed))
            sample = rb.sample(k)  # with replacement: repeated rows, the last value wins
            rb.update_priority(sample["index"], torch.tensor(values[:k], dtype=torch.float64))
            for o, v in zip(sample["observation"][:, 0].tolist(), values[:k]):
                priority[o] = v
            max_priority = max(max_priority, *values[:k])

    live = ref.live_transitions()
    expected_total = sum((priority[t[0]] + eps) ** alpha for t in live)
    assert rb.sampler.total == pytest.approx(expected_total, rel=1e-9)
    assert rb.sampler.max_priority == max_priority
    # positive mass exactly on the live transition rows
    num_rows = rb.storage.index.num_rows
    leaves = rb.sampler.priorities()
    assert torch.equal(leaves[:num_rows] > 0, rb.storage.index.row_is_step)
    assert not bool(leaves[num_rows:].any())
    positive = torch.nonzero(leaves > 0).view(-1)
    assert transitions_of(rb.storage.get(positive)) == live
    # every sampled row is a live transition
    batch = rb.sample(len(live))
    assert set(transitions_of(batch)) <= set(live)


# ------------------------------------------------- checkpoint, empty, pickling
def test_dumps_loads_into_a_fresh_buffer_gives_the_same_next_sample(tmp_path):
    rb = build(seed=3)
    rb.extend(episodes(0))
    rb.extend(episodes(6))
    sample = rb.sample(6)
    rb.update_priority(sample["index"], torch.linspace(0.5, 9.0, 6))
    rb.sample(6)  # move the RNG
    rb.dumps(tmp_path / "ckpt")

    restored = build(seed=999)
    restored.loads(tmp_path / "ckpt")
    assert torch.equal(restored.sampler.priorities(), rb.sampler.priorities())
    assert restored.sampler.max_priority == rb.sampler.max_priority == 9.0
    a, b = rb.sample(6), restored.sample(6)
    assert torch.equal(a["index"], b["index"])
    assert torch.equal(a["priority_weight"], b["priority_weight"])
    rb.extend(episodes(12))  # writes after a restore continue identically
    restored.extend(episodes(12))
    assert torch.equal(restored.sampler.priorities(), rb.sampler.priorities())


def test_state_dict_round_trip():
    rb = build()
    rb.extend(episodes(0))
    rb.update_priority(live_rows(rb)[:3], torch.tensor([4.0, 0.5, 2.0]))
    state = rb.sampler.state_dict()
    other = build()
    other.extend(episodes(0))
    other.sampler.load_state_dict(state)
    assert torch.equal(other.sampler.priorities(), rb.sampler.priorities())
    assert other.sampler.max_priority == 4.0


def test_empty_clears_priorities():
    rb = build()
    rb.extend(episodes(0))
    rb.update_priority(live_rows(rb), 5.0)
    rb.empty()
    assert rb.sampler.total == 0.0
    assert rb.sampler.max_priority == 1.0
    with pytest.raises(ValueError, match="holds no transition yet"):
        rb.sample(1)
    rb.extend(episodes(20))
    assert rb.sampler.total == pytest.approx(len(rb) * (1.0 + 1e-6) ** 0.6)
    assert bool(rb.storage.index.row_is_step[rb.sample(4)["index"]].all())


def test_pickling_keeps_priorities_and_samples():
    rb = build(seed=1)
    rb.extend(episodes(0))
    rb.update_priority(live_rows(rb), torch.arange(len(rb), dtype=torch.float32))
    copy = pickle.loads(pickle.dumps(rb.sampler))
    assert torch.equal(copy.priorities(), rb.sampler.priorities())
    assert copy.max_priority == rb.sampler.max_priority
    copy.generator = torch.Generator().manual_seed(0)  # the buffer's generator is not pickled
    rows, info = copy.sample(rb.storage, 5)
    assert bool(rb.storage.index.row_is_step[rows].all())
    restored = pickle.loads(pickle.dumps(rb))
    assert torch.equal(restored.sampler.priorities(), rb.sampler.priorities())
    assert torch.equal(restored.sample(5)["index"], rb.sample(5)["index"])


def test_repr_and_exports():
    import torchrl_ext
    import torchrl_ext.samplers

    assert "PrioritizedTransitionSampler" in torchrl_ext.__all__
    assert "PrioritizedTransitionSampler" in torchrl_ext.samplers.__all__
    assert repr(PrioritizedTransitionSampler(0.5, 0.3)) == (
        "PrioritizedTransitionSampler(alpha=0.5, beta=0.3, eps=1e-06, max_priority=1.0)"
    )


# --------------------------------------------------------------------- errors
def test_priority_count_mismatch_names_both_lengths():
    rb = build()
    rb.extend(episodes(0))
    with pytest.raises(ValueError, match=re.escape("3 priorities (shape (3,)) for 4 rows")):
        rb.update_priority(live_rows(rb)[:4], torch.ones(3))


@pytest.mark.parametrize("bad", [-0.5, float("nan"), float("inf")])
def test_negative_nan_or_infinite_priority(bad):
    rb = build()
    rb.extend(episodes(0))
    with pytest.raises(ValueError, match=r"1 priorities are negative, NaN or infinite \(first: .* at position 1\)"):
        rb.update_priority(live_rows(rb)[:2], torch.tensor([1.0, bad]))


@pytest.mark.parametrize("bad, shown", [
    ("x", "'x' (str)"), (None, "None (NoneType)"),
    (torch.ones(2, dtype=torch.bool), "tensor([True, True]) (Tensor, dtype torch.bool)"),
])
def test_priority_that_is_not_numbers_is_refused_naming_it(bad, shown):
    """update_priority(index, 'x') failed in TorchRL's torch.as_tensor ("new(): invalid data type 'str'")."""
    rb = build()
    rb.extend(episodes(0))
    with pytest.raises(TypeError, match=re.escape(f"update_priority: priority={shown}, expected a float tensor, "
                                                  "array or number: one priority per index")):
        rb.update_priority(live_rows(rb)[:2], bad)
    with pytest.raises(TypeError, match=re.escape(f"update_priority: priority={shown}")):
        rb.sampler.update_priority(live_rows(rb)[:2], bad, storage=rb.storage)  # the sampler's own check
    rb.update_priority(live_rows(rb)[:2], np.array([1, 2]))  # integers are numbers


def test_row_out_of_range():
    rb = build(40)
    rb.extend(episodes(0))
    with pytest.raises(ValueError, match="row 40 is out of range; the storage has 40 rows"):
        rb.update_priority(torch.tensor([0, 40]), torch.ones(2))


def test_float_index():
    rb = build()
    rb.extend(episodes(0))
    with pytest.raises(TypeError, match="index has dtype torch.float32, expected integer rows"):
        rb.update_priority(torch.tensor([0.0, 1.0]), torch.ones(2))


def test_storage_is_required():
    sampler = PrioritizedTransitionSampler()
    with pytest.raises(TypeError, match="needs the buffer's TransitionStorage as storage=, got NoneType"):
        sampler.update_priority(torch.tensor([0]), torch.ones(1))


def test_sample_errors():
    rb = build()
    with pytest.raises(ValueError, match="holds no transition yet; extend it first"):
        rb.sample(2)
    rb.extend(episodes(0))
    assert rb.sample(100).shape == (100,)  # more than the buffer holds: with replacement
    with pytest.raises(ValueError, match=f"batch_size=0, expected >= 1 \\(the buffer holds "
                       f"{len(rb)} transitions; batches are drawn with replacement\\)"):
        rb.sample(0)


def test_all_priorities_zero():
    rb = build(eps=0.0)
    rb.extend(episodes(0))
    rb.update_priority(live_rows(rb), 0.0)
    with pytest.raises(ValueError, match=f"all {len(rb)} live transitions have priority 0 \\(eps=0.0\\)"):
        rb.sample(2)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"alpha": -1.0}, "alpha=-1.0, expected a finite number >= 0"),
        ({"beta": float("nan")}, "beta=nan, expected a finite number >= 0"),
        ({"eps": -1e-3}, "eps=-0.001, expected a finite number >= 0"),
        ({"max_priority": 0.0}, "max_priority=0.0, expected a finite number > 0"),
    ],
)
def test_bad_parameters(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        PrioritizedTransitionSampler(**kwargs)


def test_parameters_that_are_not_numbers_are_named():
    # alpha="0.5" failed with math.isfinite's "must be real number, not str"
    with pytest.raises(TypeError, match=re.escape("PrioritizedTransitionSampler: alpha='0.5' (str), expected a finite number >= 0")):
        PrioritizedTransitionSampler(alpha="0.5")
    with pytest.raises(TypeError, match=re.escape("PrioritizedTransitionSampler: beta=None (NoneType)")):
        PrioritizedTransitionSampler().beta = None


def test_bad_beta_assignment():
    sampler = PrioritizedTransitionSampler()
    with pytest.raises(ValueError, match="beta=-0.1"):
        sampler.beta = -0.1


def test_checkpoint_with_other_alpha():
    rb = build(alpha=0.6)
    rb.extend(episodes(0))
    with pytest.raises(ValueError, match=re.escape("the checkpoint has alpha=0.6, this sampler 0.7")):
        PrioritizedTransitionSampler(alpha=0.7).load_state_dict(rb.sampler.state_dict())


def test_one_sampler_per_buffer():
    sampler = PrioritizedTransitionSampler()
    TensorDictReplayBuffer(storage=TransitionStorage(40), writer=TransitionWriter(), sampler=sampler).extend(episodes(0))
    other = TensorDictReplayBuffer(storage=TransitionStorage(200), writer=TransitionWriter(), sampler=sampler)
    with pytest.raises(ValueError, match="priority tree covers 64 rows, but the storage has 200"):
        other.extend(episodes(0))


@pytest.mark.parametrize("size", [8, 8192])  # below and above the prefix-scanned level
def test_rounding_never_draws_a_zero_mass_row(size):
    """Masses 40 orders of magnitude apart and draws at the top of each segment."""
    from torchrl_ext.samplers.prioritized import _tree_sample, _tree_set

    rng = np.random.default_rng(size)
    top = np.nextafter(1.0, 0.0)  # largest double below 1, as torch.rand may return
    for _ in range(200):
        tree = np.zeros(2 * size)
        pairs = tree.view(np.complex128)
        rows = rng.choice(size, int(rng.integers(1, 6)), replace=False)
        _tree_set(tree, pairs, rows, 10.0 ** rng.uniform(-20, 20, rows.size))
        for r in (np.full(7, top), np.zeros(7), rng.random(7)):
            drawn, mass, total = _tree_sample(tree, pairs, r, rng.permutation(7))
            assert total > 0
            assert set(drawn.tolist()) <= set(rows.tolist())
            assert np.array_equal(mass, tree[drawn + size]) and (mass > 0).all()


def test_priority_tree_helpers_stay_consistent_at_scale():
    """A tree deeper than the prefix-scanned level: descent below it is exercised."""
    rb = build(2 * 5000, alpha=1.0, eps=0.0, seed=2)
    for t0 in range(0, 6000, 1000):
        rb.extend(episodes(t0, T=1000))
    rows = live_rows(rb)
    values = torch.rand(rows.numel(), generator=torch.Generator().manual_seed(0)) * 5
    rb.update_priority(rows, values)
    assert rb.sampler.total == pytest.approx(float(values.double().sum()), rel=1e-9)
    sample = rb.sample(512)
    assert bool(rb.storage.index.row_is_step[sample["index"]].all())
    leaves = rb.sampler.priorities()[sample["index"]]
    assert bool((leaves > 0).all())


def test_a_buffer_built_over_a_filled_storage_keeps_the_priorities():
    # TorchRL gives rows arange(len(storage)) the default priority when a buffer is built
    # over a filled storage: here not the transitions (rows are laid out by stream), and
    # a spawned DataLoader worker's buffer, sharing the tree, reset the main process's
    # priorities to the maximum
    rb = build(alpha=1.0, eps=0.0)
    rb.extend(episodes(0))
    rows = live_rows(rb)
    rb.update_priority(rows, torch.linspace(0.1, 2.0, rows.numel()))
    before = rb.sampler.priorities()
    again = TransitionReplayBuffer(storage=rb.storage, sampler=rb.sampler, batch_size=4)
    again.sample()
    assert torch.equal(rb.sampler.priorities(), before)
    # a sampler holding no priority yet gives its default one to every live transition
    fresh = PrioritizedTransitionSampler(alpha=1.0, eps=0.0)
    TransitionReplayBuffer(storage=rb.storage, sampler=fresh, batch_size=4).sample()
    mass = fresh.priorities()
    assert torch.equal(mass.nonzero().view(-1).sort().values, rows.sort().values)
    assert bool((mass[rows] == 1.0).all())


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_a_copied_buffer_s_writes_reach_its_sampler(how):
    """A pickled or deep-copied buffer's storage forgot the buffer it tells of its
    writes: the copy's new transitions got mass 0 (never drawn), and the rows they
    overwrote kept theirs. Every live transition of the copy now has the max priority."""
    import copy as copies

    rb = build(8, alpha=1.0, eps=0.0)
    rb.extend(episodes(0, T=4, envs=1))
    copy = pickle.loads(pickle.dumps(rb)) if how == "pickle" else copies.deepcopy(rb)
    copy.extend(episodes(4, T=6, envs=1))  # the 8-row ring wraps
    mass = copy.sampler.priorities()
    live = live_rows(copy)
    assert torch.equal(mass[live], torch.ones(len(live), dtype=torch.float64))
    assert float(mass.sum()) == len(live)  # no mass left on rows that are not transitions
    drawn = set(copy.sample(256)["observation"][:, 0].tolist())
    assert drawn == set(obs_of(copy, live))


def test_priorities_whose_total_would_overflow_are_refused():
    """A finite priority whose mass (p + eps) ** alpha summed over the rows overflows
    made the total infinite, and draws silently picked a light row."""
    rb = build(16, alpha=1.0, eps=0.0)
    rb.extend(episodes(0, T=5, envs=1))
    with pytest.raises(ValueError, match=r"priority 1e\+308 gives the mass .* too large for the sum over 16 rows"):
        rb.update_priority(live_rows(rb)[:2], torch.tensor([1e308, 1e308], dtype=torch.float64))
    assert rb.sampler.total == len(rb) and rb.sampler.max_priority == 1.0  # nothing changed
    with pytest.raises(ValueError, match=r"max_priority=1e\+200 gives an infinite mass"):
        PrioritizedTransitionSampler(alpha=2.0, max_priority=1e200)
