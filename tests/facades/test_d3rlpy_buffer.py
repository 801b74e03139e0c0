"""BatchReplayBuffer (d3rlpy 1.0 API): the append convention, golden batches, D1-D13."""
from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
import torch

from torchrl_ext import BatchReplayBuffer
from torchrl_ext.facades.d3rlpy import Episode

BOX = gym.spaces.Box(-10.0, 10.0, (2,), np.float32)
IMAGE = gym.spaces.Box(0, 255, (1, 3, 3), np.uint8)
DISCRETE = gym.spaces.Discrete(3)


def buffer(maxlen=100, n_envs=1, obs_space=BOX, **kwargs):
    return BatchReplayBuffer(maxlen, None, observation_space=obs_space, action_space=DISCRETE,
                             n_envs=n_envs, seed=0, **kwargs)


def by_obs(batch) -> dict:
    """first obs feature of o_t -> the batch row, as plain python."""
    out = {}
    for i in range(batch.size()):
        out[float(batch.observations[i].reshape(-1)[-1 if batch.observations.ndim > 2 else 0])] = {
            "action": int(batch.actions[i]), "reward": float(batch.rewards[i]),
            "next_obs": float(batch.next_observations[i].reshape(-1)[-1 if batch.observations.ndim > 2 else 0]),
            "next_action": int(batch.next_actions[i]), "next_reward": round(float(batch.next_rewards[i]), 5),
            "terminal": float(batch.terminals[i]), "n_steps": float(batch.n_steps[i]),
        }
    return out


def chain(buf, rewards, terminal_last=True, start=0.0):
    """One env: obs t = start + t (both features), action t % 3, arrival reward rewards[t]."""
    T = len(rewards)
    for t in range(T):
        last = t == T - 1
        buf.append(np.full((1, 2), start + t, np.float32), np.array([t % 3]), np.array([rewards[t]]),
                   np.array([last and terminal_last]), np.array([last]))


def all_of(buf, **kwargs):
    seen = {}
    for _ in range(40):
        seen.update(by_obs(buf.sample(8, **kwargs)))
    return seen


# ------------------------------------------------------------ the convention
def test_append_convention_golden():
    buf = buffer()
    chain(buf, [0.0, 1.0, 2.0])  # o0 -> o1 -> o2 (terminal)
    got = all_of(buf)
    assert got[0.0] == {"action": 0, "reward": 0.0, "next_obs": 1.0, "next_action": 1,
                        "next_reward": 1.0, "terminal": 0.0, "n_steps": 1.0}
    assert got[1.0] == {"action": 1, "reward": 1.0, "next_obs": 2.0, "next_action": 2,
                        "next_reward": 2.0, "terminal": 1.0, "n_steps": 1.0}
    assert len(buf) == buf.size() == 2


def test_nstep_golden_stops_at_terminal():
    buf = buffer()
    chain(buf, [0.0, 1.0, 2.0, 4.0])
    got = all_of(buf, n_steps=2, gamma=0.5)
    assert got[0.0]["next_obs"] == 2.0 and got[0.0]["next_reward"] == 1.0 + 0.5 * 2.0
    assert got[0.0]["n_steps"] == 2.0 and got[0.0]["terminal"] == 0.0
    assert got[2.0] == {"action": 2, "reward": 2.0, "next_obs": 3.0, "next_action": 0,
                        "next_reward": 4.0, "terminal": 1.0, "n_steps": 1.0}


def test_timeout_clip_bootstraps_and_in_progress_chain_is_sampled():
    buf = buffer()
    chain(buf, [0.0, 1.0, 1.0], terminal_last=False)  # clipped by a timeout
    chain(buf, [0.0, 1.0, 1.0], terminal_last=False, start=10.0)
    buf.append(np.full((1, 2), 20.0, np.float32), np.array([0]), np.array([0.0]), np.array([False]))
    buf.append(np.full((1, 2), 21.0, np.float32), np.array([1]), np.array([5.0]), np.array([False]))
    got = all_of(buf, n_steps=3, gamma=1.0)
    assert got[1.0]["terminal"] == 0.0 and got[1.0]["next_obs"] == 2.0  # bootstraps from o2
    assert got[20.0]["next_obs"] == 21.0 and got[20.0]["n_steps"] == 1.0  # running chain
    assert 2.0 not in got and 12.0 not in got  # final observations start no transition


