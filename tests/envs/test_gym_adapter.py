"""GymVectorAdapter against real gymnasium vector envs, in every autoreset mode.

Each test drives a vector env by hand and records, next to the buffer, a slow
reference: every real transition of every sub-env, with its *true* next
observation, in a Python list per env. The buffer's live transitions must be
exactly the reference's (per stream), and samples must come from it.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Mapping

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode as GymMode

from torchrl_ext import make_replay_buffer
from torchrl_ext.envs import GymVectorAdapter
from torchrl_ext.facades._batching import StepBatcher

NUM_ENVS = 3
CARTPOLE_KEYS = ("observation",)
GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")
# CartPole terminates when |x| > 2.4 or |theta| > 12 degrees
X_LIMIT, THETA_LIMIT = 2.4, 12 * 2 * np.pi / 360


# --------------------------------------------------------------- transitions
def _flat_obs(obs: Any, keys: tuple[str, ...]) -> list[float]:
    if isinstance(obs, Mapping):
        return [v for k in keys for v in np.asarray(obs[k], np.float32).ravel().tolist()]
    return np.asarray(obs, np.float32).ravel().tolist()


def transition(obs, action, reward, next_obs, terminated, truncated, keys) -> tuple:
    """A hashable transition: obs, action, reward (float32), next obs, flags."""
    return (
        *_flat_obs(obs, keys),
        *np.asarray(action, np.float64).ravel().tolist(),
        float(np.float32(reward)),
        *_flat_obs(next_obs, keys),
        float(bool(terminated)),
        float(bool(truncated)),
    )


def stored_transitions(td, keys: tuple[str, ...]) -> list[tuple]:
    """The same tuples for a ``[B]`` TorchRL transition TensorDict."""
    n = td.shape[0]

    def cols(*entries):
        return [td.get(e).reshape(n, -1).to(torch.float64) for e in entries]

    matrix = torch.cat(
        cols(*keys)
        + cols("action", ("next", "reward"))
        + cols(*(("next", k) for k in keys))
        + cols(("next", "terminated"), ("next", "truncated")),
        dim=1,
    )
    return [tuple(row) for row in matrix.tolist()]


def _at(obs: Any, i: int) -> Any:
    if isinstance(obs, Mapping):
        return {k: v[i] for k, v in obs.items()}
    return obs[i]


class Reference:
    """Every real transition of each sub-env, in order, with its true next obs."""

    def __init__(self, num_envs: int, keys: tuple[str, ...]) -> None:
        self.keys = keys
        self.per_env: list[list[tuple]] = [[] for _ in range(num_envs)]
        self.not_transitions: list[tuple] = []  # NEXT_STEP reset steps

    def add(self, i, obs, action, reward, true_next, terminated, truncated) -> None:
        self.per_env[i].append(
            transition(obs, action, reward, true_next, terminated, truncated, self.keys)
        )

    def skip(self, obs, action, reward, next_obs, terminated, truncated) -> None:
        self.not_transitions.append(
            transition(obs, action, reward, next_obs, terminated, truncated, self.keys)
        )

    def all(self) -> Counter:
        return Counter(t for env in self.per_env for t in env)

    def episodes(self, i: int) -> int:
        """Episodes of env ``i`` with at least one transition."""
        done = [t[-1] or t[-2] for t in self.per_env[i]]
        return sum(done) + (1 if done and not done[-1] else 0)


# ------------------------------------------------------------------ drivers
def run_vector_env(env: gym.vector.VectorEnv, mode: GymMode, rb, steps: int, seed: int):
    """Step ``env`` with random actions; feed the adapter and the reference."""
    n = env.num_envs
    keys = GOAL_KEYS if isinstance(env.single_observation_space, spaces.Dict) else CARTPOLE_KEYS
    adapter = GymVectorAdapter(n, autoreset_mode=mode)
    ref = Reference(n, keys)
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    resetting = np.zeros(n, dtype=bool)  # NEXT_STEP: this step resets the sub-env
    for _ in range(steps):
        action = env.action_space.sample()
        next_obs, reward, terminated, truncated, infos = env.step(action)
        rb.extend(adapter.step(obs, action, reward, terminated, truncated, infos, next_obs))
        done = terminated | truncated
        for i in range(n):
            args = (_at(obs, i), action[i], reward[i])
            if mode is GymMode.NEXT_STEP and resetting[i]:
                # gymnasium ignored the action and returned the reset observation
                assert not done[i] and reward[i] == 0
                ref.skip(*args, _at(next_obs, i), terminated[i], truncated[i])
                continue
            true_next = _at(next_obs, i)
            if mode is GymMode.SAME_STEP and done[i]:
                assert infos["_final_obs"][i]
                true_next = infos["final_obs"][i]
            ref.add(i, *args, true_next, terminated[i], truncated[i])
        if mode is GymMode.NEXT_STEP:
            resetting = done
        if mode is GymMode.DISABLED and done.any():
            next_obs, _ = env.reset(options={"reset_mask": done})
        obs = next_obs
    env.close()
    return ref


class LegacyVecEnv:
    """A Stable-Baselines3-style VecEnv: resets inside ``step``, returns
    ``(obs, rewards, dones, infos)`` with a list of info dicts carrying
    ``"terminal_observation"`` and ``"TimeLimit.truncated"``."""

    def __init__(self, num_envs: int, max_episode_steps: int) -> None:
        self.envs = [
            gym.make("CartPole-v1", max_episode_steps=max_episode_steps) for _ in range(num_envs)
        ]
        self.num_envs = num_envs
        self.action_space = gym.vector.utils.batch_space(self.envs[0].action_space, num_envs)

    def reset(self, seed: int) -> np.ndarray:
        return np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(self.envs)])

    def step(self, actions):
        obs, rewards, dones, infos = [], [], [], []
        for env, action in zip(self.envs, actions):
            o, r, terminated, truncated, info = env.step(int(action))
            info = dict(info)
            done = terminated or truncated
            if done:
                info["terminal_observation"] = o
                info["TimeLimit.truncated"] = truncated and not terminated
                o, _ = env.reset()
            obs.append(o)
            rewards.append(r)
            dones.append(done)
            infos.append(info)
        return np.stack(obs), np.array(rewards), np.array(dones), infos

    def close(self) -> None:
        for env in self.envs:
            env.close()


def run_legacy(rb, steps: int, seed: int, max_episode_steps: int):
    env = LegacyVecEnv(NUM_ENVS, max_episode_steps)
    adapter = GymVectorAdapter(NUM_ENVS, autoreset_mode="Legacy")
    ref = Reference(NUM_ENVS, CARTPOLE_KEYS)
    env.action_space.seed(seed)
    obs = env.reset(seed)
    for _ in range(steps):
        action = env.action_space.sample()
        next_obs, reward, dones, infos = env.step(action)
        truncated = np.array([info.get("TimeLimit.truncated", False) for info in infos])
        terminated = dones & ~truncated
        rb.extend(adapter.step(obs, action, reward, terminated, truncated, infos, next_obs))
        for i in range(NUM_ENVS):
            true_next = infos[i]["terminal_observation"] if dones[i] else next_obs[i]
            ref.add(i, obs[i], action[i], reward[i], true_next, terminated[i], truncated[i])
        obs = next_obs
    env.close()
    return ref


def make_cartpole(mode: GymMode, max_episode_steps: int) -> gym.vector.VectorEnv:
    return gym.make_vec(
        "CartPole-v1",
        num_envs=NUM_ENVS,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": mode},
        max_episode_steps=max_episode_steps,
    )


# ------------------------------------------------------------------ checks
def per_stream_stored(rb, keys) -> list[Counter]:
    rows = torch.as_tensor(rb.storage.live_transition_rows())
    stream = torch.from_numpy(rb.storage.index.row_coordinates(rows.numpy())[1])
    stored = stored_transitions(rb.storage.get(rows), keys)
    out = [Counter() for _ in range(rb.storage.num_streams)]
    for s, t in zip(stream.tolist(), stored):
        out[s][t] += 1
    return out


def assert_matches_reference(rb, ref: Reference) -> None:
    everything = Counter(stored_transitions(rb.storage.get(slice(None)), ref.keys))
    assert everything == ref.all()
    assert len(rb) == sum(len(env) for env in ref.per_env)
    # streams never mix: stream i holds exactly env i's transitions
    for i, stored in enumerate(per_stream_stored(rb, ref.keys)):
        assert stored == Counter(ref.per_env[i]), f"stream {i}"
        assert int(rb.storage.index.episode_count[i]) == ref.episodes(i)


def assert_samples_from_reference(rb, ref: Reference, rounds: int = 4) -> None:
    per_env = [set(env) for env in ref.per_env]
    for _ in range(rounds):
        sample = rb.sample(min(256, len(rb)))
        streams = rb.storage.index.row_coordinates(sample["index"].numpy())[1].tolist()
        for s, t in zip(streams, stored_transitions(sample, ref.keys)):
            assert t in per_env[s]


def assert_true_terminal_obs(td) -> None:
    """CartPole: a terminated transition's next obs is out of bounds (not a reset obs)."""
    terminated = td["next", "terminated"].view(-1)
    final = td["next", "observation"][terminated]
    assert terminated.any()
    out = (final[:, 0].abs() > X_LIMIT) | (final[:, 2].abs() > THETA_LIMIT)
    assert out.all(), final[~out]
    # and the observations of non-terminal steps are all in bounds
    inside = td["observation"]
    assert ((inside[:, 0].abs() <= X_LIMIT) & (inside[:, 2].abs() <= THETA_LIMIT)).all()


