"""The episodic API (``EpisodeReplayBuffer`` + datasets): regression tests B1–B19.

Each ``test_bN_*`` pins the fix of the original's bug BN (listed in the
migration guide, ``docs/migration/buffers.md``).
Episodes carry their identity in the data: field ``"x"`` is ``(episode id, step)``.
"""
from __future__ import annotations

import logging
import multiprocessing
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from torchrl_ext import EpisodeReplayBuffer, IndividualFileDataset, RingBufferDataset
from torchrl_ext.facades.episodic import (
    EpisodeDatasetInfo,
    Evictor,
    RandomEvictor,
    ShortestEpisodeEvictor,
    VerificationMode,
)


def episode(eid: int, length: int) -> dict[str, torch.Tensor]:
    steps = torch.arange(length, dtype=torch.float32)
    return {"x": torch.stack([torch.full_like(steps, eid), steps], -1)}


def within_one_episode(batch) -> bool:
    """Every sequence is consecutive steps of a single episode."""
    x = batch["x"]
    same = (x[..., 0] == x[..., :1, 0]).all()
    consecutive = (x[..., 1:, 1] - x[..., :-1, 1] == 1).all()
    return bool(same and consecutive)


def datasets(tmp_path, capacity, **kwargs):
    return [
        RingBufferDataset(capacity, **kwargs),
        IndividualFileDataset(capacity, directory=tmp_path / "files", **kwargs),
    ]


def draw(dataset, batch_size, sequence_length, batches=1, **kwargs):
    loader = dataset.get_loader(batch_size, sequence_length, seed=0, **kwargs)
    it = iter(loader)
    return torch.cat([next(it) for _ in range(batches)])


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


# ---------------------------------------------- B12, B13: worker processes
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_b12_b13_workers_seed_on_this_python_and_each_samples_everything(tmp_path, context):
    dataset = IndividualFileDataset(1000, directory=tmp_path)
    for eid in range(3):
        dataset.add_episode(episode(eid, 20))
    loader = dataset.get_loader(48, 4, num_workers=2, seed=0, multiprocessing_context=context)
    it = iter(loader)
    batches = [next(it) for _ in range(4)]  # alternate between the two workers
    for batch in batches:
        assert within_one_episode(batch)
        assert set(batch["x"][:, 0, 0].tolist()) == {0.0, 1.0, 2.0}  # no shard
    assert not torch.equal(batches[0]["x"], batches[1]["x"])  # workers differ
    # Let the workers finish handing over their prefetched batches before shutting
    # them down: once (in one CI run of ~30) a spawn worker aborted in C++ while
    # exiting mid-hand-over ("terminate called without an active exception").
    time.sleep(0.5)
    del it


def test_b13_a_single_episode_serves_every_worker(tmp_path):
    dataset = RingBufferDataset(100)
    dataset.add_episode(episode(0, 5))
    it = iter(dataset.get_loader(8, 2, num_workers=2, seed=1))
    assert all(within_one_episode(next(it)) for _ in range(4))


def test_workers_see_episodes_added_after_they_started():
    dataset = RingBufferDataset(1000)
    dataset.add_episode(episode(0, 20))
    it = iter(dataset.get_loader(16, 5, num_workers=2, seed=0))
    next(it)
    dataset.add_episode(episode(7, 200))
    seen = set()
    for _ in range(40):
        seen |= set(next(it)["x"][:, 0, 0].tolist())
        if 7.0 in seen:
            break
    assert 7.0 in seen


# --------------------------------------------------- B14: files on disk
def test_b14_directory_is_absolute_reopened_and_temporary_default_removed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dataset = IndividualFileDataset(100, directory="relative")
    assert dataset.directory == (tmp_path / "relative").resolve()
    dataset.add_episode(episode(0, 4))
    dataset.add_episode(episode(1, 6))
    monkeypatch.chdir("/")
    reopened = IndividualFileDataset(100, directory=tmp_path / "relative")
    assert reopened.episode_lengths == [4, 6]
    assert within_one_episode(draw(reopened, 32, 3))
    reopened.add_episode(episode(2, 3))
    names = sorted(p.name[:7] for p in (tmp_path / "relative").iterdir())
    assert names == ["0000000", "0000001", "0000002"]  # ids continue after reopening

    default = IndividualFileDataset(100)
    default.add_episode(episode(0, 3))
    directory = default.directory
    assert directory.is_absolute() and any(directory.iterdir())
    del default
    assert not directory.exists()