def test_image_frames_d3rlpy_layout():
    buf = buffer(obs_space=IMAGE)
    for t in range(5):
        buf.append(np.full((1, 1, 3, 3), t, np.uint8), np.array([0]), np.array([0.0]),
                   np.array([t == 4]), np.array([t == 4]))
    batch = buf.sample(16, n_frames=4)
    assert batch.observations.shape == (16, 4, 3, 3) and batch.observations.dtype == torch.uint8
    for o, n in zip(batch.observations[:, :, 0, 0].tolist(), batch.next_observations[:, :, 0, 0].tolist()):
        t = o[-1]
        assert o == [max(t - j, 0) for j in (3, 2, 1, 0)]  # padded with o_0 (d3rlpy's rule)
        assert n == [max(t + 1 - j, 0) for j in (3, 2, 1, 0)]


def test_episode_stream_and_envs_do_not_mix():
    buf = buffer(n_envs=2)
    for t in range(4):
        obs = np.array([[t, t], [100 + t, 100 + t]], np.float32)
        buf.append(obs, np.array([0, 1]), np.zeros(2), np.zeros(2, bool))
    buf.append_episode(Episode(np.full((3, 2), 50.0, np.float32) + np.arange(3)[:, None],
                               np.zeros(3, np.int64), np.array([0.0, 1.0, 2.0]), True))
    got = all_of(buf)
    assert {o: v["next_obs"] for o, v in got.items()} == {
        0.0: 1.0, 1.0: 2.0, 2.0: 3.0, 100.0: 101.0, 101.0: 102.0, 102.0: 103.0, 50.0: 51.0, 51.0: 52.0}
    assert got[51.0]["terminal"] == 1.0 and got[51.0]["next_reward"] == 2.0


# ------------------------------------------------------------------- D1-D13
def test_d1_appended_episodes_get_masks():
    episode = Episode(np.zeros((6, 2), np.float32) + np.arange(6)[:, None], np.zeros(6), np.ones(6))
    buf = buffer(episodes=[episode], create_mask=True, mask_size=4)
    batch = buf.sample(32)
    assert batch.masks is not None and batch.masks.shape == (4, 32, 1)
    assert batch.masks.dtype == torch.float32


def test_d2_memory_bounded_by_maxlen_for_never_ending_episodes():
    buf = buffer(maxlen=50, n_envs=2)

    def nbytes() -> int:
        return buf.rb.storage.state_dict()["rows"].bytes()

    sizes = []
    for t in range(1000):  # one endless episode per env
        buf.append(np.full((2, 2), t, np.float32), np.array([0, 1]), np.ones(2), np.zeros(2, bool))
        assert len(buf) <= 50
        if t in (500, 999):  # the rings are full: a checkpoint holds every row
            sizes.append(nbytes())
    assert sizes[0] == sizes[1]
    got = all_of(buf)
    assert min(got) >= 1000 - 50 and all(v["next_obs"] == o + 1 for o, v in got.items())


def test_d3_bool_and_numeric_flags():
    for flags in (np.array([True]), np.array([1.0]), np.array([1])):
        buf = buffer()
        buf.append(np.zeros((1, 2), np.float32), np.array([0]), np.zeros(1), np.zeros(1, bool))
        buf.append(np.ones((1, 2), np.float32), np.array([0]), np.ones(1), flags, flags)
        assert float(buf.sample(1).terminals) == 1.0
    with pytest.raises(ValueError, match=r"terminals holds \[2\], expected booleans or 0/1"):
        buf.append(np.ones((1, 2), np.float32), np.array([0]), np.ones(1), np.array([2]))
    with pytest.raises(ValueError, match=r"envs \[0\] are terminal but not clipped"):
        buf.append(np.ones((1, 2), np.float32), np.array([0]), np.ones(1), np.array([True]),
                   np.array([False]))


