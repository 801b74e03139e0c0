"""MBReplayBuffer (pytorchrl API): regressions M1-M13, gymnasium vector envs, errors."""
from __future__ import annotations

import copy
import pickle
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from torchrl_ext import MBReplayBuffer
from torchrl_ext.facades import MBReplayBuffer as FacadeExport
from torchrl_ext.transforms import StandardScaler

MODES = gym.vector.AutoresetMode


def make_actor(space=None, scaler=None, reward_function=None):
    space = gym.spaces.Discrete(2) if space is None else space
    model = SimpleNamespace(standard_scaler=scaler if scaler is not None else StandardScaler(),
                            reward_function=reward_function)
    return SimpleNamespace(action_space=space, dynamics_model=model)


def step(t, n=1, done=0.0, next_done=0.0, obs_dim=2, action=None):
    """A pytorchrl transition dict of ``n`` envs whose observation is ``t`` (env i: ``t + 100 i``)."""
    base = (t + 100.0 * np.arange(n, dtype=np.float32))[:, None]
    return {
        "Observation": np.repeat(base, obs_dim, 1).astype(np.float32),
        "Action": np.zeros((n, 1), np.int64) if action is None else action,
        "Reward": base.astype(np.float32),
        "NextObservation": np.repeat(base + 1, obs_dim, 1).astype(np.float32),
        "Done": np.full((n, 1), done, np.float32),
        "NextDone": np.full((n, 1), next_done, np.float32),
    }


def filled(steps, size=50, n=1, **kwargs):
    buffer = MBReplayBuffer(size, "cpu", make_actor(), None, None, seed=0, **kwargs)
    for t in range(steps):
        buffer.insert_transition(step(t, n))
    return buffer


def decoded(buffer, batches):
    """De-normalised ``(inputs, labels)`` of every training batch."""
    scaler = buffer.scaler
    inputs = torch.cat([b["train_input"] for b in batches]) * scaler.input_std + scaler.input_mu
    labels = scaler.inverse_transform(torch.cat([b["train_label"] for b in batches]))
    return inputs, labels


# ------------------------------------------------------------ gymnasium vector envs
def drive(buffer, mode, steps=40, num_envs=3, pass_info=True, seed=0):
    """Run CartPole (5-step episodes) in ``mode``, inserting pytorchrl transition dicts."""
    env = gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1", max_episode_steps=5)] * num_envs, autoreset_mode=mode
    )
    obs, _ = env.reset(seed=seed)
    done = np.zeros(num_envs, bool)
    rng = np.random.default_rng(seed)
    real = 0
    for _ in range(steps):
        action = rng.integers(0, 2, num_envs)
        nxt, reward, term, trunc, info = env.step(action)
        next_done = term | trunc
        sample = {"Observation": obs, "Action": action[:, None], "Reward": reward[:, None].astype(np.float32),
                  "NextObservation": nxt, "Done": done[:, None].astype(np.float32),
                  "NextDone": next_done[:, None].astype(np.float32)}
        if pass_info:
            sample["EnvironmentInformation"] = info
        buffer.insert_transition(sample)
        real += int((~done).sum()) if mode == MODES.NEXT_STEP else num_envs
        if mode == MODES.DISABLED and next_done.any():
            nxt, _ = env.reset(options={"reset_mask": next_done})
        obs, done = nxt, next_done
    env.close()
    return real


def assert_cartpole_dynamics(inputs, labels):
    """Every pair is a real CartPole step: obs + delta == step(obs, action), reward 1."""
    sim = gym.make("CartPole-v1").unwrapped
    sim.reset(seed=0)
    for x, y in zip(inputs.tolist(), labels.tolist()):
        sim.state, sim.steps_beyond_terminated = np.array(x[:4], np.float64), None
        nxt, *_ = sim.step(int(np.argmax(x[4:])))
        np.testing.assert_allclose(np.array(x[:4]) + np.array(y[:4]), nxt, atol=2e-4)
        assert abs(y[4] - 1.0) < 1e-4


@pytest.mark.parametrize("mode", [MODES.NEXT_STEP, MODES.SAME_STEP, MODES.DISABLED])
def test_m1_only_real_transitions_in_every_autoreset_mode(mode):
    env_like = SimpleNamespace(autoreset_mode=mode)  # the mode is read from envs
    buffer = MBReplayBuffer(200, "cpu", make_actor(), None, env_like, seed=0)
    real = drive(buffer, mode)
    inputs, labels = decoded(buffer, list(buffer.generate_batches(1, 32)))
    assert inputs.shape[0] == real  # every real transition, once; reset steps left out
    assert_cartpole_dynamics(inputs, labels)  # no final -> reset jump anywhere


def test_m1_same_step_without_final_obs_is_stored_never_trained_and_warned_once():
    buffer = MBReplayBuffer(200, "cpu", make_actor(), None, None, autoreset_mode="SameStep", seed=0)
    with pytest.warns(UserWarning, match=r"without their true final observation .* never trained on") as record:
        drive(buffer, MODES.SAME_STEP, pass_info=False)
    assert len(record) == 1
    data = buffer.get_all_buffer_data()
    boundary = data["Boundary"][..., 0]
    assert (boundary == (data["NextDone"][..., 0] != 0)).all() and boundary.any()
    inputs, labels = decoded(buffer, list(buffer.generate_batches(1, 32)))
    assert inputs.shape[0] == boundary.size - boundary.sum()
    assert_cartpole_dynamics(inputs, labels)


