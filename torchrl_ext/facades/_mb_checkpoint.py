"""The checkpoint of :class:`~torchrl_ext.facades.model_based.MBReplayBuffer`: ``dumps`` / ``loads``."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from torchrl_ext.envs.gym import AutoresetMode
from torchrl_ext.facades._mb_batches import RingState
from torchrl_ext.facades._mb_steps import PytorchrlSteps
from torchrl_ext.facades._mb_trees import specs_json, specs_of_json
from torchrl_ext.facades._snapshots import dump_facade, load_facade
from torchrl_ext.transforms.scaler import STATISTICS

__all__ = ["ModelCheckpoints"]

_RING = ("rows", "boundary", "ids", "ids_known")  # the time ring's arrays, [max_size, N] each


class ModelCheckpoints(RingState):
    """Atomic checkpoints of the model-based facade (a mixin of ``MBReplayBuffer``).

    A checkpoint holds the stored steps (``rb.dumps``: rows, episode index,
    sampler, RNG), the time ring (write cursor, each position's row, which steps
    are real transitions, the content ids of the holdout split), the split's
    fraction and seed, the buffer's seed (which seeds a rebuild: a resize, a
    reset), each env's running episode, the layout before a ``reset()`` and the
    scaler's statistics.

    Examples:
        >>> import tempfile
        >>> from types import SimpleNamespace
        >>> import gymnasium as gym
        >>> import numpy as np
        >>> from torchrl_ext import MBReplayBuffer
        >>> from torchrl_ext.transforms import StandardScaler
        >>> def buffer():
        ...     actor = SimpleNamespace(action_space=gym.spaces.Box(-1, 1, (1,)), dynamics_model=SimpleNamespace(
        ...         standard_scaler=StandardScaler(), reward_function=None))
        ...     return MBReplayBuffer(50, "cpu", actor, None, None, seed=0)
        >>> first, path = buffer(), tempfile.mkdtemp() + "/ckpt"
        >>> for t in range(6):
        ...     first.insert_transition({"Observation": np.full((2, 3), t, np.float32),
        ...         "Action": np.zeros((2, 1), np.float32), "Reward": np.ones((2, 1), np.float32),
        ...         "NextObservation": np.full((2, 3), t + 1, np.float32),
        ...         "Done": np.zeros((2, 1), np.float32), "NextDone": np.zeros((2, 1), np.float32)})
        >>> isinstance(first, ModelCheckpoints)
        True
        >>> first.dumps(path)
        >>> second = buffer()
        >>> second.loads(path)
        >>> a, b = next(first.generate_batches(1, 4)), next(second.generate_batches(1, 4))
        >>> bool((a["train_input"] == b["train_input"]).all()), len(second)
        (True, 6)
    """

    if TYPE_CHECKING:  # MBReplayBuffer's, for type checkers
        max_size: int
        step: int
        scaler: Any
        autoreset_mode: AutoresetMode
        reward_function: Any
        num_actions: int | None
        ensemble_size: int | None
        bootstrap: bool
        seed: int | None
        _steps: PytorchrlSteps
        _layout_before_reset: dict | None

        def _clear(self) -> None: ...
        def _new_steps(self) -> PytorchrlSteps: ...
        def _new_rb(self, steps: PytorchrlSteps, max_size: int) -> Any: ...

    def dumps(self, path: str | Path) -> None:
        """Checkpoint under ``path``, atomically (a process killed meanwhile leaves the previous one).

        After :meth:`loads`, :meth:`generate_batches` draws what this buffer would
        draw next, slices and positions are the same, and the next insert continues
        each env's episode. The capacity and the holdout fraction are the
        checkpoint's (:meth:`update_storage_parameter` may have changed them); the
        scaler gets the checkpoint's statistics when it keeps them as tensors named
        as pytorchrl's (``input_mu``, ``input_std``, ``target_mu``, ``target_std``),
        else it is fitted again at the next :meth:`generate_batches`.

        Raises:
            ValueError: a staged step holds a done flag other than 0 or 1 (as a read).

        Examples:
            >>> import tempfile
            >>> from types import SimpleNamespace
            >>> import gymnasium as gym
            >>> from torchrl_ext import MBReplayBuffer
            >>> from torchrl_ext.transforms import StandardScaler
            >>> actor = SimpleNamespace(action_space=gym.spaces.Discrete(2), dynamics_model=SimpleNamespace(
            ...     standard_scaler=StandardScaler(), reward_function=None))
            >>> path = tempfile.mkdtemp() + "/ckpt"
            >>> MBReplayBuffer(10, "cpu", actor, None, None, seed=0).dumps(path)  # before any insert
            >>> restored = MBReplayBuffer(10, "cpu", actor, None, None)
            >>> restored.loads(path)
            >>> len(restored), restored.seed
            (0, 0)
            >>> MBReplayBuffer(10, "cpu", actor, None, None, ensemble_size=2).loads(path)  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            ValueError: MBReplayBuffer.loads: ... was written by a facade built otherwise: ensemble_size: the checkpoint has None, this one 2; build it as the saved one was.
        """
        self._flush()
        arrays: dict[str, np.ndarray] = {}
        meta: dict[str, Any] = {"max_size": self.max_size, "size": self.size, "step": self.step, "seed": self.seed,
                                "holdout_fraction": self.holdout_fraction, "split_seed": self._split_seed,
                                "layout_before_reset": specs_json(self._layout_before_reset)}
        if self._rb is not None:
            steps, steps_arrays = self._steps.state_dict()
            meta["steps"] = steps
            arrays.update({f"steps.{k}": v for k, v in steps_arrays.items()})
            ring = (self._rows.numpy(), self._boundary, self._ids, self._ids_known)
            arrays.update(zip(_RING, ring))
        stats = {name: getattr(self.scaler, name, None) for name in STATISTICS}
        kept = self._scaler_fitted and isinstance(stats[STATISTICS[0]], torch.Tensor)
        if kept:
            arrays.update({f"scaler.{k}": v.detach().cpu().numpy() for k, v in stats.items()
                           if isinstance(v, torch.Tensor)})
        meta["scaler_fitted"] = kept
        dump_facade(path, self._rb, f"{type(self).__name__}.dumps", self._layout(), arrays, meta)

    def loads(self, path: str | Path) -> None:
        """Restore what :meth:`dumps` wrote, in place (steps staged here are dropped).

        Raises:
            ValueError: ``path`` holds no checkpoint, or one of a buffer built with
                another autoreset mode, reward target, action one-hot width,
                ensemble size or bootstrap (nothing is loaded then).
        """
        built: dict[str, Any] = {}

        def build(arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> Any:
            if "steps" not in meta:  # saved before the first insert
                return None
            steps = self._new_steps()
            steps.load_state_dict(meta["steps"], {k[6:]: v for k, v in arrays.items() if k.startswith("steps.")})
            built.update(steps=steps, rb=self._new_rb(steps, meta["max_size"]))
            return built["rb"]

        arrays, meta = load_facade(path, build, f"{type(self).__name__}.loads", self._layout())
        self._clear()  # nothing of this buffer's stays
        self.max_size, self.size, self.step = meta["max_size"], meta["size"], meta["step"]
        self.holdout_fraction, self._split_seed = meta["holdout_fraction"], meta["split_seed"]
        # the buffer's seed seeds a rebuilt buffer (reset, resize); the layout before a
        # reset decides whether the scaler's statistics survive the next insert
        self.seed, self._layout_before_reset = meta["seed"], specs_of_json(meta["layout_before_reset"])
        if built:
            self._steps, self._rb = built["steps"], built["rb"]
            self._rows = torch.from_numpy(arrays["rows"])
            self._boundary, self._ids, self._ids_known = (arrays[k] for k in _RING[1:])
        self._scaler_fitted = meta["scaler_fitted"]
        if self._scaler_fitted:
            for name in STATISTICS:
                saved = arrays.get(f"scaler.{name}")
                setattr(self.scaler, name, None if saved is None else torch.from_numpy(saved).to(self.device))

    def _layout(self) -> dict[str, Any]:
        """How this buffer was built, as a checkpoint must match it."""
        return {"autoreset_mode": self.autoreset_mode.value, "reward_target": self.reward_function is None,
                "num_actions": self.num_actions, "ensemble_size": self.ensemble_size, "bootstrap": self.bootstrap}