def test_d4_callers_arrays_are_copied():
    buf = buffer()
    obs = np.zeros((1, 2), np.float32)
    for t in range(3):
        obs[:] = t  # the caller reuses its array
        buf.append(obs, np.array([0]), np.zeros(1), np.zeros(1, bool))
    assert {o: v["next_obs"] for o, v in all_of(buf).items()} == {0.0: 1.0, 1.0: 2.0}


def test_torch_tensors_are_taken_and_copied_like_arrays():
    # an env wrapper handing torch tensors: converted, not refused ("can't convert"), and copied
    buf = buffer()
    obs = torch.zeros(1, 2)
    for t in range(3):
        obs[:] = t
        buf.append(obs, torch.tensor([0]), torch.zeros(1), torch.tensor([t == 2]), torch.tensor([t == 2]))
    assert {o: v["next_obs"] for o, v in all_of(buf).items()} == {0.0: 1.0, 1.0: 2.0}
    assert float(buf.sample(64).terminals.max()) == 1.0


def test_d5_gymnasium_vector_env_and_env_none():
    env = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
    buf = BatchReplayBuffer(300, env, seed=0)
    assert buf.n_envs == 3 and buf.observation_shape == (4,) and buf.action_size == 2
    episode = Episode(np.zeros((3, 4), np.float32), np.zeros(3), np.zeros(3))
    offline = BatchReplayBuffer(30, None, episodes=[episode], observation_space=env.single_observation_space,
                                action_space=env.single_action_space, n_envs=1)
    assert len(offline) == 2
    with pytest.raises(TypeError, match=r"env=None needs observation_space=, action_space=, n_envs="):
        BatchReplayBuffer(30, None)
    with pytest.raises(TypeError, match=r"env is int, expected a gymnasium vector env"):
        BatchReplayBuffer(30, 3)


def test_a_same_step_vector_env_is_refused():
    # its step ending an episode returns the next episode's reset observation, which
    # d3rlpy's loop appends as the final one: each episode's last transition ended in
    # the next episode and its first was lost, silently
    env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync",
                       vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    with pytest.raises(ValueError, match=re.escape(
            "BatchReplayBuffer: the env resets in the step that ends an episode (autoreset_mode "
            "SAME_STEP): that step returns the next episode's first observation, where d3rlpy's loop "
            "appends the final one, which only the infos hold (infos['final_obs']): its transitions "
            "would end in the next episode. Make the env with autoreset_mode=NEXT_STEP, gymnasium's "
            "default (d3rlpy's own batch envs step so).")):
        BatchReplayBuffer(100, env)
    disabled = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync",
                            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.DISABLED})
    assert BatchReplayBuffer(100, disabled).n_envs == 2  # resets by hand: the final observation is appended


def test_d5_d3rlpy_style_env_with_len():
    class BatchEnv:  # the attributes d3rlpy's BatchEnv offers
        observation_space, action_space = BOX, DISCRETE

        def __len__(self) -> int:
            return 2

    assert BatchReplayBuffer(40, BatchEnv()).n_envs == 2


def test_a_d3rlpy_batch_env_of_old_gym_envs_keeps_its_discrete_actions():
    # d3rlpy 1.0's batch envs hold old gym envs, whose spaces are not gymnasium's classes:
    # their Discrete was read as a continuous action of size 1 (float actions, 7 taken)
    old_gym = pytest.importorskip("gym")  # (the full suite's set-up installs it; the compat one does not)

    class SyncBatchEnv:  # what d3rlpy 1.0's SyncBatchEnv gives the buffer: its first env's spaces
        def __init__(self, envs):
            self.envs = envs
            self.observation_space, self.action_space = envs[0].observation_space, envs[0].action_space

        def __len__(self) -> int:
            return len(self.envs)

    env = SyncBatchEnv([old_gym.make("CartPole-v1") for _ in range(2)])
    buffer = BatchReplayBuffer(100, env, seed=0)
    assert (buffer.discrete, buffer.action_size) == (True, 2)
    obs = np.stack([e.reset(seed=i)[0] for i, e in enumerate(env.envs)])
    for t in range(6):
        buffer.append(obs + t, np.array([0, 1]), np.ones(2), np.zeros(2))
    batch = buffer.sample(16)
    assert batch.actions.shape == (16,) and batch.actions.dtype == torch.int32
    assert set(batch.actions.tolist()) <= {0, 1}
    with pytest.raises(ValueError, match=r"actions"):
        buffer.append(obs, np.array([7, 1]), np.ones(2), np.zeros(2))
    dataset = buffer.to_mdp_dataset()
    assert dataset.dataset_info.action_space.name == "DISCRETE"


