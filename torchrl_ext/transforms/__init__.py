"""Transforms: pure math on sampled batches (the formulas in :mod:`.functional`)."""
from torchrl_ext.transforms.functional import (
    ReturnWeights,
    call_reward_fn,
    discount_powers,
    nstep_return,
    return_weights,
    stack_frames,
)
from torchrl_ext.transforms.hindsight import HindsightTransform
from torchrl_ext.transforms.model_pair import ModelPairTransform, encode_actions, model_pairs
from torchrl_ext.transforms.nstep import NStepTransform
from torchrl_ext.transforms.scaler import StandardScaler

__all__ = [
    "HindsightTransform",
    "ModelPairTransform",
    "NStepTransform",
    "ReturnWeights",
    "StandardScaler",
    "call_reward_fn",
    "discount_powers",
    "encode_actions",
    "model_pairs",
    "nstep_return",
    "return_weights",
    "stack_frames",
]
