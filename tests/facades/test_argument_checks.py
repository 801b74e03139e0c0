"""Arguments taken as a user gives them: no count truncated, no flag read by truthiness, no key split.

Counts went through ``int()`` (``RingBufferDataset(12.7)`` held 12 steps, a
one-hot of ``num_actions=3.9`` was 3 wide); flags through ``bool()``
(``check_finite=None`` turned the NaN check off, ``native="no"`` turned it on,
an episode's ``terminal="False"`` was a terminal); a single key given as a
string was split into its characters (``info_keys="dist"`` stored four zero
entries 'd', 'i', 's', 't'); and an info entry unlike the first ``add``'s was
cast (0.5 stored as 0 in int64) or replaced by zeros.
"""
from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tensordict import TensorDict

from torchrl_ext import (
    BatchReplayBuffer,
    EpisodeReplayBuffer,
    HerReplayStorage,
    ModelEpochDataset,
    NStepReplayStorage,
    RingBufferDataset,
    TransitionStorage,
    TransitionWriter,
    make_loader,
    make_model_based_buffer,
    make_replay_buffer,
)
from torchrl_ext.facades._convert import SpaceInput
from torchrl_ext.facades.d3rlpy import Episode
from torchrl_ext.samplers import FrameStackSampler, SequenceSampler
from torchrl_ext.transforms import ModelPairTransform, NStepTransform

BOX = gym.spaces.Box(-1, 1, (3,), np.float32)
D3 = gym.spaces.Discrete(3)


def _filled(rb):
    flags = torch.zeros(2, 1, dtype=torch.bool)
    for t in range(3):
        rb.extend(TensorDict({
            "observation": torch.full((2, 1), float(t)), "action": torch.tensor([[1], [2]]),
            "next": {"observation": torch.full((2, 1), t + 1.0), "reward": torch.ones(2, 1),
                     "terminated": flags, "truncated": flags, "done": flags},
        }, [2]))
    return rb


COUNTS = {
    "BatchReplayBuffer: maxlen=100.7 (float)": lambda: BatchReplayBuffer(
        100.7, observation_space=BOX, action_space=D3, n_envs=2),
    "BatchReplayBuffer: n_envs=2.5 (float)": lambda: BatchReplayBuffer(
        100, observation_space=BOX, action_space=D3, n_envs=2.5),
    "RingBufferDataset: capacity=12.7 (float)": lambda: RingBufferDataset(12.7),
    "RingBufferDataset: capacity='12' (str)": lambda: RingBufferDataset("12"),
    "get_loader: chunk_size=2.5 (float)": lambda: EpisodeReplayBuffer(RingBufferDataset(100), 4, 2, chunk_size=2.5),
    "get_loader: sequence_length=2.5 (float)": lambda: RingBufferDataset(100).get_loader(4, 2.5),
    "RingBufferDataset: num_workers=1.5 (float)": lambda: EpisodeReplayBuffer(
        RingBufferDataset(100), 4, 2, num_workers=1.5),
    "TransitionStorage: max_size=10.9 (float)": lambda: TransitionStorage(10.9),
    "TransitionWriter: num_streams=2.5 (float)": lambda: TransitionWriter(num_streams=2.5),
    "ReplayDataset: batch_size=2.7 (float)": lambda: make_loader(_filled(make_replay_buffer(100)), batch_size=2.7),
    "ModelPairTransform: num_actions=3.9 (float)": lambda: make_model_based_buffer(100, num_actions=3.9),
    "ModelEpochDataset: batch_size=2.5 (float)": lambda: ModelEpochDataset(
        _filled(make_model_based_buffer(100, batch_size=4, seed=0)), batch_size=2.5),
}


@pytest.mark.parametrize("message", list(COUNTS))
def test_counts_are_refused_not_truncated(message):
    with pytest.raises(TypeError, match=rf"{message.replace('(', '[(]').replace(')', '[)]')}, expected an int >= "):
        COUNTS[message]()


