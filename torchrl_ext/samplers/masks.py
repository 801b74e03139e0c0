"""Bootstrap masks for ensembles: fixed Bernoulli bits per transition, stored nowhere."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict.utils import NestedKey
from torchrl.data.replay_buffers.samplers import Sampler

from torchrl_ext.core.schema import as_key
from torchrl_ext.sample_index import reader_of
from torchrl_ext.samplers.refining import RefiningSampler
from torchrl_ext.samplers.uniform import UniformTransitionSampler, storage_index
from torchrl_ext.storages.transition import TransitionStorage

__all__ = ["BootstrapMaskSampler", "bootstrap_masks"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer (Steele et al., 2014): a bijection of uint64 with full avalanche."""
    x = (x ^ (x >> np.uint64(30))) * _MUL1
    x = (x ^ (x >> np.uint64(27))) * _MUL2
    return x ^ (x >> np.uint64(31))


def bootstrap_masks(
    key: int, stream: np.ndarray, tau: np.ndarray, mask_size: int, p: float
) -> np.ndarray:
    """The ``mask_size`` Bernoulli(``p``) bits of transitions ``(stream, tau)``.

    A transition is named by its stream and the logical time of its row in
    that stream (which only grows, so the name is never reused while the
    buffer lives, also across checkpoints). Bit ``m`` is

    .. math::

        u = \\text{mix}(\\text{mix}(\\text{mix}(\\text{key} + s + \\phi) + \\tau + \\phi) + m + \\phi)
            \\gg 11 \\cdot 2^{-53}, \\qquad \\text{bit} = u < p,

    with ``mix`` SplitMix64's finalizer and ``phi`` its golden-ratio
    increment, in wrapping uint64 arithmetic: ``u`` is uniform on ``[0, 1)``
    for practical purposes and independent across transitions and members.
    A counter-based draw: a transition's bits are the same whenever (and in
    whichever process) they are computed, and nothing is stored.

    Args:
        key (int): the buffer's mask key (from its seed).
        stream, tau: int64 arrays of the same shape.
        mask_size (int): bits per transition.
        p (float): probability of a 1.

    Returns:
        bool array ``[*tau.shape, mask_size]``.

    Examples:
        >>> import numpy as np
        >>> bits = bootstrap_masks(7, np.zeros(20000, np.int64), np.arange(20000), 3, 0.25)
        >>> bits.shape, round(float(bits.mean()), 2)
        ((20000, 3), 0.25)
        >>> bool((bootstrap_masks(7, np.array([0]), np.array([5]), 3, 0.25) == bits[5]).all())
        True
    """
    with np.errstate(over="ignore"):
        h = _mix(np.uint64(key % 2**64) + np.asarray(stream, np.int64).astype(np.uint64) + _GOLDEN)
        h = _mix(h + np.asarray(tau, np.int64).astype(np.uint64) + _GOLDEN)
        members = np.arange(mask_size, dtype=np.uint64)
        h = _mix(h[..., None] + members + _GOLDEN)
    u = (h >> np.uint64(11)).astype(np.float64) * 2.0**-53
    return u < p


