"""The running episodes of an ``EpisodeReplayBuffer``: each env's steps in ``[capacity, envs]`` blocks."""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["RunningEpisodes"]


class RunningEpisodes:
    """Each env's steps since its episode began, staged in ``[capacity, num_envs, ...]`` blocks.

    All envs step together: column ``t`` of every block holds step ``t`` of
    every env (one contiguous run: time-major), and env ``i``'s running
    episode is columns ``start[i] .. t - 1``. A step is copied (the caller
    may reuse its tensors) into column ``t`` of every block in one call
    (``torch._foreach_copy_``: a ``copy_`` per field would cost a dispatch
    each); an episode leaves as one slice per field. When the columns run
    out, those before the oldest running episode are dropped (one move), and
    the blocks double when the running episodes need more than half of their
    columns: each move frees at least half of them, so each step is moved
    O(1) times on average (moving all but a few columns every few steps
    would not be).

    Args:
        num_envs (int): envs (1 for a single env, whose steps are given without an env dim).
        spec (dict): field name to ``(shape per env, dtype, device)``.

    Keyword Args:
        capacity (int): initial columns.

    Examples:
        >>> import torch
        >>> running = RunningEpisodes(2, {"x": (torch.Size([]), torch.float32, torch.device("cpu"))}, capacity=2)
        >>> for t in range(5):
        ...     running.append({"x": torch.tensor([t, 10.0 + t])})
        >>> running.take(0)["x"].tolist()  # env 0's episode so far, which ends here
        [0.0, 1.0, 2.0, 3.0, 4.0]
        >>> running.append({"x": torch.tensor([5.0, 15.0])})
        >>> running.take(0)["x"].tolist(), running.take(1)["x"].tolist()
        ([5.0], [10.0, 11.0, 12.0, 13.0, 14.0, 15.0])
    """

    def __init__(
        self,
        num_envs: int,
        spec: dict[str, tuple[torch.Size, torch.dtype, torch.device]],
        *,
        capacity: int = 64,
    ) -> None:
        self.num_envs = num_envs
        self.spec = spec
        self.t = 0  # the next column
        self.start = np.zeros(num_envs, dtype=np.int64)  # [num_envs] first column of each running episode
        self._allocate(max(1, capacity))

    def _allocate(self, capacity: int) -> None:
        self.capacity = capacity
        self._blocks = {
            key: torch.empty((capacity, self.num_envs, *shape), dtype=dtype, device=device)
            for key, (shape, dtype, device) in self.spec.items()
        }
        # each block's [num_envs, ...] view of each column (made once per allocation)
        self._columns = {key: block.unbind(0) for key, block in self._blocks.items()}

    def append(self, values: dict[str, torch.Tensor]) -> None:
        """Copy one step of every env (``[num_envs, ...]`` per field, of ``spec``'s shapes and dtypes).

        The caller checks the values (a copy would broadcast and cast them).
        """
        if self.t == self.capacity:
            self._make_room()
        t = self.t
        columns = self._columns
        torch._foreach_copy_([columns[key][t] for key in values], list(values.values()))
        self.t = t + 1

    def take(self, env: int) -> dict[str, torch.Tensor] | None:
        """Env ``env``'s running episode (``[length, ...]`` per field, copied), which ends; ``None`` if empty."""
        first, t = int(self.start[env]), self.t
        self.start[env] = t
        if first == t:
            return None
        return {key: block[first:t, env].clone() for key, block in self._blocks.items()}

    def steps(self, env: int) -> list[dict[str, torch.Tensor]]:
        """Env ``env``'s running steps, one dict per step (copies), oldest first (checkpoints)."""
        return [{key: block[t, env].clone() for key, block in self._blocks.items()}
                for t in range(int(self.start[env]), self.t)]

    def load(self, steps: list[list[dict[str, torch.Tensor]]]) -> None:
        """Replace the running episodes by ``steps`` (per env, :meth:`steps`' format)."""
        longest = max((len(s) for s in steps), default=0)
        if longest > self.capacity:
            self._allocate(max(longest, 2 * self.capacity))
        self.t = longest
        for env, env_steps in enumerate(steps):
            self.start[env] = longest - len(env_steps)
            for j, step in enumerate(env_steps):
                for key, value in step.items():
                    self._blocks[key][int(self.start[env]) + j, env] = value

    def _make_room(self) -> None:
        """Drop the columns before the oldest running episode; double the blocks if that frees less than half."""
        oldest = int(self.start.min())
        kept = self.t - oldest
        if 2 * kept > self.capacity:  # the running episodes need more than half the columns
            old = self._blocks
            self._allocate(2 * self.capacity)
            for key, block in old.items():
                self._blocks[key][:kept] = block[oldest:self.t]
        else:
            for key, block in self._blocks.items():
                block[:kept] = block[oldest:self.t].clone()  # overlapping: through a copy
        self.start -= oldest
        self.t = kept