FLAGS = {
    "GymVectorAdapter: check_finite=None (NoneType)": lambda: NStepReplayStorage(
        BOX, D3, num_workers=0, storage_size=100, check_finite=None),
    "NStepReplayStorage: native='no' (str)": lambda: NStepReplayStorage(
        BOX, D3, num_workers=0, storage_size=100, native="no"),
    "NStepReplayStorage: save_snapshot='no' (str)": lambda: NStepReplayStorage(
        BOX, D3, num_workers=0, storage_size=100, save_snapshot="no"),
    "HerReplayStorage: copy_info_dict='yes' (str)": lambda: HerReplayStorage(
        gym.spaces.Dict(observation=BOX, achieved_goal=BOX, desired_goal=BOX), D3, storage_size=100,
        copy_info_dict="yes"),
    "BatchReplayBuffer: create_mask='no' (str)": lambda: BatchReplayBuffer(
        100, observation_space=BOX, action_space=D3, n_envs=1, create_mask="no"),
    "BatchReplayBuffer.append_episode: episode.terminal='False' (str)": lambda: BatchReplayBuffer(
        100, observation_space=BOX, action_space=D3, n_envs=1, seed=0).append_episode(
        Episode(np.zeros((3, 3), np.float32), np.zeros(3, int), np.zeros(3), "False")),
    "BatchReplayBuffer.append_episode: episode.terminal=0.5 (float)": lambda: BatchReplayBuffer(
        100, observation_space=BOX, action_space=D3, n_envs=1, seed=0).append_episode(
        Episode(np.zeros((3, 3), np.float32), np.zeros(3, int), np.zeros(3), 0.5)),
}


@pytest.mark.parametrize("message", list(FLAGS))
def test_flags_are_bools_not_truthy_values(message):
    with pytest.raises(TypeError, match=rf"{message.replace('(', '[(]').replace(')', '[)]')}, expected True or False"):
        FLAGS[message]()


def test_numeric_flags_0_and_1_are_flags():
    buffer = BatchReplayBuffer(100, observation_space=BOX, action_space=D3, n_envs=1, seed=0)
    buffer.append_episode(Episode(np.zeros((3, 3), np.float32), np.zeros(3, int), np.zeros(3), np.float32(1.0)))
    assert buffer.transitions.terminals[-1].item() == 1.0
    rb = EpisodeReplayBuffer(RingBufferDataset(100), 2, 1)
    with pytest.raises(ValueError, match=r"add_step: done holds \[0, 7\], expected bools \(or 0 / 1\)"):
        rb.add_step({"x": torch.zeros(2, 1)}, torch.tensor([0, 7]))


def test_one_key_given_as_a_string_is_one_key():
    space = gym.spaces.Dict(observation=BOX, achieved_goal=BOX, desired_goal=BOX)
    assert HerReplayStorage(space, D3, storage_size=100, copy_info_dict=True, info_keys="dist")._infos.keys == ["dist"]
    assert make_replay_buffer(100, done_keys=("next", "done")).writer.done_keys == (("next",), ("done",))  # keys
    assert make_replay_buffer(100, done_keys="done").writer.done_keys == (("done",),)
    assert TransitionWriter(done_keys="done").done_keys == (("done",),)


def _her_with_infos(infos_seq):
    n = 2
    box = gym.spaces.Box(-100, 100, (1,), np.float32)
    space = gym.spaces.Dict(observation=box, achieved_goal=box, desired_goal=box)
    storage = HerReplayStorage(space, D3, storage_size=100, num_envs=n, batch_size=4,
                               copy_info_dict=True, seed=0)

    def obs(t):
        v = np.full((n, 1), float(t), np.float32)
        return {"observation": v, "achieved_goal": v, "desired_goal": v}

    for t, infos in enumerate(infos_seq):
        storage.add(obs(t), np.array([0, 1]), np.zeros(n), np.zeros(n, bool), np.zeros(n, bool), infos, obs(t + 1))
    return storage


@pytest.mark.parametrize("first, later, message", [
    (np.array([1, 2]), np.array([0.5, 1.7]), r"infos\['dist'\] holds 0.5, which the entry's dtype int64"),
    (np.array([True, False]), np.array([0.3, 0.0]), r"infos\['dist'\] holds 0.3, which the entry's dtype bool"),
    (np.array([1.0, 2.0]), np.array([[0.5], [1.7]]), r"infos\['dist'\] has shape \(2, 1\), expected \(2,\)"),
])
def test_her_info_entries_unlike_the_first_add_s_are_refused(first, later, message):
    with pytest.raises(ValueError, match=message):
        _her_with_infos([{"dist": first}, {"dist": later}])


def test_her_info_entries_cast_exactly_are_stored():
    storage = _her_with_infos([{"dist": np.array([1.0, 2.0], np.float32)}, {"dist": np.array([3, 4])}])
    stored = storage.rb.storage.get(slice(None))["next", "info", "dist"]
    assert sorted(stored.view(-1).tolist()) == [1.0, 2.0, 3.0, 4.0]


