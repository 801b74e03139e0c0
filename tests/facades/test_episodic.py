"""Episodic datasets and their sampling: regression tests B1, B3, B7–B11 and B17–B19.

Each ``test_bN_*`` pins the fix of the original's bug BN (listed in the
migration guide, ``docs/migration/buffers.md``): eviction, the last window,
whole episodes, episodes too long, half precision, pinning, ``extend``,
evictors, sampling weights and verification modes; then the datasets'
statistics and the facade's batches. The buffer's ``add_step``, errors and
checkpoints are in ``test_episodic_buffer.py``, worker processes in
``test_episodic_workers.py``, files on disk in ``test_episodic_disk.py``.
Episodes carry their identity in the data: field ``"x"`` is ``(episode id, step)``.
"""
from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from _episodic_helpers import draw, episode, within_one_episode
from torchrl_ext import EpisodeReplayBuffer, IndividualFileDataset, RingBufferDataset
from torchrl_ext.facades.episodic import (
    EpisodeDatasetInfo,
    Evictor,
    RandomEvictor,
    ShortestEpisodeEvictor,
    VerificationMode,
)


def datasets(tmp_path, capacity, **kwargs):
    return [
        RingBufferDataset(capacity, **kwargs),
        IndividualFileDataset(capacity, directory=tmp_path / "files", **kwargs),
    ]


# ----------------------------------------------------------------- B1: eviction
@pytest.mark.parametrize("kind", ["ring", "files"])
def test_b1_eviction_frees_storage_and_only_live_episodes_are_sampled(tmp_path, kind):
    dataset = datasets(tmp_path, 25)[kind == "files"]
    for eid in range(5):
        dataset.add_episode(episode(eid, 10))
    assert dataset.num_episodes == 2 and dataset.num_timesteps == 20
    assert dataset.is_full
    batch = draw(dataset, 256, 5)
    assert within_one_episode(batch)
    assert set(batch["x"][:, 0, 0].tolist()) == {3.0, 4.0}  # the newest two
    if kind == "files":
        assert len(list((tmp_path / "files").iterdir())) == 2


def test_b1_file_dataset_deletes_evicted_files(tmp_path):
    dataset = IndividualFileDataset(30, directory=tmp_path)
    for eid in range(6):
        dataset.add_episode(episode(eid, 10))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert dataset.num_episodes == 3 and len(names) == 3
    assert [int(n[:7]) for n in names] == [3, 4, 5]
    assert set(draw(dataset, 200, 1)["x"][:, 0, 0].tolist()) == {3.0, 4.0, 5.0}


# --------------------------------------------------------- B3: last window
@pytest.mark.parametrize("kind", ["ring", "files"])
def test_b3_every_step_is_sampled_including_the_last(tmp_path, kind):
    dataset = datasets(tmp_path, 100)[kind == "files"]
    dataset.add_episode(episode(0, 10))
    steps = draw(dataset, 500, 1)["x"][:, 0, 1]
    assert set(steps.tolist()) == set(map(float, range(10)))
    starts = draw(dataset, 500, 4)["x"][:, 0, 1]
    assert set(starts.tolist()) == set(map(float, range(7)))  # 0..6: the last window too


# ------------------------------------------------------ B7: whole episodes
def test_b7_whole_episodes_with_batches_and_variable_lengths():
    dataset = RingBufferDataset(30)
    for eid, n in enumerate([3, 7, 5]):
        dataset.add_episode(episode(eid, n))
    rb = EpisodeReplayBuffer(dataset, batch_size=16, sequence_length=None, seed=0)
    assert not rb.is_empty
    batch = rb.sample()
    lengths = batch["mask"].sum(-1)
    assert batch.shape[1] == int(lengths.max())
    for row, n in zip(batch["x"], lengths.tolist()):
        assert row[:n, 1].tolist() == list(map(float, range(n)))
        assert [3, 7, 5][int(row[0, 0])] == n