# -------------------------------------------------------------------- tests
GYM_MODES = [GymMode.NEXT_STEP, GymMode.SAME_STEP, GymMode.DISABLED]


@pytest.mark.parametrize("mode", GYM_MODES, ids=lambda m: m.value)
def test_cartpole_vector_env_matches_reference(mode):
    rb = make_replay_buffer(10_000, seed=0)
    # a short time limit mixes truncated and terminated episodes
    ref = run_vector_env(make_cartpole(mode, max_episode_steps=25), mode, rb, steps=300, seed=1)
    flags = Counter((t[-2], t[-1]) for t in ref.all())
    assert flags[(1.0, 0.0)] > 0 and flags[(0.0, 1.0)] > 0  # both kinds of episode end
    assert_matches_reference(rb, ref)
    everything = rb.storage.get(slice(None))
    assert_true_terminal_obs(everything)
    assert (everything["next", "reward"] == 1).all()  # no reset step (reward 0) stored
    assert_samples_from_reference(rb, ref)
    if mode is GymMode.NEXT_STEP:
        assert ref.not_transitions
        stored = set(stored_transitions(everything, CARTPOLE_KEYS))
        assert stored.isdisjoint(ref.not_transitions)
    else:
        assert not ref.not_transitions


def test_truncated_next_obs_is_final_not_reset_obs():
    """A truncated step bootstraps from the true final obs; in SAME_STEP mode the
    returned obs is already the next episode's reset obs."""
    mode = GymMode.SAME_STEP
    rb = make_replay_buffer(10_000, seed=0)
    # no random CartPole episode ends by termination within 3 steps
    ref = run_vector_env(make_cartpole(mode, max_episode_steps=3), mode, rb, steps=12, seed=0)
    assert_matches_reference(rb, ref)
    td = rb.storage.get(slice(None))
    truncated = td["next", "truncated"].view(-1)
    assert int(truncated.sum()) == 4 * NUM_ENVS and not td["next", "terminated"].any()
    # every episode is 3 steps: the step after a truncation starts at a reset obs,
    # which must differ from the stored final obs
    per_env = [torch.tensor(env) for env in ref.per_env]
    for env in per_env:
        obs, next_obs = env[:, :4], env[:, -6:-2]
        assert torch.equal(next_obs[:-1][~env[:-1, -1].bool()], obs[1:][~env[:-1, -1].bool()])
        assert not (next_obs[:-1][env[:-1, -1].bool()] == obs[1:][env[:-1, -1].bool()]).all(-1).any()