@pytest.mark.parametrize("action_space, actions, message", [
    (gym.spaces.MultiDiscrete([3, 4]), np.array([[0, 9], [1, 1]]),
     r"actions holds 9 at \(0, 1\) \(env 0\), outside MultiDiscrete\(\[3 4\]\) \(values 0 .. 3 there\)"),
    (gym.spaces.MultiDiscrete([3, 4]), np.array([[0.0, 1.0], [-1.0, 1.0]]),
     r"actions holds -1 at \(1, 0\) \(env 1\), outside MultiDiscrete\(\[3 4\]\) \(values 0 .. 2 there\)"),
    (gym.spaces.MultiBinary(2), np.array([[2, 0], [1, 1]], np.int8),
     r"actions holds 2 at \(0, 0\) \(env 0\), outside MultiBinary\(2\) \(values 0 .. 1 there\)"),
])
def test_multi_discrete_and_multi_binary_values_outside_the_space_are_refused(action_space, actions, message):
    """Discrete values were checked, MultiDiscrete / MultiBinary ones stored as given."""
    storage = NStepReplayStorage(BOX, action_space, num_envs=2, num_workers=0, storage_size=100, batch_size=4)
    obs = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="NStepReplayStorage.add: " + message):
        storage.add(obs, actions, np.ones(2), np.zeros(2, bool), np.zeros(2, bool), {}, obs)
    storage.add(obs, np.ones_like(actions), np.ones(2), np.zeros(2, bool), np.zeros(2, bool), {}, obs)


@given(dtype=st.sampled_from([np.int8, np.uint8, np.int16]), start=st.integers(-3, 3),
       nvec=st.lists(st.integers(1, 4), min_size=1, max_size=3), uniform=st.booleans(),
       values=st.lists(st.integers(-6, 9), min_size=6, max_size=6))
def test_multi_discrete_range_check_matches_a_loop(dtype, start, nvec, uniform, values):
    """The range check (one-byte uniform bounds take a byte-deletion path) refuses exactly
    the arrays a loop over the elements finds a value outside its [start, start + n) in."""
    if dtype is np.uint8:
        start = abs(start)
    nvec = [nvec[0]] * len(nvec) if uniform else nvec
    space = gym.spaces.MultiDiscrete(nvec, dtype=dtype, start=[start] * len(nvec))
    check = SpaceInput("add", "actions", space, 2).value_check()
    array = np.resize(np.array(values), (2, len(nvec))).astype(dtype)
    outside = [(e, j) for e in range(2) for j in range(len(nvec))
               if not start <= int(array[e, j]) < start + nvec[j]]
    if not outside:
        check(array)
        return
    env, j = outside[0]
    with pytest.raises(ValueError, match=rf"add: actions holds {int(array[env, j])} at \({env}, {j}\) \(env {env}\)"):
        check(array)


@pytest.mark.parametrize("build, owner", [
    (lambda seed: make_replay_buffer(10, seed=seed), "make_replay_buffer"),
    (lambda seed: NStepReplayStorage(BOX, D3, storage_size=10, num_workers=0, seed=seed), "make_replay_buffer"),
    (lambda seed: EpisodeReplayBuffer(RingBufferDataset(100), 4, 2, seed=seed), "get_loader"),
])
def test_seeds_are_ints(build, owner):
    """seed=1.5 failed in torch's manual_seed ('expected a long'); MBReplayBuffer truncated it."""
    for seed in (1.5, "7"):
        with pytest.raises(TypeError, match=rf"{owner}: seed={seed!r} \(\w+\), expected an int or None"):
            build(seed)
    build(np.int64(7))


def test_hindsight_arguments_are_checked_when_built():
    """A terminated_fn that is not callable, and goals of two shapes, were accepted and
    failed at the first sample ('int' object is not callable; an IndexError in index_copy_)."""
    b2, b3 = gym.spaces.Box(-1, 1, (2,)), gym.spaces.Box(-1, 1, (3,))
    with pytest.raises(ValueError, match=r"the desired goal 'desired_goal' has shape \(3,\) and the achieved goal "
                                         r"'achieved_goal' \(2,\); .* expected one shape"):
        HerReplayStorage(gym.spaces.Dict(observation=b2, achieved_goal=b2, desired_goal=b3), D3, storage_size=100)
    with pytest.raises(TypeError, match=r"terminated_fn is int, expected a callable"):
        HerReplayStorage(gym.spaces.Dict(observation=b2, achieved_goal=b2, desired_goal=b2), D3,
                         storage_size=100, terminated_fn=3)


