"""``MBReplayBuffer.dumps`` / ``loads``: the model-based facade had no checkpoint.

Its time ring, row map, holdout split, running episodes and the scaler's
statistics are more than ``rb.dumps`` holds; pickling kept them but is not an
atomic checkpoint. A buffer fed by CartPole vector envs is checkpointed
mid-episode with its ring wrapped, loaded into a fresh one, and both must
serve the same batches, slices and positions, and go on identically.
"""
from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from _model_based_helpers import MODES, drive, make_actor, step
from torchrl_ext import MBReplayBuffer


class Recorder:
    """Takes the transition dicts ``drive`` inserts, to feed them to several buffers."""

    def __init__(self):
        self.samples = []

    def insert_transition(self, sample):
        self.samples.append(copy.deepcopy(sample))


def cartpole(mode, steps=70):
    recorder = Recorder()
    drive(recorder, mode, steps=steps)
    return recorder.samples


def build(mode=MODES.NEXT_STEP, seed=0, **kwargs):
    return MBReplayBuffer(30, "cpu", make_actor(), None, None, autoreset_mode=mode.value, seed=seed,
                          **{"holdout_fraction": 0.25, "ensemble_size": 2, **kwargs})


def feed(buffer, samples):
    for sample in samples:
        buffer.insert_transition(sample)


def assert_same_data(a, b):
    assert (len(a), a.step, a.max_size) == (len(b), b.step, b.max_size)
    for got, want in ((a.get_all_buffer_data(), b.get_all_buffer_data()), (a.get_data_slice(len(a) - 5, 5), b.get_data_slice(len(b) - 5, 5))):
        assert got.keys() == want.keys()
        for key in got:
            if want[key] is None:
                assert got[key] is None, key
            else:
                np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def assert_same_batches(a, b, epochs=2):
    batches = [list(buffer.generate_batches(None, 16, num_epochs=epochs)) for buffer in (a, b)]
    assert len(batches[0]) == len(batches[1]) > epochs
    for mine, theirs in zip(*batches, strict=True):
        for key in ("train_input", "train_label", "holdout_input", "holdout_label"):
            assert torch.equal(mine[key], theirs[key]), key


@pytest.mark.parametrize("lost", [False, True])
@pytest.mark.parametrize("mode", [MODES.NEXT_STEP, MODES.SAME_STEP])
def test_a_loaded_buffer_serves_and_goes_on_as_the_saved_one(mode, lost, tmp_path):
    samples = cartpole(mode)
    original = build(mode)
    feed(original, samples[:30])
    next(original.generate_batches(None, 16))  # the scaler fitted on these 30 steps
    feed(original, samples[30:40])  # the ring wraps
    original.insert_data_slice(original.get_data_slice(0, 3))  # steps that do not follow on: cut
    feed(original, samples[40:45])  # cut again; each env mid-episode
    original.dumps(tmp_path / "ckpt")
    restored = build(mode, seed=7)  # another seed: the checkpoint's RNG and split seed take over
    restored.loads(tmp_path / "ckpt")
    assert_same_data(restored, original)
    for name in ("input_mu", "input_std", "target_mu", "target_std"):  # not refitted on 45 steps
        assert torch.equal(getattr(restored.scaler, name), getattr(original.scaler, name)), name
    assert_same_batches(restored, original)
    # each env's episode goes on (or, a step lost, is cut) as in the original: the same rows and cuts
    feed(original, samples[45 + lost:])
    feed(restored, samples[45 + lost:])
    assert torch.equal(restored._rows, original._rows)
    index = [buffer.rb.storage.index for buffer in (restored, original)]
    assert index[0].episode_count.tolist() == index[1].episode_count.tolist()
    assert_same_data(restored, original)
    restored.before_gradients()
    original.before_gradients()
    assert_same_batches(restored, original)


def test_the_capacity_and_the_split_set_since_built_are_the_checkpoint_s(tmp_path):
    original = build()
    feed(original, cartpole(MODES.NEXT_STEP, 40))
    original.update_storage_parameter("max_size", 20)
    original.update_storage_parameter("holdout_fraction", 0.5)
    original.dumps(tmp_path / "ckpt")
    restored = build(holdout_fraction=0.1)
    restored.loads(tmp_path / "ckpt")
    assert (restored.max_size, restored.holdout_fraction) == (20, 0.5)
    assert_same_data(restored, original)
    assert_same_batches(restored, original)


