"""Samplers: choose rows from the episode index, O(batch) per sample."""
from torchrl_ext.samplers.nstep import NStepSampler
from torchrl_ext.samplers.uniform import UniformTransitionSampler, draw_transitions

__all__ = [
    "NStepSampler","UniformTransitionSampler", "draw_transitions"]
