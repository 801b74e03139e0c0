"""stack_frames: the layout of stacked frames, image and non-image entries."""
from __future__ import annotations

import torch

from torchrl_ext.transforms import stack_frames


def test_images_concatenate_channels_oldest_first():
    frames = torch.stack([torch.full((2, 1, 1), float(f)) for f in range(3)])  # [F=3, C=2, 1, 1]
    out = stack_frames(frames.unsqueeze(0), 1)  # [B=1, 6, 1, 1]
    assert out[0, :, 0, 0].tolist() == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]


def test_vectors_keep_a_frame_axis_after_batch_dims():
    frames = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).view(2, 3, 4, 5)  # [B, L, F, D]
    assert torch.equal(stack_frames(frames, 2), frames)


def test_sequence_images_concatenate_after_two_batch_dims():
    frames = torch.zeros(2, 3, 4, 1, 8, 8, dtype=torch.uint8)  # [B, L, F, C, H, W]
    assert stack_frames(frames, 2).shape == (2, 3, 4, 8, 8)