def test_m1_next_step_keeps_reset_steps_in_slices_but_not_in_batches():
    buffer = MBReplayBuffer(200, "cpu", make_actor(), None, None, seed=0)
    drive(buffer, MODES.NEXT_STEP, steps=12, num_envs=2)
    data = buffer.get_all_buffer_data()
    assert data["Observation"].shape == (12, 2, 4)  # every inserted step is stored
    assert (data["Boundary"][..., 0] == (data["Done"][..., 0] != 0)).all()


def test_m2_no_empty_last_batch():
    buffer = filled(8)
    assert [b["train_input"].shape[0] for b in buffer.generate_batches(1, 4)] == [4, 4]
    assert [b["train_input"].shape[0] for b in buffer.generate_batches(1, 3)] == [3, 3, 2]


def test_m3_one_hot_width_from_the_action_space():
    buffer = MBReplayBuffer(20, "cpu", make_actor(gym.spaces.Discrete(5)), None, None)
    for t in range(4):  # only actions 0 and 1 occur
        buffer.insert_transition(step(t, action=np.array([[t % 2]])))
    batch = next(buffer.generate_batches(1, 4))
    assert batch["train_input"].shape == (4, 2 + 5)


def test_m4_max_size_resizes_and_keeps_the_newest_steps():
    buffer = filled(9, size=6)
    buffer.update_storage_parameter("max_size", 4)
    assert (buffer.max_size, buffer.size) == (4, 4)
    assert buffer.get_all_buffer_data()["Observation"][:, 0, 0].tolist() == [5.0, 6.0, 7.0, 8.0]
    buffer.update_storage_parameter("max_size", 10)
    buffer.insert_transition(step(9))
    assert buffer.get_all_buffer_data()["Observation"][:, 0, 0].tolist() == [5.0, 6.0, 7.0, 8.0, 9.0]
    assert sum(b["train_input"].shape[0] for b in buffer.generate_batches(1, 2)) == 5


def test_m5_reset_empties():
    buffer = filled(5)
    buffer.reset()
    assert (buffer.size, buffer.step, len(buffer)) == (0, 0, 0)
    assert all(v is None for v in buffer.get_all_buffer_data().values())
    with pytest.raises(ValueError, match=r"the buffer is empty; insert transitions first"):
        buffer.generate_batches(1, 4)
    buffer.insert_transition(step(7))
    assert buffer.get_all_buffer_data()["Observation"][:, 0, 0].tolist() == [7.0]


def test_m6_get_all_buffer_data_copies_in_time_order_across_the_wrap():
    buffer = filled(13, size=5)
    data = buffer.get_all_buffer_data(data_to_cpu=True)
    assert data["Observation"][:, 0, 0].tolist() == [8.0, 9.0, 10.0, 11.0, 12.0]
    assert data["NextObservation"][:, 0, 0].tolist() == [9.0, 10.0, 11.0, 12.0, 13.0]
    data["Observation"][:] = -1  # a copy: the buffer is unchanged
    assert buffer.get_all_buffer_data()["Observation"][0, 0, 0] == 8.0


def test_m7_n_envs_are_flattened_into_one_dataset():
    buffer = filled(4, n=3)
    batches = list(buffer.generate_batches(1, 5))
    assert [b["train_input"].shape for b in batches] == [(5, 4), (5, 4), (2, 4)]
    inputs, _ = decoded(buffer, batches)
    assert sorted(inputs[:, 0].round().tolist()) == sorted(t + 100.0 * i for t in range(4) for i in range(3))


def test_m8_native_dtypes_and_dict_observations():
    buffer = MBReplayBuffer(10, "cpu", make_actor(), None, None)
    for t in range(3):
        obs = {"a": np.full((2, 2), t, np.float64), "b": np.full((2, 3), t, np.uint8)}
        nxt = {"a": np.full((2, 2), t + 1, np.float64), "b": np.full((2, 3), t + 1, np.uint8)}
        buffer.insert_transition({"Observation": obs, "NextObservation": nxt, "Action": np.ones((2, 1), np.int64),
                                  "Reward": np.zeros((2, 1), np.float16), "NextDone": np.zeros((2, 1), bool),
                                  "Done": np.zeros((2, 1), bool),
                                  "RecurrentHiddenStates": {"world_model_rhs": np.zeros((2, 1), np.float32)}})
    data = buffer.get_data_slice(0, 3)
    assert data["Observation"]["b"].dtype == np.uint8 and data["Observation"]["a"].dtype == np.float64
    assert data["Action"].dtype == np.int64 and data["Reward"].dtype == np.float16
    assert data["RecurrentHiddenStates"]["world_model_rhs"].shape == (3, 2, 1)
    assert data["NextObservation"]["b"][:, 0, 0].tolist() == [1, 2, 3]
    batch = next(buffer.generate_batches(1, 6))
    assert batch["train_input"].shape == (6, 2 + 3 + 2) and batch["train_label"].shape == (6, 2 + 3 + 1)


class CountingScaler(StandardScaler):
    def __init__(self):
        super().__init__()
        self.fits = 0

    def fit(self, inputs, targets=None):
        self.fits += 1
        super().fit(inputs, targets)