def test_a_subclass_of_discrete_is_discrete():
    class Moves(gym.spaces.Discrete):
        pass

    buffer = BatchReplayBuffer(40, observation_space=BOX, action_space=Moves(3), n_envs=1)
    assert (buffer.discrete, buffer.action_size) == (True, 3)
    with pytest.raises(ValueError, match=r"actions"):
        buffer.append(np.zeros((1, *BOX.shape), np.float32), np.array([7]), np.zeros(1), np.zeros(1))


def test_maxlen_is_the_envs_fifo_as_in_d3rlpy():
    # d3rlpy keeps the last maxlen transitions of all appends in one FIFO; the
    # envs' streams kept maxlen // (n_envs + 1) each (half of maxlen for one
    # env), a share set aside for whole episodes
    for n_envs in (1, 2):
        buf = buffer(maxlen=40, n_envs=n_envs)
        for t in range(100):
            buf.append(np.full((n_envs, 2), t, np.float32), np.zeros(n_envs, np.int64),
                       np.ones(n_envs), np.zeros(n_envs, bool))
        assert len(buf) == buf.size() == 40
        assert min(all_of(buf)) == 100 - 40 // n_envs - 1  # the newest, FIFO


def test_len_never_exceeds_maxlen_with_whole_episodes_and_appends_mixed():
    # whole episodes had a FIFO of their own beside the envs': a pre-fill then
    # appends held up to twice maxlen (len 20 of maxlen 10 with one env)
    for n_envs in (1, 2):
        buf = buffer(maxlen=10, n_envs=n_envs)
        buf.append_episode(Episode(np.full((31, 2), -1.0, np.float32), np.zeros(31, np.int64), np.ones(31)))
        assert len(buf) == 10 // n_envs
        for t in range(30):
            buf.append(np.full((n_envs, 2), t, np.float32), np.zeros(n_envs, np.int64),
                       np.ones(n_envs), np.zeros(n_envs, bool))
            assert len(buf) <= 10
            # an episode while every env's chain runs: still bounded
            if t == 15:
                buf.append_episode(Episode(np.full((4, 2), -2.0, np.float32), np.zeros(4, np.int64), np.ones(4)))
                assert len(buf) <= 10
        assert len(buf) == 10
        assert -1.0 not in all_of(buf)  # the pre-fill is the oldest: evicted first, FIFO


def test_a_whole_episode_beside_a_running_one_in_the_smallest_buffer():
    # maxlen == n_envs was accepted: a stream of 2 rows, where a whole episode beside
    # the env's running one needs 3; append_episode raised the storage's error and the
    # env's held append was lost with it
    buf = buffer(maxlen=2)
    for t in (0, 1):
        buf.append(np.full((1, 2), t, np.float32), np.array([0]), np.zeros(1), np.zeros(1, bool))
    buf.append_episode(Episode(np.full((2, 2), 100.0, np.float32), np.zeros(2, np.int64), np.zeros(2), True))
    assert buf.transitions.observations[:, 0].tolist() == [100.0]  # 3 rows: the episode, o_1 pending
    for t in (2, 3):
        buf.append(np.full((1, 2), t, np.float32), np.array([0]), np.zeros(1), np.zeros(1, bool))
    assert len(buf) == 2  # FIFO: the env's newest two
    assert buf.transitions.observations[:, 0].tolist() == [1.0, 2.0]
    assert buf.transitions.next_observations[:, 0].tolist() == [2.0, 3.0]


