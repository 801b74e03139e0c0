"""Export to d3rlpy 2.x: episodes, flags, and an offline algorithm fitting on the export."""
from __future__ import annotations

import numpy as np
import pytest

d3rlpy = pytest.importorskip(
    "d3rlpy", reason="d3rlpy is not importable; `make test` installs it (pip install --no-deps d3rlpy==2.8.1 + its imports)"
)

import gymnasium as gym  # noqa: E402
import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from torchrl.envs import GymEnv  # noqa: E402

from torchrl_ext import BatchReplayBuffer, make_replay_buffer  # noqa: E402
from torchrl_ext.export import to_d3rlpy  # noqa: E402

BOX = gym.spaces.Box(-10.0, 10.0, (3,), np.float32)


def filled(maxlen=200):
    """2 envs: env 0 terminates every 5 steps, env 1 runs on (its episode is in progress)."""
    buf = BatchReplayBuffer(maxlen, None, observation_space=BOX, action_space=gym.spaces.Discrete(2),
                            n_envs=2, seed=0)
    for t in range(23):
        end = np.array([t % 5 == 4, False])
        obs = np.array([[t] * 3, [100 + t] * 3], np.float32)
        buf.append(obs, np.array([t % 2, 1]), np.array([1.0, 2.0]), end, end)
    return buf


def test_d6_mdp_dataset_episodes_and_flags():
    buf = filled()
    dataset = buf.to_mdp_dataset()
    assert dataset.transition_count == len(buf)  # every held transition, never more
    terminated = [bool(e.terminated) for e in dataset.episodes]
    # env 0: four terminated episodes of 4 transitions, then one running; env 1: one running
    assert terminated == [True, True, True, True, False, False]
    # running episodes end with their newest next observation (a row no transition starts at)
    assert [len(e.rewards) for e in dataset.episodes] == [4, 4, 4, 4, 3, 23]
    np.testing.assert_array_equal(dataset.episodes[0].observations[:, 0], [0, 1, 2, 3])
    assert float(dataset.episodes[5].rewards[0, 0]) == 2.0  # the TD reward


def test_offline_algorithm_fits_on_export():
    dataset = filled().to_mdp_dataset()
    dqn = d3rlpy.algos.DQNConfig(batch_size=8).create(device="cpu:0")
    dqn.fit(dataset, n_steps=20, n_steps_per_epoch=20, show_progress=False, save_interval=10**9,
            experiment_name="export_test", with_timestamp=False,
            logger_adapter=d3rlpy.logging.NoopAdapterFactory())
    assert dqn.predict(np.zeros((2, 3), np.float32)).shape == (2,)


def test_empty_buffer_export_is_an_error():
    buf = BatchReplayBuffer(20, None, observation_space=BOX, action_space=gym.spaces.Discrete(2), n_envs=1)
    with pytest.raises(ValueError, match="the buffer holds no transition to export"):
        buf.to_mdp_dataset()


def test_discrete_action_size_is_the_buffers_not_the_largest_action_taken():
    # Discrete(4), only actions 0 and 1 taken: a DQN fitted on the export needs 4 outputs
    buf = BatchReplayBuffer(50, None, observation_space=BOX, action_space=gym.spaces.Discrete(4), n_envs=1)
    for t in range(6):
        buf.append(np.full((1, 3), t, np.float32), np.array([t % 2]), np.ones(1), np.array([t == 5]))
    assert buf.to_mdp_dataset().dataset_info.action_size == 4
    obs = {"observation_key": "observation"}  # the facade also stores the arrival reward once per row
    assert to_d3rlpy(buf.rb, **obs).dataset_info.action_size == 2  # no space known: the largest action + 1
    assert to_d3rlpy(buf.rb, action_size=4, **obs).dataset_info.action_size == 4
    with pytest.raises(ValueError, match=r"action_size=1, but the buffer holds action 1"):
        to_d3rlpy(buf.rb, action_size=1, **obs)


def test_d6_export_keeps_the_last_transition_of_unfinished_and_truncated_episodes():
    # d3rlpy 2 makes L - 1 transitions of a timeout episode of L rows: the export adds the
    # final observation as a last row, so every held transition (reaching it) is kept
    buf = BatchReplayBuffer(100, None, observation_space=BOX, action_space=gym.spaces.Discrete(2), n_envs=2)
    for t in range(6):
        obs = np.array([[t] * 3, [100 + t] * 3], np.float32)
        clip = np.array([t == 2, t == 4])  # env 0: truncated at o2, then 3 -> 4 -> 5 runs on
        buf.append(obs, np.array([0, 1]), np.array([1.0, 2.0]), np.zeros(2, bool), clip)
    buf.clip_episode()
    buf.append(np.zeros((2, 3), np.float32), np.array([0, 1]), np.zeros(2), np.zeros(2, bool))
    buf.append(np.ones((2, 3), np.float32), np.array([1, 0]), np.ones(2), np.zeros(2, bool))
    dataset = buf.to_mdp_dataset()
    assert dataset.transition_count == len(buf) == 10
    first = dataset.episodes[0]  # o0 -> o1 -> o2 (truncated): the final o2 is the last row
    assert not first.terminated and first.observations[:, 0].tolist() == [0, 1, 2]
    assert first.rewards[:, 0].tolist() == [1.0, 1.0, 0.0]
    assert [e.transition_count for e in dataset.episodes] == [2, 2, 1, 4, 1]  # env 0, then env 1



