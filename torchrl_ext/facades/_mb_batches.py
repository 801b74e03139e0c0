"""The training batches of :class:`~torchrl_ext.facades.model_based.MBReplayBuffer`: holdout split, epochs."""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from torchrl_ext.core.checks import check_count
from torchrl_ext.core.schema import as_key
from torchrl_ext.facades._mb_steps import STORED
from torchrl_ext.model_based import ModelEpochDataset
from torchrl_ext.samplers.epoch import content_ids, holdout_mask

__all__ = ["ModelBatches", "RingState"]


class RingState:
    """What ``MBReplayBuffer``'s mixins read of its time ring, declared for type checkers (no code).

    ``size`` steps at time positions whose storage rows are ``_rows``
    (``[max_size, N]``), ``_boundary`` (not a real transition), ``_ids`` /
    ``_ids_known`` (content ids of the holdout split, seeded by
    ``_split_seed``), and ``_flush()``, which writes the staged steps.

    Examples:
        >>> from torchrl_ext import MBReplayBuffer
        >>> issubclass(MBReplayBuffer, RingState)
        True
    """

    if TYPE_CHECKING:  # MBReplayBuffer's
        size: int
        device: Any
        holdout_fraction: float
        _rb: Any
        _rows: torch.Tensor
        _boundary: np.ndarray
        _ids: np.ndarray
        _ids_known: np.ndarray
        _split_seed: int
        _scaler_fitted: bool

        def _flush(self) -> None: ...