def test_whole_episodes_go_to_an_idle_env_and_a_split_chain_keeps_every_transition():
    buf = buffer(maxlen=100, n_envs=2)
    # env 0 runs a chain, env 1 is idle (never appended): the episode goes to env 1's stream
    buf.append(np.array([[0, 0], [0, 0]], np.float32), np.array([0, 0]), np.zeros(2),
               np.zeros(2, bool), clip_episodes=np.array([False, True]))
    buf.append_episode(Episode(np.full((3, 2), 50.0, np.float32), np.zeros(3, np.int64), np.ones(3)))
    for t in (1, 2):
        buf.append(np.array([[t, t], [10 + t, 10 + t]], np.float32), np.array([0, 0]), np.zeros(2),
                   np.zeros(2, bool))
    # now both chains run: the next episode splits one of them, whose transitions all stay
    buf.append_episode(Episode(np.full((3, 2), 70.0, np.float32), np.zeros(3, np.int64), np.ones(3)))
    for t in (3, 4):
        buf.append(np.array([[t, t], [10 + t, 10 + t]], np.float32), np.array([0, 0]), np.zeros(2),
                   np.zeros(2, bool))
    obs = buf.transitions.observations[:, 0].tolist()
    nxt = buf.transitions.next_observations[:, 0].tolist()
    pairs = sorted(zip(obs, nxt))
    assert pairs == sorted([(0, 1), (1, 2), (2, 3), (3, 4), (11, 12), (12, 13), (13, 14),
                            (50, 50), (50, 50), (70, 70), (70, 70)])
    assert len(buf) == 11


def test_d6_export_marks_in_progress_episodes_unfinished():
    from torchrl_ext.export import episodes_of

    buf = buffer(maxlen=40)
    chain(buf, [0.0, 1.0, 2.0])
    buf.append(np.full((1, 2), 7.0, np.float32), np.array([0]), np.zeros(1), np.zeros(1, bool))
    buf.append(np.full((1, 2), 8.0, np.float32), np.array([0]), np.zeros(1), np.zeros(1, bool))
    episodes = episodes_of(buf.rb)
    assert [(e.finished, len(e)) for e in episodes] == [(True, 2), (False, 1)]
    assert sum(len(e) for e in episodes) == len(buf)


def test_d7_transitions_are_chronological_and_re_entrant():
    buf = buffer(maxlen=12, n_envs=2)
    for t in range(20):
        buf.append(np.array([[t, t], [100 + t, 100 + t]], np.float32), np.array([0, 1]),
                   np.zeros(2), np.zeros(2, bool))
    transitions = buf.transitions
    first = transitions.observations[:, 0].tolist()
    assert len(transitions) == len(buf)
    # created in append order: env 0 then env 1 at each step, oldest first
    assert first == sorted(first, key=lambda o: (o % 100, o >= 100))
    assert float(transitions[-1].observations[0]) == 118.0  # the newest, after the wrap
    # the items answer to d3rlpy Transition's names, as code written for it reads them
    last = transitions[-1]
    assert float(last.observation[0]) == 118.0 and last.action.shape == ()
    assert torch.equal(last.next_reward, last.next_rewards) and torch.equal(last.terminal, last.terminals)
    assert [float(t.reward) for t in transitions[:2]] == [float(r) for r in transitions.rewards[:2]]
    outer = [float(t.observations[0]) for t in transitions]
    inner = [[float(u.observations[0]) for u in transitions][:2] for _ in transitions[:2]]
    assert outer == first and inner[0] == inner[1] == first[:2]


@pytest.mark.parametrize("obs_space", [BOX, IMAGE], ids=["vector", "image"])
@pytest.mark.parametrize("act_space", [DISCRETE, gym.spaces.Box(-1.0, 1.0, (2,), np.float32)],
                         ids=["discrete", "continuous"])
