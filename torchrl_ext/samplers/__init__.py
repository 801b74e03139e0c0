"""Samplers: choose rows from the episode index, O(batch) per sample."""
from torchrl_ext.samplers.epoch import EpochSampler
from torchrl_ext.samplers.frames import FrameStackSampler, frame_steps
from torchrl_ext.samplers.hindsight import HindsightSampler, HindsightStrategy
from torchrl_ext.samplers.masks import BootstrapMaskSampler, bootstrap_masks
from torchrl_ext.samplers.nstep import NStepSampler
from torchrl_ext.samplers.prioritized import PrioritizedTransitionSampler
from torchrl_ext.samplers.refining import RefiningSampler
from torchrl_ext.samplers.sequence import SequenceSampler
from torchrl_ext.samplers.uniform import (
    EmptyBufferError,
    UniformTransitionSampler,
    draw_rows,
    draw_transitions,
)

__all__ = [
    "BootstrapMaskSampler",
    "EmptyBufferError",
    "EpochSampler",
    "FrameStackSampler",
    "HindsightSampler",
    "HindsightStrategy",
    "NStepSampler",
    "PrioritizedTransitionSampler",
    "RefiningSampler",
    "SequenceSampler",
    "UniformTransitionSampler",
    "bootstrap_masks",
    "draw_rows",
    "draw_transitions",
    "frame_steps",
]