@pytest.mark.parametrize("build, named", [
    (lambda: make_replay_buffer(10, reward_key=3), "TransitionWriter: reward_key=3"),
    (lambda: make_replay_buffer(10, done_keys=[("next", "done"), 3]), r"TransitionWriter: done_keys\[1\]=3"),
    (lambda: make_replay_buffer(10, n_step=3, terminated_key=3), "make_replay_buffer: terminated_key=3"),
    (lambda: SequenceSampler(4, mask_key=3), "SequenceSampler: mask_key=3"),
    (lambda: FrameStackSampler(4, keys=["pixels", 3]), r"FrameStackSampler: keys\[1\]=3"),
    (lambda: NStepTransform(0.9, discount_key=3), "NStepTransform: discount_key=3"),
    (lambda: ModelPairTransform(observation_keys=[3]), r"ModelPairTransform: observation_keys\[0\]=3"),
    (lambda: HerReplayStorage(gym.spaces.Dict(observation=BOX, achieved_goal=BOX, desired_goal=BOX), D3,
                              storage_size=100, goal_key=3), "HerReplayStorage: goal_key=3"),
])
def test_a_key_argument_that_is_no_key_is_refused_naming_it(build, named):
    """The message said 'key 3 (int)' without naming the argument (a constructor takes several keys)."""
    with pytest.raises(TypeError, match=named + r" \(int\), expected a str or a tuple of str"):
        build()


def test_her_flags_of_another_env_count_are_named_with_copy_info_dict():
    """The info pass broadcast the flags first: numpy's 'operands could not be broadcast'."""
    space = gym.spaces.Dict(observation=BOX, achieved_goal=BOX, desired_goal=BOX)
    storage = HerReplayStorage(space, D3, storage_size=100, num_envs=2, copy_info_dict=True)
    obs = {k: np.zeros((2, 3), np.float32) for k in space.spaces}
    with pytest.raises(ValueError, match=r"terminated has shape \(3,\), expected \(2, \.\.\.\) \(one row per env\)"):
        storage.add(obs, np.array([0, 1]), np.zeros(2), np.zeros(3, bool), np.zeros(2, bool), {}, obs)


def test_loader_arguments_are_checked():
    """make_loader([1, 2]) raised AttributeError; num_workers=1.5 and num_batches=2.5 failed in
    torch's DataLoader and in islice."""
    rb = _filled(make_replay_buffer(100, batch_size=4))
    with pytest.raises(TypeError, match=r"ReplayDataset: rb is list with storage NoneType, expected a replay buffer"):
        make_loader([1, 2])
    with pytest.raises(TypeError, match=r"make_loader: num_workers=1.5 \(float\), expected an int >= 0"):
        make_loader(rb, num_workers=1.5)
    with pytest.raises(TypeError, match=r"ReplayDataset: num_batches=2.5 \(float\), expected an int >= 1"):
        make_loader(rb, num_batches=2.5)


def test_seeds_out_of_range_are_refused_naming_the_seed():
    """seed=2**70 gave torch's 'Overflow when unpacking long long'."""
    for seed in (2**70, -1):
        with pytest.raises(ValueError, match=rf"make_replay_buffer: seed={seed}, expected an int in \[0, 2\*\*63\)"):
            make_replay_buffer(10, seed=seed)


HER_SPACE = gym.spaces.Dict(observation=BOX, achieved_goal=BOX, desired_goal=BOX)


@pytest.mark.parametrize("build, owner", [
    (lambda device: NStepReplayStorage(BOX, D3, storage_size=100, num_workers=0, device=device), "NStepReplayStorage"),
    (lambda device: HerReplayStorage(HER_SPACE, D3, storage_size=100, device=device), "HerReplayStorage"),
])
def test_device_is_checked_naming_it(build, owner):
    """device='gpu' failed in torch's device parser ('Expected one of cpu, cuda, ...')."""
    with pytest.raises(ValueError, match=rf"{owner}: device='gpu' is not a device torch knows, expected a "
                                         r"torch.device or a string such as 'cpu', 'cuda' or 'cuda:0'"):
        build("gpu")
    with pytest.raises(TypeError, match=rf"{owner}: device=None \(NoneType\), expected a torch.device"):
        build(None)
    assert build(torch.device("cpu")).device == build("cpu").device == torch.device("cpu")
    if not torch.cuda.is_available():  # an index names an accelerator: torch's reason, not "unknown"
        with pytest.raises(ValueError, match=rf"{owner}: device=0 names accelerator 0, which torch cannot give "
                                             r"here \(.+\); expected a torch.device"):
            build(0)


