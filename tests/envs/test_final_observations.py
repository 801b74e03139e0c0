"""An episode's true final observation, read from the infos, meets the checks of the step's own.

In SAME_STEP / LEGACY mode the final observation of a done env comes from the
infos and replaces the (reset) next observation. It was written in without
any check: 300 became 44 in uint8, 3.7 became 3, and a dict observation
missing an entry kept the reset observation's value there (for a goal env,
the goal hindsight relabels with).
"""
from __future__ import annotations

import re
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

from torchrl_ext import MBReplayBuffer, NStepReplayStorage
from torchrl_ext.core.schema import EntryKeyError
from torchrl_ext.envs import GymVectorAdapter
from torchrl_ext.transforms import StandardScaler


def _same_step_infos(final):
    found = np.empty(2, dtype=object)
    found[0] = final
    return {"final_obs": found, "_final_obs": np.array([True, False])}


def _adapter_step(mode, final, obs=None):
    adapter = GymVectorAdapter(2, autoreset_mode=mode)
    obs = np.zeros((2, 2), np.uint8) if obs is None else obs
    infos = _same_step_infos(final) if mode == "same_step" else [{"terminal_observation": final}, {}]
    return adapter.step(obs, np.zeros(2), np.zeros(2), [True, False], [False, False], infos, obs + 9)


@pytest.mark.parametrize("mode", ["same_step", "legacy"])
@pytest.mark.parametrize("final, shown", [([300, 300], "300"), ([-1, 2], "-1"), ([3.7, 3.0], "3.7")])
def test_final_values_a_uint8_observation_cannot_hold_are_refused(mode, final, shown):
    where = "the final observation of env 0" if mode == "same_step" else "infos[0]['terminal_observation']"
    with pytest.raises(ValueError, match=(
        rf"GymVectorAdapter.step \(step 0\): {re.escape(where)} holds values of \('next', 'observation'\) "
        rf"that uint8 cannot hold exactly \({shown} in its place\)"
    )):
        _adapter_step(mode, np.array(final))


def test_final_observations_of_the_step_s_dtype_shape_and_entries_are_stored():
    step = _adapter_step("same_step", np.array([7.0, 8.0]))  # integral floats: exact in uint8
    assert step["next", "observation"].tolist() == [[7, 8], [9, 9]]
    with pytest.raises(ValueError, match=r"gives \('next', 'observation'\) shape \(3,\), expected \(2,\)"):
        _adapter_step("same_step", np.zeros(3))


def test_a_dict_final_observation_has_every_entry_and_no_other():
    obs = {"observation": np.zeros((2, 1), np.float32), "achieved_goal": np.zeros((2, 2), np.float32)}
    space = gym.spaces.Dict(observation=gym.spaces.Box(-9, 9, (1,)), achieved_goal=gym.spaces.Box(-9, 9, (2,)))
    storage = NStepReplayStorage(space, gym.spaces.Box(-1, 1, (1,)), storage_size=64, num_envs=2,
                                 batch_size=2, num_workers=0, autoreset_mode="same_step", seed=0)
    reset = {k: v + 9 for k, v in obs.items()}
    args = (np.zeros((2, 1), np.float32), np.zeros(2, np.float32), np.array([True, False]), np.zeros(2, bool))
    for final, missing, extra in (({"observation": np.ones(1)}, "('next', 'achieved_goal')", ""),
                                  ({**obs, "extra": np.ones(1)}, "", "('next', 'extra')")):
        final = {k: v[0] if k != "extra" else v for k, v in final.items()}
        with pytest.raises(EntryKeyError, match=re.escape(f"(missing [{missing and repr(missing)}"
                                                          f"], not in the step [{extra and repr(extra)}])")):
            storage.add(obs, *args, _same_step_infos(final), reset)
    assert len(storage.rb) == 0


def _mb_insert(final, obs):
    actor = SimpleNamespace(action_space=gym.spaces.Discrete(3),
                            dynamics_model=SimpleNamespace(standard_scaler=StandardScaler(), reward_function=None))
    buffer = MBReplayBuffer(10, "cpu", actor, None, None, autoreset_mode="same_step", seed=0)
    reset = {k: v + 9 for k, v in obs.items()} if isinstance(obs, dict) else obs + 9
    buffer.insert_transition({
        "Observation": obs, "Action": np.array([[0], [1]]), "Reward": np.zeros((2, 1), np.float32),
        "NextObservation": reset, "Done": np.zeros((2, 1), np.float32),
        "NextDone": np.array([[1.0], [0.0]], np.float32), "EnvironmentInformation": _same_step_infos(final),
    })
    return buffer


def test_model_based_final_observations_are_checked_too():
    with pytest.raises(ValueError, match=r"\['final_obs'\]\[0\] holds values of 'NextObservation' that "
                                         r"uint8 cannot hold exactly \(300 in its place\)"):
        _mb_insert(np.full(2, 300), np.zeros((2, 2), np.uint8))
    obs = {"a": np.zeros((2, 1), np.float32), "b": np.zeros((2, 1), np.float32)}
    with pytest.raises(EntryKeyError, match=re.escape("""(missing ["'NextObservation'['b']"]""")):
        _mb_insert({"a": np.full(1, 0.5, np.float32)}, obs)
    buffer = _mb_insert({"a": np.full(1, 0.5, np.float32), "b": np.full(1, 0.25, np.float32)}, obs)
    stored = buffer.get_all_buffer_data()["NextObservation"]
    assert stored["a"][0, 0].tolist() == [0.5] and stored["b"][0, 0].tolist() == [0.25]


def _nstep_discrete(n_obs: int = 50):
    return NStepReplayStorage(gym.spaces.Discrete(n_obs), gym.spaces.Discrete(2), storage_size=64, num_envs=2,
                              batch_size=2, num_workers=0, autoreset_mode="same_step", seed=0)


def test_a_discrete_final_observation_fills_its_column():
    """gymnasium gives one env's Discrete final observation as a scalar; the facade holds
    Discrete observations as [num_envs, 1] columns, and the scalar was refused
    ('shape (), expected (1,)') once final observations were checked."""
    storage = _nstep_discrete()
    obs, nxt = np.array([[3], [4]]), np.array([[40], [5]])  # env 0 ends: 40 is its reset observation
    storage.add(obs, np.array([0, 1]), np.zeros(2), np.array([True, False]), np.zeros(2, bool),
                _same_step_infos(np.int64(7)), nxt)
    stored = storage.rb.storage.get(storage.rb.storage.live_transition_rows())
    assert sorted(zip(stored["observation"].view(-1).tolist(), stored["next", "observation"].view(-1).tolist())) \
        == [(3, 7), (4, 5)]


def test_a_final_observation_outside_the_space_is_refused():
    """The final observation skipped the space's range checks that next_observations pass."""
    storage = _nstep_discrete(5)
    with pytest.raises(ValueError, match=r"next_observations holds values in \[2, 9\], outside Discrete\(5\)"):
        storage.add(np.array([[3], [1]]), np.array([0, 1]), np.zeros(2), np.array([True, False]),
                    np.zeros(2, bool), _same_step_infos(np.int64(9)), np.array([[0], [2]]))
    assert len(storage) == 0