def test_m9_scaler_fitted_on_training_rows_only_and_only_when_asked():
    scaler = CountingScaler()
    buffer = MBReplayBuffer(100, "cpu", make_actor(scaler=scaler), None, None, holdout_fraction=0.3, seed=1)
    for t in range(40):
        buffer.insert_transition(step(t))
    first = list(buffer.generate_batches(1, 8))
    inputs, _ = decoded(buffer, first)
    held = first[0]["holdout_input"] * scaler.input_std + scaler.input_mu
    assert held.shape[0] > 0 and inputs.shape[0] + held.shape[0] == 40
    assert torch.allclose(scaler.input_mu[0, 0], inputs[:, 0].mean())  # training rows only
    mu = scaler.input_mu.clone()
    for t in range(40, 60):
        buffer.insert_transition(step(t))
    list(buffer.generate_batches(1, 8))
    assert scaler.fits == 1 and torch.equal(scaler.input_mu, mu)  # not refitted behind the model's back
    buffer.before_gradients()  # new data arrived: refit, once
    assert scaler.fits == 2 and not torch.equal(scaler.input_mu, mu)
    single = MBReplayBuffer(10, "cpu", make_actor(), None, None)
    single.insert_transition(step(0))
    assert torch.isfinite(next(single.generate_batches(1, 4))["train_input"]).all()  # std 1, not NaN


def test_m10_num_epochs_num_mini_batch_and_holdout():
    buffer = filled(20, holdout_fraction=0.25)
    batches = list(buffer.generate_batches(1, 4, num_epochs=3))
    assert sorted({b["epoch"] for b in batches}) == [0, 1, 2]
    per_epoch = [torch.cat([b["train_input"] for b in batches if b["epoch"] == e]) for e in range(3)]
    held = batches[0]["holdout_input"]
    n = 20 - held.shape[0]
    assert all(x.shape[0] == n for x in per_epoch)
    assert all(torch.equal(x[x[:, 0].argsort()], per_epoch[0][per_epoch[0][:, 0].argsort()]) for x in per_epoch)
    assert not set(held[:, 0].tolist()) & set(per_epoch[0][:, 0].tolist())  # never trained on
    sized = list(buffer.generate_batches(4, mini_batch_size=None))
    assert len(sized) == 4 and sum(b["train_input"].shape[0] for b in sized) == n
    assert [b["batch_number"] for b in sized] == [0, 1, 2, 3]


def test_m10_ensembles():
    buffer = filled(10, ensemble_size=3)
    batches = list(buffer.generate_batches(1, 4))
    assert [tuple(b["train_input"].shape) for b in batches] == [(3, 4, 4), (3, 4, 4), (3, 2, 4)]
    for member in torch.cat([b["train_input"] for b in batches], 1):
        assert member[:, 0].unique().numel() == 10  # each member: a permutation


def test_m11_slices_are_validated():
    buffer = filled(3, size=5)
    data = buffer.get_all_buffer_data()
    too_long = {k: None if v is None else np.concatenate([v, v]) for k, v in data.items()}
    with pytest.raises(ValueError, match=r"'Observation' has 6 steps, more than the capacity size=5"):
        buffer.insert_data_slice(too_long)
    with pytest.raises(KeyError, match=r"unknown key 'Pixels'"):
        buffer.insert_data_slice({**data, "Pixels": data["Observation"]})
    uneven = {**data, "Reward": data["Reward"][:2]}
    with pytest.raises(ValueError, match=r"keys have different lengths"):
        buffer.insert_data_slice(uneven)
    with pytest.raises(KeyError, match=r"keys \[.*\] differ from the first insert's"):
        buffer.insert_data_slice({k: v for k, v in data.items() if k != "Done"})
    buffer.insert_data_slice(data)  # a valid slice goes in after the rejected ones
    assert buffer.get_all_buffer_data()["Observation"][:, 0, 0].tolist() == [1.0, 2.0, 0.0, 1.0, 2.0]


def test_m12_get_data_slice_wraps_around():
    buffer = filled(7, size=5)  # positions 0, 1 hold steps 5, 6; 2..4 hold 2..4
    assert buffer.step == 2
    assert buffer.get_data_slice(3, 1)["Observation"][:, 0, 0].tolist() == [3.0, 4.0, 5.0]
    assert buffer.get_data_slice(2, 2)["Observation"].shape == (0, 1, 2)  # empty, not missing
    with pytest.raises(ValueError, match=r"start_pos=5, expected 0 <= start_pos <= 4"):
        buffer.get_data_slice(5, 1)


def test_m13_reward_optional_with_a_reward_function():
    actor = make_actor(reward_function=lambda obs, action, next_obs: 0.0)
    buffer = MBReplayBuffer(10, "cpu", actor, None, None)
    for t in range(3):
        sample = step(t)
        del sample["Reward"]
        buffer.insert_transition(sample)
    assert next(buffer.generate_batches(1, 3))["train_label"].shape == (3, 2)  # delta only
    assert buffer.get_all_buffer_data()["Reward"] is None
    without = MBReplayBuffer(10, "cpu", make_actor(), None, None)
    sample = step(0)
    del sample["Reward"]
    with pytest.raises(KeyError, match=r"missing keys \['Reward'\].*reward_function is set"):
        without.insert_transition(sample)


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
    assert MBReplayBuffer(5, "cpu", make_actor(), None, None).autoreset_mode.value == "NextStep"
    # a wrapped vector env declares its mode in its metadata only
    wrapped = gym.wrappers.vector.RecordEpisodeStatistics(env)
    assert not hasattr(wrapped, "autoreset_mode")
    assert MBReplayBuffer(5, "cpu", make_actor(), None, wrapped).autoreset_mode.value == "SameStep"
    env.close()


