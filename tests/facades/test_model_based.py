"""MBReplayBuffer (pytorchrl API): regressions M1-M13 and the holdout split.

Each ``test_mN_*`` pins the fix of the original's bug MN: only real transitions
trained on in every autoreset mode (M1, pytorchrl's own vector env included),
batches, one-hot widths, resizes, resets, slices, ensembles, the scaler and the
holdout (M9, M10), rewards from a reward function (M13). Then the holdout
split: fixed through collector round trips, resizes and copies, reseeded only
when asked. pytorchrl's and gymnasium's ways of driving the buffer are in
``test_model_based_pytorchrl.py``, input checks and errors in
``test_model_based_inputs.py``, staged writes in ``test_model_based_staging.py``.
"""
from __future__ import annotations

import copy
import re
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from _model_based_helpers import MODES, assert_cartpole_dynamics, decoded, drive, filled, make_actor, step
from torchrl_ext import MBReplayBuffer
from torchrl_ext.transforms import StandardScaler


@pytest.mark.parametrize("mode", [MODES.NEXT_STEP, MODES.SAME_STEP, MODES.DISABLED])
def test_m1_only_real_transitions_in_every_autoreset_mode(mode):
    env_like = SimpleNamespace(autoreset_mode=mode)  # the mode is read from envs
    buffer = MBReplayBuffer(200, "cpu", make_actor(), None, env_like, seed=0)
    real = drive(buffer, mode)
    inputs, labels = decoded(buffer, list(buffer.generate_batches(1, 32)))
    assert inputs.shape[0] == real  # every real transition, once; reset steps left out
    assert_cartpole_dynamics(inputs, labels)  # no final -> reset jump anywhere


def test_m1_legacy_mode_trains_on_each_envs_terminal_observation():
    # autoreset_mode="Legacy" (an SB3 VecEnv: the final observation in each done env's
    # info dict) was accepted, then its done steps trained on final -> reset jumps
    buffer = MBReplayBuffer(200, "cpu", make_actor(), None, None, autoreset_mode="Legacy", seed=0)
    real = drive(buffer, MODES.SAME_STEP, legacy=True)
    inputs, labels = decoded(buffer, list(buffer.generate_batches(1, 32)))
    assert inputs.shape[0] == real  # the done steps too, with their true final observations
    assert_cartpole_dynamics(inputs, labels)


def test_m1_legacy_mode_without_terminal_observation_is_stored_never_trained_and_named():
    buffer = MBReplayBuffer(200, "cpu", make_actor(), None, None, autoreset_mode="Legacy", seed=0)
    with pytest.warns(UserWarning, match=re.escape("(EnvironmentInformation[i]['terminal_observation'] "
                                                   "missing in LEGACY autoreset mode)")):
        drive(buffer, MODES.SAME_STEP, pass_info=False)
    inputs, labels = decoded(buffer, list(buffer.generate_batches(1, 32)))
    assert_cartpole_dynamics(inputs, labels)


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
    buffer = MBReplayBuffer(200, "cpu", make_actor(), None, None, seed=0, autoreset_mode="next_step")
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


def test_m5_reset_to_another_layout_fits_the_scaler_anew():
    # the scaler kept the statistics of the old layout: a reset() followed by wider
    # observations failed with torch's "size of tensor a (4) must match ..."
    buffer = filled(5)
    list(buffer.generate_batches(1, 4))
    kept = buffer.scaler.input_mu.clone()
    data = buffer.get_all_buffer_data()
    buffer.reset()
    buffer.insert_data_slice(data)  # a round trip, the same layout: the statistics stay
    list(buffer.generate_batches(1, 4))
    assert torch.equal(buffer.scaler.input_mu, kept)
    buffer.reset()
    for t in range(5):
        buffer.insert_transition(step(t, obs_dim=3))
    inputs, labels = decoded(buffer, list(buffer.generate_batches(1, 4)))
    assert buffer.scaler.input_mu.shape[-1] == 3 + 2  # observation and one-hot action
    assert sorted(inputs[:, 0].round().tolist()) == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert torch.allclose(labels[:, :3], torch.ones(5, 3), atol=1e-4)


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


@pytest.mark.parametrize("n, k, sizes", [(5, 4, [1, 1, 1, 2]), (9, 6, [1, 2, 1, 2, 1, 2]), (3, 5, [1, 1, 1])])
def test_m10_num_mini_batch_cuts_the_epoch_into_that_many_batches(n, k, sizes):
    # the batch size was ceil(n / k): 5 transitions in 4 mini-batches came as [2, 2, 1]
    buffer = filled(n)
    batches = list(buffer.generate_batches(k, mini_batch_size=None))
    assert [b["train_input"].shape[0] for b in batches] == sizes  # never an empty one (M2)
    assert [b["batch_number"] for b in batches] == list(range(len(sizes)))


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


def test_m12_get_data_slice_of_the_whole_ring_and_wrap_before_it_is_full():
    full = filled(7, size=5)
    # as in pytorchrl, (0, max_size) is every position (a == b is empty)
    assert full.get_data_slice(0, 5)["Observation"][:, 0, 0].tolist() == [5.0, 6.0, 2.0, 3.0, 4.0]
    exactly = filled(5, size=5)
    assert exactly.get_data_slice(0, 5)["Observation"][:, 0, 0].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    partial = filled(5, size=10)  # positions 0 .. 4 hold steps 0 .. 4: [3, size) + [0, 1)
    assert partial.get_data_slice(3, 1)["Observation"][:, 0, 0].tolist() == [3.0, 4.0, 0.0]


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
