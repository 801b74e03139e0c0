"""n-step windows: a base sampler picks start transitions, windows run to n steps."""
from __future__ import annotations

from typing import Any

from torchrl.data.replay_buffers.samplers import Sampler

from torchrl_ext.samplers.refining import RefiningSampler
from torchrl_ext.samplers.uniform import UniformTransitionSampler
from torchrl_ext.storages.transition import TransitionStorage

__all__ = ["NStepSampler"]


class NStepSampler(RefiningSampler):
    """Windows of up to ``n`` steps, starting at transitions drawn by ``base``.

    For a start step ``t`` the window has ``k = min(n, steps left in its episode)``
    steps: it stops at the episode's end (terminated or truncated) and, for an
    episode still being written, at its last written step. Every step of every
    episode can start a window, the last ``n - 1`` included. Windows never
    cross streams, episodes or overwritten rows (they run forward from a live
    row, and newer rows of the same stream are never overwritten first).

    The sample's index is the tuple ``(rows, k)``; the storage reads the windows
    (:meth:`~torchrl_ext.storages.TransitionStorage.get_windows`) and
    :class:`~torchrl_ext.transforms.NStepTransform` computes the returns. In
    the sample, ``"index"`` is ``[B, 2]`` (row, k): pass it to
    ``rb.update_priority`` as is.

    Args:
        n (int): maximum window length. An attribute: it can change between samples.

    Keyword Args:
        base (Sampler, optional): chooses the start transitions. Defaults to
            :class:`~torchrl_ext.samplers.UniformTransitionSampler`; a
            :class:`~torchrl_ext.samplers.PrioritizedTransitionSampler` gives
            prioritized n-step replay (Rainbow).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import TransitionReplayBuffer, TransitionStorage, TransitionWriter
        >>> from torchrl_ext.samplers import NStepSampler
        >>> from torchrl_ext.transforms import NStepTransform
        >>> rb = TransitionReplayBuffer(storage=TransitionStorage(32), writer=TransitionWriter(),
        ...     sampler=NStepSampler(3), transform=NStepTransform(gamma=0.9), batch_size=2)
        >>> done = torch.tensor([[False, True]]).unsqueeze(-1)
        >>> _ = rb.extend(TensorDict({"observation": torch.zeros(1, 2, 1), "action": torch.zeros(1, 2, 1),
        ...     "next": {"observation": torch.ones(1, 2, 1), "reward": torch.ones(1, 2, 1),
        ...              "done": done, "terminated": done.clone()}}, [1, 2]))
        >>> rows = rb.storage.live_transition_rows()  # both steps of the episode
        >>> sorted(rb.storage.window_steps(rows, 3).tolist())  # windows stop at the episode end
        [1, 2]
        >>> rb.sample()["steps_to_next_obs"].shape
        torch.Size([2, 1])
    """

    def __init__(self, n: int = 3, *, base: Sampler | None = None) -> None:
        if int(n) < 1:
            raise ValueError(f"NStepSampler: n={n}, expected an integer >= 1.")
        super().__init__(base if base is not None else UniformTransitionSampler())
        self.n = int(n)

    def sample(self, storage: TransitionStorage, batch_size: int) -> tuple[tuple, dict]:
        rows, info = self.base.sample(storage, batch_size)
        return (rows, storage.window_steps(rows, self.n)), info

    def state_dict(self) -> dict[str, Any]:
        return {"n": self.n, "base": self.base.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.n = int(state_dict["n"])
        self.base.load_state_dict(state_dict["base"])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n}, base={self.base!r})"