class OldApiVecEnv:
    """A vector env as pytorchrl's ``SequentialVecEnv`` steps: the old 4-tuple API, each
    env reset inside the step that ends its episode (the reset observation returned in
    its place, the final one dropped); no autoreset mode declared."""

    def __init__(self, num_envs, episode_steps=5):
        self.envs = [gym.make("CartPole-v1", max_episode_steps=episode_steps) for _ in range(num_envs)]
        self.num_envs = num_envs

    def reset(self, seed):
        return np.stack([e.reset(seed=seed + i)[0] for i, e in enumerate(self.envs)])

    def step(self, actions):
        out = []
        for env, action in zip(self.envs, actions):
            obs, reward, term, trunc, _ = env.step(int(action))
            if term or trunc:
                obs, _ = env.reset()
            out.append((obs, reward, term or trunc))
        obs, reward, done = (np.array(x) for x in zip(*out))
        return obs, reward.astype(np.float32), done, [{} for _ in self.envs]


def test_m1_a_pytorchrl_style_vector_env_trains_only_real_transitions_with_the_import_changed():
    """pytorchrl's collector loop, as written for the original: only the import differs."""
    envs = OldApiVecEnv(3)
    buffer = MBReplayBuffer(200, "cpu", make_actor(), None, envs, seed=0)
    assert buffer.autoreset_mode.value == "SameStep"
    obs, done = envs.reset(seed=0), np.zeros(3, bool)
    rng = np.random.default_rng(0)
    with pytest.warns(UserWarning, match=r"without their true final observation .* never trained on"):
        for _ in range(40):
            action = rng.integers(0, 2, 3)
            nxt, reward, next_done, info = envs.step(action)
            buffer.insert_transition({
                "Observation": obs, "Action": action[:, None], "Reward": reward[:, None],
                "NextObservation": nxt, "Done": done[:, None].astype(np.float32),
                "NextDone": next_done[:, None].astype(np.float32), "EnvironmentInformation": info})
            obs, done = nxt, next_done
    inputs, labels = decoded(buffer, list(buffer.generate_batches(1, 32)))
    # every step but the done ones (their next observation is a reset observation), the
    # first step of each new episode included
    assert inputs.shape[0] == 40 * 3 - 40 * 3 // 5
    assert_cartpole_dynamics(inputs, labels)


def test_factory_torch_inputs_and_export():
    assert FacadeExport is MBReplayBuffer
    buffer = MBReplayBuffer.create_factory(8, holdout_fraction=0.0)("cpu", make_actor(gym.spaces.Box(-1, 1, (2,))), None, None)
    sample = {k: torch.from_numpy(v) for k, v in step(0, action=np.zeros((1, 2), np.float32)).items()}
    buffer.insert_transition(sample)
    assert buffer.get_all_buffer_data()["Action"].dtype == np.float32
    assert buffer.after_gradients({}, {"loss": 1.0}) == {"loss": 1.0}
    assert MBReplayBuffer.storage_tensors == ("Observation", "RecurrentHiddenStates", "Done", "Action",
                                              "Reward", "NextObservation", "NextRecurrentHiddenStates", "NextDone")


