"""torchrl_ext: episode-aware experience replay for TorchRL.

Components (:mod:`torchrl_ext.storages`, :mod:`torchrl_ext.writers`,
:mod:`torchrl_ext.samplers`) plug into a plain
:class:`torchrl.data.TensorDictReplayBuffer`; :func:`make_replay_buffer`
assembles them.

The package logs through the ``torchrl_ext`` logger (with a ``NullHandler``, so
nothing is printed unless the application configures logging): at INFO, once,
the facts a user should know (an autoreset convention chosen or defaulted, the
number of env streams fixed by the first write); at WARNING, inputs that look
inconsistent.
"""
import logging

from torchrl_ext._compat import moved_names
from torchrl_ext.buffer import TransitionReplayBuffer
from torchrl_ext.builders import make_her_replay_buffer, make_replay_buffer
from torchrl_ext.core.episodes import EpisodeIndex
from torchrl_ext.facades import (
    BatchReplayBatch,
    BatchReplayBuffer,
    EpisodeDataset,
    EpisodeReplayBuffer,
    FIFOEvictor,
    HerReplayBatch,
    HerReplayStorage,
    IndividualFileDataset,
    MBReplayBuffer,
    NStepReplayBatch,
    NStepReplayStorage,
    RingBufferDataset,
)
from torchrl_ext.model_based import ModelEpochDataset, make_model_based_buffer
from torchrl_ext.loader import ReplayDataset, make_loader
from torchrl_ext.samplers import PrioritizedTransitionSampler, SequenceSampler, UniformTransitionSampler
from torchrl_ext.storages import TransitionStorage
from torchrl_ext.writers import TransitionWriter

logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "BatchReplayBatch",
    "BatchReplayBuffer",
    "make_replay_buffer",
    "make_her_replay_buffer",
    "EpisodeDataset",
    "EpisodeReplayBuffer",
    "FIFOEvictor",
    "IndividualFileDataset",
    "MBReplayBuffer",
    "ModelEpochDataset",
    "make_model_based_buffer",
    "RingBufferDataset",
    "HerReplayBatch",
    "HerReplayStorage",
    "NStepReplayBatch",
    "NStepReplayStorage",
    "TransitionReplayBuffer",
    "make_loader",
    "ReplayDataset",
    "EpisodeIndex",
    "TransitionStorage",
    "TransitionWriter",
    "UniformTransitionSampler",
    "PrioritizedTransitionSampler",
    "SequenceSampler",
]
__version__ = "0.1.0"

__getattr__ = moved_names(
    "torchrl_ext",
    {
        "EpisodeStorage": "torchrl_ext.storages.transition.TransitionStorage",
        "EpisodeWriter": "torchrl_ext.writers.transition.TransitionWriter",
    },
)