class ModelBatches(RingState):
    """Serve the stored steps as normalised model-training epochs (a mixin of ``MBReplayBuffer``).

    Reads the facade's time ring (:class:`RingState`); the content ids are
    computed here when a holdout split first reads them. See :class:`~torchrl_ext.MBReplayBuffer` for the
    public methods.

    Examples:
        >>> import gymnasium as gym
        >>> import numpy as np
        >>> from types import SimpleNamespace
        >>> from torchrl_ext import MBReplayBuffer
        >>> from torchrl_ext.transforms import StandardScaler
        >>> actor = SimpleNamespace(action_space=gym.spaces.Box(-1, 1, (1,)), dynamics_model=SimpleNamespace(
        ...     standard_scaler=StandardScaler(), reward_function=None))
        >>> buffer = MBReplayBuffer(100, "cpu", actor, None, None, holdout_fraction=0.25, seed=0)
        >>> for t in range(40):
        ...     obs = np.full((2, 3), t, np.float32)
        ...     buffer.insert_transition({"Observation": obs, "Action": np.zeros((2, 1), np.float32),
        ...         "Reward": np.ones((2, 1), np.float32), "NextObservation": obs + 1,
        ...         "Done": np.zeros((2, 1), np.float32), "NextDone": np.zeros((2, 1), np.float32)})
        >>> isinstance(buffer, ModelBatches)
        True
        >>> batch = next(buffer.generate_batches(1, 16))
        >>> batch["train_input"].shape[1], batch["holdout_input"].shape[1]  # 3 observation + 1 action features
        (4, 4)
    """

    if TYPE_CHECKING:  # MBReplayBuffer's, for type checkers
        _data: ModelEpochDataset | None
        _holdout: torch.Tensor

    def _content_ids(self, take: np.ndarray) -> np.ndarray:
        """Content ids of the steps where ``take`` (``[N, size]``, env-major) is set.

        A step's id hashes its stored observation and action entries (see
        :func:`~torchrl_ext.samplers.epoch.content_ids`), once after it is
        written: only a holdout split reads them, so inserts never pay for them.
        """
        ids, known = self._ids[: self.size].T, self._ids_known[: self.size].T  # [N, size] views
        todo = take & ~known
        if todo.any():
            data = self._rb.storage.get(self._rows[: self.size].T[torch.from_numpy(todo)])
            inputs = (STORED["Observation"], STORED["Action"])
            leaves = {as_key(k): v for k, v in data.items(include_nested=True, leaves_only=True)}
            entries = [leaves[k].numpy() for k in sorted(leaves) if k[:1] in inputs]
            ids[todo] = content_ids(entries, batch_dims=1)
            known[todo] = True
        return ids[take]

    def fit_scaler(self) -> None:
        """Fit ``actor.dynamics_model.standard_scaler`` on the training transitions (not the holdout)."""
        self._dataset().fit_scaler()
        self._scaler_fitted = True

    def resplit(self, seed: int | None = None) -> None:
        """A new holdout split, of split seed ``seed``.

        Without ``seed``, the next split seed follows from the current one, so a
        buffer built with ``seed=`` re-splits the same way in every run (the
        first split seed is ``seed=``, else drawn from torch's global RNG).
        """
        if seed is None:
            state = np.random.SeedSequence(self._split_seed).generate_state(1, np.uint64)[0]
            seed = int(state >> np.uint64(2))
        self._split_seed = int(seed)

    def _dataset(self) -> ModelEpochDataset:
        self._flush()
        if not self.size:
            raise ValueError("MBReplayBuffer: the buffer is empty; insert transitions first.")
        # stream by stream, in time order: the epoch's one gather then reads rows in order
        window, boundary = self._rows[: self.size].T, self._boundary[: self.size].T
        real = ~boundary
        rows = window[torch.from_numpy(real)]
        if not rows.numel():
            raise ValueError(
                f"MBReplayBuffer: none of the {self.size} stored steps is a real transition "
                "(all are reset steps or done steps without their final observation)."
            )
        if self.holdout_fraction > 0:
            ids = self._content_ids(real)
            held = torch.from_numpy(
                holdout_mask(np.zeros_like(ids), ids, self.holdout_fraction, self._split_seed)
            )
        else:
            held = torch.zeros(rows.shape, dtype=torch.bool)
        if bool(held.all()):  # statistics of no rows are NaN: never hand them to the scaler
            raise ValueError(
                f"MBReplayBuffer: no training transition among {rows.numel()} candidates "
                f"(holdout_fraction={self.holdout_fraction}); add data or lower the holdout."
            )
        # one dataset per storage: it keeps the normalised pairs between epochs
        if self._data is None or self._data.rb is not self._rb:
            self._data = ModelEpochDataset(self._rb, device=self.device)
        self._data.rows, self._holdout = rows[~held], rows[held]
        return self._data

    # ----------------------------------------------------------------- batches
    def generate_batches(
        self, num_mini_batch: int | None, mini_batch_size: int | None = 256, num_epochs: int = 1
    ) -> Iterator[dict[str, Any]]:
        """``num_epochs`` epochs of normalised ``(input, label)`` mini-batches (M10).

        Each epoch visits every training transition of every env exactly once,
        in a fresh random order, in batches of ``mini_batch_size`` (the last
        one smaller, never empty: M2). With ``mini_batch_size=None`` the epoch
        is cut into ``num_mini_batch`` batches instead (pytorchrl's on-policy
        meaning), of sizes that differ by at most one (as many as there are
        transitions, when fewer); otherwise ``num_mini_batch`` is not needed. The scaler is
        fitted on the training transitions on the first call, then only by
        :meth:`before_gradients` / :meth:`fit_scaler` (M9).

        As pytorchrl's, the generator is lazy: each epoch is drawn from the
        steps held when it starts (its first batch is asked for), so steps
        inserted while iterating join the next epoch, and an epoch is never
        served from rows that hold other steps by then.

        Yields:
            dicts with ``"train_input"`` ``[b, obs_dim + act_dim]`` and
            ``"train_label"`` ``[b, obs_dim (+ 1)]`` (``[E, b, ...]`` for an
            ensemble) on ``device``, ``"batch_number"`` (within the epoch) and
            ``"epoch"``; with a holdout also ``"holdout_input"`` and
            ``"holdout_label"`` (all held-out transitions).

        Raises:
            ValueError: the buffer holds no transition, or a count is not >= 1.
            TypeError: a count is not an int (``2.5``, ``"3"``).
        """
        where = "MBReplayBuffer.generate_batches"
        if mini_batch_size is None:
            if num_mini_batch is None:
                raise ValueError(f"{where}: num_mini_batch=None, expected an int >= 1 when mini_batch_size is None.")
            batches = check_count(where, "num_mini_batch", num_mini_batch)
        else:
            mini_batch_size = check_count(where, "mini_batch_size", mini_batch_size)
            batches = 1 if num_mini_batch is None else check_count(where, "num_mini_batch", num_mini_batch)
        epochs = check_count(where, "num_epochs", num_epochs)
        dataset = self._dataset()
        if not self._scaler_fitted:
            dataset.fit_scaler()
            self._scaler_fitted = True
        return self._batches(mini_batch_size, batches, epochs)

    def _batches(
        self, batch_size: int | None, num_mini_batch: int, num_epochs: int
    ) -> Iterator[dict[str, Any]]:
        for epoch in range(num_epochs):
            # the steps held now: steps inserted since the call (or during the last
            # epoch) moved the time window, so the rows found before may hold others
            dataset = self._dataset()
            if batch_size is None:
                dataset.num_batches = num_mini_batch
            else:
                dataset.batch_size, dataset.num_batches = batch_size, None
            holdout = {}
            if self.holdout_fraction > 0:
                pairs = dataset.normalised_pairs(self._holdout)
                holdout = {"holdout_input": pairs[0], "holdout_label": pairs[1]}
            for j, (inputs, labels) in enumerate(dataset.epoch()):
                yield {"train_input": inputs, "train_label": labels, "batch_number": j,
                       "epoch": epoch, **holdout}