def test_errors():
    with pytest.raises(AttributeError, match=r"actor.dynamics_model.standard_scaler must exist"):
        MBReplayBuffer(10, "cpu", SimpleNamespace(action_space=gym.spaces.Discrete(2)), None, None)
    no_reward_fn = SimpleNamespace(action_space=gym.spaces.Discrete(2),
                                   dynamics_model=SimpleNamespace(standard_scaler=StandardScaler()))
    with pytest.raises(AttributeError, match=r"no reward_function attribute"):
        MBReplayBuffer(10, "cpu", no_reward_fn, None, None)
    with pytest.raises(TypeError, match=r"actor.action_space is MultiBinary, expected a gym or gymnasium Discrete or Box"):
        MBReplayBuffer(10, "cpu", make_actor(gym.spaces.MultiBinary(3)), None, None)
    with pytest.raises(ValueError, match=r"size=0, expected an int >= 1"):
        MBReplayBuffer(0, "cpu", make_actor(), None, None)
    with pytest.raises(ValueError, match=r"EpochSampler: holdout_fraction=1.0, expected a value in \[0, 1\)"):
        MBReplayBuffer(10, "cpu", make_actor(), None, None, holdout_fraction=1.0)
    with pytest.raises(ValueError, match=r"autoreset_mode='Sometimes'"):
        MBReplayBuffer(10, "cpu", make_actor(), None, None, autoreset_mode="Sometimes")
    buffer = filled(2)
    bad = step(2)
    bad["NextObservation"] = np.zeros((1, 3), np.float32)
    with pytest.raises(ValueError, match=r"'NextObservation' has shape \(1, 3\), expected \(1, 2\) as in the first insert"):
        buffer.insert_transition(bad)
    bad = step(2)
    bad["Action"] = bad["Action"].astype(np.int32)
    with pytest.raises(TypeError, match=r"'Action' has dtype int32, expected int64 as in the first insert"):
        buffer.insert_transition(bad)
    bad = step(2, n=2)
    with pytest.raises(ValueError, match=r"'Observation' has shape \(2, 2\), expected \(1, \.\.\.\) \(one row per env\)"):
        buffer.insert_transition(bad)
    missing = step(2)
    del missing["NextDone"]
    with pytest.raises(KeyError, match=r"missing keys \['NextDone'\]"):
        buffer.insert_transition(missing)
    with pytest.raises(KeyError, match=r"unknown keys \['Extra'\]"):
        buffer.insert_transition({**step(2), "Extra": np.zeros(1)})
    with pytest.raises(ValueError, match=r"'Action' holds \[7\], expected integers in \[0, 2\) for the Discrete\(2\)"):
        buffer.insert_transition(step(2, action=np.array([[7]])))
    with pytest.raises(ValueError, match=r"unknown parameter 'gamma'"):
        buffer.update_storage_parameter("gamma", 0.9)
    with pytest.raises(ValueError, match=r"max_size=-1, expected an int >= 1"):
        buffer.update_storage_parameter("max_size", -1)
    with pytest.raises(ValueError, match=r"validation_percentage=1.5, expected a value in \[0, 1\)"):
        buffer.update_storage_parameter("validation_percentage", 1.5)
    with pytest.raises(ValueError, match=r"mini_batch_size=0, expected an int >= 1"):
        buffer.generate_batches(1, 0)
    with pytest.raises(ValueError, match=r"num_epochs=0, expected an int >= 1"):
        buffer.generate_batches(1, 4, num_epochs=0)
    with pytest.raises(ValueError, match=r"num_mini_batch=None, expected an int >= 1 when mini_batch_size is None"):
        buffer.generate_batches(None, None)
    # counts were truncated (2.5 -> 2) or converted ("3" -> 3) without a word
    with pytest.raises(TypeError, match=r"generate_batches: mini_batch_size=2.5 \(float\), expected an int >= 1"):
        buffer.generate_batches(1, 2.5)
    with pytest.raises(TypeError, match=r"generate_batches: num_epochs='3' \(str\), expected an int >= 1"):
        buffer.generate_batches(1, 4, num_epochs="3")
    with pytest.raises(TypeError, match=r"expected a dict of transition entries, got list"):
        buffer.insert_transition([1, 2])


def test_steps_laid_out_like_the_first_insert_and_others_store_the_same():
    # numpy, torch and None-valued steps after the first insert: each either
    # stored exactly as given or refused with the full checks' message
    buffer = filled(1)
    buffer.insert_transition({k: torch.from_numpy(v) for k, v in step(1).items()})
    buffer.insert_transition({**step(2), "EnvironmentInformation": {}})
    with pytest.raises(KeyError, match=r"missing keys \['NextDone'\]"):
        buffer.insert_transition({**step(3), "NextDone": None})
    data = buffer.get_data_slice(0, 3)
    assert data["Observation"][:, 0, 0].tolist() == [0.0, 1.0, 2.0]
    assert data["NextObservation"][:, 0, 0].tolist() == [1.0, 2.0, 3.0]
    assert len(buffer) == 3


def test_nan_observations_that_follow_on_stay_one_episode():
    # observations compare bit for bit: a NaN entry that the previous next
    # observation also held does not cut the episode (== would: NaN != NaN)
    buffer = MBReplayBuffer(50, "cpu", make_actor(gym.spaces.Box(-1, 1, (1,))), None, None,
                            autoreset_mode="Disabled")
    for t in range(6):
        buffer.insert_transition({
            "Observation": np.array([[np.nan, t]], np.float32),
            "NextObservation": np.array([[np.nan, t + 1]], np.float32),
            "Action": np.zeros((1, 1), np.float32), "Reward": np.zeros((1, 1), np.float32),
            "NextDone": np.zeros((1, 1), np.float32),
        })
    assert buffer.get_all_buffer_data()["Observation"].shape == (6, 1, 2)  # written
    _, lengths, _ = buffer.rb.storage.episode_index.live_episodes()
    assert lengths.tolist() == [6]


@pytest.mark.parametrize("copy_buffer", [copy.deepcopy, lambda b: pickle.loads(pickle.dumps(b))],
                         ids=["deepcopy", "pickle"])
def test_a_copy_with_staged_steps_stores_the_steps_inserted_after_it(copy_buffer):
    # pytorchrl's async gradient worker deep-copies the collector's storage (which
    # holds the staged start steps); both copies then keep inserting
    buffer = MBReplayBuffer(50, "cpu", make_actor(gym.spaces.Box(-1, 1, (1,))), None, None)
    for t in range(5):
        buffer.insert_transition(step(t, action=np.zeros((1, 1), np.float32)))
    copied = copy_buffer(buffer)
    for t in range(5, 8):
        copied.insert_transition(step(t, action=np.zeros((1, 1), np.float32)))
        buffer.insert_transition(step(t, action=np.full((1, 1), 0.5, np.float32)))
    data = copied.get_all_buffer_data()
    assert data["Observation"][:, 0, 0].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    assert data["Action"][:, 0, 0].tolist() == [0.0] * 8  # the original's inserts stay in the original
    assert buffer.get_all_buffer_data()["Action"][:, 0, 0].tolist() == [0.0] * 5 + [0.5] * 3


