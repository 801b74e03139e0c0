"""TransitionReplayBuffer.sample: the sampler's entries (index, masks, weights) join the batch.

TransitionReplayBuffer.sample_batch leaves them out.
"""
from __future__ import annotations

import pytest
import torch
from torchrl.envs.transforms import Transform

from conftest import steps
from torchrl_ext import TransitionReplayBuffer, make_replay_buffer
from torchrl_ext.samplers import SequenceSampler


class Flatten(Transform):
    """A sample-time transform that changes the batch: ``[B, L]`` sequences to ``[B * L]`` steps."""

    def forward(self, tensordict):
        return tensordict.reshape(-1)

    def _inv_call(self, tensordict):
        return tensordict


def episode(T: int = 6):
    obs = torch.arange(T, dtype=torch.float32).view(1, T, 1)
    done = torch.zeros(1, T, 1, dtype=torch.bool)
    done[0, -1] = True
    return steps(obs, obs + 1, terminated=done)


def test_sampler_entries_join_the_batch_with_its_leading_dims():
    rb = make_replay_buffer(32, batch_size=2, sampler=SequenceSampler(3, pad=True), seed=0)
    rb.extend(episode())
    batch = rb.sample()
    assert batch.batch_size == (2, 3)
    assert batch["index"].shape == (2, 3)
    assert batch["is_init"].shape == (2, 3, 1) and batch["is_init"][:, 0].all()
    assert batch["collector", "mask"].shape == (2, 3)


def test_a_sampler_entry_that_no_longer_fits_the_transformed_batch_is_an_error():
    # the transform returns [6] steps; the sampler's [2, 3] index cannot join them
    rb = make_replay_buffer(32, batch_size=2, sampler=SequenceSampler(3), transform=Flatten(), seed=0)
    rb.extend(episode())
    with pytest.raises(ValueError, match=r"TransitionReplayBuffer.sample: the sampler's entry "
                                         r"'(index|is_init)' has shape \(2, 3(, 1)?\), which does "
                                         r"not fit the batch of shape \(6,\) the transforms "
                                         r"returned"):
        rb.sample()


@pytest.mark.parametrize("where", ["transform", "global"])
def test_a_sample_time_transform_s_hooks_run_as_nn_module_runs_them(where):
    # the lean sample calls a transform's forward itself when no hook is registered
    rb = make_replay_buffer(32, batch_size=2, n_step=2, seed=0)
    rb.extend(episode())
    (transform,) = rb._transform
    seen = []

    def pre(module, args):
        seen.append(("pre", type(module).__name__, "discount" in args[0].keys()))

    def post(module, args, out):
        seen.append(("post", type(module).__name__, "discount" in out.keys()))

    if where == "transform":
        handles = [transform.register_forward_pre_hook(pre), transform.register_forward_hook(post)]
    else:
        handles = [torch.nn.modules.module.register_module_forward_pre_hook(pre),
                   torch.nn.modules.module.register_module_forward_hook(post)]
    try:
        rb.sample()
        rb.sample_batch()
    finally:
        for handle in handles:
            handle.remove()
    assert seen == [("pre", "NStepTransform", False), ("post", "NStepTransform", True)] * 2
    seen.clear()
    assert "discount" in rb.sample().keys() and seen == []  # removed: forward alone, the same batch


class CountedCall(Transform):
    """A sample-time transform whose class has its own ``__call__`` (counted), around ``forward``."""

    _sample_time_only = True

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __call__(self, tensordict):
        self.calls += 1
        return super().__call__(tensordict)

    def forward(self, tensordict):
        return tensordict

    def _inv_call(self, tensordict):
        return tensordict


@pytest.mark.parametrize("how", ["compiled", "own __call__"])
def test_a_sample_time_transform_is_called_through_call_when_call_does_more(how):
    # Module.compile() routes __call__ to the compiled function; a class may define __call__
    if how == "compiled":
        rb = make_replay_buffer(32, batch_size=2, n_step=2, seed=0)
        (transform,) = rb._transform
        calls = []

        def compiled(*args, **kwargs):  # what Module.compile() installs, recording its calls
            calls.append(1)
            return transform._call_impl(*args, **kwargs)

        transform._compiled_call_impl = compiled
    else:
        transform = CountedCall()
        rb = make_replay_buffer(32, batch_size=2, transform=transform, seed=0)
    rb.extend(episode())
    rb.sample()
    rb.sample_batch()
    assert (len(calls) if how == "compiled" else transform.calls) == 2


@pytest.mark.parametrize("n_step", [None, 1, 3])
def test_sample_batch_is_the_sample_without_the_sampler_entries(n_step):
    # two buffers, the same seed and rows: the same draws, one with and one without "index"
    a, b = (make_replay_buffer(64, batch_size=4, n_step=n_step, seed=3) for _ in range(2))
    for rb in (a, b):
        rb.extend(episode(10))
    for _ in range(3):
        full, lean = a.sample(), b.sample_batch()
        assert "index" in full.keys() and "index" not in lean.keys()
        assert (full.exclude("index") == lean).all()


def test_sample_batch_on_torchrl_s_generic_path_is_the_sample():
    # prefetch takes TorchRL's path (TransitionReplayBuffer._lean): its batch, entries included
    parts = make_replay_buffer(64, batch_size=4, seed=3)
    rb = TransitionReplayBuffer(storage=parts.storage, writer=parts.writer, sampler=parts.sampler,
                                batch_size=4, prefetch=1)
    rb.extend(episode(10))
    batch = rb.sample_batch()
    assert batch.batch_size == (4,) and "index" in batch.keys()


def test_sample_batch_refuses_a_batch_size_that_is_not_an_int():
    rb = make_replay_buffer(64, batch_size=4, seed=3)
    rb.extend(episode(10))
    with pytest.raises(TypeError, match=r"TransitionReplayBuffer.sample_batch: batch_size=2.5 "
                                        r"\(float\), expected an int >= 1\."):
        rb.sample_batch(2.5)


def test_sample_batch_leaves_out_the_prioritized_sampler_s_entries():
    from torchrl_ext.samplers import PrioritizedTransitionSampler

    a, b = (make_replay_buffer(64, batch_size=4, seed=3, sampler=PrioritizedTransitionSampler(0.6, 0.4))
            for _ in range(2))
    for rb in (a, b):
        rb.extend(episode(10))
    full, lean = a.sample(), b.sample_batch()
    extra = set(full.keys()) - set(lean.keys())
    assert {"index", "priority_weight"} <= extra
    assert (full.exclude(*extra) == lean).all()


def test_sample_batch_refuses_an_empty_buffer_and_a_batch_below_one():
    rb = make_replay_buffer(64, batch_size=4, seed=3)
    with pytest.raises(ValueError, match=r"cannot sample: the buffer holds no transition yet; extend it first\."):
        rb.sample_batch()
    rb.extend(episode(10))
    with pytest.raises(ValueError, match=r"cannot sample: batch_size=0, expected >= 1 \(the buffer holds 10 "
                                         r"transitions; batches are drawn with replacement\)\."):
        rb.sample_batch(0)
