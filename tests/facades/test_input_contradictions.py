"""Issue 13's input classes, met as a user meets them: real gymnasium vector envs, resets by hand.

Each test is named after its class: unseen resets, autoreset mode
contradictions, HER infos, inputs contradicting the spaces, problems caught
where the key is known, constructor arguments, non-finite values, and issue
17's spellings of the modes and final-observation keys.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode as GymMode

from torchrl_ext import HerReplayStorage, NStepReplayStorage, make_replay_buffer
from torchrl_ext.envs import AutoresetMode, GymVectorAdapter

N = 2


def cartpole(mode=GymMode.NEXT_STEP, n=N):
    return gym.make_vec("CartPole-v1", num_envs=n, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": mode})


def nstep(n=N, **kw):
    env = cartpole(n=n)
    args = dict(num_envs=n, batch_size=64, num_workers=0, n_step=1, seed=0, storage_size=4000)
    args.update(kw)
    store = NStepReplayStorage(env.single_observation_space, env.single_action_space, **args)
    env.close()
    return store


def play(env, store, steps, seed=0, reset_at=(), reset_mask=None):
    """Random steps; at the steps in ``reset_at`` call ``env.reset`` by hand (all envs,
    or ``reset_mask``'s). Returns the real (obs, next_obs) pairs of every stored step."""
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    real, resetting = set(), np.zeros(env.num_envs, bool)
    for t in range(steps):
        if t in reset_at:
            options = None if reset_mask is None else {"reset_mask": reset_mask}
            fresh, _ = env.reset(seed=seed + t, options=options)
            resetting[:] = False if reset_mask is None else resetting & ~reset_mask
            obs = fresh
        action = env.action_space.sample()
        nxt, reward, term, trunc, infos = env.step(action)
        store.add(obs, action, reward, term, trunc, infos, nxt)
        for i in range(env.num_envs):
            if not resetting[i]:
                real.add((tuple(np.float32(obs[i]).tolist()), tuple(np.float32(nxt[i]).tolist())))
        resetting = term | trunc
        obs = nxt
    return real


def stored_pairs(store):
    pairs = set()
    for _ in range(40):
        b = store.sample()
        for o, x in zip(b.observations.tolist(), b.next_observations.tolist()):
            pairs.add((tuple(o), tuple(x)))
    return pairs


# ------------------------------------------------------------ 1. unseen resets
@pytest.mark.parametrize("mask", [None, np.array([True, False])])
def test_unseen_reset_opens_a_new_episode_in_nstep_storage(mask):
    env, store = cartpole(), nstep()
    real = play(env, store, 60, reset_at=(7, 20, 33), reset_mask=mask)
    env.close()
    # every sampled transition happened; none goes from an old episode's
    # observation to the reset episode's (the glued step)
    assert stored_pairs(store) <= real
    assert len(store) == len(real)


@pytest.mark.parametrize("mode", [GymMode.SAME_STEP, GymMode.NEXT_STEP])
def test_unseen_reset_after_an_episode_end_keeps_the_real_step(mode):
    """NEXT_STEP: a reset by hand right after a done clears gymnasium's pending reset,
    so the next step is a real transition, not the (dropped) reset step."""
    env = cartpole(mode)
    store = nstep(autoreset_mode=mode.value)
    env.action_space.seed(1)
    obs, _ = env.reset(seed=1)
    while True:
        action = env.action_space.sample()
        nxt, reward, term, trunc, infos = env.step(action)
        store.add(obs, action, reward, term, trunc, infos, nxt)
        obs = nxt
        if (term | trunc).any():
            break
    before = len(store)
    obs, _ = env.reset(seed=5)
    nxt, reward, term, trunc, infos = env.step(env.action_space.sample())
    store.add(obs, np.zeros(N, np.int64), reward, term, trunc, infos, nxt)
    env.close()
    assert len(store) == before + N


def test_unseen_reset_in_her_storage_and_the_adapter():
    bits = gym.spaces.MultiBinary(2)
    space = gym.spaces.Dict(observation=bits, achieved_goal=bits, desired_goal=bits)
    store = HerReplayStorage(space, gym.spaces.Discrete(2), storage_size=100, batch_size=8,
                             num_goals=1, goal_selection_strategy="final", seed=0)

    def o(x):
        state = np.array([[x, 0]], np.int8)
        return dict(observation=state, achieved_goal=state, desired_goal=np.array([[0, 1]], np.int8))
    for obs, nxt in ((0, 1), (1, 0), (1, 1)):  # the third step starts after a reset by hand
        store.add(o(obs), np.array([0]), np.array([-1.0]), np.array([False]),
                  np.array([False]), {}, o(nxt))
    pairs = set()
    for _ in range(30):
        b = store.sample()
        pairs |= {(tuple(x), tuple(g)) for x, g in zip(b.observations["observation"].tolist(),
                                                       b.observations["desired_goal"].tolist())}
    # episode 1 (obs [0, 0], [1, 0]) ends with achieved [0, 0]; episode 2 (obs [1, 0]) with
    # [1, 0]. Glued, the third step would observe [0, 0] and relabel episode 1 with [1, 0].
    assert ((0, 0), (1, 0)) not in pairs
    assert {((0, 0), (0, 0)), ((1, 0), (0, 0)), ((1, 0), (1, 0))} <= pairs
    adapter, rb = GymVectorAdapter(1), make_replay_buffer(16)
    flags = (np.zeros(1), np.zeros(1, bool), np.zeros(1, bool), {})
    rb.extend(adapter.step(np.zeros((1, 2)), np.zeros(1), *flags, np.ones((1, 2))))
    with pytest.raises(ValueError, match=r"env\(s\) \[0\] is not their previous step's next "
                                         r"observation.*Call adapter.reset\(rb\)"):
        adapter.step(np.zeros((1, 2)), np.zeros(1), *flags, np.ones((1, 2)))
    adapter.reset(rb)  # after env.reset(): the episode ends in rb, the next step opens one
    rb.extend(adapter.step(np.zeros((1, 2)), np.zeros(1), *flags, np.ones((1, 2))))
    assert rb.storage.index.episode_count.tolist() == [2]


# ----------------------------------------------------------- 2. autoreset mode
def test_autoreset_mode_contradiction_same_step_env_declared_next_step():
    env, store = cartpole(GymMode.SAME_STEP), nstep()
    with pytest.raises(ValueError, match=r"autoreset_mode is NEXT_STEP, but the infos of an "
                                         r"episode end carry \['final_obs', 'final_info'\].*"
                                         r"autoreset_mode='same_step'"):
        play(env, store, 500)
    env.close()


def test_autoreset_mode_contradiction_next_step_env_declared_same_step():
    env, store = cartpole(GymMode.NEXT_STEP), nstep(autoreset_mode="same_step")
    with pytest.raises(ValueError, match=r"env \d is done but infos has no final observation.*"
                                         r"autoreset_mode='next_step'"):
        play(env, store, 500)
    env.close()


@pytest.mark.parametrize("mode", [None, "disabled"])
def test_autoreset_mode_contradiction_sb3_vec_env_infos_declared_next_step(mode):
    """An SB3 VecEnv's step (per-env info dicts, the final observation in
    ``infos[i]["terminal_observation"]``, the reset observation returned) was taken
    as a NEXT_STEP step: the reset observation became the final one and the next
    episode's first step was dropped as a reset step (DISABLED: kept, the same
    wrong final observation)."""
    store = nstep(n=2, autoreset_mode=mode)
    obs = lambda v: np.full((2, 4), v, np.float32)
    store.add(obs(0), np.zeros(2, np.int64), np.ones(2), np.zeros(2, bool), np.zeros(2, bool),
              [{}, {}], obs(1))
    infos = [{}, {"terminal_observation": np.full(4, 2.0, np.float32), "TimeLimit.truncated": False}]
    with pytest.raises(ValueError, match=r"autoreset_mode is (NEXT_STEP|DISABLED), but the infos of "
                                         r"an episode end carry \['terminal_observation'\] "
                                         r"\(infos\[1\]\).*autoreset_mode='legacy'"):
        store.add(obs(1), np.zeros(2, np.int64), np.ones(2), np.array([False, True]),
                  np.zeros(2, bool), infos, obs(50))
    assert len(store) == 2


# ---------------------------------------------------- 8. modes users write (#17)
@pytest.mark.parametrize("name", ["same_step", "SameStep", "SAME_STEP", "samestep",
                                  AutoresetMode.SAME_STEP, GymMode.SAME_STEP])
def test_autoreset_mode_spellings_and_gymnasium_029_final_observation(name):
    """gymnasium 0.26-0.29: ``final_observation`` / ``final_info`` object arrays."""
    store = nstep(n=2, autoreset_mode=name, n_step=1, batch_size=8)
    final = np.full((2, 4), 9.0, np.float32)
    for t in range(3):
        done = np.array([t == 2, False])
        infos = {}
        if done.any():
            infos = {"final_observation": np.array([final[0], None], dtype=object),
                     "_final_observation": done,
                     "final_info": np.array([{}, None], dtype=object), "_final_info": done}
        store.add(np.full((2, 4), t, np.float32), np.zeros(2, np.int64), np.ones(2), done,
                  np.zeros(2, bool), infos, np.full((2, 4), t + 1, np.float32))
    nexts = {x[0] for _ in range(10) for x in store.sample().next_observations.tolist()}
    assert nexts == {1.0, 2.0, 3.0, 9.0}  # env 0's last step ends in its final observation
    with pytest.raises(ValueError, match=r"autoreset_mode='same-steps', expected one of "
                                         r"\['NextStep', 'SameStep', 'Disabled', 'Legacy'\]"):
        GymVectorAdapter(2, autoreset_mode="same-steps")


# ------------------------------------------------------------------ 3. HER infos
def test_her_infos_final_info_and_keys_declared_later():
    """SAME_STEP: reward_fn gets each episode's last step's final_info, not the reset info."""
    seen = []

    def reward_fn(achieved, desired, infos):
        seen.append(infos)
        return (achieved != desired).any(-1) * -1.0

    box = gym.spaces.Box(0, 100, (1,), np.float32)
    space = gym.spaces.Dict(observation=box, achieved_goal=box, desired_goal=box)
    store = HerReplayStorage(space, gym.spaces.Discrete(2), storage_size=100, num_envs=1,
                             batch_size=16, num_goals=3, goal_selection_strategy="final",
                             reward_fn=reward_fn, copy_info_dict=True, autoreset_mode="same_step",
                             info_keys=["dist"], seed=0)

    def o(x):
        v = np.array([[x]], np.float32)
        return dict(observation=v, achieved_goal=v, desired_goal=v + 50)
    for t in range(6):
        done = np.array([t == 5])
        infos = {} if t == 0 else {"dist": np.array([float(t)])}  # the first add has none
        nxt = o(t + 1)
        if done[0]:  # the reset step's info, and the true last step's in final_info
            final = {k: v[0] for k, v in o(6).items()}  # one env's observation, as gymnasium's
            infos = {"dist": np.array([-1.0]), "final_obs": np.array([final], dtype=object),
                     "_final_obs": done, "final_info": {"dist": np.array([5.0])},
                     "_final_info": done}
            nxt = o(100)
        store.add(o(t), np.array([0]), np.array([-1.0]), done, np.array([False]), infos, nxt)
    store.sample()
    dists = [float(row["dist"]) for rows in seen for row in rows]
    assert set(dists) <= {0.0, 1.0, 2.0, 3.0, 4.0, 5.0} and 5.0 in dists
    with pytest.warns(UserWarning, match=r"infos carry \['late'\].*info_keys=\['late'\]"):
        store.add(o(100), np.array([0]), np.array([-1.0]), np.array([False]),
                  np.array([False]), {"late": np.array([1.0])}, o(101))


# ------------------------------------------------ 4. inputs against the spaces
def test_space_contradiction_inputs_are_refused_not_cast():
    env = cartpole()
    store = nstep()
    obs, _ = env.reset(seed=0)
    nxt, reward, term, trunc, infos = env.step(np.zeros(N, np.int64))
    args = (reward, term, trunc, infos, nxt)
    with pytest.raises(ValueError, match=r"actions holds 0.9999999 \(env 0\), not an integer, "
                                         r"for Discrete\(2\)"):
        store.add(obs, np.array([0.9999999, 1.0]), *args)
    with pytest.raises(ValueError, match=r"actions holds values in \[0, 2\], outside Discrete\(2\)"):
        store.add(obs, np.array([0, 2]), *args)
    with pytest.raises(ValueError, match=r"observations has shape \(2, 5\), expected \(2, 4\)"):
        store.add(np.zeros((2, 5), np.float32), np.zeros(N, np.int64), *args)
    env.close()
    pair = gym.spaces.Tuple((gym.spaces.Box(0, 1, (3,)), gym.spaces.Box(0, 1, (3,))))
    with pytest.raises(TypeError, match=r"observations.*is a Tuple space, which is not "
                                        r"supported.*Use a Dict space"):
        NStepReplayStorage(pair, gym.spaces.Discrete(2), num_envs=2, num_workers=0)
    with pytest.raises(TypeError, match=r"n_step=2.5 \(float\), expected an int >= 1"):
        NStepReplayStorage(env.single_observation_space, gym.spaces.Discrete(2), n_step=2.5)
    bits = gym.spaces.MultiBinary(2)
    goals = gym.spaces.Dict(observation=bits, achieved_goal=bits, desired_goal=bits)
    with pytest.raises(TypeError, match=r"num_goals=2.0 \(float\), expected an int >= 0"):
        HerReplayStorage(goals, gym.spaces.Discrete(2), num_goals=2.0)


@pytest.mark.parametrize("bad", [np.array([[300, 1]]), np.array([[-1.0, 2.0]]), torch.tensor([[256, 3]]),
                                 np.array([[np.inf, 0.0]])], ids=["int64", "float", "tensor", "inf"])
def test_integer_values_outside_the_space_dtype_are_refused_not_wrapped(bad):
    """uint8 pixels given as int64 / float values past 255 (or below 0) wrapped around
    (300 was stored as 44); an int8 MultiBinary goal of 200 became -56."""
    store = NStepReplayStorage(gym.spaces.Box(0, 255, (2,), np.uint8), gym.spaces.Discrete(2),
                               storage_size=100, num_envs=1, num_workers=0)
    fine = np.zeros((1, 2), np.uint8)
    for obs, nxt, name in ((bad, fine, "observations"), (fine, bad, "next_observations")):
        with pytest.raises(ValueError, match=rf"^NStepReplayStorage.add: {name} holds values in "
                                             r"\[.*\], outside uint8's \[0, 255\] \(the dtype of "
                                             r"Box\(0, 255, \(2,\), uint8\)\); they would wrap around"):
            store.add(obs, np.zeros(1, np.int64), [0.0], [False], [False], {}, nxt)
    assert len(store) == 0
    bits = gym.spaces.Dict(observation=gym.spaces.MultiBinary(2), achieved_goal=gym.spaces.MultiBinary(2),
                           desired_goal=gym.spaces.MultiBinary(2))
    her = HerReplayStorage(bits, gym.spaces.Discrete(2), storage_size=100)
    goal = {k: np.zeros((1, 2), np.int64) for k in bits.spaces}
    with pytest.raises(ValueError, match=r"observations\['desired_goal'\] holds values in \[0, 200\], "
                                         r"outside int8's \[-128, 127\]"):
        her.add({**goal, "desired_goal": np.array([[200, 0]])}, np.zeros(1, np.int64), [0.0],
                [False], [False], {}, goal)


def test_flags_that_are_not_0_or_1_are_refused_not_cast():
    """A termination of 0.5, 2 or NaN is not a flag: it was stored as True."""
    env = cartpole()
    store = nstep()
    obs, _ = env.reset(seed=0)
    nxt, reward, term, trunc, infos = env.step(np.zeros(N, np.int64))
    action = np.zeros(N, np.int64)
    store.add(obs, action, reward, term, trunc, infos, nxt)  # lays the held steps out
    for bad in (np.array([0.5, 0.0]), np.array([2, 0]), np.array([np.nan, 0.0])):
        with pytest.raises(ValueError, match=r"terminated holds .*, expected booleans or 0 / 1"):
            store.add(nxt, action, reward, bad, trunc, infos, nxt)
    with pytest.raises(ValueError, match=r"truncated holds \['no', 'yes'\], expected booleans or 0 / 1"):
        store.add(nxt, action, reward, term, np.array(["no", "yes"]), infos, nxt)
    store.add(nxt, action, reward, np.array([0.0, 1.0]), np.array([0, 0]), infos, nxt)  # 0 / 1 numbers
    assert len(store) == 2 * N
    assert store.rb.storage.get(slice(None))["next", "terminated"].view(-1).tolist().count(True) == 1
    env.close()


def test_space_contradiction_dict_keys_and_goal_shapes_caught_at_add():
    """Goals of another shape, keys missing from the space, obs / next obs with other keys,
    data without goals: each at the add, naming the key."""
    bits = gym.spaces.MultiBinary(2)
    goals = gym.spaces.Dict(observation=bits, achieved_goal=bits, desired_goal=bits)
    store = HerReplayStorage(goals, gym.spaces.Discrete(2), storage_size=50, batch_size=2)
    full = {k: np.zeros((1, 2), np.int8) for k in goals.spaces}
    flags = (np.array([0]), np.array([-1.0]), np.array([False]), np.array([False]), {})
    store.add(full, *flags, full)
    with pytest.raises(ValueError, match=r"observations\['desired_goal'\] has shape \(1, 3\), "
                                         r"expected \(1, 2\)"):
        store.add({**full, "desired_goal": np.zeros((1, 3), np.int8)}, *flags, full)
    no_goal = {"observation": full["observation"]}
    with pytest.raises(KeyError, match=r"observations has keys \['observation'\], expected .*"
                                       r"missing \['achieved_goal', 'desired_goal'\]"):
        store.add(no_goal, *flags, no_goal)
    with pytest.raises(KeyError, match=r"next_observations has keys .* not in the space \['extra'\]"):
        store.add(full, *flags, {**full, "extra": np.zeros((1, 2), np.int8)})
    assert len(store) == 1  # nothing half-written


# ------------------------------------------------------------ 7. non-finite values
def test_non_finite_reward_raises_naming_env_and_step():
    env, store = cartpole(), nstep()
    obs, _ = env.reset(seed=0)
    for t in range(3):
        nxt, reward, term, trunc, infos = env.step(np.zeros(N, np.int64))
        if t == 2:
            reward = reward.copy()
            reward[1] = np.nan
            with pytest.raises(ValueError, match=r"step 2\): \('next', 'reward'\) of env 1 is "
                                                 r"nan.*check_finite=False.*That step and the 0 "
                                                 r"added after it were not stored"):
                store.add(obs, np.zeros(N, np.int64), reward, term, trunc, infos, nxt)
                len(store)  # steps are written (and checked) a chunk at a time, at the latest on a read
        else:
            store.add(obs, np.zeros(N, np.int64), reward, term, trunc, infos, nxt)
        obs = nxt
    assert len(store) == 2 * N  # the steps before it
    loose = nstep(check_finite=False)
    loose.add(obs, np.zeros(N, np.int64), np.array([np.nan, 0.0]), np.zeros(N, bool),
              np.zeros(N, bool), {}, obs + 1)
    assert len(loose) == N
    env.close()


# ------------------------------------------------------- 6. constructor arguments
@pytest.mark.parametrize("kwargs, error, match", [
    ({"num_envs": 0}, ValueError, r"num_envs=0, expected an int >= 1"),
    ({"num_envs": -2}, ValueError, r"num_envs=-2, expected an int >= 1"),
    ({"num_envs": "4"}, TypeError, r"num_envs='4' \(str\), expected an int >= 1"),
    ({"storage_size": 1e6}, TypeError, r"storage_size=1000000.0 \(float\)"),
    ({"batch_size": None}, TypeError, r"batch_size=None \(NoneType\)"),
    ({"num_workers": -1}, ValueError, r"num_workers=-1, expected an int >= 0"),
])
def test_constructor_out_of_range_arguments(kwargs, error, match):
    box = gym.spaces.Box(-1, 1, (2,))
    goals = gym.spaces.Dict(observation=box, achieved_goal=box, desired_goal=box)
    with pytest.raises(error, match=match):
        NStepReplayStorage(box, gym.spaces.Discrete(2), **kwargs)
    if "num_workers" not in kwargs:
        with pytest.raises(error, match=match):
            HerReplayStorage(goals, gym.spaces.Discrete(2), **kwargs)
    if "num_envs" in kwargs:
        with pytest.raises(error, match=f"GymVectorAdapter: {match}"):
            GymVectorAdapter(kwargs["num_envs"])


# ------------------------------------------------ 5. problems caught where they start
def test_late_problems_field_shape_change_mid_episode_caught_at_add_step():
    from torchrl_ext import EpisodeReplayBuffer, RingBufferDataset

    rb = EpisodeReplayBuffer(RingBufferDataset(100), batch_size=2)
    done = torch.zeros(2, dtype=torch.bool)
    for t in range(3):
        rb.add_step({"obs": torch.full((2, 3), float(t))}, done)
    with pytest.raises(ValueError, match=r"field 'obs' has shape \(4,\) per env, expected \(3,\)"):
        rb.add_step({"obs": torch.zeros(2, 4)}, done)
    with pytest.raises(TypeError, match=r"field 'obs' has dtype torch.float64, expected "
                                        r"torch.float32"):
        rb.add_step({"obs": torch.zeros(2, 3, dtype=torch.float64)}, done)
    rb.add_step({"obs": torch.full((2, 3), 3.0)}, done)
    rb.flush()  # the running episodes are whole: nothing was lost
    assert rb.dataset.episode_lengths == [4, 4]


def test_late_problems_done_none_and_string_fields():
    from torchrl_ext import EpisodeReplayBuffer, RingBufferDataset

    rb = EpisodeReplayBuffer(RingBufferDataset(100), batch_size=2)
    with pytest.raises(TypeError, match=r"done=None, expected a bool"):
        rb.add_step({"obs": torch.zeros(3)}, None)
    with pytest.raises(TypeError, match=r"field 'name' is str \('left'\), expected a tensor"):
        rb.add_step({"obs": torch.zeros(3), "name": "left"}, False)
    with pytest.raises(ValueError, match=r"batch_size=0, expected an int >= 1"):
        EpisodeReplayBuffer(RingBufferDataset(100), batch_size=0)


def test_ambiguous_single_env_step_keeps_the_rule_and_warns():
    """Issue 17: the original reads ``[4, 10]`` with a bool flag as 4 envs; here it is one
    env's step (the flag decides), said once with the fix."""
    from torchrl_ext import EpisodeReplayBuffer, RingBufferDataset

    rb = EpisodeReplayBuffer(RingBufferDataset(100), batch_size=2, sequence_length=1)
    with pytest.warns(UserWarning, match=r"stored as ONE env's step, but every field has a "
                                         r"leading dim of 4.*pass done as a \[4\] bool tensor"):
        rb.add_step({"obs": np.zeros((4, 10), np.float32)}, False)
    rb.add_step({"obs": np.zeros((4, 10), np.float32)}, True)  # once only: no second warning
    assert rb.sample()["obs"].shape == (2, 1, 4, 10)
    quiet = EpisodeReplayBuffer(RingBufferDataset(100), batch_size=2)
    quiet.add_step({"image": torch.zeros(8, 8, 3), "reward": torch.tensor(0.0)}, False)


def test_constructor_out_of_range_arguments_of_the_builders():
    from torchrl_ext import make_her_replay_buffer

    with pytest.raises(TypeError, match=r"make_replay_buffer: n_step=2.5 \(float\), expected an "
                                        r"int >= 1"):
        make_replay_buffer(100, n_step=2.5)
    with pytest.raises(ValueError, match=r"make_replay_buffer: num_streams=0, expected an int >= 1"):
        make_replay_buffer(100, num_streams=0)
    with pytest.raises(TypeError, match=r"make_replay_buffer: capacity='1000' \(str\)"):
        make_replay_buffer("1000")
    with pytest.raises(TypeError, match=r"make_her_replay_buffer: num_goals=4.0 \(float\), "
                                        r"expected an int >= 0"):
        make_her_replay_buffer(100, lambda a, d, i: a.sum(-1), num_goals=4.0)
