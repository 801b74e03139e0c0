"""Hindsight relabelling: goal ranges per strategy, episode/stream/ring bounds, rewards."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tensordict import TensorDict

from torchrl_ext import make_her_replay_buffer, make_replay_buffer
from torchrl_ext.samplers import HindsightSampler, HindsightStrategy, NStepSampler
from torchrl_ext.transforms import HindsightTransform


def reward(achieved, desired, infos):
    return -(achieved != desired).any(-1).float()  # (n,), as SB3's compute_reward


def goal_code(env, episode, step):
    """The achieved goal after ``step``: unique per env, episode and step."""
    return float(env * 10_000 + episode * 100 + step + 1)


def episodes_td(env_lengths, episode0=0):
    """One [num_envs, T] write; env i runs episodes of the given lengths back to back.

    Step k of episode e in env i has observation (i, e, k) and next observation
    (i, e, k + 1); its next achieved goal is ``goal_code(i, e, k)`` and its own
    achieved goal the previous step's (-1 at the episode's first step).
    """
    T = sum(env_lengths[0])
    assert all(sum(ls) == T for ls in env_lengths), "equal lengths per env keep the test simple"
    N = len(env_lengths)
    obs, next_obs = torch.zeros(N, T, 3), torch.zeros(N, T, 3)
    ach, next_ach = torch.zeros(N, T, 1), torch.zeros(N, T, 1)
    done = torch.zeros(N, T, 1, dtype=torch.bool)
    for i, lengths in enumerate(env_lengths):
        t = 0
        for e, L in enumerate(lengths):
            for k in range(L):
                obs[i, t] = torch.tensor([i, episode0 + e, k])
                next_obs[i, t] = torch.tensor([i, episode0 + e, k + 1])
                ach[i, t] = -1.0 if k == 0 else goal_code(i, episode0 + e, k - 1)
                next_ach[i, t] = goal_code(i, episode0 + e, k)
                done[i, t] = k == L - 1
                t += 1
    desired = torch.full((N, T, 1), -5.0)
    return TensorDict({
        "observation": obs, "achieved_goal": ach, "desired_goal": desired,
        "action": torch.zeros(N, T, 1),
        "next": {"observation": next_obs, "achieved_goal": next_ach, "desired_goal": desired,
                 "reward": -torch.ones(N, T, 1), "done": done, "terminated": done.clone()},
    }, [N, T])


def relabelled(batch, n_virtual):
    """(env, episode, step, goal) of the relabelled rows (the batch's last rows)."""
    obs = batch["observation"][-n_virtual:]
    goals = batch["desired_goal"][-n_virtual:, 0]
    return [(int(o[0]), int(o[1]), int(o[2]), float(g)) for o, g in zip(obs, goals)]


def decode(goal):
    g = int(goal) - 1
    return g // 10_000, (g % 10_000) // 100, g % 100


@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
def test_goal_ranges_per_strategy(strategy):
    rb = make_her_replay_buffer(200, reward, strategy=strategy, num_goals=4, batch_size=20, seed=0)
    rb.extend(episodes_td([[5, 3, 4], [4, 4, 4]]))
    lengths = {(0, 0): 5, (0, 1): 3, (0, 2): 4, (1, 0): 4, (1, 1): 4, (1, 2): 4}
    for _ in range(20):
        batch = rb.sample()
        for env, ep, step, goal in relabelled(batch, rb.sampler.n_virtual(20)):
            g_env, g_ep, g_step = decode(goal)
            assert (g_env, g_ep) == (env, ep)  # same env, same episode
            L = lengths[(env, ep)]
            if strategy == "future":
                assert step <= g_step <= L - 1  # own next achieved goal included
            elif strategy == "final":
                assert g_step == L - 1
            else:
                assert 0 <= g_step <= L - 1


def test_future_reaches_every_later_step_and_rewards_follow():
    rb = make_her_replay_buffer(200, reward, strategy="future", num_goals=5, batch_size=6, seed=1)
    rb.extend(episodes_td([[6]]))
    seen = set()
    for _ in range(200):
        batch = rb.sample()
        for row, (env, ep, step, goal) in enumerate(relabelled(batch, 5), start=1):
            seen.add((step, decode(goal)[2]))
            success = decode(goal)[2] == step  # the goal is reached by this very step
            assert float(batch["next", "reward"][row]) == (0.0 if success else -1.0)
            assert float(batch["next", "desired_goal"][row]) == goal
    assert seen == {(i, j) for i in range(6) for j in range(i, 6)}


def test_real_rows_first_and_untouched():
    rb = make_her_replay_buffer(200, reward, num_goals=3, batch_size=8, seed=0)
    rb.extend(episodes_td([[8]]))
    batch = rb.sample()
    assert rb.sampler.n_virtual(8) == 6
    assert bool((batch["desired_goal"][:2] == -5.0).all())
    assert bool((batch["next", "reward"][:2] == -1.0).all())


@pytest.mark.parametrize("strategy", ["future", "episode", "random"])
def test_one_step_without_discount_has_no_nstep_layer_and_samples_the_same_batches(strategy):
    # n_step=1 and discount_key=None: the n-step layer would change nothing, so it is left out
    # (the HER facade builds it so); its batches are those of the layered buffer, minus "discount"
    lean = make_her_replay_buffer(200, reward, strategy=strategy, num_goals=3, discount_key=None,
                                  batch_size=16, seed=3)
    layered = make_her_replay_buffer(200, reward, strategy=strategy, num_goals=3, batch_size=16, seed=3)
    assert type(lean.sampler.base).__name__ == "UniformTransitionSampler"
    assert [type(t).__name__ for t in lean.transform.transforms] == ["HindsightTransform"]
    assert type(layered.sampler.base).__name__ == "NStepSampler"
    for rb in (lean, layered):
        rb.extend(episodes_td([[4, 6], [7, 3]]))
    for _ in range(5):
        a, b = lean.sample(), layered.sample()
        assert "discount" not in a.keys() and "discount" in b.keys()
        assert (a == b.exclude("discount")).all()
    with pytest.raises(ValueError, match="gamma"):  # still checked, though unused
        make_her_replay_buffer(200, reward, gamma=2.0, discount_key=None)


def test_a_batch_without_virtual_goals_reads_its_goal_entries_from_its_own_rows():
    # one row, k = 1: int(1 * 1 / 2) = 0 virtual rows, so the goal rows are the rows themselves
    rb = make_her_replay_buffer(200, reward, num_goals=1, batch_size=1, seed=0)
    rb.extend(episodes_td([[4, 4], [5, 3]]))
    index, _ = rb.sampler.sample(rb.storage, 1)
    raw = rb.storage.get(index)
    her = raw["her"]
    assert not her["relabel"].any()
    for key in ("observation", "achieved_goal", "desired_goal"):
        assert torch.equal(her[key], raw[key])
    batch = rb.sample()  # nothing relabelled: the rewards as stored
    assert bool((batch["desired_goal"] == -5.0).all()) and bool((batch["next", "reward"] == -1.0).all())


@pytest.mark.parametrize("n_step", [1, 3])
def test_num_goals_zero_serves_the_base_sampler_s_batch(n_step):
    # no goal drawn: the base's draws, index and entries, and an empty "her" the
    # transform passes on; num_goals may be raised afterwards
    kw = {"n_step": n_step, "gamma": 0.9}
    her = make_her_replay_buffer(200, reward, num_goals=0, batch_size=8, seed=0, **kw)
    plain = make_replay_buffer(200, batch_size=8, seed=0, **kw)
    for rb in (her, plain):
        rb.extend(episodes_td([[4, 4], [5, 3]]))
    for _ in range(3):
        batch, expected = her.sample(), plain.sample()
        assert "her" not in batch.keys()
        assert (batch == expected).all()  # "index" included: the base's ([8] rows, or [8, 2] windows)
    index, _ = her.sampler.sample(her.storage, 8)
    raw = her.storage.get(index)
    assert raw["her"].batch_size == (8,) and not list(raw["her"].keys())
    her.sampler.num_goals = 4
    assert her.sample()["index"].shape == (8, 3)


def test_random_strategy_draws_any_live_transition():
    rb = make_her_replay_buffer(200, reward, strategy="random", num_goals=4, batch_size=15, seed=0)
    rb.extend(episodes_td([[4, 4], [4, 4]]))
    goals = {decode(g)[:2] for _ in range(30) for *_, g in relabelled(rb.sample(), 12)}
    assert goals == {(0, 0), (0, 1), (1, 0), (1, 1)}


def test_running_episode_goals_stop_at_last_written_step():
    rb = make_her_replay_buffer(200, reward, strategy="final", num_goals=1, batch_size=4, seed=0)
    td = episodes_td([[6]])
    td["next", "done"][:] = False
    td["next", "terminated"][:] = False
    rb.extend(td[:, :4])
    assert {decode(g)[2] for *_, g in relabelled(rb.sample(), 2)} == {3}
    rb.extend(td[:, 4:])
    assert {decode(g)[2] for *_, g in relabelled(rb.sample(), 2)} == {5}


@given(st.integers(0, 3), st.sampled_from(["future", "final", "episode"]), st.integers(0, 10**6))
def test_goals_never_cross_episodes_or_overwritten_rows(writes, strategy, seed):
    # 2 envs, 9-row rings: episodes wrap the seam and their first rows get evicted
    rb = make_her_replay_buffer(18, reward, strategy=strategy, num_goals=4, batch_size=5, seed=seed)
    for w in range(writes + 2):
        rb.extend(episodes_td([[3, 2], [1, 4]], episode0=2 * w))
    index = rb.storage.index
    lo = index.live_start()
    for _ in range(10):
        batch = rb.sample()
        for env, ep, step, goal in relabelled(batch, 4):
            g_env, g_ep, g_step = decode(goal)
            assert (g_env, g_ep) == (env, ep)
            if strategy == "future":
                assert g_step >= step
    # the goal rows are live: every goal is the achieved goal of a live transition
    live = rb.storage.get(slice(None))
    stored = set(live["next", "achieved_goal"][:, 0].tolist())
    for _ in range(5):
        assert {g for *_, g in relabelled(rb.sample(), 4)} <= stored
    assert lo.shape == (2,)


def test_her_with_nstep_recomputes_every_window_reward():
    rb = make_her_replay_buffer(200, reward, strategy="final", num_goals=1, n_step=3,
                                gamma=0.5, batch_size=6, seed=0)
    rb.extend(episodes_td([[6]]))
    for _ in range(10):
        batch = rb.sample()
        for row in range(3, 6):  # relabelled with the final goal (step 5)
            step = int(batch["observation"][row, 2])
            k = int(batch["steps_to_next_obs"][row])
            rewards = [0.0 if step + i == 5 else -1.0 for i in range(k)]
            expected = sum(0.5**i * r for i, r in enumerate(rewards))
            assert float(batch["next", "reward"][row]) == pytest.approx(expected)


def test_terminated_fn_recomputes_relabelled_termination():
    def reached(a, d, infos):
        return (a == d).all(-1)

    rb = make_her_replay_buffer(200, reward, strategy="future", num_goals=5, batch_size=6,
                                terminated_fn=reached, seed=0)
    rb.extend(episodes_td([[6]]))
    for _ in range(10):
        batch = rb.sample()
        success = batch["next", "reward"][1:].view(-1) == 0
        assert torch.equal(batch["next", "terminated"][1:].view(-1), success)
        assert torch.equal(batch["next", "done"][1:].view(-1), success)


def test_reward_fn_shapes_and_errors():
    for fn in (reward, lambda a, d, i: reward(a, d, i).unsqueeze(-1)):
        rb = make_her_replay_buffer(100, fn, batch_size=5, seed=0)
        rb.extend(episodes_td([[5]]))
        assert rb.sample()["next", "reward"].shape == (5, 1)
    rb = make_her_replay_buffer(100, lambda a, d, i: torch.zeros(3), batch_size=5, seed=0)
    rb.extend(episodes_td([[5]]))
    with pytest.raises(ValueError, match=r"reward_fn returned shape \(3,\) for 4 goals; expected \(4,\) or \(4, 1\)"):
        rb.sample()


@pytest.mark.parametrize("view", [lambda x: x[::-1], lambda x: np.broadcast_to(x[:1], x.shape)])
def test_reward_fn_may_return_a_numpy_view(view):
    # a reversed view was refused ("expected a float tensor (or numpy array)"), and a broadcast
    # (read-only) one made torch warn that it is not writable
    def fn(achieved, desired, infos):
        return view(-(achieved != desired).any(-1).numpy().astype(np.float32))

    rb = make_her_replay_buffer(100, fn, batch_size=5, seed=0)
    rb.extend(episodes_td([[5]]))
    assert rb.sample()["next", "reward"].shape == (5, 1)


@pytest.mark.parametrize("result, shown", [(None, "None (NoneType)"), ("-1", "'-1' (str)")])
def test_reward_fn_returning_no_tensor_is_refused_naming_it(result, shown):
    """reward_fn returning None failed inside torch ('Could not infer dtype of NoneType')."""
    rb = make_her_replay_buffer(100, lambda a, d, i: result, batch_size=5, seed=0)
    rb.extend(episodes_td([[5]]))
    with pytest.raises(TypeError, match=rf"HindsightTransform: reward_fn returned {re.escape(shown)}, expected a "
                                        r"float tensor \(or numpy array\) of shape \(4,\) or \(4, 1\)"):
        rb.sample()


def test_terminated_fn_results_are_checked_naming_it():
    """A terminated_fn result of the wrong shape failed in torch ('The size of tensor a (7) must
    match the size of tensor b (6)'), None in torch.as_tensor, and 0.5 was read as True."""
    def build(fn):
        rb = make_her_replay_buffer(100, reward, batch_size=5, terminated_fn=fn, seed=0)
        rb.extend(episodes_td([[5]]))
        return rb
    rb = build(lambda a, d, i: torch.ones(a.shape[0] + 1, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"HindsightTransform: terminated_fn returned shape \(5,\) for 4 goals; "
                                         r"expected \(4,\) or \(4, 1\): one flag per"):
        rb.sample()
    with pytest.raises(TypeError, match=r"HindsightTransform: terminated_fn returned None \(NoneType\), expected "
                                        r"a bool tensor"):
        build(lambda a, d, i: None).sample()
    with pytest.raises(ValueError, match=r"HindsightTransform: terminated_fn returned 0.5 \(dtype torch.float32\), "
                                         r"expected bools \(or numbers 0 / 1\)"):
        build(lambda a, d, i: torch.full((a.shape[0],), 0.5)).sample()
    for fn in (lambda a, d, i: (a == d).all(-1).float(), lambda a, d, i: (a == d).all(-1, keepdim=True)):
        assert build(fn).sample()["next", "terminated"].dtype == torch.bool  # 0 / 1 and (n, 1) are flags


def test_argument_errors():
    with pytest.raises(ValueError, match="strategy='later', expected one of"):
        HindsightSampler("later")
    with pytest.raises(ValueError, match="num_goals=-1, expected an int >= 0"):
        HindsightSampler(num_goals=-1)


def test_strategy_and_num_goals_set_between_samples_are_checked_like_the_constructor_s():
    # a plain string set after construction was compared by identity with the
    # enum members and silently served as "episode"
    rb = make_her_replay_buffer(100, reward, batch_size=8, seed=0)
    rb.extend(episodes_td([[5]]))
    rb.sampler.strategy = "final"
    assert rb.sampler.strategy is HindsightStrategy.FINAL
    # final: every relabelled goal is the episode's last achieved goal
    goals = {goal for *_, goal in relabelled(rb.sample(), rb.sampler.n_virtual(8))}
    assert goals == {goal_code(0, 0, 4)}
    with pytest.raises(ValueError, match="strategy='last', expected one of"):
        rb.sampler.strategy = "last"
    with pytest.raises(TypeError, match=r"num_goals=2.5 \(float\), expected an int >= 0"):
        rb.sampler.num_goals = 2.5
    with pytest.raises(TypeError, match="reward_fn is int, expected a callable"):
        HindsightTransform(3)


def test_her_nstep_and_prioritized_compose():
    from torchrl_ext.samplers import PrioritizedTransitionSampler

    rb = make_her_replay_buffer(200, reward, strategy="future", num_goals=1, n_step=2,
                                sampler=PrioritizedTransitionSampler(alpha=1.0), batch_size=8, seed=0)
    rb.extend(episodes_td([[6, 6]]))
    batch = rb.sample()
    assert batch["index"].shape == (8, 3) and batch["priority_weight"].shape == (8,)
    rows = rb.storage.live_transition_rows()
    td_error = torch.full((rows.numel(),), 1e-4)
    td_error[3] = 10.0  # step 3 of the first episode
    rb.update_priority(rows, td_error)
    batch.set("td_error", torch.ones(8))
    rb.update_tensordict_priority(batch)  # the [B, 3] index of a HER sample is accepted
    rb.update_priority(rows, td_error)
    draws = torch.cat([rb.sample()["observation"] for _ in range(10)])
    hits = ((draws[:, 1] == 0) & (draws[:, 2] == 3)).float().mean()
    assert float(hits) > 0.9


@pytest.mark.parametrize("goal_shape", [(1,), (2,), (1, 2, 2)])
def test_frame_stacked_goals_get_the_relabelled_goal_in_every_frame(goal_shape):
    # make_her_replay_buffer(..., n_frames=F) stacks every observation entry,
    # the goals too; relabelling wrote a [V, *goal] goal into the [V, F, *goal]
    # (or channel-stacked [V, F * C, H, W]) entry and failed with a shape mismatch
    T, F = 6, 3
    rb = make_her_replay_buffer(64, lambda a, d, i: -(a != d).flatten(1).any(-1).float(),
                                strategy="final", num_goals=1, n_frames=F, batch_size=8, seed=0)
    td = episodes_td([[T]])
    for key in ("achieved_goal", "desired_goal", ("next", "achieved_goal"), ("next", "desired_goal")):
        td.set(key, td.get(key).view(1, T, *(1,) * len(goal_shape)).expand(1, T, *goal_shape).clone())
    rb.extend(td)
    batch = rb.sample()
    final = torch.full(goal_shape, goal_code(0, 0, T - 1))
    stacked = batch["desired_goal"]
    frames = stacked.unflatten(1, (F, goal_shape[0])) if len(goal_shape) == 3 else stacked
    assert frames.shape == (8, F, *goal_shape)
    assert bool((frames[:4] == -5.0).all())  # real rows keep the stored goal in every frame
    assert bool((frames[4:] == final).all())  # relabelled rows: the final goal in every frame
    assert torch.equal(batch["next", "desired_goal"], stacked)
    reached = batch["observation"][4:, -1, 2] == T - 1  # the last step reaches the final goal
    assert torch.equal(batch["next", "reward"][4:, 0], torch.where(reached, 0.0, -1.0))


@pytest.mark.parametrize("discount_key", [None, "discount"])
def test_frame_stacked_one_step_transitions_get_the_relabelled_reward(discount_key):
    # under frame stacks, one-step hindsight windows are read as windows (for each
    # step's own next achieved goal); with n_step=1 and discount_key=None no
    # NStepTransform folded them back: relabelled rows kept the stored reward and
    # the batch an "n_step" entry
    T = 6
    rb = make_her_replay_buffer(64, reward, strategy="final", num_goals=1, n_frames=2,
                                discount_key=discount_key, batch_size=8, seed=0)
    plain = make_her_replay_buffer(64, reward, strategy="final", num_goals=1,
                                   discount_key=discount_key, batch_size=8, seed=0)
    for buffer in (rb, plain):
        buffer.extend(episodes_td([[T]]))
    batch = rb.sample()
    reached = batch["observation"][4:, -1, 2] == T - 1  # the last step reaches the final goal
    assert torch.equal(batch["next", "reward"][4:, 0], torch.where(reached, 0.0, -1.0))
    assert bool((batch["next", "reward"][:4] == -1.0).all())  # real rows: as stored
    assert set(batch.keys(True, True)) == set(plain.sample().keys(True, True))


@pytest.mark.parametrize("name, key, n, where", [
    ("goal_key", "target", 1, "sampled observation entries"),
    ("achieved_goal_key", "target", 1, "sampled observation entries"),
    ("reward_key", ("next", "score"), 1, "sampled transitions"),  # one-step windows: transitions
    ("reward_key", ("next", "score"), 2, "'n_step' windows"),
])
def test_a_key_the_batch_does_not_hold_is_named(name, key, n, where):
    # a goal_key or achieved_goal_key the data does not hold failed with
    # "'NoneType' object has no attribute 'clone'" (or "is not subscriptable"),
    # a reward_key with "... has no attribute 'clone'"
    rb = make_replay_buffer(100, sampler=HindsightSampler(num_goals=4, base=NStepSampler(n)),
                            transform=HindsightTransform(reward, **{name: key}), batch_size=5, seed=0)
    rb.extend(episodes_td([[5]]))
    with pytest.raises(KeyError, match=rf"HindsightTransform: {name}={re.escape(repr(key))} is not "
                       rf"among the {where} \(held: .*'(achieved_goal|reward)'.*\); pass {name}="):
        rb.sample()


@pytest.mark.parametrize("n_step, where", [(1, "the sampled transitions"), (3, "the 'n_step' windows")])
def test_a_reward_key_the_batch_does_not_hold_is_named(n_step, where):
    # one-step windows are relabelled as transitions ([B, ...] entries), wider ones as windows
    sampler = HindsightSampler("future", num_goals=4, base=NStepSampler(n_step))
    rb = make_replay_buffer(100, sampler=sampler, batch_size=5, seed=0,
                            transform=HindsightTransform(reward, reward_key=("next", "score")))
    rb.extend(episodes_td([[5]]))
    with pytest.raises(KeyError, match=rf"HindsightTransform: reward_key=\('next', 'score'\) is not among "
                       rf"{where} \(held: .*'reward'.*\); pass reward_key="):
        rb.sample()
