"""MBReplayBuffer as pytorchrl and gymnasium drive it.

Collector-to-learner round trips (one collector or several), pytorchrl-style
scalers without ``fitted``, the autoreset mode read from a (wrapped)
gymnasium vector env, the factory and the package export, ``[num_envs]``
discrete actions as gymnasium gives them, and empty slices as in pytorchrl.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from _model_based_helpers import MODES, assert_cartpole_dynamics, decoded, drive, filled, make_actor, step
from torchrl_ext import MBReplayBuffer
from torchrl_ext.facades import MBReplayBuffer as FacadeExport


def test_collector_to_learner_round_trip_keeps_the_training_set():
    collector = MBReplayBuffer(300, "cpu", make_actor(), None, None, autoreset_mode="SameStep", seed=0)
    drive(collector, MODES.SAME_STEP, steps=30)
    learner = MBReplayBuffer(300, "cpu", make_actor(), None, None, autoreset_mode="SameStep", seed=0)
    learner.insert_data_slice(collector.get_all_buffer_data(data_to_cpu=True))
    collector.reset()
    a, _ = decoded(learner, list(learner.generate_batches(1, 64)))
    assert a.shape[0] == 90
    assert_cartpole_dynamics(*decoded(learner, list(learner.generate_batches(1, 64))))


def test_slices_of_two_collectors_are_not_joined():
    # async pytorchrl: a learner gets slices of several collectors one after the other
    learner = MBReplayBuffer(300, "cpu", make_actor(), None, None, autoreset_mode="SameStep", seed=0)
    for seed in (1, 2, 3):
        collector = MBReplayBuffer(300, "cpu", make_actor(), None, None, autoreset_mode="SameStep")
        drive(collector, MODES.SAME_STEP, steps=7, seed=seed)
        learner.insert_data_slice(collector.get_all_buffer_data())
    inputs, labels = decoded(learner, list(learner.generate_batches(1, 64)))
    assert inputs.shape[0] == 3 * 7 * 3
    assert_cartpole_dynamics(inputs, labels)
    assert learner.get_all_buffer_data()["Observation"].shape == (21, 3, 4)


def test_pytorchrl_style_scaler_without_fitted_attribute():
    class PlainScaler:  # pytorchrl's interface: fit / transform, no `fitted`
        def fit(self, inputs, targets):
            self.mu, self.std = inputs.mean(0), inputs.std(0) + 1

        def transform(self, inputs, targets=None):
            return (inputs - self.mu) / self.std, targets

    buffer = MBReplayBuffer(10, "cpu", make_actor(scaler=PlainScaler()), None, None)
    for t in range(4):
        buffer.insert_transition(step(t))
    assert next(buffer.generate_batches(1, 4))["train_input"].shape == (4, 4)


def test_autoreset_mode_is_read_from_a_gymnasium_vector_env():
    env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")], autoreset_mode=MODES.SAME_STEP)
    assert MBReplayBuffer(5, "cpu", make_actor(), None, env).autoreset_mode.value == "SameStep"
    # envs=None: pytorchrl's convention (its envs reset inside the step), as for an env that declares none;
    # it took gymnasium's NEXT_STEP, and pytorchrl-style steps then trained on reset jumps (review)
    assert MBReplayBuffer(5, "cpu", make_actor(), None, None).autoreset_mode.value == "SameStep"
    assert MBReplayBuffer(5, "cpu", make_actor(), None, None, autoreset_mode="next_step").autoreset_mode.value == "NextStep"
    # a wrapped vector env declares its mode in its metadata only
    wrapped = gym.wrappers.vector.RecordEpisodeStatistics(env)
    assert not hasattr(wrapped, "autoreset_mode")
    assert MBReplayBuffer(5, "cpu", make_actor(), None, wrapped).autoreset_mode.value == "SameStep"
    env.close()


def test_factory_torch_inputs_and_export():
    assert FacadeExport is MBReplayBuffer
    buffer = MBReplayBuffer.create_factory(8, holdout_fraction=0.0)("cpu", make_actor(gym.spaces.Box(-1, 1, (2,))), None, None)
    sample = {k: torch.from_numpy(v) for k, v in step(0, action=np.zeros((1, 2), np.float32)).items()}
    buffer.insert_transition(sample)
    assert buffer.get_all_buffer_data()["Action"].dtype == np.float32
    assert buffer.after_gradients({}, {"loss": 1.0}) == {"loss": 1.0}
    assert MBReplayBuffer.storage_tensors == ("Observation", "RecurrentHiddenStates", "Done", "Action",
                                              "Reward", "NextObservation", "NextRecurrentHiddenStates", "NextDone")


def test_discrete_actions_of_shape_num_envs_as_gymnasium_gives_them():
    # envs.action_space.sample() / a policy's argmax: [N], not pytorchrl's [N, 1]
    flat = MBReplayBuffer(20, "cpu", make_actor(gym.spaces.Discrete(3)), None, None, seed=0)
    column = MBReplayBuffer(20, "cpu", make_actor(gym.spaces.Discrete(3)), None, None, seed=0)
    for t in range(6):
        action = np.array([t % 3, 2], np.int64)
        flat.insert_transition(step(t, n=2, action=action))
        column.insert_transition(step(t, n=2, action=action[:, None]))
    assert flat.get_all_buffer_data()["Action"].tolist() == column.get_all_buffer_data()["Action"][..., 0].tolist()
    a, b = next(flat.generate_batches(1, 12)), next(column.generate_batches(1, 12))
    assert a["train_input"].shape == (12, 2 + 3) and torch.equal(a["train_input"], b["train_input"])
    flat.insert_data_slice(flat.get_data_slice(0, 2))  # the [T, N] slice goes back in
    assert len(flat) == 8


def test_an_empty_slice_inserts_nothing_as_in_pytorchrl():
    buffer = filled(7, size=5)
    before = buffer.get_all_buffer_data()
    buffer.insert_data_slice(buffer.get_data_slice(2, 2))  # [0, N, ...] entries: no step
    assert (buffer.size, buffer.step) == (5, 2)
    assert buffer.get_all_buffer_data()["Observation"].tolist() == before["Observation"].tolist()
    with pytest.raises(ValueError, match=r"'Reward' has no time axis \(shape \(\)\), expected \(T, num_envs, \.\.\.\)"):
        buffer.insert_data_slice({**before, "Reward": np.float32(1.0)})


def test_pytorchrl_style_steps_without_envs_are_not_trained_on_reset_jumps():
    """envs=None took gymnasium's NEXT_STEP: steps of envs that reset inside the step (pytorchrl's
    convention) were trained on reset_obs - last_obs at each episode end, and each episode's
    first step was dropped as a reset step (review; M1)."""
    buffer = MBReplayBuffer(200, "cpu", make_actor(), None, None, seed=0)
    with pytest.warns(UserWarning, match="without their true final observation"):
        drive(buffer, MODES.SAME_STEP, steps=40, num_envs=3, pass_info=False)
    data = buffer.get_all_buffer_data()
    done_steps = int((data["NextDone"] != 0).sum())
    inputs, labels = decoded(buffer, list(buffer.generate_batches(1, 64)))
    assert inputs.shape[0] == 40 * 3 - done_steps > 0  # every step but the done ones
    assert_cartpole_dynamics(inputs, labels)
