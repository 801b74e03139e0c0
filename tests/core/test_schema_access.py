"""get_unchecked / pop_unchecked / set_unchecked / tensordict_of: TensorDict's own get / pop / set / constructor, without its layers."""
from __future__ import annotations

from collections import OrderedDict

import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict

from torchrl_ext.core.schema import get_unchecked, pop_unchecked, set_unchecked, tensordict_of


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


@pytest.mark.parametrize("key", ["obs", ("obs",), ("next", "reward"), ("next", "new"), ("her", "relabel"),
                                 ("her", "deep", "x")])
def test_set_is_tensordict_set(key):
    value = torch.full((2, 1), 7.0)
    got, want = batch(), batch()
    set_unchecked(got, key, value)
    want.set(key, value)
    assert sorted(map(str, got.keys(True, True))) == sorted(map(str, want.keys(True, True)))
    assert got.get(key) is value and got.batch_size == want.batch_size
    if isinstance(key, tuple) and len(key) > 1:  # parents made on the way are TensorDicts of the batch
        assert type(got.get(key[:-1])) is TensorDict and got.get(key[:-1]).batch_size == (2,)


def test_set_into_another_kind_of_parent_goes_through_it():
    stack = LazyStackedTensorDict.lazy_stack([batch(), batch()], 0)  # [2, 2]
    td = TensorDict({"inner": stack}, [2])
    set_unchecked(td, ("inner", "next", "reward"), torch.zeros(2, 2, 1))
    assert (td["inner", "next", "reward"] == 0).all()


def test_a_locked_tensordict_refuses_a_set():
    td = batch().lock_()
    for key in ("obs", ("next", "reward")):
        with pytest.raises(RuntimeError, match="locked"):
            set_unchecked(td, key, torch.zeros(2, 1))
    assert (td["next", "reward"] == 1).all()


def _trees() -> tuple[dict, dict]:
    """Two trees of the same leaves (a tree is consumed by the TensorDict made of it)."""
    obs, reward, done = torch.zeros(2, 3), torch.ones(2, 1), torch.zeros(2, 1, dtype=torch.bool)
    kept = TensorDict({"x": torch.ones(2)}, [2])

    def tree() -> dict:
        return {"obs": obs, "kept": kept, "next": {"reward": reward, "deep": OrderedDict(done=done)}}
    return tree(), tree()


def _state(td: TensorDict) -> tuple:
    """What a TensorDict is made of, nested ones included (entries by identity).

    Its instance attributes first (their names, types and values, before any
    property read sets one): tensordict_of sets them itself. ``_has_mps_val``
    is the cache of the ``_has_mps`` property, which ``_new_unsafe`` reads
    given a device, and which fills it on first read otherwise.
    """
    attrs = tuple(sorted((name, type(value), value) for name, value in vars(td).items()
                         if name not in ("_tensordict", "_has_mps_val")))
    entries = tuple(
        (name, _state(value) if isinstance(value, TensorDict) else id(value))
        for name, value in td._tensordict.items())
    return (attrs, type(td._tensordict), type(td), td.batch_size, td.device, td.names, td.is_locked, entries)


@pytest.mark.parametrize("device", [None, torch.device("cpu"), "cpu", torch.device("meta")])
@pytest.mark.parametrize("names", [None, ["b"]])
def test_tensordict_of_is_the_unchecked_constructor(device, names):
    """The same TensorDicts as TensorDict._new_unsafe: devices and batch sizes nested, names at the root, dict subclasses too."""
    a, b = _trees()
    ours = tensordict_of(a, torch.Size([2]), device, names)
    theirs = TensorDict._new_unsafe(b, batch_size=torch.Size([2]), device=device, names=names)
    assert _state(ours) == _state(theirs)
    assert isinstance(ours["next", "deep"], TensorDict)
