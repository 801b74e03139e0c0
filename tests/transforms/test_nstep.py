"""n-step windows: golden cases and a property against the loop reference."""
from __future__ import annotations

import math
import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conftest import run, steps, workloads
from reference import nstep_reference
from torchrl_ext import make_replay_buffer
from torchrl_ext.sample_index import SampleIndex
from torchrl_ext.samplers import NStepSampler
from torchrl_ext.samplers.nstep import OneStepWindows, StepWindows, window_steps
from torchrl_ext.transforms import NStepTransform, discount_powers, nstep_return, return_weights


def windows(rb, n, gamma):
    """Every live transition's n-step window, as reference tuples, sorted."""
    storage = rb.storage
    rows = storage.live_transition_rows()
    index = torch.stack([rows, window_steps(storage.index, rows, n)], -1)
    batch = NStepTransform(gamma)(storage.get(SampleIndex.wrap(index, StepWindows())))
    return sorted(
        zip(
            batch["observation"][:, 0].tolist(),
            batch["next", "reward"][:, 0].tolist(),
            batch["next", "observation"][:, 0].tolist(),
            batch["next", "terminated"][:, 0].tolist(),
            batch["next", "truncated"][:, 0].tolist(),
            batch["steps_to_next_obs"][:, 0].tolist(),
            batch["discount"][:, 0].tolist(),
        )
    )


def same(got: list[tuple], expected: list[tuple]) -> bool:
    """Equal windows, floats compared at float32 precision."""
    return len(got) == len(expected) and all(
        g[0] == e[0] and g[2:6] == e[2:6]
        and math.isclose(g[1], e[1], rel_tol=1e-5, abs_tol=1e-5)
        and math.isclose(g[6], e[6], rel_tol=1e-5, abs_tol=1e-6)
        for g, e in zip(got, expected)
    )


def episode(rewards, terminated=False, truncated=False, n=3, gamma=0.5, capacity=64):
    """One env, one episode of ``len(rewards)`` steps; obs t = t, final obs = 100."""
    T = len(rewards)
    obs = torch.arange(T, dtype=torch.float32).view(1, T, 1)
    nxt = torch.cat([obs[:, 1:], torch.full((1, 1, 1), 100.0)], 1)
    term = torch.zeros(1, T, 1, dtype=torch.bool)
    trunc = torch.zeros(1, T, 1, dtype=torch.bool)
    term[0, -1], trunc[0, -1] = terminated, truncated
    rb = make_replay_buffer(capacity, n_step=n, gamma=gamma, seed=0)
    rb.extend(steps(obs, nxt, terminated=term, truncated=trunc,
                    reward=torch.tensor(rewards, dtype=torch.float32).view(1, T, 1)))
    return rb


def by_step(rb, n, gamma):
    """step -> (return, next obs, terminated, truncated, k, discount), floats rounded."""
    return {
        w[0]: (round(w[1], 5), *w[2:6], round(w[6], 5)) for w in windows(rb, n, gamma)
    }


def test_one_step_final_reward():
    got = by_step(episode([5.0], terminated=True, n=1), 1, 0.5)
    assert got == {0.0: (5.0, 100.0, True, False, 1, 0.0)}


def test_three_step_mid_episode_return():
    got = by_step(episode([1.0, 2.0, 4.0, 8.0, 16.0]), 3, 0.5)
    # 1 + 0.5 * 2 + 0.25 * 4, bootstrapping from obs 3 with 0.5 ** 3
    assert got[0.0] == (3.0, 3.0, False, False, 3, 0.125)


def test_n1_terminal_cuts_bootstrap():
    got = by_step(episode([1.0] * 6, terminated=True), 3, 0.5)
    assert got[3.0] == (1.75, 100.0, True, False, 3, 0.0)  # the last full window
    assert all(w[5] == 0.0 for t, w in got.items() if t >= 3.0)
    assert got[2.0][5] == 0.125  # a window that ends before the terminal bootstraps


def test_truncation_bootstraps_from_true_final_observation():
    got = by_step(episode([1.0] * 4, truncated=True), 3, 0.5)
    assert got[3.0] == (1.0, 100.0, False, True, 1, 0.5)
    assert got[1.0] == (1.75, 100.0, False, True, 3, 0.125)