def test_snapshot_dir_is_a_directory_path(tmp_path):
    """snapshot_dir=3 failed in pathlib ('expected str, bytes or os.PathLike object, not int')."""
    def build(snapshot_dir):
        return NStepReplayStorage(BOX, D3, storage_size=100, num_workers=0, save_snapshot=True,
                                  snapshot_dir=snapshot_dir)
    with pytest.raises(TypeError, match=r"NStepReplayStorage: snapshot_dir=3 \(int\), expected a str or "
                                        r"os.PathLike naming a directory, or None"):
        build(3)
    with pytest.raises(ValueError, match=r"NStepReplayStorage: snapshot_dir='' is the current directory"):
        build("")
    assert build(str(tmp_path / "a")).snapshot_dir == build(tmp_path / "a").snapshot_dir == tmp_path / "a"


@pytest.mark.parametrize("actions, action_space, dtype", [
    (np.array(["0", "1"]), D3, "<U1"),
    (np.array([b"0", b"1"]), D3, "|S1"),
    (np.array([0, 1], dtype=object), D3, "object"),
    (np.array([0j, 1j]), D3, "complex128"),
    (np.array([["0.5"] * 3] * 2), BOX, "<U3"),  # parsed into 0.5 by the float32 cast
])
def test_non_numeric_inputs_are_refused_naming_their_dtype(actions, action_space, dtype):
    """String actions failed in np.rint ("ufunc 'rint' not supported for the input types");
    string values for a float space were parsed."""
    observation_space, obs = (BOX, np.zeros((2, 3), np.float32)) if action_space is D3 else (
        D3, np.array([0, 1]))
    storage = NStepReplayStorage(observation_space, action_space, num_envs=2, num_workers=0, storage_size=100)
    with pytest.raises(TypeError, match=rf"NStepReplayStorage.add: actions has dtype {re.escape(dtype)}, "
                                        r"expected numbers \(bool, int or float\) for .* of dtype "
                                        rf"{np.dtype(action_space.dtype)}"):
        storage.add(obs, actions, np.ones(2), np.zeros(2, bool), np.zeros(2, bool), {}, obs)


def test_finite_values_beyond_float32_are_refused_as_not_fitting_not_as_inf():
    """1e40 in float64 observations was refused as 'observation of env 0 is inf' (its float32 cast)."""
    storage = NStepReplayStorage(BOX, D3, num_envs=2, num_workers=0, storage_size=100)
    obs, big = np.zeros((2, 3), np.float32), np.zeros((2, 3))
    big[1, 2] = -1e40
    with pytest.raises(ValueError, match=r"NStepReplayStorage.add: observations holds -1e\+40 \(env 1\), which does "
                                         r"not fit float32, .*\(finite values within \+-3.402823e\+38\): it would be "
                                         r"stored as -inf"):
        storage.add(big, np.array([0, 1]), np.ones(2), np.zeros(2, bool), np.zeros(2, bool), {}, obs)
    storage.add(np.full((2, 3), 3e38), np.array([0, 1]), np.ones(2), np.ones(2, bool), np.zeros(2, bool), {}, obs)
    real_inf = np.full((2, 3), np.inf)  # an infinity that came as one keeps its message
    storage.add(real_inf, np.array([0, 1]), np.ones(2), np.ones(2, bool), np.zeros(2, bool), {}, obs)
    with pytest.raises(ValueError, match=r"observation of env 0 is inf \(or a value beyond float32's range, "
                                         r"\+-3.403e\+38, cast to it\); NaN and infinities poison"):
        storage.sample()
    # rewards are cast on every add unchecked (a check would cost each add): the finite check names both causes
    with pytest.warns(RuntimeWarning, match="overflow"), pytest.raises(
            ValueError, match=r"\('next', 'reward'\) of env 1 is inf \(or a value beyond float32's range"):
        storage.add(obs, np.array([0, 1]), np.array([1.0, 1e40]), np.zeros(2, bool), np.zeros(2, bool), {}, obs)
        storage.sample()
    half = NStepReplayStorage(gym.spaces.Box(-1, 1, (3,), np.float16), D3, num_envs=2, num_workers=0, storage_size=100)
    with pytest.raises(ValueError, match=r"observations holds 70000 \(env 0\), which does not fit float16"):
        half.add(np.full((2, 3), 70000), np.array([0, 1]), np.ones(2), np.zeros(2, bool), np.zeros(2, bool), {}, obs)
