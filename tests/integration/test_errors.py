"""Every bad input gets a clear error naming the entry, what came and what was expected."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

from conftest import column, steps
from torchrl_ext import TransitionStorage, TransitionWriter, make_replay_buffer
from torchrl_ext.envs import GymVectorAdapter
from torchrl_ext.loader import ReplayDataset


def step_of(n=2):
    return steps(torch.zeros(n, 3), torch.ones(n, 3))


@pytest.fixture
def rb():
    buffer = make_replay_buffer(64, seed=0)
    buffer.extend(step_of())
    return buffer


def test_missing_entry(rb):
    bad = step_of().exclude("action")
    with pytest.raises(KeyError, match=re.escape("missing entries [\"'action'\"]")):
        rb.extend(bad)


def test_unexpected_entry(rb):
    bad = step_of()
    bad.set("extra", torch.zeros(2))
    with pytest.raises(KeyError, match="unexpected entry 'extra'; the buffer stores"):
        rb.extend(bad)


def test_wrong_shape_names_entry_and_expected_shape(rb):
    bad = steps(torch.zeros(2, 4), torch.ones(2, 4))
    with pytest.raises(ValueError, match=re.escape("'observation' has shape (2, 4), expected (2, 3)")):
        rb.extend(bad)


def test_wrong_dtype(rb):
    bad = steps(torch.zeros(2, 3, dtype=torch.float64), torch.ones(2, 3, dtype=torch.float64))
    with pytest.raises(TypeError, match="'observation' has dtype torch.float64, expected torch.float32"):
        rb.extend(bad)


def test_env_count_change(rb):
    with pytest.raises(ValueError, match=r"writer 0 writes 3 envs .* first write had 2; a writer's env count cannot change"):
        rb.extend(step_of(3))


def test_reward_of_wrong_shape():
    bad = step_of()
    bad.set(("next", "reward"), torch.zeros(2))
    with pytest.raises(ValueError, match=re.escape("('next', 'reward') has shape (2,), expected (2, 1)")):
        make_replay_buffer(64).extend(bad)


def test_done_of_wrong_dtype():
    bad = step_of()
    bad.set(("next", "done"), torch.zeros(2, 1))
    with pytest.raises(TypeError, match=re.escape("('next', 'done') has dtype torch.float32, expected torch.bool")):
        make_replay_buffer(64).extend(bad)


def test_no_done_entry():
    bad = step_of().exclude(("next", "done"), ("next", "terminated"), ("next", "truncated"))
    with pytest.raises(KeyError, match="none of the done entries"):
        make_replay_buffer(64).extend(bad)


def test_no_reward_entry():
    bad = step_of().exclude(("next", "reward"))
    with pytest.raises(KeyError, match=re.escape("reward entry ('next', 'reward') is missing")):
        make_replay_buffer(64).extend(bad)


def test_no_observation():
    bad = step_of().exclude(("next", "observation"))
    with pytest.raises(KeyError, match="no observation found"):
        make_replay_buffer(64).extend(bad)


def test_observation_and_next_observation_disagree():
    bad = steps(torch.zeros(2, 3), torch.ones(2, 4))
    with pytest.raises(ValueError, match="an observation and its next observation must match"):
        make_replay_buffer(64).extend(bad)


def test_three_batch_dims():
    with pytest.raises(ValueError, match=r"batch shape \(2, 2, 2\) has 3 dims"):
        make_replay_buffer(64).extend(steps(torch.zeros(2, 2, 2, 1), torch.ones(2, 2, 2, 1)))


def test_not_a_tensordict(rb):
    with pytest.raises(TypeError, match="expected a TensorDict, got dict"):
        rb.writer.extend({"observation": torch.zeros(2)})


def test_flat_trajectories_need_num_streams():
    td = steps(column([0.0, 1.0]), column([1.0, 2.0]), traj_ids=torch.tensor([4, 4]))
    with pytest.raises(ValueError, match=r"needs the number of envs: build TransitionWriter\(num_streams=...\)"):
        make_replay_buffer(64).extend(td)


def test_flat_trajectories_beyond_stream_count():
    rb = make_replay_buffer(64, num_streams=1)
    td = steps(column([0.0, 10.0]), column([1.0, 11.0]), traj_ids=torch.tensor([4, 5]))
    with pytest.raises(ValueError, match="trajectory \\('collector', 'traj_ids'\\)=5 of writer 0 starts while its 1 streams hold running episodes and none of the 1 streams is free"):
        rb.extend(td)


def test_num_streams_below_the_data_env_count():
    with pytest.raises(ValueError, match=r"data has 2 envs .*more than num_streams=1; raise num_streams"):
        make_replay_buffer(64, num_streams=1).extend(step_of())


def test_sample_empty_buffer():
    with pytest.raises(ValueError, match="holds no transition yet"):
        make_replay_buffer(64, batch_size=4).sample()


def test_batch_size_below_one(rb):
    with pytest.raises(ValueError, match=r"batch_size=0, expected >= 1 \(the buffer holds 2 "
                       r"transitions; batches are drawn with replacement\)"):
        rb.sample(0)


def test_storage_too_small_for_streams():
    with pytest.raises(ValueError, match="gives 1 rows to each of 2 streams"):
        make_replay_buffer(3).extend(step_of())


def test_storage_arguments():
    with pytest.raises(ValueError, match="backend='disk', expected 'tensor' or 'memmap'"):
        TransitionStorage(10, backend="disk")
    with pytest.raises(ValueError, match="TransitionStorage: max_size=1, expected an int >= 2"):
        TransitionStorage(1)


def test_writer_needs_episode_storage():
    with pytest.raises(TypeError, match="TransitionWriter needs an TransitionStorage, got LazyTensorStorage"):
        TensorDictReplayBuffer(storage=LazyTensorStorage(10), writer=TransitionWriter())


def test_writer_arguments():
    with pytest.raises(ValueError, match="TransitionWriter: num_streams=0, expected an int >= 1"):
        TransitionWriter(num_streams=0)


def test_direct_assignment_is_refused(rb):
    with pytest.raises(TypeError, match="written through torchrl_ext.writers.TransitionWriter"):
        rb[0] = step_of()[0]


def test_get_before_any_write():
    with pytest.raises(RuntimeError, match="nothing was written yet"):
        TransitionStorage(10).get(torch.tensor([0]))


def test_checkpoint_into_buffer_of_other_size(rb, tmp_path):
    rb.dumps(tmp_path)
    with pytest.raises(ValueError, match="checkpoint has max_size=64, this storage 32"):
        make_replay_buffer(32).loads(tmp_path)


def test_dataset_of_empty_buffer():
    with pytest.raises(ValueError, match="the buffer is empty; write at least one step"):
        ReplayDataset(make_replay_buffer(8, batch_size=2))


def test_adapter_wrong_rows():
    adapter = GymVectorAdapter(2)
    with pytest.raises(ValueError, match=re.escape("action has shape (3,), expected (2, ...)")):
        adapter.step(np.zeros((2, 3)), np.zeros(3), np.zeros(2), np.zeros(2, bool), np.zeros(2, bool), {}, np.zeros((2, 3)))
    with pytest.raises(ValueError, match=re.escape("reward has shape (2, 1), expected (2,)")):
        adapter.step(np.zeros((2, 3)), np.zeros(2), np.zeros((2, 1)), np.zeros(2, bool), np.zeros(2, bool), {}, np.zeros((2, 3)))


def test_adapter_unknown_mode():
    with pytest.raises(ValueError, match="autoreset_mode='Sometimes', expected one of"):
        GymVectorAdapter(2, autoreset_mode="Sometimes")


def test_adapter_same_step_without_final_obs():
    adapter = GymVectorAdapter(2, autoreset_mode="SameStep")
    done = np.array([True, False])
    with pytest.raises(ValueError, match=re.escape("env 0 is done but infos has no final observation for it (infos['final_obs'][0]")):
        adapter.step(np.zeros((2, 3)), np.zeros(2), np.zeros(2), done, ~done, {}, np.zeros((2, 3)))


def test_adapter_legacy_without_terminal_observation():
    adapter = GymVectorAdapter(2, autoreset_mode="Legacy")
    done = np.array([False, True])
    with pytest.raises(ValueError, match="env 1 is done but infos\\[1\\] has no 'terminal_observation'"):
        adapter.step(np.zeros((2, 3)), np.zeros(2), np.zeros(2), done, np.zeros(2, bool), [{}, {}], np.zeros((2, 3)))


def test_nested_entries_are_named_in_full(rb):
    bad = step_of()
    bad.set(("next", "info"), TensorDict({"x": torch.zeros(2)}, [2]))
    with pytest.raises(KeyError, match=re.escape("unexpected entry ('next', 'info', 'x')")):
        rb.extend(bad)


def test_adapter_legacy_infos_must_be_a_list_per_env():
    adapter = GymVectorAdapter(2, autoreset_mode="Legacy")
    with pytest.raises(ValueError, match="LEGACY mode needs infos as a list of 2 dicts"):
        adapter.step(np.zeros((2, 3)), np.zeros(2), np.zeros(2), np.zeros(2, bool), None, {}, np.zeros((2, 3)))


def test_nstep_components_arguments():
    from tensordict import TensorDict as TD

    from torchrl_ext.samplers import NStepSampler
    from torchrl_ext.transforms import HindsightTransform, NStepTransform

    with pytest.raises(ValueError, match=r"NStepSampler: n=0, expected an integer >= 1"):
        NStepSampler(0)
    with pytest.raises(ValueError, match=r"NStepTransform: gamma=1.5, expected a finite number in \[0, 1\]"):
        NStepTransform(1.5)
    with pytest.raises(ValueError, match="reward_key='reward', expected a key under 'next'"):
        NStepTransform(0.9, reward_key="reward")
    with pytest.raises(KeyError, match="the batch has no 'n_step' windows; sample with"):
        NStepTransform(0.9)(TD({}, [2]))
    with pytest.raises(KeyError, match="the batch has no 'her' goals; sample with"):
        HindsightTransform(lambda a, d, i: a)(TD({}, [2]))


def test_nstep_storage_save_without_snapshot():
    import gymnasium as gym

    from torchrl_ext import NStepReplayStorage

    store = NStepReplayStorage(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), num_workers=0)
    with pytest.raises(ValueError, match=r"NStepReplayStorage.save: only with save_snapshot=True"):
        store.save()


def test_service_backend_errors(monkeypatch):
    with pytest.raises(ValueError, match=r"service_backend='dask', expected None \(in process\) or 'ray'"):
        make_replay_buffer(64, service_backend="dask")
    with pytest.raises(ValueError, match="service_backend_options given without service_backend; pass service_backend='ray'"):
        make_replay_buffer(64, service_backend_options={"remote_config": {}})
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else find_spec(name, *a))
    with pytest.raises(ImportError, match=re.escape('needs Ray; install the extra: pip install "torchrl_ext[ray]"')):
        make_replay_buffer(64, service_backend="ray")


def test_writer_ids_are_one_per_write():
    rb = make_replay_buffer(64)
    td = step_of()
    td.set(("collector", "writer_id"), torch.tensor([1, 2]))
    with pytest.raises(ValueError, match=re.escape("('collector', 'writer_id') holds [1, 2], expected one id >= 0 for the whole batch")):
        rb.extend(td)


def test_writer_handle_id_must_be_a_non_negative_int():
    with pytest.raises(ValueError, match=r"writer_id=-1, expected an int >= 0"):
        make_replay_buffer(64).writer_handle(-1)
