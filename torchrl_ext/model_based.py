"""Dynamics-model training data: the buffer builder and an epoch dataset."""
from __future__ import annotations

from typing import Any, Iterator, Sequence

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey
from torch.utils.data import IterableDataset, get_worker_info

from torchrl_ext.buffer import TransitionReplayBuffer
from torchrl_ext.builders import make_replay_buffer
from torchrl_ext.core.checks import check_count
from torchrl_ext.core.schema import unchecked_tensordict
from torchrl_ext.samplers.epoch import EpochSampler
from torchrl_ext.transforms.model_pair import ModelPairTransform
from torchrl_ext.transforms.scaler import STATISTICS, StandardScaler

__all__ = ["ModelEpochDataset", "make_model_based_buffer"]


def make_model_based_buffer(
    capacity: int,
    *,
    batch_size: int = 256,
    observation_keys: Sequence[NestedKey] = ("observation",),
    action_key: NestedKey = "action",
    reward_key: NestedKey | None = ("next", "reward"),
    num_actions: int | None = None,
    holdout_fraction: float = 0.0,
    ensemble_size: int | None = None,
    bootstrap: bool = False,
    scaler: Any = None,
    **kwargs: Any,
) -> TransitionReplayBuffer:
    """A replay buffer serving epochs of dynamics-model regression pairs.

    :func:`~torchrl_ext.make_replay_buffer` with
    ``sampler=EpochSampler(holdout_fraction=..., ensemble_size=..., bootstrap=...)``
    and ``transform=ModelPairTransform(observation_keys=..., num_actions=...,
    scaler=...)``: ``rb.sample()`` is the next batch of the current epoch with
    ``"model_input"`` / ``"model_target"`` entries (normalised by ``scaler``
    once it is fitted), and ``for batch in rb`` is one epoch. For whole epochs
    at the speed of a bare permutation, wrap it in :class:`ModelEpochDataset`.

    Args:
        capacity (int): rows of the storage (an episode of ``L`` steps uses ``L + 1``).

    Keyword Args:
        batch_size (int): mini-batch size ``B``. Defaults to ``256``.
        observation_keys, action_key, reward_key, num_actions: see
            :class:`~torchrl_ext.transforms.ModelPairTransform`.
        holdout_fraction, ensemble_size, bootstrap: see
            :class:`~torchrl_ext.samplers.EpochSampler`.
        scaler (optional): a :class:`~torchrl_ext.transforms.StandardScaler`
            (or any object with its ``fit`` / ``transform``); the batches are
            normalised with it once fitted. ``None``: raw pairs.
        **kwargs: the other keywords of :func:`~torchrl_ext.make_replay_buffer`
            (``seed``, ``backend``, ``num_streams``...).

    Returns:
        the assembled :class:`~torchrl_ext.TransitionReplayBuffer`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> rb = make_model_based_buffer(100, batch_size=3, seed=0)
        >>> _ = rb.extend(TensorDict({"observation": torch.zeros(1, 5, 2), "action": torch.ones(1, 5, 1),
        ...     "next": {"observation": torch.ones(1, 5, 2), "reward": torch.ones(1, 5, 1),
        ...              "done": torch.zeros(1, 5, 1, dtype=torch.bool)}}, [1, 5]))
        >>> [tuple(b["model_input"].shape) for b in rb]  # one epoch of 5 transitions
        [(3, 3), (2, 3)]
    """
    sampler = EpochSampler(
        holdout_fraction=holdout_fraction, ensemble_size=ensemble_size, bootstrap=bootstrap
    )
    transform = ModelPairTransform(
        observation_keys=observation_keys,
        action_key=action_key,
        reward_key=reward_key,
        num_actions=num_actions,
        scaler=scaler,
    )
    return make_replay_buffer(
        capacity, batch_size=batch_size, sampler=sampler, transform=transform, **kwargs
    )


