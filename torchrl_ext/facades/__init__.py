"""Facades: the seed APIs people already use, over the same components."""
from torchrl_ext.facades.her import HerReplayBatch, HerReplayStorage
from torchrl_ext.facades.nstep import NStepReplayBatch, NStepReplayStorage

__all__ = ["HerReplayBatch", "HerReplayStorage", "NStepReplayBatch", "NStepReplayStorage"]
