"""check_finite_entries: one test when every value is finite, the first bad entry named otherwise."""
from __future__ import annotations

import numpy as np
import pytest

from torchrl_ext.core.checks import check_finite_entries, check_finite_rows


def test_finite_values_whose_sum_overflows_pass():
    big = np.full((2, 3), np.finfo(np.float32).max, dtype=np.float32)
    check_finite_entries("add", {("obs",): big, ("next", "obs"): big})


def test_the_first_non_finite_entry_and_env_are_named():
    entries = {
        ("obs",): np.zeros((3, 2), np.float32),
        ("next", "reward"): np.array([[0.0], [np.nan], [1.0]], np.float32),
        ("next", "done"): np.zeros((3, 1), bool),
    }
    with pytest.raises(ValueError, match=r"add: \('next', 'reward'\) of env 1 is nan"):
        check_finite_entries("add", entries)


def test_integer_and_bool_entries_are_not_checked():
    check_finite_entries("add", {("action",): np.array([[1], [2]]), ("mask",): np.ones(2, bool)})


def test_check_finite_rows_of_an_overflowing_sum_passes_without_a_warning():
    check_finite_rows("add", "obs", np.full(4, np.finfo(np.float64).max))
