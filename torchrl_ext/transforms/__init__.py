"""Transforms: pure math on sampled batches (the formulas in :mod:`.functional`)."""
from torchrl_ext.transforms.functional import call_reward_fn, nstep_return, stack_frames
from torchrl_ext.transforms.hindsight import HindsightTransform
from torchrl_ext.transforms.nstep import NStepTransform

__all__ = ["HindsightTransform", "NStepTransform", "call_reward_fn", "nstep_return", "stack_frames"]