def test_transitions_of_an_empty_buffer_are_none_as_in_d3rlpy(obs_space, act_space):
    # d3rlpy 1.0's transitions is then an empty queue: len() 0, iterating yields nothing
    buf = BatchReplayBuffer(100, None, observation_space=obs_space, action_space=act_space, n_envs=1, seed=0)
    empty = buf.transitions
    assert len(empty) == 0 and list(empty) == [] and buf.size() == 0
    obs = np.ones((1, *obs_space.shape), obs_space.dtype)
    buf.append(obs, np.array([act_space.sample()]), np.ones(1), np.zeros(1, bool))
    assert len(buf.transitions) == 0  # one append: no transition yet
    buf.append(obs, np.array([act_space.sample()]), np.ones(1), np.zeros(1, bool))
    held = buf.transitions
    assert len(held) == 1
    for name in ("observations", "actions", "rewards", "next_observations", "next_actions",
                 "next_rewards", "td_rewards", "terminals", "n_steps"):
        a, b = getattr(empty, name), getattr(held, name)
        assert (a.shape[1:], a.dtype) == (b.shape[1:], b.dtype), name
    assert empty.mask is None and held.mask is None


def test_d8_frames_for_vectors_and_validation():
    buf = buffer()
    chain(buf, [0.0] * 6)
    batch = buf.sample(4, n_frames=3)
    assert batch.observations.shape == (4, 3, 2)  # a frame axis for vectors
    with pytest.raises(ValueError, match=r"n_steps=0, expected an integer >= 1"):
        buf.sample(4, n_steps=0)
    with pytest.raises(ValueError, match=r"n_frames=0, expected an integer >= 1"):
        buf.sample(4, n_frames=0)


def test_d9_td_reward_alias():
    buf = buffer()
    chain(buf, [0.0, 3.0, 5.0])
    batch = buf.sample(8)
    assert torch.equal(batch.td_rewards, batch.next_rewards)
    assert not torch.equal(batch.td_rewards, batch.rewards)


def test_d10_masks_seeded_and_p_configurable():
    def masks(seed, p):
        buf = BatchReplayBuffer(400, None, create_mask=True, mask_size=8, mask_p=p, seed=seed,
                                observation_space=BOX, action_space=DISCRETE, n_envs=1)
        chain(buf, [0.0] * 200)
        return buf.sample(199).masks

    assert torch.equal(masks(1, 0.5), masks(1, 0.5))
    assert not torch.equal(masks(1, 0.5), masks(2, 0.5))
    assert abs(float(masks(1, 0.2).mean()) - 0.2) < 0.05


def test_d11_empty_buffer_sample_is_a_clear_error():
    with pytest.raises(ValueError, match=r"^BatchReplayBuffer\.sample: the buffer holds no transition "
                       r"yet; append at least two steps"):
        buffer().sample(4)


def test_a_batch_larger_than_the_buffer_is_drawn_with_replacement():
    buf = buffer()
    for t in range(4):  # three transitions
        buf.append(np.full((1, 2), float(t), np.float32), np.array([0]), np.array([1.0]), np.array([False]))
    batch = buf.sample(50)
    assert batch.size() == 50
    assert set(batch.observations[:, 0].tolist()) <= {0.0, 1.0, 2.0}


def test_d12_gymnasium_env_gives_no_reset_to_reset_transition():
    env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    buf = BatchReplayBuffer(500, env, seed=0)
    obs, _ = env.reset(seed=0)
    first_obs = obs.copy()
    reward, terminal, clip = np.zeros(2), np.zeros(2, bool), np.zeros(2, bool)
    for _ in range(3):
        action = np.array([0, 1])
        buf.append(obs, action, reward, terminal, clip)
        obs, reward, terminal, truncated, _ = env.step(action)
        clip = terminal | truncated
    transitions = buf.transitions
    # the first transition of each env starts at the reset obs and earns CartPole's reward
    assert torch.allclose(transitions.observations[:2], torch.from_numpy(first_obs))
    assert transitions.td_rewards[:2].view(-1).tolist() == [1.0, 1.0]


def test_d13_n_envs_keyword():
    assert buffer(n_envs=4).n_envs == 4


def test_shape_errors_name_the_input():
    buf = buffer(n_envs=2)
    with pytest.raises(ValueError, match=r"observations has shape \(1, 2\), expected \(2, 2\)"):
        buf.append(np.zeros((1, 2)), np.zeros(2), np.zeros(2), np.zeros(2))
    with pytest.raises(ValueError, match=re.escape("BatchReplayBuffer: maxlen=3 gives each of the n_envs=2 "
                                                   "envs room for 1 transition(s); expected maxlen >= 4 (2 per env).")):
        buffer(maxlen=3, n_envs=2)


