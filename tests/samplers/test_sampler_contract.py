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
    HindsightSampler,
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
    "hindsight-future": lambda: HindsightSampler("future", 2),
    "hindsight-random": lambda: HindsightSampler("random", 3, base=NStepSampler(2)),
    "hindsight-prioritized": lambda: HindsightSampler(
        "episode", 1, base=NStepSampler(1, base=PrioritizedTransitionSampler(alpha=0.6, beta=0.4))
    ),
}
REFINING = ("nstep", "hindsight-future", "hindsight-random", "hindsight-prioritized")


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
        # (refining samplers: [B, k] rows first; sequences: [B, L] rows)
        rows = a["index"][:, 0] if kind in REFINING else a["index"].reshape(-1)
        assert ours.storage.contains(rows)
        if kind.startswith("hindsight"):  # goal rows: -1 for real rows, else live rows
            goals = a["index"][:, 2]
            assert (goals[: 6 - ours.sampler.n_virtual(6)] == -1).all()
            assert torch.equal(a["index"][:, 2], b["index"][:, 2])


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


@pytest.mark.parametrize("kind", ["uniform", "prioritized", "sequence"])
def test_sampler_own_generator_is_checkpointed(kind, tmp_path):
    """Without a buffer generator, the sampler's own one is saved and restored."""
    make = {"uniform": UniformTransitionSampler, "prioritized": PrioritizedTransitionSampler,
            "sequence": lambda generator: SequenceSampler(2, generator=generator)}[kind]
    sampler = make(generator=torch.Generator().manual_seed(5))
    rb = TensorDictReplayBuffer(storage=TransitionStorage(48), writer=TransitionWriter(), sampler=sampler)
    fill(rb)
    sampler.dumps(tmp_path)
    first = rb.sample(4)["index"]
    sampler.loads(tmp_path)
    assert torch.equal(rb.sample(4)["index"], first)
