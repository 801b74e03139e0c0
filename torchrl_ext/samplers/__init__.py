"""Samplers: choose rows from the episode index, O(batch) per sample."""
from torchrl_ext.samplers.hindsight import HindsightSampler, HindsightStrategy
from torchrl_ext.samplers.nstep import NStepSampler
from torchrl_ext.samplers.prioritized import PrioritizedTransitionSampler
from torchrl_ext.samplers.refining import RefiningSampler
from torchrl_ext.samplers.sequence import SequenceSampler
from torchrl_ext.samplers.uniform import UniformTransitionSampler, draw_transitions

__all__ = [
    "HindsightSampler",
    "HindsightStrategy",
    "NStepSampler",
    "PrioritizedTransitionSampler",
    "RefiningSampler",
    "SequenceSampler",
    "UniformTransitionSampler",
    "draw_transitions",
]
