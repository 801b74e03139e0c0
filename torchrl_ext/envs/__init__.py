"""Adapters from environment loops to TorchRL transitions."""
from torchrl_ext.envs.gym import AutoresetMode, GymVectorAdapter

__all__ = ["AutoresetMode", "GymVectorAdapter"]
