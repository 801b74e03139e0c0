"""MBReplayBuffer's input checks: what an insert stores and what it refuses, naming the key.

Constructor and call arguments, entries unlike the first insert's, NaN
observations that follow on, actions the model cannot take, next observations
unlike the observations, done flags other than 0 and 1 (staged ones too),
reads of an empty buffer after ``init_tensors``, and non-numeric dtypes.
"""
from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from _model_based_helpers import filled, make_actor, step
from torchrl_ext import MBReplayBuffer
from torchrl_ext.transforms import StandardScaler


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


def test_an_entry_with_the_first_inserts_size_but_another_shape_is_refused_naming_the_key():
    # a later step is checked by ndim and size; an array of the same size in
    # another shape (two envs of three values given as three rows of two, or
    # with an extra axis) is refused with the full checks' message, and the
    # step is not stored
    buffer = MBReplayBuffer(50, "cpu", make_actor(), None, None, seed=0)
    for t in range(2):
        buffer.insert_transition(step(t, n=2, obs_dim=3))
    for shape in ((3, 2), (1, 2, 3), (6,)):
        bad = step(2, n=2, obs_dim=3)
        bad["NextObservation"] = bad["NextObservation"].reshape(shape)
        with pytest.raises(ValueError, match=r"'NextObservation' has shape"):
            buffer.insert_transition(bad)
    renamed = step(2, n=2, obs_dim=3)
    renamed["Extra"] = renamed.pop("NextDone")  # as many keys as the first insert, one of them another
    with pytest.raises(KeyError, match=r"unknown keys \['Extra'\]"):
        buffer.insert_transition(renamed)
    bad = step(2, n=2, obs_dim=3)
    bad["Reward"] = list(bad["Reward"])
    buffer.insert_transition(bad)  # a list: converted by the full checks, stored as an array
    assert len(buffer) == 3
    assert buffer.get_data_slice(0, 3)["Reward"][:, :, 0].tolist() == [[0.0, 100.0], [1.0, 101.0], [2.0, 102.0]]


def test_steps_with_an_empty_entry_are_checked_in_full_and_stored():
    # an empty [2, 0] entry: a [1, 0] one has its size and ndim and broadcasts to it,
    # so only the full checks tell them apart
    buffer = MBReplayBuffer(50, "cpu", make_actor(), None, None, seed=0)
    for t in range(3):
        buffer.insert_transition({**step(t, n=2), "RecurrentHiddenStates": np.zeros((2, 0), np.float32)})
    with pytest.raises(ValueError, match=r"'RecurrentHiddenStates' has shape \(1, 0\)"):
        buffer.insert_transition({**step(3, n=2), "RecurrentHiddenStates": np.zeros((1, 0), np.float32)})
    assert len(buffer) == 3
    assert buffer.get_data_slice(0, 3)["RecurrentHiddenStates"].shape == (3, 2, 0)


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


def test_m11_positions_counts_and_slices_of_another_type_are_refused_naming_them():
    # get_data_slice(1.5, 3) was floored, ensemble_size=2.5 truncated (and "3" parsed),
    # get_data_slice("a", 3) and holdout_fraction="x" failed with int()'s and float()'s
    # messages, insert_data_slice([1, 2]) with "'list' object has no attribute 'items'"
    buffer = filled(4)
    for pos in (1.5, "a"):
        with pytest.raises(TypeError, match=rf"^MBReplayBuffer.get_data_slice: start_pos={pos!r} "
                                            rf"\({type(pos).__name__}\), expected an int >= 0\.$"):
            buffer.get_data_slice(pos, 3)
    with pytest.raises(ValueError, match=r"^MBReplayBuffer.get_data_slice: end_pos=-1, expected an int >= 0\.$"):
        buffer.get_data_slice(0, -1)
    assert buffer.get_data_slice(np.int64(1), 3)["Observation"][:, 0, 0].tolist() == [1.0, 2.0]
    with pytest.raises(TypeError, match=r"^EpochSampler: ensemble_size=2.5 \(float\), expected an int >= 1\.$"):
        MBReplayBuffer(10, "cpu", make_actor(), None, None, ensemble_size=2.5)
    with pytest.raises(TypeError, match=r"^EpochSampler: holdout_fraction='x' \(str\), expected a finite number >= 0\.$"):
        MBReplayBuffer(10, "cpu", make_actor(), None, None, holdout_fraction="x")
    with pytest.raises(TypeError, match=r"^MBReplayBuffer.insert_data_slice: new_data is list, expected a dict "):
        buffer.insert_data_slice([1, 2])


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
