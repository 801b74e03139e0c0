"""TorchRL's replay-buffer contract, with our components inside TorchRL's own buffers."""
from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import (
    LazyTensorStorage,
    RandomSampler,
    SamplerWithoutReplacement,
    TensorDictReplayBuffer,
)

from torchrl_ext.samplers import PrioritizedTransitionSampler, UniformTransitionSampler
from torchrl_ext.storages import TransitionStorage
from torchrl_ext.writers import TransitionWriter

FINAL = 1000.0  # marks the true final observation of an episode


def buffer(sampler, lengths=(3, 2, 4), batch_size=64, size=100):
    """Episodes of ``lengths`` in one env: obs t -> t + 1, the final next obs is FINAL + t."""
    rb = TensorDictReplayBuffer(storage=TransitionStorage(size), writer=TransitionWriter(),
                                sampler=sampler, batch_size=batch_size,
                                generator=torch.Generator().manual_seed(0))
    t = 0.0
    for length in lengths:
        for k in range(length):
            done = torch.tensor([[k == length - 1]])
            nxt = FINAL + t if k == length - 1 else t + 1
            rb.extend(TensorDict({
                "observation": torch.tensor([[t]]), "action": torch.zeros(1, 1),
                "next": {"observation": torch.tensor([[nxt]]), "reward": torch.ones(1, 1),
                         "done": done, "terminated": done}}, [1]))
            t += 1
    return rb


def genuine(data):
    """Every transition of ``data`` goes from t to t + 1 or to its episode's final obs."""
    obs, nxt = data["observation"].view(-1), data["next", "observation"].view(-1)
    return bool(((nxt == obs + 1) | (nxt == FINAL + obs)).all())


def test_every_index_below_len_is_a_transition():
    rb = buffer(UniformTransitionSampler())
    assert len(rb) == len(rb.storage) == 9
    items = [rb[i] for i in range(len(rb))]
    assert all(genuine(item) for item in items)
    assert [float(item["observation"]) for item in items] == [float(t) for t in range(9)]
    with pytest.raises(IndexError):
        rb[len(rb)]


def test_iterating_the_storage_yields_only_transitions():
    rb = buffer(UniformTransitionSampler())
    items = list(rb.storage)
    assert len(items) == len(rb) and all(genuine(item) for item in items)


@pytest.mark.parametrize("k", [0, 2, 5, 9])
def test_slices_work_as_in_torchrl(k):
    rb = buffer(UniformTransitionSampler())
    whole = torch.stack([rb[i]["observation"] for i in range(len(rb))])
    assert torch.equal(rb[:k]["observation"], whole[:k])
    assert torch.equal(rb[k:]["observation"], whole[k:])
    assert genuine(rb[:]) and rb[:].shape == (9,)
    assert torch.equal(rb[torch.tensor([4, 0])]["observation"], whole[[4, 0]])


def test_stock_random_sampler_draws_only_transitions_uniformly():
    rb = buffer(RandomSampler(), batch_size=4000)
    batch = rb.sample()
    assert genuine(batch)
    counts = torch.bincount(batch["observation"].view(-1).long(), minlength=9)
    assert counts.min() > 300  # every one of the 9 transitions, ~444 each


def test_stock_samplers_reading_positions_as_rows_are_refused():
    rb = buffer(SamplerWithoutReplacement(), batch_size=2)
    with pytest.raises(TypeError, match="torchrl's SamplerWithoutReplacement draws positions .* "
                                        "EpochSampler \\(without replacement\\)"):
        rb.sample()
    assert genuine(rb[0])  # indexing stays right whatever the sampler


def test_update_tensordict_priority_acts_in_a_plain_tensordict_replay_buffer():
    rb = buffer(PrioritizedTransitionSampler(alpha=1.0, beta=1.0), batch_size=512)
    assert type(rb) is TensorDictReplayBuffer
    batch = rb.sample()
    batch["td_error"] = torch.where(batch["observation"].view(-1) == 4, 100.0, 0.0)
    rb.update_tensordict_priority(batch)
    again = rb.sample()
    assert bool((again["observation"] == 4).all())  # all the mass is on transition 4


def test_sampling_an_empty_storage_raises_what_torchrl_raises():
    stock = TensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=2)
    with pytest.raises(RuntimeError):  # TorchRL's own behaviour, which its users catch
        stock.sample()
    for sampler in (UniformTransitionSampler(), PrioritizedTransitionSampler()):
        rb = TensorDictReplayBuffer(storage=TransitionStorage(10), writer=TransitionWriter(),
                                    sampler=sampler, batch_size=2)
        with pytest.raises(RuntimeError, match="the buffer holds no transition yet; extend it"):
            rb.sample()