def test_b7_an_episode_as_long_as_the_capacity():
    dataset = RingBufferDataset(10)
    dataset.add_episode(episode(0, 4))
    dataset.add_episode(episode(1, 10))  # evicts episode 0, fills every row
    assert dataset.episode_lengths == [10]
    batch = draw(dataset, 200, 3)
    assert within_one_episode(batch)
    assert set(batch["x"][:, 0, 1].tolist()) == set(map(float, range(8)))


# ----------------------------------------------------------- B8: too long
def test_b8_an_episode_longer_than_the_capacity_is_a_clear_error():
    dataset = RingBufferDataset(5)
    with pytest.raises(ValueError, match=r"an episode of 6 steps does not fit in "
                       r"RingBufferDataset\(capacity=5\); raise the capacity"):
        dataset.add_episode(episode(0, 6))
    assert dataset.num_episodes == 0


# ----------------------------------------------------- B9: half precision
def test_b9_half_precision_stores_float16_and_returns_float32():
    dataset = RingBufferDataset(20, half_precision=True)
    dataset.add_episode({**episode(0, 5), "flag": torch.ones(5, dtype=torch.bool)})
    assert dataset.pool.rows["x"].dtype == torch.float16
    batch = draw(dataset, 4, 2)
    assert batch["x"].dtype == torch.float32 and batch["flag"].dtype == torch.bool
    assert within_one_episode(batch)


def test_b9_half_precision_refuses_values_float16_cannot_hold_before_evicting():
    dataset = RingBufferDataset(10, half_precision=True)
    dataset.add_episode(episode(0, 6))
    big = episode(1, 6)
    big["x"][3, 1] = -7e4  # float16 stops at 65504: it would be stored as -inf
    with pytest.raises(ValueError, match=r"field 'x' holds -70000, beyond the float16 range "
                       r"\(\+-65504\) of RingBufferDataset\(half_precision=True\)"):
        dataset.add_episode(big)
    assert dataset.episode_lengths == [6]  # nothing evicted for the refused episode
    inf = episode(2, 6)
    inf["x"][0, 1] = float("inf")  # an infinite value stays infinite: stored as it came
    dataset.add_episode(inf)
    assert dataset.episode(0)["x"][0, 1] == float("inf")


# ------------------------------------------------------- B10: pin_memory
def test_b10_pinning_is_off_by_default_and_refused_without_cuda():
    dataset = RingBufferDataset(20)
    assert dataset.get_loader(2, 1).pin_memory is False
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="pin_memory=True needs CUDA"):
            dataset.get_loader(2, 1, pin_memory=True)


def test_pad_that_is_not_a_bool_is_refused_when_the_loader_is_built():
    # the sequence sampler refused pad=1 only when sequences were drawn: the
    # facade was built fine and its first batch failed
    with pytest.raises(TypeError, match=r"get_loader: pad=1 \(int\), expected True or False"):
        EpisodeReplayBuffer(RingBufferDataset(20), batch_size=2, sequence_length=2, pad=1)


# ---------------------------------------------------------- B11: extend
@pytest.mark.parametrize("large", ["ring", "files"])
def test_b11_extend_with_variable_lengths_any_kind_and_the_new_episode_kept(tmp_path, large):
    other = datasets(tmp_path, 200)[large == "files"]
    front = RingBufferDataset(20)
    front.extend(other, other_batch_size=2, fetch_from_other_every=1)
    for eid, n in enumerate([6, 9, 4, 7, 5, 8]):
        front.add_episode(episode(eid, n))
        newest = front.episode(-1)
        assert newest["x"][0, 0] == eid  # the incoming episode is stored in the front
    assert other.num_episodes == 6 and other.num_timesteps == 39
    assert front.is_full and front.num_timesteps <= 20
    assert within_one_episode(draw(front, 64, 3))