def test_b14_reopening_a_larger_directory_evicts_to_the_capacity(tmp_path):
    dataset = IndividualFileDataset(100, directory=tmp_path)
    for eid in range(4):
        dataset.add_episode(episode(eid, 10))
    with pytest.warns(UserWarning, match=r"2 older episode files .*kept on disk"):
        smaller = IndividualFileDataset(25, directory=tmp_path)
    assert smaller.episode_lengths == [10, 10]
    assert smaller.episode(0)["x"][0, 0].item() == 2.0  # the newest that fit
    # issue 13: opening never deletes; the surplus stays on disk
    assert sorted(int(p.name[:7]) for p in tmp_path.iterdir()) == [0, 1, 2, 3]


def test_file_writes_are_atomic_when_the_process_dies_mid_write(tmp_path):
    script = textwrap.dedent(f"""
        import os, torch
        from torchrl_ext.facades.episodic import IndividualFileDataset, TorchSerialization

        class DiesMidWrite(TorchSerialization):
            def save(self, episode, file):
                file.write(b"half an episode")
                file.flush()
                os._exit(3)

        dataset = IndividualFileDataset(100, directory={str(tmp_path)!r}, serialization_strategy="pt")
        dataset.add_episode({{"x": torch.zeros(4, 2)}})
        dataset.serialization = DiesMidWrite()
        dataset.add_episode({{"x": torch.ones(5, 2)}})
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert result.returncode == 3, result.stderr.decode()
    assert any(p.name.endswith(".tmp") for p in tmp_path.iterdir())  # the half-written file
    reopened = IndividualFileDataset(100, directory=tmp_path, serialization_strategy="pt")
    assert reopened.episode_lengths == [4]
    assert [p.name.endswith(".pt") for p in tmp_path.iterdir()] == [True]


def test_a_failed_write_leaves_neither_file_nor_episode(tmp_path):
    class Fails:
        suffix = ".bin"

        def save(self, episode, file):
            file.write(b"partial")
            raise OSError("disk full")

        def load(self, file):
            raise AssertionError("never read")

    dataset = IndividualFileDataset(100, directory=tmp_path, serialization_strategy=Fails())
    with pytest.raises(OSError, match="disk full"):
        dataset.add_episode(episode(0, 3))
    assert dataset.num_episodes == 0 and dataset.num_timesteps == 0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("strategy", ["npz", "pt"])
def test_serialization_strategies_round_trip_every_field(tmp_path, strategy):
    data = {"x": torch.randn(4, 2), "image": torch.randint(0, 255, (4, 3, 3, 3), dtype=torch.uint8),
            "done": torch.tensor([False, False, False, True])}
    IndividualFileDataset(100, directory=tmp_path, serialization_strategy=strategy).add_episode(data)
    reopened = IndividualFileDataset(100, directory=tmp_path, serialization_strategy=strategy)
    stored = reopened.episode(0)
    for key, value in data.items():
        assert torch.equal(stored[key], value)


# ------------------------------------------------ B15: no disk per sample
def test_b15_samples_come_from_memory_not_from_files(tmp_path):
    dataset = IndividualFileDataset(1000, directory=tmp_path / "episodes")
    for eid in range(3):
        dataset.add_episode(episode(eid, 10))
    (tmp_path / "episodes").rename(tmp_path / "moved")  # no file can be read any more
    it = iter(dataset.get_loader(32, 3, num_workers=2, seed=0))
    assert all(within_one_episode(next(it)) for _ in range(3))


def test_b15_rare_long_episodes_are_found_without_giving_up(tmp_path):
    dataset = IndividualFileDataset(1000, directory=tmp_path, max_sampling_attempts=1)
    for eid in range(100):
        dataset.add_episode(episode(eid, 1))
    dataset.add_episode(episode(100, 8))
    batch = draw(dataset, 64, 8)
    assert bool((batch["x"][:, 0, 0] == 100).all())


# --------------------------------------------------- B16: no Manager process
def test_b16_no_manager_process_and_add_before_get_loader(tmp_path):
    before = set(multiprocessing.active_children())
    dataset = IndividualFileDataset(100, directory=tmp_path)
    dataset.add_episode(episode(0, 5))  # before any get_loader
    rb = EpisodeReplayBuffer(dataset, batch_size=4, sequence_length=2, num_workers=1)
    assert set(multiprocessing.active_children()) == before
    assert within_one_episode(rb.sample())
    rb.close()
    assert set(multiprocessing.active_children()) == before


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
    with pytest.raises(ValueError, match="capacity=0, expected >= 1 steps"):
        RingBufferDataset(0)
    with pytest.raises(TypeError, match="expected an EpisodeDataset"):
        EpisodeReplayBuffer(object(), batch_size=2)
    dataset = RingBufferDataset(10)
    with pytest.raises(ValueError, match="chunk_size=3 must be >= 1 and divide batch_size=8"):
        dataset.get_loader(8, 2, chunk_size=3)
    with pytest.raises(ValueError, match="sequence_length=0, expected >= 1 or None"):
        dataset.get_loader(8, 0)
    with pytest.raises(ValueError, match="batch_size=0, expected >= 1"):
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
