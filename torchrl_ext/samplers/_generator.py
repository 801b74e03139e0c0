"""The random generator a sampler owns when the buffer sets none, in checkpoints."""
from __future__ import annotations

from typing import Any

import torch


def generator_state(generator: torch.Generator | None) -> dict[str, Any]:
    """``{"generator": state}``, or ``{}`` without a generator."""
    return {} if generator is None else {"generator": generator.get_state()}


def restore_generator(
    generator: torch.Generator | None, state: dict[str, Any]
) -> torch.Generator | None:
    """The generator with the state of :func:`generator_state` (created if needed)."""
    if "generator" not in state:
        return generator
    generator = generator if generator is not None else torch.Generator()
    generator.set_state(state["generator"].cpu())  # a CPU byte tensor, also when loaded onto a GPU
    return generator
