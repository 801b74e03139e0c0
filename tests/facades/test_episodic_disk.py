"""``IndividualFileDataset``'s files on disk: regression tests B14 and B15.

Directories (relative, reopened, the temporary default), atomic and failed
writes, the serialization strategies (B14), and samples drawn from memory,
never from the files (B15). Reopening with other capacities, truncated files
and other strategies is in ``test_episodic_files.py``. Bug ids and the
``"x"`` field as in ``test_episodic.py``.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from _episodic_helpers import draw, episode, within_one_episode
from torchrl_ext import IndividualFileDataset


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