def test_m12_get_data_slice_of_the_whole_ring_and_wrap_before_it_is_full():
    full = filled(7, size=5)
    # as in pytorchrl, (0, max_size) is every position (a == b is empty)
    assert full.get_data_slice(0, 5)["Observation"][:, 0, 0].tolist() == [5.0, 6.0, 2.0, 3.0, 4.0]
    exactly = filled(5, size=5)
    assert exactly.get_data_slice(0, 5)["Observation"][:, 0, 0].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    partial = filled(5, size=10)  # positions 0 .. 4 hold steps 0 .. 4: [3, size) + [0, 1)
    assert partial.get_data_slice(3, 1)["Observation"][:, 0, 0].tolist() == [3.0, 4.0, 0.0]


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


@pytest.mark.parametrize("space", [gym.spaces.Discrete(2), gym.spaces.Box(-1, 1, (2,))], ids=["Discrete", "Box"])
def test_m10_holdout_fraction_with_no_transition_held_out_yet(space):
    # a few transitions, none held out by the split: an empty holdout, not a crash
    buffer = MBReplayBuffer(10, "cpu", make_actor(space), None, None, holdout_fraction=0.1, seed=1)
    action = np.zeros((1, 1), np.int64) if space.shape == () else np.zeros((1, 2), np.float32)
    for t in range(3):
        buffer.insert_transition(step(t, action=action))
    batches = list(buffer.generate_batches(1, 4))
    assert sum(b["train_input"].shape[0] for b in batches) == 3
    assert batches[0]["holdout_input"].shape == (0, 4) and batches[0]["holdout_label"].shape == (0, 3)


def test_every_transition_held_out_raises_before_the_scaler_is_fitted():
    class PlainScaler:  # pytorchrl's interface: fitting on no rows gives NaN statistics, no error
        def fit(self, inputs, targets):
            self.mu = inputs.mean(0)

        def transform(self, inputs, targets=None):
            return inputs - self.mu, targets

    scaler = PlainScaler()
    buffer = MBReplayBuffer(10, "cpu", make_actor(scaler=scaler), None, None, holdout_fraction=0.9, seed=0)
    for t in range(2):
        buffer.insert_transition(step(t))  # both held out by this split
    message = r"no training transition among 2 candidates \(holdout_fraction=0.9\); add data or lower the holdout"
    with pytest.raises(ValueError, match=message):
        buffer.before_gradients()
    with pytest.raises(ValueError, match=message):
        buffer.generate_batches(1, 4)
    assert not hasattr(scaler, "mu")  # the model's normalisation is untouched


def test_actions_the_model_cannot_take_are_refused_at_the_insert_naming_action():
    # stored, they would fail every later generate_batches call, under TorchRL's key name
    discrete = MBReplayBuffer(10, "cpu", make_actor(gym.spaces.Discrete(3)), None, None)
    with pytest.raises(ValueError, match=r"'Action' has shape \(2, 3\), expected \(2,\) or \(2, 1\): one "
                                         r"action index per env for the Discrete\(3\) action space"):
        discrete.insert_transition(step(0, n=2, action=np.eye(3, dtype=np.float32)[[0, 2]]))  # one-hot
    with pytest.raises(ValueError, match=r"'Action' has shape \(4, 2, 3\), expected \(4, 2\) or \(4, 2, 1\)"):
        discrete.insert_data_slice({k: np.stack([v] * 4) for k, v in step(0, n=2, action=np.zeros((2, 3))).items()})
    box = MBReplayBuffer(10, "cpu", make_actor(gym.spaces.Box(-1, 1, (2,))), None, None)
    with pytest.raises(TypeError, match=r"'Action' is a dict \(keys \['x'\]\), expected one array \(1, \.\.\.\)"):
        box.insert_transition(step(0, action={"x": np.zeros((1, 2), np.float32)}))
    discrete.insert_transition(step(0, n=2, action=np.array([[0], [2]])))  # the checks fixed nothing
    assert next(discrete.generate_batches(1, 4))["train_input"].shape == (2, 2 + 3)


def test_next_observations_unlike_the_observations_are_refused_at_the_insert():
    # delta = next - obs needs the same entries, shapes and dtypes: stored, they failed every
    # later generate_batches under TorchRL's key names (a dict mismatch: a bare KeyError)
    buffer = MBReplayBuffer(10, "cpu", make_actor(), None, None)
    wider = {**step(0), "NextObservation": np.zeros((1, 3), np.float32)}
    with pytest.raises(ValueError, match=r"'NextObservation' has shape \(1, 3\) and dtype float32, "
                                         r"expected \(1, 2\) and float32 as 'Observation'"):
        buffer.insert_transition(wider)
    wider = {**step(0), "NextObservation": np.zeros((1, 2), np.float64)}
    with pytest.raises(ValueError, match=r"'NextObservation' has shape \(1, 2\) and dtype float64"):
        buffer.insert_transition(wider)
    renamed = {**step(0), "Observation": {"a": np.zeros((1, 2), np.float32)},
               "NextObservation": {"b": np.zeros((1, 2), np.float32)}}
    with pytest.raises(KeyError, match=r"'NextObservation' holds 'NextObservation'\['b'\]; expected the "
                                       r"entries of 'Observation': 'Observation'\['a'\]"):
        buffer.insert_transition(renamed)
    buffer.insert_transition(step(0))
    assert next(buffer.generate_batches(1, 4))["train_label"].shape == (1, 3)


