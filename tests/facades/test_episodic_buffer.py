"""``EpisodeReplayBuffer``: ``add_step`` (regression tests B2, B4–B6), errors pinned, checkpoints.

``add_step`` of single and vector envs (``done`` or the explicit flags), the
error messages of the buffer and its datasets word for word, and
``state_dict`` / ``load_state_dict``, then the step fields ``add_step`` takes
(str subclasses, numpy arrays torch cannot view) or refuses (nested fields).
Bug ids and the ``"x"`` field as in ``test_episodic.py``.
"""
from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from _episodic_helpers import episode, within_one_episode
from torchrl_ext import EpisodeReplayBuffer, IndividualFileDataset, RingBufferDataset
from torchrl_ext.facades.episodic import EpisodeDatasetInfo, Fields, RandomEvictor, Vector, VerificationMode


# -------------------------------------------------- B2, B4, B5, B6: add_step
def test_b2_single_env_accepts_a_python_bool_done():
    rb = EpisodeReplayBuffer(RingBufferDataset(100), batch_size=2)
    for t in range(3):
        rb.add_step({"x": torch.tensor([0.0, t])}, t == 2)
    assert rb.num_episodes == 1 and rb.num_timesteps == 3


def test_b4_one_step_episodes_are_closed_not_merged():
    rb = EpisodeReplayBuffer(RingBufferDataset(100), batch_size=2)
    for t, was_done in enumerate([False, True, True, False, False, True]):
        rb.add_step({"x": torch.tensor([[0.0, t]])}, torch.tensor([was_done]))
    rb.flush()
    assert rb.dataset.episode_lengths == [1, 1, 3, 1]


def test_b5_single_env_episode_is_stored_at_its_done_step_and_flush_keeps_the_tail():
    rb = EpisodeReplayBuffer(RingBufferDataset(100), batch_size=2)
    rb.add_step({"x": torch.tensor([0.0, 0.0])}, False)
    rb.add_step({"x": torch.tensor([0.0, 1.0])}, True)
    assert rb.num_episodes == 1  # stored at once, not one call late
    rb.add_step({"x": torch.tensor([1.0, 0.0])}, False)
    rb.add_step({"x": torch.tensor([1.0, 1.0])}, False)
    assert rb.num_episodes == 1
    rb.flush()
    assert rb.dataset.episode_lengths == [2, 2]


def test_b5_vector_env_flush_stores_every_running_episode():
    rb = EpisodeReplayBuffer(RingBufferDataset(100), batch_size=2)
    for t in range(4):
        rb.add_step({"x": torch.tensor([[0.0, t], [1.0, t], [2.0, t]])}, torch.zeros(3, dtype=torch.bool))
    assert rb.num_episodes == 0
    rb.flush()
    assert rb.dataset.episode_lengths == [4, 4, 4]


def test_b6_single_env_data_with_equal_leading_sizes_is_not_a_batch():
    rb = EpisodeReplayBuffer(RingBufferDataset(100), batch_size=2)
    # both fields happen to have a leading size of 2: still one env (done is a bool), said once
    with pytest.warns(UserWarning, match=r"stored as ONE env's step.*leading dim of 2"):
        rb.add_step({"obs": torch.zeros(2), "action": torch.zeros(2)}, False)
    rb.add_step({"obs": torch.ones(2), "action": torch.ones(2)}, True)
    assert rb.dataset.episode_lengths == [2]
    assert rb.dataset.fields["obs"].shape == (2,)


def test_b6_scalar_only_steps():
    rb = EpisodeReplayBuffer(RingBufferDataset(100), batch_size=3, sequence_length=2)
    for t in range(4):
        rb.add_step({"reward": torch.tensor(float(t))}, t == 3)
    batch = rb.sample()
    assert batch["reward"].shape == (3, 2)
    assert bool((batch["reward"][:, 1] - batch["reward"][:, 0] == 1).all())


