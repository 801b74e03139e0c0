"""One contract for every sampler of the episode index.

Each sampler must draw the same indices inside a plain ``TensorDictReplayBuffer``
and inside ``TransitionReplayBuffer``, on both storage backends; draw only live
rows; survive ``rb.dumps`` / ``rb.loads`` with the next sample unchanged; and
refuse an empty buffer with a ``ValueError``.
"""
from __future__ import annotations

import pytest
import torch
from torchrl.data import TensorDictReplayBuffer

from conftest import steps
from torchrl_ext import TransitionStorage, TransitionWriter, TransitionReplayBuffer
from torchrl_ext.samplers import (
    NStepSampler,
    PrioritizedTransitionSampler,
    SequenceSampler,
    UniformTransitionSampler,
)

SAMPLERS = {
    "uniform": UniformTransitionSampler,
    "prioritized": lambda: PrioritizedTransitionSampler(alpha=0.6, beta=0.4),
    "nstep": lambda: NStepSampler(3),
    "sequence": lambda: SequenceSampler(2),
    "sequence-pad": lambda: SequenceSampler(3, pad=True),
    "episodes": lambda: SequenceSampler(None),
}


def build(make_sampler, backend, directory, seed=0, cls=TransitionReplayBuffer):
    return cls(
        storage=TransitionStorage(48, backend=backend, scratch_dir=directory),
        writer=TransitionWriter(),
        sampler=make_sampler(),
        batch_size=6,
        generator=torch.Generator().manual_seed(seed),
    )


def fill(rb, start=0, n_steps=14):
    """Two envs, episodes of 4 and 3 steps; the 24-row rings wrap, episodes stay open."""
    for t in range(start, start + n_steps):
        obs = torch.tensor([[float(t)], [100.0 + t]])
        done = torch.tensor([[t % 4 == 3], [t % 3 == 2]])
        rb.extend(steps(obs, obs + 0.5, terminated=done))


@pytest.fixture(params=list(SAMPLERS), ids=list(SAMPLERS))
def kind(request):
    return request.param


@pytest.mark.parametrize("backend", ["tensor", "memmap"])
def test_plain_torchrl_buffer_draws_the_same(kind, backend, tmp_path):
    ours = build(SAMPLERS[kind], backend, tmp_path / "a", seed=4)
    plain = build(SAMPLERS[kind], backend, tmp_path / "b", seed=4, cls=TensorDictReplayBuffer)
    fill(ours)
    fill(plain)
    for _ in range(3):
        a, b = ours.sample(), plain.sample()
        assert torch.equal(a["index"], b["index"])
        assert torch.equal(a["observation"], b["observation"])
        assert torch.equal(a["next", "observation"], b["next", "observation"])
        # every row drawn is a live transition (n-step: [row, k]; sequences: [B, L] rows)
        rows = a["index"][:, 0] if kind == "nstep" else a["index"].reshape(-1)
        assert ours.storage.contains(rows)


def test_checkpoint_resume_gives_the_same_next_sample(kind, tmp_path):
    rb = build(SAMPLERS[kind], "tensor", tmp_path / "a", seed=2)
    fill(rb)
    rb.sample()  # the generator moved on from its seed
    rb.dumps(tmp_path / "ckpt")
    restored = build(SAMPLERS[kind], "tensor", tmp_path / "b", seed=99)
    restored.loads(tmp_path / "ckpt")
    a, b = rb.sample(), restored.sample()
    assert torch.equal(a["index"], b["index"])
    assert (a == b).all()
    fill(rb, start=14, n_steps=3)  # in-progress episodes go on identically
    fill(restored, start=14, n_steps=3)
    assert torch.equal(rb.sample()["index"], restored.sample()["index"])


def test_empty_buffer_is_a_value_error(kind, tmp_path):
    rb = build(SAMPLERS[kind], "tensor", tmp_path)
    with pytest.raises(ValueError, match="cannot sample"):
        rb.sample()