def test_legacy_vec_env_matches_reference():
    rb = make_replay_buffer(10_000, seed=0)
    ref = run_legacy(rb, steps=300, seed=2, max_episode_steps=25)
    flags = Counter((t[-2], t[-1]) for t in ref.all())
    assert flags[(1.0, 0.0)] > 0 and flags[(0.0, 1.0)] > 0
    assert_matches_reference(rb, ref)
    assert_true_terminal_obs(rb.storage.get(slice(None)))
    assert_samples_from_reference(rb, ref)


def test_legacy_done_without_terminal_observation_raises():
    adapter = GymVectorAdapter(2, autoreset_mode="Legacy")
    obs = np.zeros((2, 4), np.float32)
    with pytest.raises(ValueError, match="terminal_observation"):
        adapter.step(obs, np.zeros(2), np.ones(2), np.array([False, True]),
                     np.zeros(2, bool), [{}, {}], obs)


def test_legacy_truncation_from_infos():
    adapter = GymVectorAdapter(2, autoreset_mode="Legacy")
    obs = np.zeros((2, 4), np.float32)
    final = np.ones(4, np.float32)
    infos = [{}, {"terminal_observation": final, "TimeLimit.truncated": True}]
    td = adapter.step(obs, np.zeros(2, np.int64), np.ones(2), np.array([False, True]), None, infos, obs)
    assert td["next", "truncated"].view(-1).tolist() == [False, True]
    assert td["next", "terminated"].view(-1).tolist() == [False, False]