def test_a_refused_episode_leaves_the_other_envs_episodes_and_the_step_stored():
    """One env's episode refused (a NaN) at a step: the other envs' episodes that
    end there and every env's step itself are still stored, then the error is raised."""
    info = EpisodeDatasetInfo(verification_mode=VerificationMode.EXTENDED_CHECKS)
    rb = EpisodeReplayBuffer(RingBufferDataset(100, info=info), batch_size=2)
    was_done = torch.zeros(2, dtype=torch.bool)
    for t in range(8):  # env 0: steps 0..5 (a NaN at step 4), 6..7; env 1: 0..2, 3..5, 6..7
        step = {"x": torch.tensor([[0.0 if t != 4 else float("nan"), t], [1.0, t]])}
        if t == 6:
            with pytest.raises(ValueError, match="field 'x' holds NaN or infinite values"):
                rb.add_step(step, was_done)
        else:
            rb.add_step(step, was_done)
        was_done = torch.tensor([t == 5, t in (2, 5)])
    rb.flush()
    stored = [rb.dataset.episode(i)["x"].tolist() for i in range(rb.num_episodes)]
    assert sorted(stored) == [[[0.0, 6.0], [0.0, 7.0]], [[1.0, 0.0], [1.0, 1.0], [1.0, 2.0]],
                              [[1.0, 3.0], [1.0, 4.0], [1.0, 5.0]], [[1.0, 6.0], [1.0, 7.0]]]


def test_is_last_ends_the_episode_at_this_step_for_vector_envs():
    rb = EpisodeReplayBuffer(RingBufferDataset(100), batch_size=2)
    for t in range(3):
        last = torch.tensor([t == 0, t == 2])
        rb.add_step({"x": torch.tensor([[0.0, t], [1.0, t]])}, is_last=last)
    assert rb.dataset.episode_lengths == [1, 3]
    rb.flush()
    assert rb.dataset.episode_lengths == [1, 3, 2]


def test_explicit_is_first_terminated_and_truncated_flags():
    rb = EpisodeReplayBuffer(RingBufferDataset(100), batch_size=2)
    for t in range(4):  # single env: a new episode opens at step 2
        rb.add_step({"x": torch.tensor([0.0, t])}, is_first=t == 2)
    rb.flush()
    assert rb.dataset.episode_lengths == [2, 2]

    rb = EpisodeReplayBuffer(RingBufferDataset(100), batch_size=4, sequence_length=2, seed=0)
    for t in range(3):  # env 0 terminates at step 1, env 1 is truncated at step 2
        rb.add_step({"x": torch.tensor([[0.0, t], [1.0, t]])},
                    terminated=torch.tensor([t == 1, False]), truncated=torch.tensor([False, t == 2]))
    assert rb.dataset.episode_lengths == [2, 3]
    batch = rb.sample()
    assert set(batch.keys()) == {"x", "terminated", "truncated"}
    for row in batch:
        ends = row["terminated"] | row["truncated"]
        assert not bool(ends[0])  # only an episode's last step ends it
        assert bool(row["terminated"][-1]) == (row["x"][0, 0] == 0 and row["x"][-1, 1] == 1)
        assert bool(row["truncated"][-1]) == (row["x"][0, 0] == 1 and row["x"][-1, 1] == 2)


