"""Samplers: choose rows from the episode index, O(batch) per sample."""
from torchrl_ext.samplers.uniform import UniformTransitionSampler, draw_transitions

__all__ = ["UniformTransitionSampler", "draw_transitions"]