class BootstrapMaskSampler(RefiningSampler):
    """Attach ``mask_size`` Bernoulli(``p``) bits to every sampled transition.

    Bootstrapped ensembles (Osband et al., 2016) train member ``m`` of an
    ensemble only on transitions whose bit ``m`` is set. Each transition's
    bits are fixed for its whole life in the buffer and computed from its
    identity (stream, logical time) and the buffer's mask key by
    :func:`bootstrap_masks`: nothing is stored, every transition has them
    (also those written as whole episodes), and they survive checkpoints. The
    key is ``seed`` or, without it, the seed of the buffer's generator
    (``generator.initial_seed()``, read at the first sample; no draw is
    taken, so masks do not change which rows are sampled; never a global
    RNG), and it is checkpointed.

    The sample gets ``mask_key`` (default ``"mask"``), a bool
    ``[*batch, mask_size]`` tensor (for windows, the bits of their first
    transition). ``base`` draws the transitions and may be any sampler.

    Args:
        mask_size (int): ensemble size, ``>= 1``.
        p (float): probability of each bit, in ``(0, 1]``. Defaults to 0.5.

    Keyword Args:
        seed (int, optional): the mask key.
        mask_key (NestedKey): defaults to ``"mask"``.
        base (Sampler, optional): defaults to
            :class:`~torchrl_ext.samplers.UniformTransitionSampler`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import make_replay_buffer
        >>> rb = make_replay_buffer(64, batch_size=4, seed=0,
        ...     sampler=BootstrapMaskSampler(5, p=0.5, seed=1))
        >>> _ = rb.extend(TensorDict({"observation": torch.arange(8.).view(1, 8, 1),
        ...     "action": torch.zeros(1, 8, 1), "next": {"observation": torch.ones(1, 8, 1),
        ...     "reward": torch.zeros(1, 8, 1), "done": torch.zeros(1, 8, 1, dtype=torch.bool)}}, [1, 8]))
        >>> batch = rb.sample()
        >>> batch["mask"].shape, batch["mask"].dtype
        (torch.Size([4, 5]), torch.bool)
    """

    def __init__(
        self,
        mask_size: int,
        p: float = 0.5,
        *,
        seed: int | None = None,
        mask_key: NestedKey = "mask",
        base: Sampler | None = None,
    ) -> None:
        if isinstance(mask_size, bool) or not isinstance(mask_size, (int, np.integer)) or mask_size < 1:
            raise ValueError(
                f"BootstrapMaskSampler: mask_size={mask_size!r}, expected an integer >= 1 "
                "(the ensemble size)."
            )
        if not 0.0 < float(p) <= 1.0:
            raise ValueError(
                f"BootstrapMaskSampler: p={p!r}, expected a probability in (0, 1] "
                "(the chance that a member trains on a transition)."
            )
        super().__init__(base if base is not None else UniformTransitionSampler())
        self.mask_size, self.p = int(mask_size), float(p)
        self.key = None if seed is None else int(seed)
        self.mask_key = as_key(mask_key, "mask_key", type(self).__name__)

    def _mask_key(self) -> int:
        if self.key is None:
            generator = self._rng if self._rng is not None else getattr(self.base, "generator", None)
            if generator is None:
                raise ValueError(
                    "BootstrapMaskSampler: no seed and no generator to draw the mask key from; "
                    "pass seed=..., or give the buffer a generator "
                    "(TensorDictReplayBuffer(generator=...), make_replay_buffer(seed=...))."
                )
            # the seed itself, not a draw: masks do not change which rows are sampled
            self.key = int(generator.initial_seed())
        return self.key

    def sample(self, storage: TransitionStorage, batch_size: int) -> tuple[Any, dict]:
        index, info = self.base.sample(storage, batch_size)
        rows, _ = reader_of(index).spans(index)
        tau, stream = storage_index(storage).row_coordinates(rows.numpy())
        bits = bootstrap_masks(self._mask_key(), stream, tau, self.mask_size, self.p)
        info[self.mask_key] = torch.from_numpy(bits)
        return index, info

    def update_priority(self, index: Any, priority: Any, *, storage: Any = None) -> None:
        """Give ``base`` the index as sampled (masks add no column)."""
        self.base.update_priority(index, priority, storage=storage)

    settings_file = "bootstrap_mask.json"  # its name before other samplers saved settings

    def settings(self) -> dict[str, Any]:
        return {"key": self.key, "mask_size": self.mask_size, "p": self.p}

    def load_settings(self, settings: dict[str, Any]) -> None:
        self.key = settings["key"]
        # checkpoints written before held the key alone
        self.mask_size = int(settings.get("mask_size", self.mask_size))
        self.p = float(settings.get("p", self.p))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(mask_size={self.mask_size}, p={self.p}, "
            f"base={self.base!r})"
        )