# ------------------------------------------------------- errors, pinned
def test_add_step_errors():
    rb = EpisodeReplayBuffer(RingBufferDataset(100), batch_size=2)
    with pytest.raises(ValueError, match=r"field 'x' has shape \(3, 2\), expected a leading dim of 2"):
        rb.add_step({"x": torch.zeros(3, 2)}, torch.zeros(2, dtype=torch.bool))
    rb.add_step({"x": torch.zeros(2, 2)}, torch.zeros(2, dtype=torch.bool))
    with pytest.raises(ValueError, match="describes a single env, but the buffer receives steps "
                       "of a vector env of 2"):
        rb.add_step({"x": torch.zeros(2)}, False)
    with pytest.raises(KeyError, match=r"step fields \['y'\] differ from the first step's \['x'\]"):
        rb.add_step({"y": torch.zeros(2, 2)}, torch.zeros(2, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"pass done \(the seed's convention\) or the flags "
                       "is_first / is_last / terminated / truncated, not both"):
        rb.add_step({"x": torch.zeros(2, 2)}, torch.ones(2, dtype=torch.bool),
                    is_last=torch.ones(2, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"done must be a bool, a 0-d or a \[num_envs\] bool tensor, "
                       r"got torch.bool of shape \(2, 1\)"):
        rb.add_step({"x": torch.zeros(2, 2)}, torch.zeros(2, 1, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"the flags have different shapes: "
                       r"\{'is_first': \(2,\), 'terminated': \(3,\)\}"):
        rb.add_step({"x": torch.zeros(2, 2)}, is_first=torch.zeros(2, dtype=torch.bool),
                    terminated=torch.zeros(3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"step_data has fields \['terminated'\] and the terminated"):
        rb.add_step({"x": torch.zeros(2, 2), "terminated": torch.zeros(2, dtype=torch.bool)},
                    terminated=torch.zeros(2, dtype=torch.bool))
    with pytest.raises(TypeError, match="step_data is list, expected a dict of tensors"):
        rb.add_step([1, 2], torch.zeros(2, dtype=torch.bool))


def test_add_step_refuses_a_step_without_fields_at_once():
    rb = EpisodeReplayBuffer(RingBufferDataset(100), batch_size=2)
    with pytest.raises(ValueError, match=r"add_step: step_data has no field; expected a dict "
                       r"mapping each field name to a tensor"):
        rb.add_step({}, False)
    rb.add_step({"x": torch.zeros(2)}, True)  # the refused step fixed nothing
    assert rb.dataset.episode_lengths == [1]


def test_a_refused_first_step_fixes_neither_single_nor_vector_env():
    rb = EpisodeReplayBuffer(RingBufferDataset(100), batch_size=2)
    with pytest.raises(ValueError, match=r"field 'x' has shape \(3,\), expected a leading dim of 2"):
        rb.add_step({"x": torch.zeros(3)}, torch.zeros(2, dtype=torch.bool))  # one env's step
    rb.add_step({"x": torch.zeros(3)}, True)  # the single env it is
    assert rb.dataset.episode_lengths == [1]


def test_sample_errors():
    rb = EpisodeReplayBuffer(RingBufferDataset(100), batch_size=2, sequence_length=5)
    with pytest.raises(RuntimeError, match="Cannot sample from empty dataset."):
        rb.sample()
    rb.dataset.add_episode(episode(0, 3))
    with pytest.raises(RuntimeError, match="Cannot sample sequences of 5 steps: the longest "
                       "stored episode has 3; .* or pass pad=True"):
        rb.sample()


def test_a_worker_that_drew_before_long_episodes_came_back_does_not_fail_sample(monkeypatch):
    # The race: a worker draws its prefetched batch while eviction has left no
    # episode of sequence_length steps; sample() comes after a long one was
    # added. The worker's first draw fails, as it would in that moment.
    from torchrl_ext.storages import EpisodePool

    failures = multiprocessing.get_context("fork").Value("i", 1)  # shared with forked workers
    sample = EpisodePool.sample

    def racing(self, *args, **kwargs):
        with failures.get_lock():
            failing, failures.value = failures.value > 0, failures.value - 1
        if failing:
            raise ValueError("cannot sample sequences of 4 steps: no stored episode has that many")
        return sample(self, *args, **kwargs)

    monkeypatch.setattr(EpisodePool, "sample", racing)
    rb = EpisodeReplayBuffer(RingBufferDataset(100), batch_size=2, sequence_length=4, num_workers=2)
    rb.dataset.add_episode(episode(0, 6))
    assert within_one_episode(rb.sample())
    rb.close()


def test_construction_and_loader_errors(tmp_path):
    with pytest.raises(ValueError, match="RingBufferDataset: capacity=0, expected an int >= 1"):
        RingBufferDataset(0)
    with pytest.raises(TypeError, match="expected an EpisodeDataset"):
        EpisodeReplayBuffer(object(), batch_size=2)
    dataset = RingBufferDataset(10)
    with pytest.raises(ValueError, match="chunk_size=3 must be >= 1 and divide batch_size=8"):
        dataset.get_loader(8, 2, chunk_size=3)
    with pytest.raises(ValueError, match="sequence_length=0, expected >= 1 or None"):
        dataset.get_loader(8, 0)
    with pytest.raises(ValueError, match="get_loader: batch_size=0, expected an int >= 1"):
        dataset.get_loader(0, 1)
    with pytest.raises(ValueError, match="a dataset cannot extend itself"):
        dataset.extend(dataset)
    with pytest.raises(ValueError, match=r"serialization_strategy='zip', expected one of \['npz', 'pt'\]"):
        IndividualFileDataset(10, directory=tmp_path, serialization_strategy="zip")
    with pytest.raises(ValueError, match="info describes 2 stored episodes"):
        RingBufferDataset(10, info=EpisodeDatasetInfo(num_episodes=2))
    with pytest.raises(ValueError, match="fields have different numbers of steps: {'a': 2, 'b': 3}"):
        dataset.add_episode({"a": torch.zeros(2), "b": torch.zeros(3)})
    with pytest.raises(TypeError, match=r"field 'a' must be a non-empty list of tensors"):
        dataset.add_episode({"a": []})
    with pytest.raises(ValueError, match="the episode has no step"):
        dataset.add_episode({"a": torch.zeros(0, 2)})
    with pytest.raises(ValueError, match=r"RingBufferDataset on meta samples in the main "
                       r"process: num_workers=2, expected 0"):
        RingBufferDataset(10, device="meta").get_loader(2, 1, num_workers=2)


def test_npz_refuses_dtypes_numpy_cannot_store(tmp_path):
    dataset = IndividualFileDataset(10, directory=tmp_path)
    with pytest.raises(TypeError, match="field 'x' has dtype torch.bfloat16, which numpy cannot "
                       "store; use serialization_strategy='pt'"):
        dataset.add_episode({"x": torch.zeros(2, 2, dtype=torch.bfloat16)})
    assert dataset.num_episodes == 0 and not any(Path(tmp_path).iterdir())
    assert os.path.isdir(tmp_path)


# ------------------------------------------------------------- checkpoints
def test_checkpoint_resume_restores_episodes_running_steps_and_rng(tmp_path):
    def build():
        return EpisodeReplayBuffer(RingBufferDataset(30, evictor=RandomEvictor(seed=1)),
                                   batch_size=8, sequence_length=3, seed=5)

    rb = build()
    for t in range(40):  # 2 envs, episodes of 7 and 9 steps; evictions happen
        was_done = torch.tensor([t % 7 == 0 and t > 0, t % 9 == 0 and t > 0])
        rb.add_step({"x": torch.tensor([[float(t // 7), t % 7], [100.0 + t // 9, t % 9]])}, was_done)
    rb.sample()
    torch.save(rb.state_dict(), tmp_path / "rb.pt")
    restored = build()
    restored.load_state_dict(torch.load(tmp_path / "rb.pt", weights_only=False))
    assert restored.dataset.episode_lengths == rb.dataset.episode_lengths
    for _ in range(3):
        assert torch.equal(restored.sample()["x"], rb.sample()["x"])
    for buffer in (rb, restored):  # same running episodes, same evictions from here on
        buffer.add_step({"x": torch.tensor([[9.0, 0.0], [9.0, 0.0]])}, torch.ones(2, dtype=torch.bool))
        buffer.flush()
    assert restored.dataset.episode_lengths == rb.dataset.episode_lengths
    assert torch.equal(restored.sample()["x"], rb.sample()["x"])


def test_add_step_takes_field_names_of_str_subclasses():
    """StrEnum members and numpy strings are string keys, as plain ``str`` ones."""
    import enum

    import numpy as np

    class Field(enum.StrEnum):
        X = "x"

    rb = EpisodeReplayBuffer(RingBufferDataset(30), batch_size=2, sequence_length=1, seed=5)
    rb.add_step({Field.X: torch.zeros(2, 1)}, torch.zeros(2, dtype=torch.bool))
    rb.add_step({np.str_("x"): np.ones((2, 1), np.float32)}, torch.zeros(2, dtype=torch.bool))
    rb.flush()
    assert rb.dataset.episode_lengths == [2, 2]


@pytest.mark.parametrize("step", [{"x": {"y": torch.zeros(2)}}, {"x": TensorDict({}, [2])},
                                  {1: torch.zeros(2)}], ids=["dict", "tensordict", "int key"])
def test_add_step_refuses_nested_fields_and_keys_that_are_not_strings(step):
    rb = EpisodeReplayBuffer(RingBufferDataset(30), batch_size=2, sequence_length=1, seed=5)
    with pytest.raises(TypeError, match=r"add_step: field .*: expected string keys and tensor "
                       r"values \(nested fields are not supported\)"):
        rb.add_step(step, torch.zeros(2, dtype=torch.bool))


def test_add_step_copies_numpy_fields_torch_cannot_view():
    """Read-only (broadcast) and reversed arrays are stored as given, without a warning."""
    import numpy as np

    rb = EpisodeReplayBuffer(RingBufferDataset(30), batch_size=2, sequence_length=1, seed=5)
    row = np.arange(3, dtype=np.float32)
    no = torch.zeros(2, dtype=torch.bool)
    rb.add_step({"x": np.broadcast_to(row, (2, 3))}, no)  # read-only, zero strides
    rb.add_step({"x": np.stack([row, row + 3])[::-1]}, no)  # negative strides
    rb.add_step({"x": torch.zeros(2, 3)}, torch.ones(2, dtype=torch.bool))
    assert rb.dataset.episode(0)["x"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert rb.dataset.episode(1)["x"].tolist() == [[0.0, 1.0, 2.0], [0.0, 1.0, 2.0]]


def test_add_step_refuses_a_numpy_field_for_a_bfloat16_field():
    """numpy has no bfloat16: a numpy array is never of the field's dtype (np.dtype(None) is float64)."""
    import numpy as np

    rb = EpisodeReplayBuffer(RingBufferDataset(30), batch_size=2, sequence_length=1, seed=5)
    rb.add_step({"x": torch.zeros(2, 1, dtype=torch.bfloat16)}, torch.zeros(2, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"field 'x' has dtype torch.float64, expected torch.bfloat16"):
        rb.add_step({"x": np.ones((2, 1))}, torch.zeros(2, dtype=torch.bool))


def test_fields_devices_follow_the_checkpoint_map_location():
    # each field's device is saved as a tensor, so torch.load(map_location=...) moves it
    # with the data: a GPU run's checkpoint serves CPU batches on a machine without a GPU
    dataset = RingBufferDataset(20)
    dataset.add_episode(episode(0, 5))
    state = dataset.state_dict()
    state["devices"] = {k: v.to("meta") for k, v in state["devices"].items()}  # as if mapped
    restored = RingBufferDataset(20)
    restored.load_state_dict(state)
    assert restored.fields["x"].device == torch.device("meta")
    assert dataset.fields["x"].device == torch.device("cpu")


def test_a_field_kept_on_another_device_than_the_pool_comes_back_there():
    # steps added as CUDA tensors into a pool in host memory come back on the GPU; the
    # pool's batches carry its device, which moved such a field back (setting a tensor
    # into a TensorDict with a device casts it): the meta device stands in for the GPU
    dataset = RingBufferDataset(20)
    dataset.add_episode(episode(0, 5))
    state = dataset.state_dict()
    state["devices"] = {"x": state["devices"]["x"].to("meta")}  # "x" only: the rest stays
    restored = RingBufferDataset(20)
    restored.load_state_dict(state)
    batch = EpisodeReplayBuffer(restored, batch_size=2, sequence_length=2, seed=0).sample()
    assert batch["x"].device == torch.device("meta")
    assert all(batch[k].device == torch.device("cpu") for k in restored.fields if k != "x")


def test_the_padding_mask_goes_with_fields_kept_on_another_device():
    # whole episodes come padded, with a "mask": it stayed on the pool's device while
    # every field went back to its own (the meta device stands in for the GPU)
    info = EpisodeDatasetInfo(fields=Fields({"obs": Vector("meta", torch.float32, (2,))}))
    dataset = RingBufferDataset(20, info=info)
    for n in (3, 5):
        dataset.add_episode({"obs": torch.zeros(n, 2)})
    batch = EpisodeReplayBuffer(dataset, batch_size=2, sequence_length=None, seed=0).sample()
    assert batch["obs"].device == batch["mask"].device == torch.device("meta")


def test_load_state_dict_without_running_steps_drops_the_running_episodes():
    def build():
        return EpisodeReplayBuffer(RingBufferDataset(30), batch_size=2, sequence_length=1, seed=5)

    empty = build().state_dict()  # no episode, no running step
    rb = build()
    for t in range(3):  # running episodes, not stored yet
        rb.add_step({"x": torch.tensor([[float(t)], [10.0 + t]])}, torch.zeros(2, dtype=torch.bool))
    rb.load_state_dict(empty)
    rb.flush()
    assert rb.dataset.episode_lengths == []  # the checkpoint's state, nothing from before it


def test_load_state_dict_needs_an_empty_dataset_of_the_same_capacity():
    dataset = RingBufferDataset(10)
    dataset.add_episode(episode(0, 2))
    with pytest.raises(ValueError, match="the checkpoint has capacity 10; load it into an empty "
                       "dataset of that capacity \\(this one: 20, 0 episodes\\)"):
        RingBufferDataset(20).load_state_dict(dataset.state_dict())