def test_extend_refuses_an_episode_longer_than_the_front_before_storing_it_in_other(tmp_path):
    front, other = RingBufferDataset(5), RingBufferDataset(100)
    front.extend(other, other_batch_size=4, other_num_workers=0)
    front.add_episode(episode(0, 3))
    with pytest.raises(ValueError, match=r"an episode of 6 steps does not fit in "
                       r"RingBufferDataset\(capacity=5\)"):
        front.add_episode(episode(1, 6))
    assert other.episode_lengths == [3]  # refused by both: later fetches never meet it
    for eid in range(2, 8):  # fetch rounds once the front is full
        front.add_episode(episode(eid, 2))
        assert front.episode(-1)["x"][0, 0] == eid
    assert other.episode_lengths == [3] + [2] * 6
    # a large dataset already holding an episode the front cannot hold is refused at once
    large = IndividualFileDataset(100, directory=tmp_path)
    large.add_episode(episode(0, 8))
    with pytest.raises(ValueError, match=r"extend: other holds an episode of 8 steps, more than "
                       r"this RingBufferDataset's capacity=5"):
        RingBufferDataset(5).extend(large)


# ---------------------------------------------------------- B17: evictors
def test_b17_evictors_see_the_dataset_and_may_evict_any_episode():
    seen = []

    class Longest(Evictor):
        def __call__(self, dataset):
            seen.append((dataset.num_timesteps, list(dataset.episode_lengths)))
            return dataset.episode_lengths.index(max(dataset.episode_lengths))

    dataset = RingBufferDataset(20, evictor=Longest())
    for eid, n in enumerate([4, 9, 5, 6]):
        dataset.add_episode(episode(eid, n))
    assert seen == [(18, [4, 9, 5])]
    assert dataset.episode_lengths == [4, 5, 6]
    batch = draw(dataset, 300, 1)
    assert set(batch["x"][:, 0, 0].tolist()) == {0.0, 2.0, 3.0}
    for eid, n in ((0, 4), (2, 5), (3, 6)):  # every surviving episode intact
        steps = batch["x"][batch["x"][:, 0, 0] == eid][:, 0, 1]
        assert set(steps.tolist()) == set(map(float, range(n)))


def test_b17_builtin_evictors():
    dataset = RingBufferDataset(12, evictor=ShortestEpisodeEvictor())
    for eid, n in enumerate([6, 2, 3, 4]):
        dataset.add_episode(episode(eid, n))
    assert dataset.episode_lengths == [6, 4]
    dataset = RingBufferDataset(12, evictor=RandomEvictor(seed=0))
    for eid in range(10):
        dataset.add_episode(episode(eid, 4))
    assert dataset.num_timesteps == 12 and within_one_episode(draw(dataset, 50, 4))


def test_b17_an_evictor_written_for_the_original_api_is_called_without_the_dataset():
    class Oldest(Evictor):  # the original's signature: called with no argument
        def __call__(self):
            return 0

    dataset = RingBufferDataset(8, evictor=Oldest())
    for eid, n in enumerate([3, 4, 5]):
        dataset.add_episode(episode(eid, n))
    assert dataset.episode_lengths == [5]
    with pytest.raises(TypeError, match=r"evictor .* takes 2 arguments, expected a callable taking "
                       r"the dataset \(or none, as in the original\)"):
        RingBufferDataset(8, evictor=lambda a, b: 0)
    with pytest.raises(TypeError, match=r"RingBufferDataset: evictor is int, expected an Evictor"):
        RingBufferDataset(8, evictor=3)


def test_an_evictor_returning_a_bad_position_is_a_clear_error():
    class Bad(Evictor):
        def __call__(self, dataset):
            return 5

    dataset = RingBufferDataset(10, evictor=Bad())
    dataset.add_episode(episode(0, 6))
    with pytest.raises(ValueError, match=r"Bad returned 5, expected an episode position in \[0, 1\)"):
        dataset.add_episode(episode(1, 6))