def test_n2_last_steps_of_an_episode_are_windows():
    got = by_step(episode([1.0] * 6, terminated=True), 3, 0.5)
    assert sorted(got) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert [got[t][4] for t in (4.0, 5.0)] == [2, 1]


def test_n3_episode_shorter_than_n():
    got = by_step(episode([1.0, 1.0], terminated=True, n=5), 5, 0.5)
    assert got == {0.0: (1.5, 100.0, True, False, 2, 0.0), 1.0: (1.0, 100.0, True, False, 1, 0.0)}


def test_window_stops_at_last_written_step_of_running_episode():
    rb = make_replay_buffer(64, n_step=3, gamma=0.5, seed=0)
    rb.extend(steps(torch.tensor([[[0.0], [1.0]]]), torch.tensor([[[1.0], [2.0]]])))
    got = by_step(rb, 3, 0.5)
    assert got[0.0][1:] == (2.0, False, False, 2, 0.25)  # bootstraps from the pending obs
    rb.extend(steps(torch.tensor([[2.0]]), torch.tensor([[3.0]])))
    assert by_step(rb, 3, 0.5)[0.0][4] == 3  # the window grows as the episode is written


def test_n_and_gamma_change_between_samples():
    rb = episode([1.0] * 6)
    rb.sampler.n = 1
    rb.transform[0].gamma = 0.9  # rb.transform is a Compose around NStepTransform
    batch = rb.sample(4)
    assert bool((batch["steps_to_next_obs"] == 1).all())
    assert torch.allclose(batch["discount"], torch.full((4, 1), 0.9))


@pytest.mark.parametrize("n", [0, -1, 2.5, True, "3"])
def test_n_set_between_samples_is_checked_like_the_constructor_s(n):
    # a bad n set between samples used to be taken as is: n=0 served 1-step
    # windows silently, and the constructor truncated 2.5 to 2 and True to 1
    rb = episode([1.0] * 6)
    message = rf"NStepSampler: n={re.escape(repr(n))}, expected an integer >= 1"
    with pytest.raises(ValueError, match=message):
        NStepSampler(n)
    with pytest.raises(ValueError, match=message):
        rb.sampler.n = n
    assert rb.sampler.n == 3 and int(rb.sample(16)["steps_to_next_obs"].max()) == 3


@pytest.mark.parametrize("gamma", [-0.1, 1.5, math.nan])
def test_gamma_set_between_samples_is_checked_like_the_constructor_s(gamma):
    # gamma=1.5 set between samples used to give bootstrap discounts above 1
    rb = episode([1.0] * 6, gamma=0.5)
    message = rf"NStepTransform: gamma={gamma}, expected a finite number in \[0, 1\]"
    with pytest.raises(ValueError, match=message):
        NStepTransform(gamma)
    with pytest.raises(ValueError, match=message):
        rb.transform[0].gamma = gamma
    assert rb.transform[0].gamma == 0.5 and bool((rb.sample(8)["discount"] <= 0.5).all())


@pytest.mark.parametrize("gamma", ["0.9", None])
def test_gamma_that_is_not_a_number_names_the_argument(gamma):
    with pytest.raises(TypeError, match=rf"NStepTransform: gamma={re.escape(repr(gamma))} "
                       rf"\({type(gamma).__name__}\), expected a finite number in \[0, 1\]"):
        NStepTransform(gamma)


@pytest.mark.parametrize("n, where", [(3, "the 'n_step' windows"), (1, "the sampled transitions")])
def test_a_reward_key_the_windows_do_not_hold_is_named(n, where):
    # failed with "'NoneType' object has no attribute 'is_floating_point'"; one-step
    # windows are read as transitions (no 'n_step' entries): the error names those
    rb = make_replay_buffer(64, sampler=NStepSampler(n), seed=0,
                            transform=NStepTransform(0.5, reward_key=("next", "score")))
    rb.extend(steps(torch.arange(4.0).view(1, 4, 1), torch.arange(1.0, 5.0).view(1, 4, 1)))
    with pytest.raises(KeyError, match=rf"NStepTransform: reward_key=\('next', 'score'\) is not among "
                       rf"{where} \(held: .*'reward'.*\); pass reward_key="):
        rb.sample(2)