def test_one_hot_actions_of_a_torchrl_env_export_as_action_indices():
    """TorchRL stores a Discrete action one-hot (its OneHot spec): flattened, it gave d3rlpy
    twice as many actions as steps, the one-hot digits, misaligned with the observations
    without a word. Each step now exports its action index."""
    env = GymEnv("CartPole-v1")
    env.set_seed(0)
    torch.manual_seed(0)
    rollout = env.rollout(60, break_when_any_done=False)  # [60] named "time": one env's episodes
    assert rollout["action"].shape == (60, 2) and rollout["next", "done"].any()
    rb = make_replay_buffer(100, seed=0)
    rb.extend(rollout)
    dataset = to_d3rlpy(rb)
    assert dataset.dataset_info.action_size == 2
    for e in dataset.episodes:
        assert e.actions.shape == (e.observations.shape[0], 1)
    exported = np.concatenate([e.actions[: e.transition_count, 0] for e in dataset.episodes])
    assert exported.tolist() == rollout["action"].argmax(-1).tolist()
    rollout["action"][5] = torch.tensor([1, 1])  # not one-hot: refused, not guessed
    rb = make_replay_buffer(100, seed=0)
    rb.extend(rollout)
    with pytest.raises(ValueError, match=r"to_d3rlpy: 'action' holds \[1, 1\] at a step, neither one "
                                         r"integer per step nor a one-hot vector"):
        to_d3rlpy(rb)


def goal_buffer(observation):
    """One 3-step terminated episode whose observation is the dict ``observation`` ([1, 3] leaves)."""
    done = torch.tensor([[[False], [False], [True]]])
    rb = make_replay_buffer(16, seed=0)
    rb.extend(TensorDict({**observation, "action": torch.zeros(1, 3, 1, dtype=torch.int64),
                          "next": {**{k: v + 1 for k, v in observation.items()}, "reward": torch.ones(1, 3, 1),
                                   "done": done, "terminated": done.clone()}}, [1, 3]))
    return rb


def test_dict_observations_are_exported_whole_or_refused():
    """A goal env's buffer (Dict observation, its entries at the root as GymVectorAdapter
    writes them) was exported with 'observation' alone: the goals were dropped without a
    word and a policy fitted on the export never saw them; a dict stored under
    'observation' failed in numpy ('zero-dimensional arrays cannot be concatenated').
    Several entries export as d3rlpy 2's tuple observations, in the order given;
    left to choose, to_d3rlpy refuses, naming the entries."""
    steps = torch.arange(3.0).view(1, 3, 1)
    rb = goal_buffer({"observation": steps.expand(1, 3, 2).clone(), "desired_goal": steps + 10})
    with pytest.raises(KeyError, match=r"to_d3rlpy: the buffer holds the observation entries "
                                       r"'observation', 'desired_goal'; pass observation_key="):
        to_d3rlpy(rb)
    dataset = to_d3rlpy(rb, observation_key=["observation", "desired_goal"])
    obs, goal = dataset.episodes[0].observations
    assert obs[:, 0].tolist() == [0.0, 1.0, 2.0] and goal[:, 0].tolist() == [10.0, 11.0, 12.0]
    assert to_d3rlpy(rb, observation_key="observation").episodes[0].observations.shape == (3, 2)
    nested = goal_buffer({"observation": TensorDict({"pos": steps, "vel": steps + 5}, [1, 3])})
    with pytest.raises(KeyError, match=r"to_d3rlpy: observation_key='observation' is a dict of entries "
                                       r"\('observation', 'pos'\), \('observation', 'vel'\)"):
        to_d3rlpy(nested, observation_key="observation")
    with pytest.raises(KeyError, match=r"to_d3rlpy: observation_key='goal' is not an observation entry"):
        to_d3rlpy(rb, observation_key="goal")
    pos, vel = to_d3rlpy(nested, observation_key=[("observation", "pos"), ("observation", "vel")]).episodes[0].observations
    assert vel[:, 0].tolist() == [5.0, 6.0, 7.0]