def test_a_buffer_saved_before_its_first_insert_loads_empty(tmp_path):
    build().dumps(tmp_path / "empty")
    restored = build()
    feed(restored, cartpole(MODES.NEXT_STEP, 10))
    restored.loads(tmp_path / "empty")  # what this buffer held is gone
    assert len(restored) == 0 and restored.rb is None
    assert restored.get_all_buffer_data()["Observation"] is None
    feed(restored, cartpole(MODES.NEXT_STEP, 10))
    assert len(restored) == 10


@pytest.mark.parametrize("other, message", [
    (lambda: build(MODES.SAME_STEP), r"autoreset_mode: the checkpoint has 'NextStep', this one 'SameStep'"),
    (lambda: build(ensemble_size=3), r"ensemble_size: the checkpoint has 2, this one 3"),
    (lambda: MBReplayBuffer(30, "cpu", make_actor(reward_function=lambda *a: 0), None, None,
                            autoreset_mode="next_step"),
     r"reward_target: the checkpoint has True, this one False"),
    (lambda: MBReplayBuffer(30, "cpu", make_actor(gym.spaces.Discrete(3)), None, None, autoreset_mode="next_step",
                            ensemble_size=2, holdout_fraction=0.25),
     r"num_actions: the checkpoint has 2, this one 3"),
])
def test_a_checkpoint_of_a_buffer_built_otherwise_is_refused(other, message, tmp_path):
    original = build()
    feed(original, cartpole(MODES.NEXT_STEP, 10))
    original.dumps(tmp_path / "ckpt")
    target = other()
    target.insert_transition(step(0, 3, action=np.zeros((3, 1), np.int64)))
    with pytest.raises(ValueError, match=r"MBReplayBuffer\.loads: .*ckpt was written by a facade built otherwise: .*"
                       + message):
        target.loads(tmp_path / "ckpt")
    assert len(target) == 1  # nothing loaded
    with pytest.raises(ValueError, match=r"holds no checkpoint written by dumps\(\)"):
        target.loads(tmp_path)


def test_a_scaler_without_tensor_statistics_is_fitted_again_after_a_load(tmp_path):
    class Scaler:
        fits = 0

        def fit(self, inputs, targets):
            Scaler.fits += 1

        def transform(self, inputs, targets):
            return inputs, targets

    original = MBReplayBuffer(30, "cpu", make_actor(scaler=Scaler()), None, None, autoreset_mode="next_step")
    feed(original, cartpole(MODES.NEXT_STEP, 10))
    next(original.generate_batches(None, 16))
    original.dumps(tmp_path / "ckpt")
    restored = MBReplayBuffer(30, "cpu", make_actor(scaler=Scaler()), None, None, autoreset_mode="next_step")
    restored.loads(tmp_path / "ckpt")
    next(restored.generate_batches(None, 16))
    next(original.generate_batches(None, 16))
    assert Scaler.fits == 2  # the original's first fit, the restored buffer's


def test_a_buffer_rebuilt_after_a_load_is_the_saved_one_s(tmp_path):
    """Found by review: a resize (or reset) after loads rebuilt the buffer with the loading
    buffer's seed= (batches in another order), and a reset before dumps was forgotten, so
    data of another layout was normalised by the old statistics instead of fitted ones."""
    samples = cartpole(MODES.NEXT_STEP, 40)
    original = build()
    feed(original, samples[:30])
    original.dumps(tmp_path / "ckpt")
    restored = build(seed=7)
    restored.loads(tmp_path / "ckpt")
    for buffer in (original, restored):
        buffer.update_storage_parameter("max_size", 20)  # rebuilt from the stored steps
    assert_same_batches(restored, original)

    next(original.generate_batches(None, 16))  # the scaler fitted on 3 envs of CartPole
    original.reset()
    original.dumps(tmp_path / "reset")
    restored = build(seed=7)
    restored.loads(tmp_path / "reset")
    wider = [step(t, 2, obs_dim=4, action=np.zeros((2, 1), np.int64)) for t in range(30)]  # 2 envs: another layout
    for buffer in (original, restored):
        feed(buffer, wider)
    assert not restored._scaler_fitted and not original._scaler_fitted
    assert_same_batches(restored, original)