def test_one_step_windows_are_read_as_transitions():
    rb = make_replay_buffer(64, n_step=3, gamma=0.5, seed=0)
    ends = torch.tensor([False, False, False, True]).view(1, 4, 1)
    rb.extend(steps(torch.arange(4.0).view(1, 4, 1), torch.arange(1.0, 5.0).view(1, 4, 1),
                    reward=torch.arange(10.0, 14.0).view(1, 4, 1), terminated=ends))
    rows = rb.storage.live_transition_rows()
    index = torch.stack([rows, torch.ones_like(rows)], -1)  # every window one step long
    raw = rb.storage.get(SampleIndex.wrap(index, StepWindows()))
    assert "n_step" not in raw.keys() and raw["steps_to_next_obs"].tolist() == [[1]] * 4
    batch = NStepTransform(0.5)(raw)
    assert batch["next", "reward"].view(-1).tolist() == [10.0, 11.0, 12.0, 13.0]
    # gamma * (1 - terminated): the episode's last step terminates it
    assert batch["discount"].view(-1).tolist() == [0.5, 0.5, 0.5, 0.0]


def test_n1_windows_are_read_without_looking_at_their_lengths_and_match_a_general_read():
    rb = make_replay_buffer(64, n_step=1, gamma=0.5, seed=0)
    ends = torch.tensor([False, True, False, False]).view(1, 4, 1)
    rb.extend(steps(torch.arange(4.0).view(1, 4, 1), torch.arange(1.0, 5.0).view(1, 4, 1),
                    reward=torch.arange(10.0, 14.0).view(1, 4, 1), terminated=ends))
    index, _ = rb.sampler.sample(rb.storage, 16)
    assert index.reader == OneStepWindows() and index.shape == (16,)  # the rows: no length column
    fast = rb.storage.get(index)
    windows = torch.stack([index.plain, torch.ones_like(index.plain)], -1)  # [B, 2] (row, 1)
    general = rb.storage.get(SampleIndex.wrap(windows, StepWindows()))
    assert (fast == general).all()
    batch = NStepTransform(0.5)(fast)
    rows = fast["observation"].view(-1).long()
    assert batch["next", "reward"].view(-1).tolist() == (rows + 10).float().tolist()
    assert batch["discount"].view(-1).tolist() == [0.0 if r == 1 else 0.5 for r in rows.tolist()]


def test_one_step_returns_keep_the_shape_of_a_reward_without_its_trailing_dim():
    from tensordict import TensorDict

    batch = TensorDict({"steps_to_next_obs": torch.ones(3, 1, dtype=torch.int64),
                        "next": {"reward": torch.tensor([1.0, 2.0, 3.0]),
                                 "terminated": torch.tensor([[False], [True], [False]])}}, [3])
    out = NStepTransform(0.5)(batch)
    assert out["next", "reward"].tolist() == [1.0, 2.0, 3.0]
    assert out["discount"].tolist() == [[0.5], [0.0], [0.5]]


def test_one_step_integer_rewards_become_float_returns_in_the_batch():
    # the one-step return is the reward itself: set again only when it changed (here its dtype)
    from tensordict import TensorDict

    batch = TensorDict({"steps_to_next_obs": torch.ones(2, 1, dtype=torch.int64),
                        "next": {"reward": torch.tensor([[1], [2]]),
                                 "terminated": torch.tensor([[False], [True]])}}, [2])
    out = NStepTransform(0.5)(batch)
    assert out["next", "reward"].dtype == torch.get_default_dtype()
    assert out["next", "reward"].tolist() == [[1.0], [2.0]]
    assert out["discount"].tolist() == [[0.5], [0.0]]


