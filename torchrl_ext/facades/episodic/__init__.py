"""The episodic replay API of maltemosbach/buffers (``ReplayBuffer`` + ``EpisodeDataset``)."""
from torchrl_ext.facades.episodic.buffer import EpisodeReplayBuffer
from torchrl_ext.facades.episodic.dataset import EpisodeDataset
from torchrl_ext.facades.episodic.evictors import (
    Evictor,
    FIFOEvictor,
    RandomEvictor,
    ShortestEpisodeEvictor,
)
from torchrl_ext.facades.episodic.fields import (
    ColorImage,
    EpisodeDatasetInfo,
    Fields,
    PaddedPointcloud,
    Scalar,
    TensorType,
    Vector,
    VerificationMode,
)
from torchrl_ext.facades.episodic.files import (
    IndividualFileDataset,
    NumpyCompressedSerialization,
    TorchSerialization,
)
from torchrl_ext.facades.episodic.ring import RingBufferDataset
from torchrl_ext.facades.episodic.utils import to_torch

__all__ = [
    "ColorImage",
    "EpisodeDataset",
    "EpisodeDatasetInfo",
    "EpisodeReplayBuffer",
    "Evictor",
    "FIFOEvictor",
    "Fields",
    "IndividualFileDataset",
    "NumpyCompressedSerialization",
    "PaddedPointcloud",
    "RandomEvictor",
    "RingBufferDataset",
    "Scalar",
    "ShortestEpisodeEvictor",
    "TensorType",
    "TorchSerialization",
    "Vector",
    "VerificationMode",
    "to_torch",
]