def test_an_evictor_may_return_a_numpy_or_tensor_integer():
    # np.argmin's np.int64 was refused ("returned np.int64(0), expected an episode
    # position in [0, 2)"), where the original's list.pop takes it; a flag is no position
    for position in (np.int64(0), torch.tensor(0), True):
        class Shortest(Evictor):
            def __call__(self, dataset, position=position):
                return position

        dataset = RingBufferDataset(8, evictor=Shortest())
        for eid, n in enumerate((3, 4)):
            dataset.add_episode(episode(eid, n))
        if position is True:
            with pytest.raises(ValueError, match=r"Shortest returned True, expected an episode position"):
                dataset.add_episode(episode(2, 3))
            continue
        dataset.add_episode(episode(2, 3))  # 7 + 3 > 8: the first episode goes
        assert dataset.episode_lengths == [4, 3]


# --------------------------------------------------------- B18: weighting
def test_b18_sampling_is_uniform_over_windows_not_episodes():
    dataset = RingBufferDataset(100)
    dataset.add_episode(episode(0, 18))
    dataset.add_episode(episode(1, 2))
    batch = draw(dataset, 4000, 1)
    share = float((batch["x"][:, 0, 0] == 1).float().mean())
    assert 0.07 < share < 0.13  # 2 of 20 steps, not 1 of 2 episodes


# ------------------------------------------------------- B19: verification
def test_b19_verification_modes_check_what_they_say():
    dataset = RingBufferDataset(100)
    dataset.add_episode(episode(0, 3))
    with pytest.raises(ValueError, match=r"field 'x' has steps of shape \(3,\), expected \(2,\)"):
        dataset.add_episode({"x": torch.zeros(3, 3)})
    with pytest.raises(TypeError, match=r"field 'x' has dtype torch.float64, expected torch.float32"):
        dataset.add_episode({"x": torch.zeros(3, 2, dtype=torch.float64)})
    with pytest.raises(KeyError, match=r"missing \['x'\], unexpected \['y'\]"):
        dataset.add_episode({"y": torch.zeros(3, 2)})
    dataset.add_episode({"x": torch.full((3, 2), float("nan"))})  # basic: NaN passes

    extended = RingBufferDataset(100, info=EpisodeDatasetInfo(
        verification_mode=VerificationMode.EXTENDED_CHECKS))
    with pytest.raises(ValueError, match="field 'x' holds NaN or infinite values"):
        extended.add_episode({"x": torch.full((3, 2), float("inf"))})


def test_no_checks_mode_still_refuses_missing_or_unknown_fields():
    """With NO_CHECKS an unknown field failed inside the pool ('NoneType' object has no attribute
    'index_copy_'), and a missing one was stored with the rows' stale values."""
    dataset = RingBufferDataset(100, info=EpisodeDatasetInfo(verification_mode=VerificationMode.NO_CHECKS))
    dataset.add_episode({"x": torch.zeros(3, 2), "y": torch.zeros(3)})
    with pytest.raises(KeyError, match=r"add_episode: the episode's fields differ from the dataset's \['x', 'y'\]: "
                                       r"missing \['y'\], unexpected \['z'\]"):
        dataset.add_episode({"x": torch.zeros(3, 2), "z": torch.zeros(3)})
    with pytest.raises(KeyError, match=r"missing \['y'\], unexpected \[\]"):
        dataset.add_episode({"x": torch.zeros(3, 2)})
    dataset.add_episode({"x": torch.full((3, 2), float("nan")), "y": torch.zeros(3)})  # values unchecked
    assert dataset.num_episodes == 2


def test_no_checks_mode_refuses_a_field_of_another_shape_naming_it():
    """NO_CHECKS skips value checks, but a step of another shape cannot be stored: it failed in
    torch's index_copy_ ('source and destination slices have the same size'); nothing is stored."""
    dataset = RingBufferDataset(100, info=EpisodeDatasetInfo(verification_mode=VerificationMode.NO_CHECKS))
    dataset.add_episode({"x": torch.zeros(3, 2), "y": torch.zeros(3)})
    with pytest.raises(ValueError, match=r"EpisodePool.append: entry 'x' has steps of shape \(4,\), the pool's "
                                         r"rows hold \(2,\) \(fixed by the first episode\)"):
        dataset.add_episode({"x": torch.zeros(3, 4), "y": torch.zeros(3)})
    dataset.add_episode({"x": torch.ones(2, 2), "y": torch.ones(2)})
    assert dataset.num_episodes == 2