def test_one_transform_follows_each_batch_s_dtype_and_a_gamma_set_between_batches():
    # the weights are kept between batches: rebuilt for another dtype, a new gamma, a wider window
    from tensordict import TensorDict

    def batch(dtype, width=None):
        term = torch.tensor([[False], [True]])
        if width is None:
            return TensorDict({"steps_to_next_obs": torch.ones(2, 1, dtype=torch.int64),
                               "next": {"reward": torch.ones(2, 1, dtype=dtype), "terminated": term}}, [2])
        window = TensorDict({"reward": torch.ones(2, width, 1, dtype=dtype),
                             "mask": torch.ones(2, width, dtype=torch.bool)}, [2, width])
        return TensorDict({"n_step": window, "next": {"terminated": term}}, [2])

    transform = NStepTransform(0.5)
    for dtype, gamma, width, discount in [(torch.float32, 0.5, None, 0.5), (torch.float64, 0.5, None, 0.5),
                                          (torch.float64, 0.25, None, 0.25), (torch.float64, 0.25, 3, 0.25**3),
                                          (torch.float32, 0.25, 2, 0.25**2)]:
        if gamma != transform.gamma:  # (set only when it changes: the weights are kept otherwise)
            transform.gamma = gamma
        out = transform(batch(dtype, width))
        assert out["discount"].dtype == dtype and out["discount"].view(-1).tolist() == [discount, 0.0]
        assert out["next", "reward"].dtype == dtype


def test_a_transform_pickled_before_its_weights_were_kept_rebuilds_them():
    # an older NStepTransform pickled its weights without what they were made for
    import pickle

    from tensordict import TensorDict

    def batch():
        return TensorDict({"steps_to_next_obs": torch.ones(2, 1, dtype=torch.int64),
                           "next": {"reward": torch.ones(2, 1), "terminated": torch.tensor([[False], [True]])}},
                          [2])

    transform = NStepTransform(0.5)
    transform(batch())
    old = pickle.loads(pickle.dumps(transform))
    kept = old.__dict__.pop("_kept")  # as the old pickle held them: the weights alone, of gamma 0.5
    old.__dict__["_weights"], old.__dict__["_weights_gamma"] = kept[1], 0.5
    old.__dict__["_gamma"] = 0.25
    assert old(batch())["discount"].view(-1).tolist() == [0.25, 0.0]


def test_nstep_return_without_a_mask_is_for_one_step_windows_only():
    with pytest.raises(ValueError, match=r"nstep_return: mask=None is for one-step windows; "
                       r"these are 3 wide"):
        nstep_return(torch.ones(2, 3), None, torch.zeros(2, 1, dtype=torch.bool), 0.9,
                     steps=torch.full((2, 1), 3))
    with pytest.raises(ValueError, match=r"nstep_return: mask=None needs steps="):
        nstep_return(torch.ones(2, 1), None, torch.zeros(2, 1, dtype=torch.bool), 0.9)
    ret, disc = nstep_return(torch.ones(2, 1), None, torch.tensor([[True], [False]]), 0.9,
                             steps=torch.ones(2, 1, dtype=torch.int64))
    assert ret.view(-1).tolist() == [1.0, 1.0] and torch.allclose(disc.view(-1), torch.tensor([0.0, 0.9]))


def test_nstep_return_function_rejects_nothing_silently():
    ret, disc = nstep_return(torch.ones(2, 3, 1), torch.tensor([[True, False, False]] * 2),
                             torch.tensor([[True], [False]]), 0.9)
    assert ret.view(-1).tolist() == [1.0, 1.0]
    assert torch.allclose(disc.view(-1), torch.tensor([0.0, 0.9]))


@pytest.mark.parametrize("gamma", [0.0, 1.0])
def test_gamma_extremes(gamma):
    got = by_step(episode([1.0, 2.0, 3.0], n=3, gamma=gamma), 3, gamma)
    assert got[0.0][0] == (1.0 if gamma == 0.0 else 6.0)


@given(workloads(), st.integers(1, 4), st.sampled_from([0.5, 0.9, 1.0]))
def test_windows_match_reference(workload, n, gamma):
    rb, ref = run(*workload)
    expected = []
    for rows in ref.rows:
        kept = rows[-ref.capacity :]
        expected += nstep_reference(kept, n, gamma)
    assert same(windows(rb, n, gamma), sorted(expected))


