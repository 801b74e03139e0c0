"""Transforms: pure math on sampled batches (the formulas in :mod:`.functional`)."""
from torchrl_ext.transforms.functional import nstep_return
from torchrl_ext.transforms.nstep import NStepTransform

__all__ = ["NStepTransform", "nstep_return"]
