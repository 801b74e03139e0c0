"""EpochSampler: epochs without replacement over live transitions, holdout, ensembles."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from conftest import steps
from reference import LoopReference
from torchrl_ext import ModelEpochDataset, make_model_based_buffer, make_replay_buffer
from torchrl_ext.samplers import EpochSampler
from torchrl_ext.samplers.epoch import holdout_mask
from torchrl_ext.transforms import StandardScaler

ENDINGS = st.sampled_from([0, 0, 0, 1, 2])  # continue, terminated, truncated


@st.composite
def workloads(draw):
    streams = draw(st.integers(1, 3))
    capacity = draw(st.integers(2, 12))
    writes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=8))
    endings = [draw(st.lists(ENDINGS, min_size=streams * t, max_size=streams * t)) for t in writes]
    return streams, capacity, writes, endings


class Feeder:
    """Writes the same episodes to a buffer and to the loop reference.

    Observations are unique numbers, so a transition is identified by its observation.
    """

    def __init__(self, rb, streams, capacity):
        self.rb, self.streams = rb, streams
        self.ref = LoopReference(streams, capacity)
        self.counter = iter(range(1, 10**9))
        self.current = [float(next(self.counter)) for _ in range(streams)]

    def write(self, T, ending):
        ending = torch.tensor(ending).view(self.streams, T)
        obs, nxt = torch.zeros(self.streams, T), torch.zeros(self.streams, T)
        for t in range(T):
            for s in range(self.streams):
                obs[s, t], nxt[s, t] = self.current[s], next(self.counter)
                term, trunc = bool(ending[s, t] == 1), bool(ending[s, t] == 2)
                self.ref.step(s, self.current[s], 0, 0, float(nxt[s, t]), term, trunc)
                self.current[s] = float(next(self.counter)) if term or trunc else float(nxt[s, t])
        self.rb.extend(steps(obs.unsqueeze(-1), nxt.unsqueeze(-1), terminated=(ending == 1).unsqueeze(-1),
                             truncated=(ending == 2).unsqueeze(-1)))

    def live(self) -> list[float]:
        return sorted(t[0] for t in self.ref.live_transitions())


def fed(workload, **sampler_kwargs):
    streams, capacity, writes, endings = workload
    sampler = EpochSampler(**sampler_kwargs)
    rb = make_replay_buffer(streams * capacity, sampler=sampler, seed=0)
    feeder = Feeder(rb, streams, capacity)
    for T, ending in zip(writes, endings):
        feeder.write(T, ending)
    return rb, feeder



def _batches(rb, batch_size):
    return -(-rb.sampler.train_rows(rb.storage).numel() // batch_size)


@given(workloads(), st.integers(1, 7))
def test_each_epoch_is_a_permutation_of_the_live_transitions(workload, batch_size):
    rb, feeder = fed(workload)
    for _ in range(2):
        batches = [b["observation"][:, 0] for b in _iterate(rb, batch_size)]
        assert all(1 <= b.numel() <= batch_size for b in batches)
        assert all(b.numel() == batch_size for b in batches[:-1])
        assert sorted(torch.cat(batches).tolist()) == feeder.live()


def _iterate(rb, batch_size):
    rb._batch_size = batch_size
    return list(rb)  # TorchRL iteration stops when the sampler ran out: one epoch


@given(workloads(), st.floats(0.05, 0.9), st.integers(0, 1000))
def test_holdout_is_disjoint_fixed_and_never_trained_on(workload, fraction, seed):
    rb, feeder = fed(workload, holdout_fraction=fraction)
    rb.sampler.resplit(seed)
    storage = rb.storage
    held = set(storage.get(rb.sampler.holdout_rows(storage))["observation"][:, 0].tolist())
    train = storage.get(rb.sampler.train_rows(storage))["observation"][:, 0].tolist()
    assert held.isdisjoint(train) and sorted([*held, *train]) == feeder.live()
    if train:
        trained = torch.cat([b["observation"][:, 0] for b in _iterate(rb, 3)]).tolist()
        assert sorted(trained) == sorted(train)
    feeder.write(2, [0] * (2 * feeder.streams))  # new data: the old split stays
    held_after = set(storage.get(rb.sampler.holdout_rows(storage))["observation"][:, 0].tolist())
    assert held_after & set(feeder.live()) >= held & set(feeder.live())
    assert held_after - held <= set(feeder.live())


def test_holdout_fraction_and_resplit():
    tau = np.arange(20_000)
    held = holdout_mask(tau % 4, tau // 4, 0.25, seed=1)
    assert abs(held.mean() - 0.25) < 0.01
    assert (held != holdout_mask(tau % 4, tau // 4, 0.25, seed=2)).any()


@given(workloads(), st.integers(1, 5), st.integers(1, 4), st.booleans())
def test_ensembles(workload, batch_size, members, bootstrap):
    rb, feeder = fed(workload, ensemble_size=members, bootstrap=bootstrap)
    batches = [b["observation"][..., 0] for b in _iterate(rb, batch_size)]
    assert all(b.shape[0] == members and 1 <= b.shape[1] <= batch_size for b in batches)
    per_member = torch.cat(batches, 1)  # [E, n]
    live = feeder.live()
    for row in per_member.tolist():
        if bootstrap:  # n draws with replacement from the live transitions
            assert len(row) == len(live) and set(row) <= set(live)
        else:
            assert sorted(row) == live


@given(workloads(), st.integers(1, 4), st.lists(st.integers(1, 6), min_size=1, max_size=3))
def test_an_epoch_started_before_new_data_stays_consistent(workload, batch_size, more):
    streams, capacity = workload[0], workload[1]
    rb, feeder = fed(workload)
    at_start = set(feeder.live())
    seen = []
    rb._batch_size = batch_size
    seen += rb.sample()["observation"][:, 0].tolist()
    for T in more:  # writes in the middle of the epoch, some evicting epoch rows
        feeder.write(T, [0] * (streams * T))
    while not rb.sampler.ran_out:
        seen += rb.sample()["observation"][:, 0].tolist()
    assert len(seen) == len(set(seen)) and set(seen) <= at_start
    # every epoch transition that is still live was served
    assert at_start & set(feeder.live()) <= set(seen)
    # the next epoch covers the data live now
    assert sorted(torch.cat([b["observation"][:, 0] for b in _iterate(rb, batch_size)]).tolist()) == feeder.live()


def test_batches_are_never_empty_when_the_batch_size_divides_the_count():
    # pytorchrl's M2 at the component level: 8 transitions, B = 4 -> exactly two batches
    rb, _ = fed((1, 20, [8], [[0] * 8]))
    assert [b.batch_size[0] for b in _iterate(rb, 4)] == [4, 4]


def test_checkpoint_resumes_mid_epoch():
    rb, _ = fed((2, 10, [4, 4], [[0, 0, 1, 0] * 2, [0] * 8]), ensemble_size=2)
    rb._batch_size = 3
    rb.sample()
    state = rb.state_dict()
    expected = [rb.sample()["observation"] for _ in range(4)]
    rb.load_state_dict(state)
    assert all(torch.equal(rb.sample()["observation"], e) for e in expected)


def test_a_write_overwriting_the_rest_of_the_epoch_ends_it_after_a_reload_too(tmp_path):
    """After rb.loads the sampler no longer knew its storage: a write that overwrote the
    rest of the epoch left it running (ran_out unset), so ``for batch in rb:`` went on
    into a new epoch where the buffer that was never saved stopped."""
    def build():
        return make_replay_buffer(20, batch_size=3, sampler=EpochSampler(), seed=0)

    saved = build()
    saved.extend(steps(torch.arange(12.0).view(1, 12, 1), torch.arange(1.0, 13.0).view(1, 12, 1)))
    saved.sample()  # mid-epoch
    saved.dumps(tmp_path / "checkpoint")
    loaded = build()
    loaded.loads(tmp_path / "checkpoint")
    later = steps(torch.arange(12.0, 32.0).view(1, 20, 1), torch.arange(13.0, 33.0).view(1, 20, 1))
    runs = []
    for rb in (saved, loaded):
        served = []
        for batch in rb:
            served.append(batch["observation"].view(-1).tolist())
            if len(served) == 1:
                rb.extend(later)  # the ring turns over: nothing of the epoch is left
        runs.append((served, rb.sampler.epochs, rb.sampler.ran_out, rb.sampler.position))
    assert runs[1] == runs[0]
    assert len(runs[0][0]) == 1 and runs[0][1:3] == (1, True)


def test_sampler_state_dict_carries_its_own_generator():
    rb, _ = fed((1, 20, [9], [[0] * 9]))
    sampler = EpochSampler(generator=torch.Generator().manual_seed(5))
    sampler.start_epoch(rb.storage)
    first = sampler.sample(rb.storage, 2)[0]
    state = sampler.state_dict()
    nxt = [sampler.sample(rb.storage, 2)[0] for _ in range(6)]  # crosses into a new epoch
    clone = EpochSampler()
    clone.load_state_dict(state)
    assert first.numel() == 2
    assert all(torch.equal(clone.sample(rb.storage, 2)[0], n) for n in nxt)


def test_model_epoch_dataset_matches_buffer_sampling():
    def build():
        rb = make_model_based_buffer(40, batch_size=4, ensemble_size=3, scaler=StandardScaler(), seed=7)
        feeder = Feeder(rb, 2, 20)
        feeder.write(6, [0, 0, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0])
        return rb

    fast, slow = build(), build()
    dataset = ModelEpochDataset(fast)
    dataset.fit_scaler()
    ModelEpochDataset(slow).fit_scaler()
    for batch in dataset:
        other = slow.sample()
        assert torch.allclose(batch["model_input"], other["model_input"])
        assert torch.allclose(batch["model_target"], other["model_target"])
    assert slow.sampler.ran_out and len(dataset) == 3


def _sorted_rows(inputs, targets):
    rows = torch.cat([inputs.reshape(-1, inputs.shape[-1]), targets.reshape(-1, targets.shape[-1])], -1)
    return rows[np.lexsort(rows.T.numpy()[::-1])]


def _epoch_rows(dataset):
    inputs, targets = zip(*dataset.epoch())
    return _sorted_rows(torch.cat(inputs), torch.cat(targets))


def _fresh_rows(dataset):
    """The epoch's pairs built from scratch: the storage's training rows, normalised."""
    rows = dataset.sampler.train_rows(dataset.rb.storage)
    inputs, targets = dataset.transform.pairs(dataset.rb.storage.get(rows))
    return _sorted_rows(*dataset.transform.scaler.transform(inputs, targets))


def test_kept_pairs_are_rebuilt_after_a_write_a_refit_a_resplit_an_empty_and_a_load():
    def build(endings, first_obs=1):
        rb = make_model_based_buffer(16, batch_size=3, scaler=StandardScaler(), holdout_fraction=0.25, seed=0)
        feeder = Feeder(rb, 2, 8)
        feeder.counter = iter(range(first_obs, 10**9))
        feeder.write(3, endings)
        return rb, feeder

    rb, feeder = build([0, 0, 1, 0, 0, 0])
    dataset = ModelEpochDataset(rb)
    dataset.fit_scaler()
    first = _epoch_rows(dataset)
    assert torch.equal(first, _fresh_rows(dataset)) and torch.equal(_epoch_rows(dataset), first)
    feeder.write(5, [0] * 10)  # the ring wraps: some rows now hold other transitions
    assert torch.equal(_epoch_rows(dataset), _fresh_rows(dataset))
    dataset.transform.scaler.fit(torch.randn(5, 2) * 3, torch.randn(5, 2))  # a refit elsewhere
    assert torch.equal(_epoch_rows(dataset), _fresh_rows(dataset))
    before = _epoch_rows(dataset)
    rb.sampler.resplit(123)
    assert not torch.equal(_epoch_rows(dataset), before)
    assert torch.equal(_epoch_rows(dataset), _fresh_rows(dataset))
    # a checkpoint of other values in the same rows, with the same write sequence
    rb, _ = build([0, 0, 1, 0, 0, 0])
    other, _ = build([0, 0, 1, 0, 0, 0], first_obs=1000)
    dataset = ModelEpochDataset(rb)
    dataset.fit_scaler()
    kept = _epoch_rows(dataset)
    assert rb.storage.read_token() == other.storage.read_token()
    rb.storage.load_state_dict(other.storage.state_dict())
    assert not torch.equal(_epoch_rows(dataset), kept)
    assert torch.equal(_epoch_rows(dataset), _fresh_rows(dataset))
    rb.empty()
    Feeder(rb, 2, 8).write(2, [0, 2, 0, 0])
    assert torch.equal(_epoch_rows(dataset), _fresh_rows(dataset))


def _fitted_dataset(streams, capacity, steps, batch_size):
    """A dataset with a fitted scaler over ``steps`` steps of ``streams`` unending episodes."""
    rb = make_model_based_buffer(streams * capacity, batch_size=batch_size, scaler=StandardScaler(), seed=0)
    Feeder(rb, streams, capacity).write(steps, [0] * (streams * steps))
    dataset = ModelEpochDataset(rb)
    dataset.fit_scaler()
    return rb, dataset


def test_a_pickled_dataset_leaves_its_kept_pairs_behind():
    # spawn DataLoader workers get the dataset pickled: the kept pairs would be copied to each
    rb, dataset = _fitted_dataset(1, 4200, 4000, 64)
    epoch = _epoch_rows(dataset)
    pairs_bytes = epoch.numel() * epoch.element_size()  # what the kept pairs hold
    copy = pickle.loads(pickle.dumps(dataset))
    fresh = ModelEpochDataset(rb)  # the same buffer and epoch state, nothing kept
    assert len(pickle.dumps(dataset)) - len(pickle.dumps(fresh)) < pairs_bytes / 2
    assert torch.equal(_epoch_rows(copy), epoch)


def test_dataloader_workers_serve_one_epoch_together():
    _, dataset = _fitted_dataset(2, 100, 30, 8)
    loader = DataLoader(dataset, batch_size=None, num_workers=2, multiprocessing_context="fork",
                        collate_fn=_identity)
    for _ in range(2):  # each iteration of the loader is one epoch
        batches = list(loader)
        inputs = torch.cat([b["model_input"] for b in batches])
        assert len(batches) == 8 and inputs.shape[0] == 60
        assert torch.unique(inputs[:, 0]).numel() == 60  # every transition once


def _identity(batch):
    return batch


def test_errors():
    for bad in (1.0, 1.5):
        with pytest.raises(ValueError, match=rf"holdout_fraction={bad}, expected a value in \[0, 1\)"):
            EpochSampler(holdout_fraction=bad)
    with pytest.raises(ValueError, match=r"bootstrap=True resamples per ensemble member; pass ensemble_size"):
        EpochSampler(bootstrap=True)
    with pytest.raises(ValueError, match=r"^EpochSampler: ensemble_size=0, expected an int >= 1\.$"):
        EpochSampler(ensemble_size=0)
    # a float or a string was truncated or parsed: ensemble_size=2.5 trained 2 members
    for bad in (2.5, "3"):
        with pytest.raises(TypeError, match=rf"^EpochSampler: ensemble_size={bad!r} \({type(bad).__name__}\), "
                                            r"expected an int >= 1\.$"):
            EpochSampler(ensemble_size=bad)
    with pytest.raises(TypeError, match=r"^EpochSampler: holdout_fraction='x' \(str\), expected a finite number >= 0\.$"):
        EpochSampler(holdout_fraction="x")
    rb = make_replay_buffer(10, sampler=EpochSampler(), batch_size=2)
    with pytest.raises(ValueError, match=r"EpochSampler: cannot sample: the buffer holds no transition yet"):
        rb.sample()
    rb, _ = fed((1, 10, [2], [[0, 0]]), holdout_fraction=0.5)
    rb.sampler.resplit(0)
    with pytest.raises(ValueError, match=r"batch_size=0, expected >= 1"):
        rb.sampler.sample(rb.storage, 0)
    with pytest.raises(ValueError, match=r"no training transition among 0 candidates \(holdout_fraction=0.5\)"):
        rb.sampler.start_epoch(rb.storage, torch.empty(0, dtype=torch.int64))
    with pytest.raises(TypeError, match=r"ModelEpochDataset: the buffer needs an EpochSampler"):
        ModelEpochDataset(make_replay_buffer(10))


def test_the_number_of_batches_is_checked_naming_it():
    rb = make_model_based_buffer(20, batch_size=4, seed=0)
    for bad, error in ((0, ValueError), (2.5, TypeError)):
        with pytest.raises(error, match=rf"^ModelEpochDataset: num_batches={bad!r}.* expected an int >= 1\.$"):
            ModelEpochDataset(rb, num_batches=bad)