def test_the_buffer_underneath_holds_every_inserted_step():
    buffer = filled(7, n=2)
    assert buffer._steps.staged == 7  # staged, none written yet
    assert len(buffer.rb) == 7 * 2 and buffer._steps.staged == 0


def test_a_chunk_of_more_steps_than_the_ring_keeps_the_newest_in_order():
    buffer = filled(23, size=5, n=2)  # 23 staged steps, written as one chunk into 5 positions
    data = buffer.get_all_buffer_data()
    assert data["Observation"][:, :, 0].tolist() == [[t, t + 100] for t in range(18, 23)]
    assert len(buffer) == 5


def test_large_observations_stage_at_most_slab_bytes_and_are_written_as_they_fill():
    # 2 envs x 2 x 300,000 float32 observations: 4.8 MB a step, more than a slab
    buffer = MBReplayBuffer(4, "cpu", make_actor(), None, None, seed=0)
    for t in range(3):
        buffer.insert_transition(step(t, n=2, obs_dim=300_000))
    staged = sum(block.nbytes for block in buffer._steps._stage.values())
    assert buffer._steps.chunk == 1 and staged < 5_000_000  # one step, not 1024 of them
    assert buffer._steps.staged == 0  # each step was written when it filled the chunk
    obs = buffer.get_all_buffer_data()["Observation"]
    assert obs.shape == (3, 2, 300_000) and obs[:, :, -1].tolist() == [[0, 100], [1, 101], [2, 102]]


def test_steps_inserted_while_batches_are_generated_never_pair_one_step_with_another():
    # a Dyna-style loop inserts while it trains: each epoch is drawn from the
    # steps held when it starts (rows captured at the call held other steps then)
    buffer = MBReplayBuffer(8, "cpu", make_actor(), None, None, seed=0)
    t = 0
    for t in range(8):  # NEXT_STEP: episodes of 3 steps, then the reset step
        buffer.insert_transition(step(t, done=float(t % 4 == 3), next_done=float(t % 4 == 2)))
    batches = buffer.generate_batches(1, 2, num_epochs=3)
    seen = []
    for batch in batches:
        seen.append(batch)
        for t in range(t + 1, t + 4):
            buffer.insert_transition(step(t, done=float(t % 4 == 3), next_done=float(t % 4 == 2)))
        buffer.get_all_buffer_data()  # the staged steps are written
    inputs, labels = decoded(buffer, seen)
    assert torch.allclose(labels, torch.cat([torch.ones(len(seen) * 2, 2), inputs[:, :1]], 1), atol=1e-4)
    for epoch in range(3):  # each epoch: every transition held when it started, once
        starts = [i for i, b in enumerate(seen) if b["epoch"] == epoch]
        obs = sorted(inputs[2 * starts[0]: 2 * starts[-1] + 2, 0].round().tolist())
        assert len(obs) == len(set(obs)) == 6 and obs[-1] - obs[0] < 8


@pytest.mark.parametrize("key", ["Done", "NextDone"])
@pytest.mark.parametrize("value", [0.5, np.nan, 2.0, -1.0])
@pytest.mark.parametrize("when", ["first insert", "later insert", "slice"])
def test_done_flags_other_than_0_and_1_are_refused_naming_the_key(key, value, when):
    # a done flag of 0.5 (or NaN) was taken as done: the step silently left the
    # training set (NEXT_STEP: "Done") or cut its episode ("NextDone")
    buffer = filled(0 if when == "first insert" else 2)
    bad = step(2, n=1)
    bad[key] = np.full((1, 1), value, np.float32)
    message = rf"'{key}' holds \[{value}\], expected 0 or 1 \(done flags: pass the env's terminated"
    with pytest.raises(ValueError, match=message):
        if when == "slice":
            buffer.insert_data_slice({k: v[None] for k, v in bad.items()})
        elif when == "first insert":
            buffer.insert_transition(bad)
        else:  # staged: checked when the held steps are written (here, before a read)
            buffer.insert_transition(bad)
            buffer.insert_transition(step(3, n=1))
            buffer.get_all_buffer_data()
    buffer.insert_transition(step(2, done=1.0, next_done=1.0))  # 0 / 1 (and bool) flags are fine
    assert len(buffer) == (1 if when == "first insert" else 3)


