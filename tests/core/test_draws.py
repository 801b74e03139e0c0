"""``uniform_below``: torch.randint's values from the same generator, drawn into per-thread buffers."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from torchrl_ext.core.draws import uniform_below


@given(st.integers(1, 2**40), st.integers(1, 600), st.integers(0, 2**31))
def test_values_and_stream_are_randint_s(total, count, seed):
    ours, theirs = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    for _ in range(2):  # the generator moves on as randint moves it: the next draw agrees too
        expected = torch.randint(total, (count,), generator=theirs).numpy()
        drawn = uniform_below(total, count, ours)
        assert drawn.dtype == np.int64 and drawn.shape == (count,)
        np.testing.assert_array_equal(drawn, expected)


def test_a_draw_of_another_count_leaves_a_result_as_it_was():
    generator = torch.Generator().manual_seed(0)
    first = uniform_below(100, 7, generator)
    kept = first.copy()
    for count in range(8, 20):  # other counts, past the sizes a thread keeps
        assert uniform_below(100, count, generator) is not first
    np.testing.assert_array_equal(first, kept)


def test_threads_draw_into_their_own_buffers():
    # a main-thread draw is not overwritten by another thread's draw of as many values
    mine = uniform_below(1000, 64, torch.Generator().manual_seed(1))
    kept = mine.copy()
    theirs: list[np.ndarray] = []
    worker = threading.Thread(
        target=lambda: theirs.append(uniform_below(1000, 64, torch.Generator().manual_seed(2))))
    worker.start()
    worker.join()
    assert theirs[0] is not mine
    np.testing.assert_array_equal(mine, kept)


@pytest.mark.parametrize("total, count, error, message", [
    (0, 4, ValueError, r"uniform_below: total=0, expected an int >= 1\."),
    (10.0, 4, TypeError, r"uniform_below: total=10\.0 \(float\), expected an int >= 1\."),
    (10, -1, ValueError, r"uniform_below: count=-1, expected an int >= 0\."),
    (10, True, TypeError, r"uniform_below: count=True \(bool\), expected an int >= 0\."),
])
def test_bad_totals_and_counts_are_refused_by_name(total, count, error, message):
    with pytest.raises(error, match=message):
        uniform_below(total, count, torch.Generator().manual_seed(0))


def test_numpy_ints_are_taken_and_an_empty_draw_is_empty():
    assert uniform_below(np.int64(10), np.int64(3), torch.Generator().manual_seed(0)).shape == (3,)
    assert uniform_below(10, 0, None).shape == (0,)