def test_add_episode_refuses_per_step_lists_whose_shape_or_dtype_changes():
    # torch.stack promotes dtypes (an int64 step among float32 ones, float32 among
    # float64) and names no field when shapes differ: each is refused by name
    dataset = RingBufferDataset(100)
    with pytest.raises(TypeError, match=r"add_episode: field 'obs' has dtype torch.float64 at "
                       r"step 1, expected torch.float32 as at step 0"):
        dataset.add_episode({"obs": [torch.zeros(3), torch.zeros(3, dtype=torch.float64)]})
    with pytest.raises(TypeError, match=r"field 'reward' has dtype torch.float32 at step 2, "
                       r"expected torch.int64"):
        dataset.add_episode({"reward": [torch.tensor(1), torch.tensor(0), torch.tensor(0.5)]})
    with pytest.raises(ValueError, match=r"add_episode: field 'obs' has shape \(4,\) at step 1, "
                       r"expected \(3,\) as at step 0"):
        dataset.add_episode({"obs": [torch.zeros(3), torch.zeros(4)]})
    assert dataset.is_empty and dataset.fields is None  # nothing stored, no field fixed


def test_b19_debugging_mode_logs_each_episode(caplog):
    dataset = RingBufferDataset(100, info=EpisodeDatasetInfo(
        verification_mode=VerificationMode.DEBUGGING_CHECKS))
    with caplog.at_level(logging.DEBUG, logger="torchrl_ext.facades.episodic.fields"):
        dataset.add_episode(episode(0, 3))
    assert "add_episode: 3 steps" in caplog.text


# ------------------------------------------------ statistics and the facade
def test_statistics_and_fields():
    dataset = RingBufferDataset(10)
    assert dataset.is_empty and dataset.fields is None and dataset.average_episode_length == 0
    dataset.add_episode({"x": [torch.zeros(2)] * 4, "image": [torch.zeros(4, 4, 3, dtype=torch.uint8)] * 4})
    dataset.add_episode({"x": [torch.zeros(2)] * 2, "image": [torch.zeros(4, 4, 3, dtype=torch.uint8)] * 2})
    assert (dataset.num_episodes, dataset.num_timesteps, len(dataset)) == (2, 6, 6)
    assert dataset.average_episode_length == 3.0 and not dataset.is_full
    assert type(dataset.fields["image"]).__name__ == "ColorImage"
    assert repr(dataset) == "RingBufferDataset(capacity=10, num_episodes=2, num_timesteps=6)"


def test_preallocated_fields_from_info():
    probe = RingBufferDataset(10)
    probe.add_episode(episode(0, 2))
    dataset = RingBufferDataset(10, info=EpisodeDatasetInfo(fields=probe.fields))
    assert dataset.pool is not None
    with pytest.raises(KeyError, match="missing"):
        dataset.add_episode({"y": torch.zeros(2, 2)})


def test_datasets_built_from_one_info_keep_their_own_statistics(tmp_path):
    probe = RingBufferDataset(10)
    probe.add_episode(episode(0, 2))
    info = EpisodeDatasetInfo(fields=probe.fields)
    front, large = RingBufferDataset(10, info=info), IndividualFileDataset(100, info=info,
                                                                           directory=tmp_path)
    front.extend(large, other_batch_size=2, other_num_workers=0)
    for eid in range(4):
        front.add_episode(episode(eid, 4))
    assert large.episode_lengths == [4, 4, 4, 4] and large.num_timesteps == 16
    assert front.num_timesteps == sum(front.episode_lengths) <= 10
    assert info.num_episodes == 0 and info.episode_lengths == []  # the caller's is not the dataset's