class ModelEpochDataset(IterableDataset):
    """Whole epochs of normalised model pairs, each iteration one epoch.

    The training transitions are gathered from the storage once, turned into
    ``(inputs, targets)`` by the buffer's
    :class:`~torchrl_ext.transforms.ModelPairTransform` and normalised on
    ``device``; each mini-batch is then one ``index_select`` of ``[b]`` (or
    ``[E, b]``) of those rows, in the order
    :class:`~torchrl_ext.samplers.EpochSampler` drew. The normalised pairs are
    kept from epoch to epoch and built again only when the training rows, the
    stored data (a write, ``empty()``, a checkpoint load) or the scaler's
    statistics changed, so an epoch without new data costs about a bare
    permutation and its ``index_select`` calls. The batches are the same as
    ``rb.sample()`` would give for the same epoch, faster.

    The scaler is fitted on the first epoch's *training* pairs if it was never
    fitted, and afterwards only by :meth:`fit_scaler` (the normalisation does
    not move under a model that is being trained or used by a planner).

    With a ``DataLoader(dataset, batch_size=None, num_workers=W,
    collate_fn=identity)`` (batches are TensorDicts already), the
    workers draw one shared epoch order from the DataLoader's seed and serve
    every ``W``-th batch each, so the loader still yields each transition once
    per epoch. Fit the scaler before the workers start.

    Args:
        rb: a buffer from :func:`make_model_based_buffer` (an
            :class:`~torchrl_ext.samplers.EpochSampler` and a
            :class:`~torchrl_ext.transforms.ModelPairTransform`).

    Keyword Args:
        batch_size (int, optional): defaults to the buffer's.
        num_batches (int, optional): cut each epoch into this many batches
            instead, of sizes that differ by at most one (as many as there
            are transitions, when fewer). An attribute, as ``batch_size``.
        device (torch.device or str, optional): where batches are made.
            Defaults to ``"cpu"``.
        rows (torch.Tensor, optional): restrict epochs to these transition rows.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext.transforms import StandardScaler
        >>> rb = make_model_based_buffer(100, batch_size=4, scaler=StandardScaler(), seed=0)
        >>> _ = rb.extend(TensorDict({"observation": torch.randn(1, 9, 2), "action": torch.randn(1, 9, 1),
        ...     "next": {"observation": torch.randn(1, 9, 2), "reward": torch.randn(1, 9, 1),
        ...              "done": torch.zeros(1, 9, 1, dtype=torch.bool)}}, [1, 9]))
        >>> epoch = list(ModelEpochDataset(rb))
        >>> [b.batch_size[0] for b in epoch], abs(torch.cat([b["model_input"] for b in epoch]).mean().item()) < 1e-6
        ([4, 4, 1], True)
    """

    def __init__(
        self,
        rb: TransitionReplayBuffer,
        *,
        batch_size: int | None = None,
        num_batches: int | None = None,
        device: torch.device | str = "cpu",
        rows: torch.Tensor | None = None,
    ) -> None:
        sampler, transform = rb.sampler, rb.transform
        transform = next((t for t in (transform or []) if isinstance(t, ModelPairTransform)), None)
        if not isinstance(sampler, EpochSampler) or transform is None:
            raise TypeError(
                "ModelEpochDataset: the buffer needs an EpochSampler and a ModelPairTransform "
                f"(got sampler {type(sampler).__name__}); build it with make_model_based_buffer()."
            )
        self.rb, self.sampler, self.transform = rb, sampler, transform
        self.batch_size = check_count("ModelEpochDataset", "batch_size",
                                      batch_size if batch_size is not None else rb.batch_size or 256)
        self.num_batches = None if num_batches is None else check_count(
            "ModelEpochDataset", "num_batches", num_batches)
        self.device = torch.device(device)
        self.rows = rows
        self._table: _PairTable | None = None

    def _pairs(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # on the device first: a scaler fitted here keeps its statistics there
        inputs, targets = self.transform.pairs(self.rb.storage.get(rows))
        return inputs.to(self.device), targets.to(self.device)

    def fit_scaler(self) -> None:
        """Fit the transform's scaler on the current training pairs (only when called).

        Raises:
            ValueError: there is no scaler, or no training transition (all held
                out); the scaler is then left as it was.
        """
        scaler = self.transform.scaler
        if scaler is None:
            raise ValueError("ModelEpochDataset.fit_scaler: the transform has no scaler.")
        rows = self.sampler.train_rows(self.rb.storage, self.rows)
        if not rows.numel():  # statistics of no rows are NaN: never hand them to the scaler
            candidates = self.sampler.holdout_rows(self.rb.storage, self.rows).numel()  # all held out
            raise ValueError(
                f"ModelEpochDataset.fit_scaler: no training transition among {candidates} candidates "
                f"(holdout_fraction={self.sampler.holdout_fraction}); add data or lower the holdout."
            )
        scaler.fit(*self._pairs(rows))

    def _normalise(self, inputs: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # the pairs are fresh tensors: a scaler with an in-place transform_ saves two copies
        scaler = self.transform.scaler
        if scaler is None:
            return inputs, targets
        if not getattr(scaler, "fitted", True):
            if get_worker_info() is not None:
                raise RuntimeError(
                    "ModelEpochDataset: the scaler is not fitted; call fit_scaler() before "
                    "iterating with DataLoader workers."
                )
            scaler.fit(inputs, targets)
        if callable(getattr(scaler, "transform_", None)):
            scaler.transform_(inputs, targets)
            return inputs, targets
        inputs, targets = scaler.transform(inputs, targets)
        return inputs, targets

    def _training_pairs(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised pairs of the training ``rows``, in their order, on ``device``.

        Kept across epochs (never handed out: batches are copies) and rebuilt
        when the rows, the stored data (a write, an ``empty()`` or a checkpoint
        load) or the scaler's statistics differ from when they were built.
        """
        table = self._table
        if table is None or not table.serves(rows, self.rb.storage, self.transform.scaler):
            self._table = None  # free the old table before building the new one
            pairs = self._normalise(*self._pairs(rows))
            table = self._table = _PairTable(rows, self.rb.storage, self.transform.scaler, pairs)
        return table.inputs, table.targets

    def holdout(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised ``(inputs, targets)`` of the held-out transitions, on ``device``.

        ``[0, dim]`` tensors when none is held out.
        """
        return self.normalised_pairs(self.sampler.holdout_rows(self.rb.storage, self.rows))

    def normalised_pairs(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised ``(inputs, targets)`` of the transitions at storage ``rows``, on ``device``.

        E.g. a held-out set chosen outside the sampler; ``[0, dim]`` tensors for no rows.
        """
        return self._normalise(*self._pairs(rows))

    def epoch(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """One epoch as ``(inputs, targets)`` batches, ``[b, d]`` or ``[E, b, d]``."""
        info = get_worker_info()
        generator = None
        if info is not None:  # every worker draws the same order from the loader's seed
            generator = torch.Generator().manual_seed(info.seed - info.id)
        self.sampler.start_epoch(self.rb.storage, self.rows, generator)
        rows, order = self.sampler.epoch_state()
        bounds = self._bounds(rows.numel())
        first, step = (0, 1) if info is None else (info.id, info.num_workers)
        inputs, targets = self._training_pairs(rows)
        order = order.to(self.device)
        for j in range(first, len(bounds) - 1, step):
            # [b] (one model) or [E, b] (ensemble) rows of the kept pairs: fresh tensors
            index = order[..., bounds[j] : bounds[j + 1]]
            flat = index.reshape(-1)
            yield (
                inputs.index_select(0, flat).view(*index.shape, -1),
                targets.index_select(0, flat).view(*index.shape, -1),
            )
        self.sampler.end_epoch()  # the buffer's next sample starts a new epoch

    def __iter__(self) -> Iterator[TensorDictBase]:
        keys = (self.transform.inputs_key, self.transform.targets_key)
        for pair in self.epoch():
            # two fresh tensors of the batch's shape: built without per-entry checks
            yield unchecked_tensordict(dict(zip(keys, pair)), pair[0].shape[:-1])

    def __getstate__(self) -> dict[str, Any]:
        # DataLoader workers started by spawn get the dataset pickled: not the kept pairs
        return {**self.__dict__, "_table": None}

    def __len__(self) -> int:
        """Batches in an epoch of the current data (the count may change with new data)."""
        return len(self._bounds(self.sampler.train_rows(self.rb.storage, self.rows).numel())) - 1

    def _bounds(self, n: int) -> list[int]:
        """Where the batches of an epoch of ``n`` transitions start, then ``n``."""
        if self.num_batches is None:  # batch_size each, the last one smaller
            return [*range(0, n, self.batch_size), n]
        k = min(self.num_batches, n)  # k batches of n // k or n // k + 1
        return [j * n // k for j in range(k + 1)]


def _statistics(scaler: Any) -> tuple[torch.Tensor, ...] | None:
    """Copies of a scaler's four statistics; ``()`` without a scaler, ``None`` if they are not
    all tensors (a scaler that cannot be checked: its pairs are never reused)."""
    if scaler is None:
        return ()
    stats = [getattr(scaler, name, None) for name in STATISTICS]
    tensors = [s.detach().clone() for s in stats if isinstance(s, torch.Tensor)]
    return tuple(tensors) if len(tensors) == len(stats) else None


def _data_version(storage: Any) -> tuple[Any, int, int]:
    """What changes whenever the stored rows may have: the index object, its write
    sequence (each write moves it) and that tensor's in-place version (a checkpoint
    load or a restore copies the sequence back with a torch op, which moves it)."""
    index = storage.index
    return index, index.read_token(), index.write_seq._version


class _PairTable:
    """Normalised ``(inputs, targets)`` of some training rows and what they were built from."""

    def __init__(
        self, rows: torch.Tensor, storage: Any, scaler: Any, pairs: tuple[torch.Tensor, torch.Tensor]
    ) -> None:
        self.rows = rows.clone()
        self.version = _data_version(storage)
        self.statistics = _statistics(scaler)
        self.inputs, self.targets = pairs

    def serves(self, rows: torch.Tensor, storage: Any, scaler: Any) -> bool:
        """Whether these pairs are still those of ``rows`` in ``storage`` under ``scaler``."""
        if self.statistics is None or self.version != _data_version(storage):
            return False
        if self.rows.shape != rows.shape or not torch.equal(self.rows, rows):
            return False
        now = _statistics(scaler)
        return now is not None and len(now) == len(self.statistics) and all(
            a.shape == b.shape and torch.equal(a, b) for a, b in zip(now, self.statistics)
        )
