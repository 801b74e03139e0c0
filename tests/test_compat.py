"""Renamed public names stay importable, with a DeprecationWarning naming the new one."""
from __future__ import annotations

import importlib

import pytest

import torchrl_ext
from torchrl_ext.core.episodes import EpisodeIndex, WritePlan
from torchrl_ext.storages import TransitionStorage
from torchrl_ext.writers import DEFAULT_DONE_KEYS, TransitionWriter

OLD_NAMES = [
    ("torchrl_ext", "EpisodeStorage", TransitionStorage, "torchrl_ext.storages.transition.TransitionStorage"),
    ("torchrl_ext", "EpisodeWriter", TransitionWriter, "torchrl_ext.writers.transition.TransitionWriter"),
    ("torchrl_ext.storages", "EpisodeStorage", TransitionStorage, "TransitionStorage"),
    ("torchrl_ext.writers", "EpisodeWriter", TransitionWriter, "TransitionWriter"),
    ("torchrl_ext.storages.episode", "EpisodeStorage", TransitionStorage, "TransitionStorage"),
    ("torchrl_ext.writers.episode", "EpisodeWriter", TransitionWriter, "TransitionWriter"),
    ("torchrl_ext.writers.episode", "DEFAULT_DONE_KEYS", DEFAULT_DONE_KEYS, "DEFAULT_DONE_KEYS"),
    ("torchrl_ext.episodes", "EpisodeIndex", EpisodeIndex, "torchrl_ext.core.episodes.EpisodeIndex"),
    ("torchrl_ext.episodes", "WritePlan", WritePlan, "torchrl_ext.core.episodes.WritePlan"),
]


@pytest.mark.parametrize("module, old, new, new_name", OLD_NAMES)
def test_old_name_warns_and_is_the_new_object(module, old, new, new_name):
    mod = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=rf"{module}\.{old} is deprecated; use .*{new_name} instead"):
        assert getattr(mod, old) is new


def test_from_import_of_an_old_name_warns():
    with pytest.warns(DeprecationWarning, match=r"torchrl_ext\.EpisodeStorage is deprecated"):
        from torchrl_ext import EpisodeStorage  # noqa: F401


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="module 'torchrl_ext' has no attribute 'NoSuchThing'"):
        torchrl_ext.NoSuchThing  # noqa: B018


def test_old_names_are_not_listed_as_public():
    assert "EpisodeStorage" not in torchrl_ext.__all__
    assert "EpisodeWriter" not in torchrl_ext.__all__