def test_buffer_sample_shape_and_dict_access_and_iteration():
    rb = EpisodeReplayBuffer(RingBufferDataset(200), batch_size=5, sequence_length=3, seed=0)
    for t in range(10):
        rb.add_step({"x": torch.tensor([[0.0, t], [1.0, t]]), "a": torch.tensor([t, t])},
                    torch.zeros(2, dtype=torch.bool))
    rb.flush()
    batch = rb.sample()
    assert batch["x"].shape == (5, 3, 2) and batch["a"].dtype == torch.int64
    assert within_one_episode(next(iter(rb)))
    assert len(rb) == 20 and rb.num_timesteps == 20


def test_buffer_sampling_is_reproducible_with_a_seed():
    def run():
        rb = EpisodeReplayBuffer(RingBufferDataset(200), batch_size=6, sequence_length=2, seed=3)
        for eid in range(4):
            rb.dataset.add_episode(episode(eid, 5 + eid))
        return [rb.sample()["x"] for _ in range(3)]

    assert all(torch.equal(a, b) for a, b in zip(run(), run()))


def test_buffer_samples_are_the_batches_its_loader_serves_in_process():
    # sample() draws a one-chunk batch directly; the loader's iteration is the reference
    def filled():
        rb = EpisodeReplayBuffer(RingBufferDataset(200), batch_size=6, sequence_length=2, seed=3)
        for eid in range(4):
            rb.dataset.add_episode(episode(eid, 5 + eid))
        return rb

    direct, reference = filled(), filled()
    served = iter(reference.loader)
    for _ in range(3):
        assert torch.equal(direct.sample()["x"], next(served)["x"])

    def chunked():  # two chunks a batch, collated as the loader collates them
        rb = EpisodeReplayBuffer(RingBufferDataset(200), batch_size=6, sequence_length=2,
                                 chunk_size=3, seed=3)
        for eid in range(4):
            rb.dataset.add_episode(episode(eid, 5 + eid))
        return rb

    direct, served = chunked(), iter(chunked().loader)
    for _ in range(3):
        batch = direct.sample()
        assert batch.shape == (6, 2) and within_one_episode(batch)
        assert torch.equal(batch["x"], next(served)["x"])


def test_padded_short_episodes_with_pad():
    dataset = RingBufferDataset(100)
    dataset.add_episode(episode(0, 2))
    dataset.add_episode(episode(1, 6))
    batch = draw(dataset, 400, 4, pad=True)
    short = batch[batch["x"][:, 0, 0] == 0]
    assert short["mask"].tolist()[0] == [True, True, False, False]
    assert short["x"][0, :, 1].tolist() == [0.0, 1.0, 1.0, 1.0]
    assert bool(batch[batch["x"][:, 0, 0] == 1]["mask"].all())


def test_a_stored_mask_field_is_never_overwritten_by_the_padding_mask():
    """A step field named "mask" (an action mask) and padded sequences: a clear error,
    or the padding mask under ``mask_key``; ``extend`` keeps the field."""
    def steps(n):
        return {**episode(0, n), "mask": torch.arange(n) % 2 == 0}

    rb = EpisodeReplayBuffer(RingBufferDataset(100), batch_size=4, sequence_length=None, seed=0)
    rb.dataset.add_episode(steps(3))
    with pytest.raises(ValueError, match=r"the stored field 'mask' has the name of the padding "
                       r"mask .* pass mask_key="):
        rb.sample()
    rb = EpisodeReplayBuffer(rb.dataset, batch_size=4, sequence_length=None, seed=0,
                             mask_key="valid")
    rb.dataset.add_episode(steps(5))
    batch = rb.sample()
    for row in batch:
        n = int(row["valid"].sum())
        assert row["mask"][:n].tolist() == [t % 2 == 0 for t in range(n)]
    assert set(draw(rb.dataset, 8, 4, pad=True, mask_key="valid").keys()) == {"x", "mask", "valid"}
    front = RingBufferDataset(6)
    front.extend(RingBufferDataset(100), other_batch_size=2, other_num_workers=0)
    for n in (3, 3, 2, 2):  # fetch rounds from the second episode on
        front.add_episode(steps(n))
    for position in range(front.num_episodes):
        stored = front.episode(position)
        assert stored["mask"].tolist() == [t % 2 == 0 for t in range(stored.shape[0])]
