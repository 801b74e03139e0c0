"""get_unchecked / pop_unchecked: TensorDict's own get / pop, without its layers."""
from __future__ import annotations

import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict

from torchrl_ext.core.schema import get_unchecked, pop_unchecked


def batch() -> TensorDict:
    return TensorDict({"obs": torch.zeros(2, 3), "next": {"reward": torch.ones(2, 1)}}, [2])


@pytest.mark.parametrize("key", ["obs", ("obs",), ("next", "reward"), "next", "missing",
                                 ("next", "missing"), ("missing", "reward")])
def test_get_is_tensordict_get(key):
    td = batch()
    got, want = get_unchecked(td, key), td.get(key, None)
    assert (got is None) == (want is None)
    if isinstance(want, torch.Tensor):
        assert got is want
    elif want is not None:
        assert got.keys() == want.keys()


def test_a_key_through_a_tensor_holds_nothing():
    assert get_unchecked(batch(), ("obs", "x")) is None


def test_other_kinds_answer_through_their_own_get():
    stack = LazyStackedTensorDict.lazy_stack([batch(), batch()], 0)
    assert get_unchecked(stack, ("next", "reward")).shape == (2, 2, 1)
    assert get_unchecked(TensorDict({"inner": stack}, []), ("inner", "obs")).shape == (2, 2, 3)


def test_pop_drops_the_entry_and_a_missing_one_is_none():
    td = batch()
    assert get_unchecked(td, "obs") is pop_unchecked(td, "obs") is not None
    assert "obs" not in td.keys() and pop_unchecked(td, "obs") is None


def test_a_locked_tensordict_refuses_as_its_own_pop():
    td = batch().lock_()
    with pytest.raises(RuntimeError, match="locked"):
        pop_unchecked(td, "obs")
    assert "obs" in td.keys()


@pytest.mark.parametrize("helper", [get_unchecked, pop_unchecked])
@pytest.mark.parametrize("value", [{"obs": torch.zeros(2)}, torch.zeros(2)])
def test_what_is_not_a_tensordict_is_refused_by_name(helper, value):
    with pytest.raises(TypeError, match=rf"{helper.__name__}: expected a TensorDict, got {type(value).__name__}\."):
        helper(value, "obs")
