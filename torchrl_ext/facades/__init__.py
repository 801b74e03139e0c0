"""Facades: the seed APIs people already use, over the same components."""
from torchrl_ext.facades.d3rlpy import BatchReplayBatch, BatchReplayBuffer, Episode
from torchrl_ext.facades.episodic import (
    EpisodeDataset,
    EpisodeReplayBuffer,
    FIFOEvictor,
    IndividualFileDataset,
    RingBufferDataset,
)
from torchrl_ext.facades.model_based import MBReplayBuffer
from torchrl_ext.facades.her import HerReplayBatch, HerReplayStorage, HerReplayTuple
from torchrl_ext.facades.nstep import NStepReplayBatch, NStepReplayStorage, NStepReplayTuple

__all__ = [
    "BatchReplayBatch",
    "BatchReplayBuffer",
    "Episode",
    "EpisodeDataset",
    "EpisodeReplayBuffer",
    "FIFOEvictor",
    "IndividualFileDataset",
    "RingBufferDataset",
    "HerReplayBatch", "HerReplayStorage", "HerReplayTuple", "MBReplayBuffer", "NStepReplayBatch",
    "NStepReplayStorage", "NStepReplayTuple"]
