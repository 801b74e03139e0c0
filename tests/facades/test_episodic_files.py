"""IndividualFileDataset: reopening never loses data (issue 13, "data lost")."""
from __future__ import annotations

import pytest
import torch

from torchrl_ext.facades.episodic.files import IndividualFileDataset


def episode(start, length=5):
    return {"obs": torch.arange(start, start + length, dtype=torch.float32).view(length, 1)}


def files_in(directory):
    return sorted(p.name for p in directory.iterdir() if not p.name.startswith("."))


def test_reopening_deletes_data_smaller_capacity_keeps_files(tmp_path):
    dataset = IndividualFileDataset(100, directory=tmp_path)
    for i in range(4):
        dataset.add_episode(episode(10 * i))
    before = files_in(tmp_path)
    with pytest.warns(UserWarning, match=r"2 older episode files .* capacity=10 .*kept on disk"):
        small = IndividualFileDataset(10, directory=tmp_path)
    assert files_in(tmp_path) == before  # nothing deleted on open
    assert small.episode_lengths == [5, 5]
    assert small.episode(0)["obs"][0].item() == 20.0  # the newest that fit
    assert IndividualFileDataset(100, directory=tmp_path).num_episodes == 4


def test_reopening_deletes_data_skips_a_truncated_file(tmp_path):
    dataset = IndividualFileDataset(100, directory=tmp_path)
    for i in range(3):
        dataset.add_episode(episode(10 * i))
    broken = tmp_path / files_in(tmp_path)[1]
    broken.write_bytes(broken.read_bytes()[:20])
    with pytest.warns(UserWarning, match=f"unreadable episode file .*{broken.name}"):
        reopened = IndividualFileDataset(100, directory=tmp_path)
    assert [reopened.episode(i)["obs"][0].item() for i in range(2)] == [0.0, 20.0]


def test_reopening_deletes_data_reads_another_strategy(tmp_path):
    IndividualFileDataset(100, directory=tmp_path, serialization_strategy="pt").add_episode(episode(0))
    IndividualFileDataset(100, directory=tmp_path).add_episode(episode(10))
    reopened = IndividualFileDataset(100, directory=tmp_path)  # npz, sees the .pt file too
    assert [reopened.episode(i)["obs"][0].item() for i in range(2)] == [0.0, 10.0]
    (tmp_path / "0000009_5_20250101-000000.h5").write_bytes(b"x")
    with pytest.warns(UserWarning, match=r"0000009_5_20250101-000000.h5 has suffix '.h5'"):
        IndividualFileDataset(100, directory=tmp_path)


def test_eviction_after_load_state_dict(tmp_path):
    dataset = IndividualFileDataset(10, directory=tmp_path / "a")
    dataset.add_episode(episode(0))
    restored = IndividualFileDataset(10, directory=tmp_path / "b")
    restored.load_state_dict(dataset.state_dict())
    assert len(files_in(tmp_path / "b")) == 1
    for i in (1, 2):  # each add evicts the oldest (it used to pop from an empty list)
        restored.add_episode(episode(10 * i))
    assert restored.episode_lengths == [5, 5]
    assert len(files_in(tmp_path / "b")) == 2
    assert IndividualFileDataset(10, directory=tmp_path / "b").episode(0)["obs"][0].item() == 10.0


def test_b14_reopening_with_a_capacity_below_an_episode_keeps_its_file(tmp_path):
    dataset = IndividualFileDataset(100, directory=tmp_path)
    for start, length in ((0, 5), (10, 30), (50, 8)):
        dataset.add_episode(episode(start, length))
    before = files_in(tmp_path)
    with pytest.warns(UserWarning, match=r"1 older episode files .* capacity=20 .*kept on disk"):
        small = IndividualFileDataset(20, directory=tmp_path)  # the 30-step episode cannot fit
    assert files_in(tmp_path) == before
    assert small.episode_lengths == [5, 8]
    assert IndividualFileDataset(100, directory=tmp_path).episode_lengths == [5, 30, 8]


def test_reopening_names_the_file_whose_fields_differ(tmp_path):
    IndividualFileDataset(100, directory=tmp_path).add_episode(episode(0))
    name = files_in(tmp_path)[0]
    (tmp_path / "other").mkdir()
    IndividualFileDataset(100, directory=tmp_path / "other").add_episode({"obs": torch.zeros(3, 2)})
    (tmp_path / "other" / files_in(tmp_path / "other")[0]).rename(tmp_path / "0000001_3_20250101-000000.npz")
    with pytest.raises(ValueError, match=rf"0000001_3_20250101-000000.npz .*{name}.*field 'obs' "
                       r"has steps of shape \(2,\), expected \(1,\)"):
        IndividualFileDataset(100, directory=tmp_path)