@pytest.mark.parametrize("mode", [GymMode.NEXT_STEP, GymMode.SAME_STEP], ids=lambda m: m.value)
def test_eviction_keeps_only_reference_transitions(mode):
    capacity = NUM_ENVS * 16  # 16 rows per stream: a few episodes at most
    rb = make_replay_buffer(capacity, seed=0)
    ref = run_vector_env(make_cartpole(mode, max_episode_steps=25), mode, rb, steps=300, seed=3)
    assert sum(len(env) for env in ref.per_env) > capacity  # rows were overwritten
    assert 0 < len(rb) < capacity
    stored = per_stream_stored(rb, CARTPOLE_KEYS)
    for i, counter in enumerate(stored):
        assert counter and set(counter) <= set(ref.per_env[i]), f"stream {i}"
        # and they are the most recent ones: FIFO per stream
        recent = ref.per_env[i][-counter.total() :]
        assert counter == Counter(recent), f"stream {i}"
    assert_samples_from_reference(rb, ref)
    if mode is GymMode.NEXT_STEP:
        all_stored = set().union(*stored)
        assert all_stored.isdisjoint(ref.not_transitions)


# ------------------------------------------------------- dict observations
class GoalEnv(gym.Env):
    """A goal-conditioned toy env with a Dict observation space; each episode
    terminates after a random 3 to 7 steps."""

    metadata: dict = {"render_modes": []}

    def __init__(self) -> None:
        box = lambda n: spaces.Box(-1.0, 1.0, (n,), np.float32)  # noqa: E731
        self.observation_space = spaces.Dict(
            {"observation": box(5), "achieved_goal": box(2), "desired_goal": box(2)}
        )
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)

    def _obs(self) -> dict[str, np.ndarray]:
        rand = lambda n: self.np_random.uniform(-1, 1, n).astype(np.float32)  # noqa: E731
        return {"observation": rand(5), "achieved_goal": rand(2), "desired_goal": self._goal}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        self._length = int(self.np_random.integers(3, 8))
        self._goal = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return self._obs(), {}

    def step(self, action):
        self._t += 1
        obs = self._obs()
        reward = -float(np.linalg.norm(obs["achieved_goal"] - obs["desired_goal"]))
        return obs, reward, self._t >= self._length, False, {}


@pytest.mark.parametrize("mode", GYM_MODES, ids=lambda m: m.value)
def test_dict_observation_env(mode):
    env = gym.vector.SyncVectorEnv([GoalEnv] * NUM_ENVS, autoreset_mode=mode)
    rb = make_replay_buffer(10_000, seed=0)
    ref = run_vector_env(env, mode, rb, steps=60, seed=4)
    assert_matches_reference(rb, ref)
    assert_samples_from_reference(rb, ref)
    sample = rb.sample(64)
    shapes = {"observation": 5, "achieved_goal": 2, "desired_goal": 2}
    for key, size in shapes.items():
        assert sample[key].shape == (64, size)
        assert sample["next", key].shape == (64, size)
    leaves = set(sample.keys(include_nested=True, leaves_only=True))
    assert leaves == {
        *shapes, "action", "index",
        *(("next", k) for k in (*shapes, "reward", "terminated", "truncated", "done")),
    }
    # the goal is constant within an episode, so it must not change across a
    # stored transition unless the step ended the episode
    same_goal = (sample["desired_goal"] == sample["next", "desired_goal"]).all(-1)
    assert same_goal[~sample["next", "done"].view(-1)].all()
    # episodes last 3-7 steps: every stream saw several terminations
    assert (rb.storage.index.episode_count >= 60 // 7).all()


def _one_env_step(t: int, reward: float = 1.0) -> tuple:
    """Step ``t`` of a one-env episode: observation ``t``, next observation ``t + 1``."""
    flag = np.zeros(1, bool)
    return (np.array([[float(t)]], np.float32), np.zeros((1, 1), np.float32),
            np.array([reward], np.float32), flag, flag, {}, np.array([[float(t + 1)]], np.float32))


def test_a_step_refused_as_non_finite_is_never_glued_over():
    """After a NaN step (not stored), the step that follows it is an unseen reset, not a continuation.

    Otherwise the buffer, which never saw the refused step, would continue its
    episode with the next one and store it under the last stored next observation.
    """
    rb, adapter = make_replay_buffer(100, seed=0), GymVectorAdapter(1)
    for t in range(3):
        rb.extend(adapter.step(*_one_env_step(t)))
    with pytest.raises(ValueError, match=r"\(step 3\): \('next', 'reward'\) of env 0 is nan"):
        adapter.step(*_one_env_step(3, reward=np.nan))
    with pytest.raises(ValueError, match=r"the observation of env\(s\) \[0\] is not their previous "
                                         r"step's next observation"):
        adapter.step(*_one_env_step(4))
    adapter.reset(rb)  # as the message says
    rb.extend(adapter.step(*_one_env_step(4)))
    td = rb[:]
    pairs = list(zip(td["observation"][:, 0].tolist(), td["next", "observation"][:, 0].tolist()))
    assert sorted(pairs) == [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0), (4.0, 5.0)]
    assert rb.storage.index.episode_count.tolist() == [2]


