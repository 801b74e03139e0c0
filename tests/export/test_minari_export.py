"""Export to Minari: minari.load_dataset reads the held episodes back."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

minari = pytest.importorskip(
    "minari", reason="minari is not importable; `make test` installs it (the `minari` extra)"
)

import gymnasium as gym  # noqa: E402

from conftest import steps  # noqa: E402
from torchrl_ext import make_replay_buffer  # noqa: E402
from torchrl_ext.export import to_minari  # noqa: E402


def test_round_trip_through_minari(tmp_path, monkeypatch):
    rb = make_replay_buffer(64, seed=0)
    for t in range(7):
        obs = torch.tensor([[float(t)], [10.0 + t]])
        term = torch.tensor([[t == 3], [False]])
        trunc = torch.tensor([[t == 6], [False]])
        rb.extend(steps(obs, torch.where(term | trunc, obs + 50, obs + 1), terminated=term, truncated=trunc))
    space = gym.spaces.Box(-100.0, 100.0, (1,), np.float32)
    with warnings.catch_warnings():
        # Minari advises (UserWarning) on every metadata field left out (eval_env, ...)
        warnings.filterwarnings("ignore", category=UserWarning, module="minari")
        to_minari(rb, "test/replay-v0", observation_space=space, action_space=space, root=tmp_path)
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    dataset = minari.load_dataset("test/replay-v0")
    episodes = list(dataset.iterate_episodes())
    assert dataset.total_steps == len(rb)
    got = [(e.observations[:, 0].tolist(), e.terminations.tolist(), e.truncations.tolist()) for e in episodes]
    assert got == [
        ([0.0, 1.0, 2.0, 3.0, 53.0], [False, False, False, True], [False] * 4),
        ([4.0, 5.0, 6.0, 56.0], [False] * 3, [False, False, True]),
        # still being written: neither flag set on its last step (D6), pending obs last
        ([10.0 + t for t in range(8)], [False] * 7, [False] * 7),
    ]
    np.testing.assert_allclose(episodes[0].rewards, [0.0, 1.0, 2.0, 3.0])


def test_dict_observations_from_a_vector_env_round_trip(tmp_path, monkeypatch):
    """A Dict observation space (its entries stored at the root, as GymVectorAdapter
    writes them): Minari got the ``"observation"`` entry alone for a Dict space and
    failed with a bare AssertionError. Every entry of the space is exported, each with
    its true final observation last; a nested Dict too."""
    from torchrl_ext.envs import GymVectorAdapter

    box = lambda n: gym.spaces.Box(-100.0, 100.0, (n,), np.float32)  # noqa: E731
    space = gym.spaces.Dict({"observation": box(2), "goal": gym.spaces.Dict({"xy": box(1)})})
    rb, adapter = make_replay_buffer(64, seed=0), GymVectorAdapter(1)

    def o(v):
        return {"observation": np.full((1, 2), v, np.float32), "goal": {"xy": np.full((1, 1), -v, np.float32)}}
    # one env, NEXT_STEP: an episode of 3 steps, the reset step (to 10), one being written
    for t, (obs, nxt) in enumerate([(0, 1), (1, 2), (2, 3), (3, 10), (10, 11)]):
        rb.extend(adapter.step(o(obs), np.zeros((1, 1), np.float32), [1.0], [t == 2], [False], {}, o(nxt)))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module="minari")
        to_minari(rb, "test/dict-v0", observation_space=space, action_space=box(1), root=tmp_path)
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    episodes = list(minari.load_dataset("test/dict-v0").iterate_episodes())
    got = [(e.observations["observation"][:, 0].tolist(), e.observations["goal"]["xy"][:, 0].tolist(),
            e.terminations.tolist()) for e in episodes]
    assert got == [([0.0, 1.0, 2.0, 3.0], [0.0, -1.0, -2.0, -3.0], [False, False, True]),
                   ([10.0, 11.0], [-10.0, -11.0], [False])]
    wrong = gym.spaces.Dict({"observation": box(2), "desired_goal": box(1)})
    with pytest.raises(KeyError, match=r"observation_space has the entry .desired_goal., which the "
                                       r"buffer does not hold \(its step entries: .action., .*observation"):
        to_minari(rb, "test/wrong-v0", observation_space=wrong, action_space=box(1), root=tmp_path)


def test_one_hot_actions_of_a_torchrl_env_export_as_a_discrete_space(tmp_path, monkeypatch):
    """TorchRL's OneHot actions of a Discrete(2) env failed with numpy's reshape error."""
    from torchrl.envs import GymEnv

    env = GymEnv("CartPole-v1")
    env.set_seed(0)
    torch.manual_seed(0)
    rollout = env.rollout(30, break_when_any_done=False)
    rb = make_replay_buffer(64, seed=0)
    rb.extend(rollout)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module="minari")
        to_minari(rb, "test/cartpole-v0", root=tmp_path, action_space=gym.spaces.Discrete(2),
                  observation_space=gym.make("CartPole-v1").observation_space)
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    episodes = list(minari.load_dataset("test/cartpole-v0").iterate_episodes())
    exported = np.concatenate([e.actions for e in episodes])
    assert exported.tolist() == rollout["action"].argmax(-1).tolist()


def test_an_episode_cut_without_a_flag_ends_truncated(tmp_path, monkeypatch):
    """An episode ended by end_episodes (an env reset by hand, a writer released) was
    exported with both flags False on its last step, which Minari reads as not finished,
    like an episode still being written."""
    rb = make_replay_buffer(64, seed=0)
    no = torch.zeros(2, 1, dtype=torch.bool)
    for t in range(3):
        obs = torch.tensor([[float(t)], [10.0 + t]])
        rb.extend(steps(obs, obs + 1, terminated=no, truncated=no))
    rb.end_episodes([0])  # env 0's episode is cut; env 1's goes on
    rb.extend(steps(torch.tensor([[100.0], [13.0]]), torch.tensor([[101.0], [14.0]]), terminated=no, truncated=no))
    space = gym.spaces.Box(-200.0, 200.0, (1,), np.float32)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module="minari")
        to_minari(rb, "test/cut-v0", observation_space=space, action_space=space, root=tmp_path)
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    got = [(e.observations[:, 0].tolist(), e.terminations.tolist(), e.truncations.tolist())
           for e in minari.load_dataset("test/cut-v0").iterate_episodes()]
    assert got == [
        ([0.0, 1.0, 2.0, 3.0], [False] * 3, [False, False, True]),  # cut: ended, not by the MDP
        ([100.0, 101.0], [False], [False]),  # still being written
        ([10.0, 11.0, 12.0, 13.0, 14.0], [False] * 4, [False] * 4),
    ]