def test_mask_settings_are_checked_in_this_api_s_names():
    # mask_size=2.5 was truncated to 2 members, "a" failed in int(), and 0 or mask_p=1.5
    # were named by make_replay_buffer / BootstrapMaskSampler
    for bad, error in ((2.5, TypeError), ("a", TypeError), (0, ValueError)):
        with pytest.raises(error, match=rf"^BatchReplayBuffer: mask_size={bad!r}.* expected an int >= 1\.$"):
            buffer(create_mask=True, mask_size=bad)
    with pytest.raises(ValueError, match=r"^BatchReplayBuffer: mask_p=1.5, expected a finite number in \(0, 1\]\.$"):
        buffer(create_mask=True, mask_p=1.5)


def test_image_observations_of_another_dtype_are_refused_not_cast():
    # d3rlpy asserted uint8 images; a cast would turn 0..1 float frames into zeros
    buf = buffer(obs_space=IMAGE)
    with pytest.raises(TypeError, match=r"append: observations has dtype float32, expected uint8"):
        buf.append(np.full((1, 1, 3, 3), 0.5, np.float32), np.array([0]), np.zeros(1), np.zeros(1, bool))
    episode = Episode(np.full((3, 1, 3, 3), 300, np.int64), np.zeros(3), np.zeros(3))
    with pytest.raises(TypeError, match=r"append_episode: episode.observations has dtype int64, expected uint8"):
        buf.append_episode(episode)
    assert len(buf) == 0


def test_non_numeric_inputs_name_the_input():
    buf = buffer(n_envs=2)
    obs, act, rew, flags = np.zeros((2, 2)), np.zeros(2), np.zeros(2), np.zeros(2)
    with pytest.raises(TypeError, match=r"append: rewards has dtype <U1, expected numbers"):
        buf.append(obs, act, np.array(["a", "b"]), flags)
    with pytest.raises(TypeError, match=r"append: actions has dtype object, expected numbers"):
        buf.append(obs, np.array([None, None]), rew, flags)
    with pytest.raises(TypeError, match=r"append: terminals has dtype object, expected booleans or 0/1"):
        buf.append(obs, act, rew, np.array([None, None]))
    with pytest.raises(TypeError, match=r"append_episode: episode.rewards has dtype <U1, expected numbers"):
        buf.append_episode(Episode(np.zeros((3, 2)), np.zeros(3), np.array(list("abc"))))
    buf.append(obs, act, rew, flags)
    buf.append(obs, act, rew, flags)
    assert len(buf) == 2  # nothing half-written


def test_discrete_actions_outside_the_space_are_refused_not_cast():
    # were cast to int32: 1.7 -> 1, 2**40 -> 0, and 5 or -1 kept for a Discrete(3) space
    buf = buffer(n_envs=2)
    obs, rew, flags = np.zeros((2, 2)), np.zeros(2), np.zeros(2)
    for bad, shown in (([0, 1.7], r"\[1.7\]"), ([5, 1], r"\[5\]"), ([-1, 0], r"\[-1\]"), ([2**40, 0], r"\[1099511627776\]")):
        with pytest.raises(ValueError, match=rf"append: actions holds {shown}, expected integers in \[0, 3\)"):
            buf.append(obs, np.array(bad), rew, flags)
    with pytest.raises(ValueError, match=r"append_episode: episode.actions holds \[3\], expected integers in \[0, 3\)"):
        buf.append_episode(Episode(np.zeros((3, 2)), np.array([0, 3, 1]), np.zeros(3)))
    buf.append(obs, np.array([2.0, 0]), rew, flags)  # integral floats are fine
    buf.append(obs, np.array([1, 2]), rew, flags)
    assert buf.transitions.actions.tolist() == [2, 0]