def test_the_reset_step_after_a_refused_episode_end_is_left_out_by_a_facade():
    """NEXT_STEP, steps held in chunks (the facades): a refused step that ends the episode
    is still followed by the env's reset step (the final observation again, the action
    ignored); it was stored as a transition (3 -> 100), and an n-step window ran on
    across it into the next episode."""
    rb, adapter = make_replay_buffer(100, n_step=2, seed=0), GymVectorAdapter(1)
    batcher = StepBatcher(rb, adapter, chunk=8)

    def one(obs, nxt, reward=1.0, terminated=False):
        return (np.array([[obs]], np.float32), np.zeros((1, 1), np.float32), np.array([reward], np.float32),
                np.array([terminated]), np.zeros(1, bool), {}, np.array([[nxt]], np.float32))

    batcher.add(*one(0.0, 1.0))
    batcher.add(*one(1.0, 2.0, reward=np.nan))
    batcher.add(*one(2.0, 3.0, terminated=True))
    with pytest.raises(ValueError, match=r"\(step 1\): \('next', 'reward'\) of env 0 is nan"):
        batcher.flush()
    batcher.add(*one(3.0, 100.0, reward=0.0))  # the reset step
    batcher.add(*one(100.0, 101.0))
    batcher.flush()
    td = rb.storage.get(slice(None))  # every stored transition
    pairs = sorted(zip(td["observation"][:, 0].tolist(), td["next", "observation"][:, 0].tolist()))
    assert pairs == [(0.0, 1.0), (100.0, 101.0)]
    assert bool((rb.sample(32)["steps_to_next_obs"] == 1).all())  # no window across the episodes


def test_a_step_retried_after_a_non_finite_one_continues_the_episode():
    """The same step again with a finite reward follows on from the last stored step: one episode."""
    rb, adapter = make_replay_buffer(100, seed=0), GymVectorAdapter(1)
    for t in range(3):
        rb.extend(adapter.step(*_one_env_step(t)))
    with pytest.raises(ValueError, match="is inf"):
        adapter.step(*_one_env_step(3, reward=np.inf))
    rb.extend(adapter.step(*_one_env_step(3)))
    assert len(rb) == 4 and rb.storage.index.episode_count.tolist() == [1]