@pytest.mark.parametrize("n", [1, 3])
def test_prioritized_nstep_rainbow_combination(n):
    from torchrl_ext.samplers import PrioritizedTransitionSampler

    base = PrioritizedTransitionSampler(alpha=1.0, beta=0.5)
    rb = make_replay_buffer(64, batch_size=16, n_step=n, gamma=0.5, sampler=base, seed=0)
    T = 20
    obs = torch.arange(T, dtype=torch.float32).view(1, T, 1)
    rb.extend(steps(obs, obs + 1))
    batch = rb.sample()
    # (row, steps), as TorchRL stacks the tuple; one-step windows: the rows alone
    assert batch["index"].shape == ((16,) if n == 1 else (16, 2))
    assert batch["priority_weight"].shape == (16,)
    # step 5 gets almost all the priority mass, through an index shaped as the sample's
    rows = rb.storage.live_transition_rows()  # steps 0..19 of the one stream, in order
    td_error = torch.full((T,), 1e-3)
    td_error[5] = 100.0
    rb.update_priority(rows if n == 1 else torch.stack([rows, torch.ones_like(rows)], -1), td_error)
    draws = torch.cat([rb.sample()["observation"].view(-1) for _ in range(10)])
    assert float((draws == 5.0).float().mean()) > 0.9
    # windows stay n-step windows under prioritized starts
    batch = rb.sample()
    expected_k = torch.clamp(T - batch["observation"].view(-1), max=n)
    assert torch.equal(batch["steps_to_next_obs"].view(-1), expected_k.long())
    # and a sample's own td errors go back through update_tensordict_priority
    batch.set("td_error", torch.full((16,), 1e-3))
    rb.update_tensordict_priority(batch)
    assert float((torch.cat([rb.sample()["observation"] for _ in range(10)]) == 5.0).float().mean()) < 0.9


def test_update_tensordict_priority_without_entry_or_priorities_is_a_no_op():
    rb = make_replay_buffer(64, batch_size=2, n_step=3, seed=0)
    rb.extend(steps(torch.zeros(1, 4, 1), torch.ones(1, 4, 1)))
    batch = rb.sample()
    rb.update_tensordict_priority(batch)  # no "td_error" entry
    batch.set("td_error", torch.ones(2))
    rb.update_tensordict_priority(batch)  # a uniform sampler keeps no priorities


def test_discount_powers_match_nstep_return_and_refuse_bad_widths():
    powers = discount_powers(0.9, 3, dtype=torch.float64)
    assert powers.tolist() == [1.0, 0.9, 0.9**2, 0.9**3]
    weights = return_weights(0.9, 3, dtype=torch.float64)
    assert weights.powers.tolist() == powers.tolist()
    assert weights.column.view(-1).tolist() == powers[:3].tolist()
    assert (weights.zero.item(), weights.gamma.item()) == (0.0, 0.9)
    r = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, False]])
    term = torch.tensor([False])
    assert [t.tolist() for t in nstep_return(r, mask, term, 0.9, weights=weights)] == [
        t.tolist() for t in nstep_return(r, mask, term, 0.9)] == [[[1.0 + 0.9 * 2.0]], [[0.9**2]]]
    # weights for wider windows than the batch's: the first W weights
    assert [t.tolist() for t in nstep_return(r[:, :2], mask[:, :2], term, 0.9, weights=weights)] == [
        [[1.0 + 0.9 * 2.0]], [[0.9**2]]]
    with pytest.raises(ValueError, match=r"discount_powers: n=-1, expected an int >= 0\."):
        discount_powers(0.9, -1)
    with pytest.raises(TypeError, match=r"discount_powers: n=2.0 \(float\), expected an int >= 0\."):
        discount_powers(0.9, 2.0)
    with pytest.raises(ValueError, match=r"return_weights: n=0, expected an int >= 1\."):
        return_weights(0.9, 0)
    with pytest.raises(ValueError, match=r"nstep_return: weights for windows of up to 2 steps; these are "
                       r"3 wide \(return_weights\(gamma, n\) with n >= 3\)\."):
        nstep_return(r, mask, term, 0.9, weights=return_weights(0.9, 2, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"nstep_return: weights is Tensor, expected ReturnWeights "
                       r"\(made by return_weights\(gamma, n\)\)\."):
        nstep_return(r, mask, term, 0.9, weights=powers)