def test_observation_space_without_a_shape_is_a_clear_error():
    space = gym.spaces.Dict({"pos": BOX})  # d3rlpy 1.0 took array observations only
    with pytest.raises(TypeError, match=r"observation_space is Dict, which has no shape; expected an array space"):
        buffer(obs_space=space)


def test_append_episode_checks_what_came_before_skipping_a_one_observation_episode():
    # an episode of one observation (no transition) of another shape was skipped without a
    # word, and an object that is no episode failed with an AttributeError
    buf = buffer()
    with pytest.raises(ValueError, match=r"append_episode: episode.observations has shape \(1, 3\), expected \(1, 2\)"):
        buf.append_episode(Episode(np.zeros((1, 3), np.float32), np.zeros(1), np.zeros(1)))
    with pytest.raises(TypeError, match=r"append_episode: episode is ndarray, expected an Episode \(observations, "
                                        r"actions, rewards, terminal\); it has no observations"):
        buf.append_episode(np.zeros((3, 2)))
    buf.append_episode(Episode(np.zeros((1, 2), np.float32), np.zeros(1), np.zeros(1)))
    assert len(buf) == 0


def test_continuous_actions_of_one_dim_may_come_flat_as_d3rlpy_took_them():
    # d3rlpy 1.0 took (n_envs,) actions beside (n_envs, action_size): a Box((1,)) action
    # (Pendulum) given flat was refused here with a shape error
    buf = BatchReplayBuffer(20, None, observation_space=BOX, action_space=gym.spaces.Box(-2, 2, (1,), np.float32),
                            n_envs=2, seed=0)
    for t in range(3):
        buf.append(np.zeros((2, 2)), np.array([0.5 * t, -0.5 * t]), np.zeros(2), np.zeros(2))
    assert buf.transitions.actions.tolist() == [[0.0], [-0.0], [0.5], [-0.5]]
    buf.append_episode(Episode(np.zeros((3, 2)), np.array([1.0, 1.5, 2.0]), np.zeros(3)))
    assert buf.sample(4).actions.shape == (4, 1)
    wide = BatchReplayBuffer(20, None, observation_space=BOX, action_space=gym.spaces.Box(-2, 2, (2,), np.float32),
                             n_envs=2)
    with pytest.raises(ValueError, match=r"append: actions has shape \(2,\), expected \(2, 2\)"):
        wide.append(np.zeros((2, 2)), np.zeros(2), np.zeros(2), np.zeros(2))


def test_sample_refuses_a_gamma_that_is_no_discount():
    buf = buffer(maxlen=40)
    chain(buf, [0.0, 1.0, 2.0])
    for gamma in (1.5, -0.1, float("nan")):
        with pytest.raises(ValueError, match=rf"sample: gamma={gamma!r}, expected a finite number in \[0, 1\]"):
            buf.sample(2, gamma=gamma)
    for gamma in ("x", True, None):
        with pytest.raises(TypeError, match=rf"sample: gamma={gamma!r} \(\w+\), expected a finite number in \[0, 1\]"):
            buf.sample(2, gamma=gamma)
    assert buf.sample(2, gamma=1).rewards.shape == (2, 1)


def test_non_finite_values_are_refused_unless_asked_for():
    """The other facades refused NaN and infinities by default; this one stored them
    (a NaN reward poisons every n-step return and target over it)."""
    b = buffer(n_envs=2)
    obs = np.zeros((2, 2), np.float32)
    with pytest.raises(ValueError, match=r"BatchReplayBuffer.append: rewards of env 1 is nan; .*check_finite=False"):
        b.append(obs, np.array([0, 1]), np.array([0.0, np.nan]), [0, 0])
    with pytest.raises(ValueError, match=r"append_episode: episode.observations at step 2 is inf"):
        b.append_episode(Episode(np.array([[0, 0], [1, 1], [np.inf, 2]], np.float32),
                                 np.zeros(3, int), np.zeros(3), True))
    assert b.size() == 0
    lenient = buffer(n_envs=2, check_finite=False)
    lenient.append(obs, np.array([0, 1]), np.array([0.0, np.nan]), [0, 0])
    lenient.append(obs, np.array([0, 1]), np.zeros(2), [1, 1])
    assert lenient.size() == 2