def test_a_staged_step_with_a_done_flag_not_0_or_1_is_refused_with_the_steps_after_it():
    # staged inserts are checked when written: the steps before the bad one are
    # stored, it and the ones after it are not, and the cursors say so
    buffer = filled(3)
    bad = step(3, n=1)
    bad["NextDone"] = np.full((1, 1), 0.5, np.float32)
    buffer.insert_transition(bad)
    for t in (4, 5):
        buffer.insert_transition(step(t, n=1))
    message = (r"'NextDone' holds \[0.5\], expected 0 or 1 .* It came 3 insert\(s\) ago .*; it and the 2 "
               r"insert\(s\) after it are not stored, the 3 before it are")
    with pytest.raises(ValueError, match=message):
        buffer.get_all_buffer_data()
    assert len(buffer) == 3 and buffer.step == 3
    assert buffer.get_all_buffer_data()["Observation"][:, 0, 0].tolist() == [0.0, 1.0, 2.0]
    buffer.insert_transition(step(3, n=1))
    assert buffer.get_all_buffer_data()["Observation"][:, 0, 0].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_reads_of_an_empty_buffer_after_init_tensors_give_none_as_before_any_insert():
    # pytorchrl allocates in init_tensors; reading then crashed in the storage underneath
    # ("TransitionStorage.get: the storage is empty"), and get_data_slice(0, 0) of an
    # empty buffer asked for "0 <= start_pos <= -1"
    for init in (False, True):
        buffer = MBReplayBuffer(10, "cpu", make_actor(), None, None)
        if init:
            buffer.init_tensors(step(0))
        assert all(v is None for v in buffer.get_all_buffer_data().values())
        assert all(v is None for v in buffer.get_data_slice(0, 0).values())
        buffer.insert_data_slice(buffer.get_all_buffer_data())  # nothing to insert
        with pytest.raises(ValueError, match=r"end_pos=1, expected 0 <= end_pos <= 0 \(the buffer holds 0 steps\)"):
            buffer.get_data_slice(0, 1)
        buffer.insert_transition(step(0))
        assert buffer.get_all_buffer_data()["Observation"][:, 0, 0].tolist() == [0.0]


def held_out_observations(buffer):
    """The (de-normalised) first observation feature of every held-out transition."""
    batch = next(buffer.generate_batches(1, 1000))
    held = batch["holdout_input"] * buffer.scaler.input_std + buffer.scaler.input_mu
    return set(held[:, 0].round().int().tolist())


@pytest.mark.parametrize("seed", [None, 3])
def test_holdout_stays_fixed_through_a_collector_round_trip_a_resize_and_a_copy(seed):
    # pytorchrl's sync mode runs get_all_buffer_data -> reset -> insert_data_slice on one
    # instance after every collection, and the async gradient worker resizes; each
    # rebuilt the split, so held-out steps were later trained on
    torch.manual_seed(0)
    buffer = MBReplayBuffer(30, "cpu", make_actor(), None, None, holdout_fraction=0.3, seed=seed)
    for t in range(20):
        buffer.insert_transition(step(t))
    held = held_out_observations(buffer)
    assert 0 < len(held) < 20
    for first in (20, 40):  # two collections: the second one wraps the ring
        data = buffer.get_all_buffer_data()
        buffer.reset()
        buffer.insert_data_slice(data)
        assert held_out_observations(buffer) == held
        for t in range(first, first + 20):
            buffer.insert_transition(step(t))
        now = held_out_observations(buffer)
        assert now & set(range(first)) == held & set(range(first + 20 - 30, first))
        held = now
    buffer.update_storage_parameter("max_size", 25)
    assert held_out_observations(buffer) == {t for t in held if t >= 35}
    assert held_out_observations(copy.deepcopy(buffer)) == {t for t in held if t >= 35}
    buffer.resplit()  # a new split, asked for
    assert held_out_observations(buffer) != {t for t in held if t >= 35}


@pytest.mark.parametrize("space", [gym.spaces.Discrete(2), gym.spaces.Box(-1, 1, (1,))], ids=["Discrete", "Box"])
@pytest.mark.parametrize(("key", "value", "dtype"), [
    ("Action", np.array([["a"]]), "<U1"),
    ("Observation", np.array([[None, None]], dtype=object), "object"),
    ("Observation", np.zeros((1, 2), np.complex64), "complex64"),
    ("Reward", np.array([["x"]]), "<U1"),
])
def test_entries_of_non_numeric_dtypes_are_refused_at_the_first_insert_naming_the_key(space, key, value, dtype):
    # they were staged, then failed the chunk's write (torch's "can't convert np.ndarray of
    # type numpy.str_", numpy's ufunc loop error, a complex-to-real cast warning) with the
    # key unnamed, and the steps already counted in size were lost
    buffer = MBReplayBuffer(10, "cpu", make_actor(space), None, None)
    sample = step(0, action=np.zeros((1, 1), np.int64 if space.shape == () else np.float32))
    sample[key] = value
    if key == "Observation":
        sample["NextObservation"] = value
    with pytest.raises(TypeError, match=rf"'{key}' has dtype {dtype}, expected a bool, integer or floating"):
        buffer.insert_transition(sample)
    assert len(buffer) == 0
    buffer.insert_transition(step(0, action=np.zeros((1, 1), np.int64 if space.shape == () else np.float32)))
    assert next(buffer.generate_batches(1, 4))["train_input"].shape[0] == 1


def test_a_seeded_buffer_resplits_the_same_way_whatever_torchs_global_rng_did():
    splits = []
    for global_seed in (0, 1):
        torch.manual_seed(global_seed)
        buffer = MBReplayBuffer(40, "cpu", make_actor(), None, None, holdout_fraction=0.3, seed=5)
        for t in range(40):
            buffer.insert_transition(step(t))
        first = held_out_observations(buffer)
        buffer.resplit()
        second = held_out_observations(buffer)
        buffer.update_storage_parameter("holdout_fraction", 0.3)  # a new split too
        splits.append((first, second, held_out_observations(buffer)))
    assert splits[0] == splits[1]
    assert len({frozenset(s) for s in splits[0]}) == 3