@pytest.mark.parametrize("mode", GYM_MODES, ids=lambda m: m.value)
def test_reset_by_hand_mid_episode_never_glues_two_episodes(mode):
    """``env.reset()`` mid-episode, then ``adapter.reset()`` as its docstring said: the
    adapter stopped checking the next observation, and the buffer (never told) wrote
    the new episode onto the running one. Now ``adapter.reset(rb)`` ends them in the
    buffer; ``adapter.reset()`` alone makes the next step raise, and a partial
    ``reset_mask`` reset ends only the envs reset."""
    def run(reset_with_rb, envs=None):
        env = make_cartpole(mode, max_episode_steps=500)
        adapter, rb = GymVectorAdapter(NUM_ENVS, autoreset_mode=mode), make_replay_buffer(1000, seed=0)
        obs, _ = env.reset(seed=0)
        for t in range(6):
            if t == 3:  # every episode is running (CartPole does not end in 3 steps)
                if envs is None:
                    obs, _ = env.reset(seed=7)
                else:  # DISABLED: the other envs keep their observations
                    obs, _ = env.reset(options={"reset_mask": np.isin(np.arange(NUM_ENVS), envs)})
                adapter.reset(rb if reset_with_rb else None, envs)
            action = np.zeros(NUM_ENVS, np.int64)
            next_obs, reward, terminated, truncated, infos = env.step(action)
            assert not (terminated | truncated).any()
            rb.extend(adapter.step(obs, action, reward, terminated, truncated, infos, next_obs))
            obs = next_obs
        env.close()
        return rb

    rb = run(reset_with_rb=True)
    assert rb.storage.index.episode_count.tolist() == [2] * NUM_ENVS
    assert len(rb) == 6 * NUM_ENVS
    with pytest.raises(ValueError, match=r"env\(s\) \[0, 1, 2\] .* adapter.reset\(\) was called "
                                         r"without the buffer.*Call adapter.reset\(rb\)"):
        run(reset_with_rb=False)
    if mode is GymMode.DISABLED:  # env 1 alone reset by hand
        rb = run(reset_with_rb=True, envs=[1])
        assert rb.storage.index.episode_count.tolist() == [1, 2, 1]



def test_reset_with_an_emptied_buffer_mid_episode():
    """``rb.empty()`` mid-episode, then ``adapter.reset(rb)``: no episode runs in the
    emptied buffer, so there is none to end (it raised IndexError from the writer)."""
    rb, adapter = make_replay_buffer(100, seed=0), GymVectorAdapter(1)
    for t in range(3):
        rb.extend(adapter.step(*_one_env_step(t)))
    rb.empty()
    adapter.reset(rb)
    rb.extend(adapter.step(*_one_env_step(10)))
    assert len(rb) == 1 and rb.storage.index.episode_count.tolist() == [1]


def test_reset_refuses_envs_it_does_not_have():
    adapter = GymVectorAdapter(NUM_ENVS)
    for envs in ([NUM_ENVS], [-1], [True, False], [0.5]):
        with pytest.raises(ValueError, match=rf"GymVectorAdapter.reset: envs=\[.*\], expected env "
                                             rf"positions in \[0, {NUM_ENVS}\) or a bool mask of "
                                             rf"{NUM_ENVS} envs"):
            adapter.reset(None, envs)
    adapter.reset(None, np.array([True, False, True]))  # a reset_mask as gymnasium takes it

# ----------------------------------------------------------- Tuple spaces
class PairEnv(gym.Env):
    """Tuple observation and action spaces of two same-shaped entries, as many as the envs."""

    metadata: dict = {"render_modes": []}

    def __init__(self) -> None:
        box = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.observation_space = spaces.Tuple((box, box))
        self.action_space = spaces.Tuple((spaces.Discrete(3), spaces.Discrete(3)))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 1.0, False, False, {}


@pytest.mark.parametrize("tuple_entry", ["obs", "action"])
def test_tuple_space_batches_are_refused_not_transposed(tuple_entry):
    """A Tuple space's batch is a tuple of per-entry arrays: ``np.asarray`` of it is
    ``[entries, num_envs, ...]``, so with as many entries as envs every env's row
    held one entry of all the envs. It is refused, naming the entry."""
    env = gym.vector.SyncVectorEnv([PairEnv] * 2)
    obs, _ = env.reset(seed=0)
    env.action_space.seed(0)
    action = env.action_space.sample()
    next_obs, reward, terminated, truncated, infos = env.step(action)
    env.close()
    if tuple_entry == "obs":  # one [num_envs, 2] action array: the observation alone is a tuple
        action = np.stack(action, -1)
    else:  # one entry of the observations: the action alone is a tuple
        obs, next_obs = obs[0], next_obs[0]
    with pytest.raises(TypeError, match=rf"{tuple_entry} is a tuple of 2 arrays \(a gymnasium "
                                        r"Tuple space's batch\).*gymnasium.spaces.Dict"):
        GymVectorAdapter(2).step(obs, action, reward, terminated, truncated, infos, next_obs)
