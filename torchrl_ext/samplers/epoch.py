"""Epochs without replacement over live transitions, with a holdout split and ensembles."""
from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torchrl.data.replay_buffers.samplers import Sampler

from torchrl_ext.core.checks import check_count, check_flag, check_number
from torchrl_ext.core.episodes import EpisodeIndex
from torchrl_ext.samplers._generator import generator_state, restore_generator
from torchrl_ext.storages.transition import TransitionStorage

__all__ = ["EpochSampler", "content_ids", "epoch_order", "holdout_mask"]

_TAU_BITS = 40  # transition id = stream << 40 | tau: unique while the storage lives


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser of uint64 ``x`` (wraps around by design)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def holdout_mask(stream: np.ndarray, tau: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Whether each transition ``(stream, tau)`` is held out, for a split ``seed``.

    A transition is held out iff ``u < fraction`` where ``u`` in ``[0, 1)`` is
    a hash (SplitMix64) of its identity and ``seed``. The split is therefore
    fixed for a transition's whole life, independent of which other rows
    exist, and transitions written later are split in the same proportion:
    each is held out with probability ``fraction``. A new ``seed`` re-splits.

    Examples:
        >>> import numpy as np
        >>> tau = np.arange(10_000)
        >>> held = holdout_mask(np.zeros_like(tau), tau, 0.2, seed=0)
        >>> bool(abs(held.mean() - 0.2) < 0.02), bool((held == holdout_mask(0 * tau, tau, 0.2, 0)).all())
        (True, True)
    """
    if fraction <= 0.0:
        return np.zeros(np.shape(tau), dtype=bool)
    x = ((np.asarray(stream, dtype=np.uint64) << np.uint64(_TAU_BITS))
         | np.asarray(tau, dtype=np.uint64))
    with np.errstate(over="ignore"):
        x = _mix64(x + np.uint64(seed & (2**64 - 1)))
    return (x >> np.uint64(11)).astype(np.float64) * 2.0**-53 < fraction


def content_ids(entries: list[np.ndarray], batch_dims: int) -> np.ndarray:
    """A 64-bit identity of each item's content, ``[*batch]`` uint64.

    Item ``i``'s id hashes the bytes of ``entries[k][i]`` for every ``k`` in
    order (a multiply-add of its 4-byte words, or bytes, with fixed odd
    multipliers per entry, mixed by SplitMix64): items of equal contents and dtypes get equal
    ids, others almost surely different ones. As the ``tau`` of
    :func:`holdout_mask` it splits by content: a transition keeps its side of
    the split wherever its data is copied to (another buffer, a resized one).
    One pass over the bytes.

    Examples:
        >>> import numpy as np
        >>> obs, action = np.array([[0.5, 1.0], [0.5, 1.0], [0.5, 2.0]]), np.array([1, 1, 1])
        >>> ids = content_ids([obs, action], batch_dims=1)
        >>> bool(ids[0] == ids[1]), bool(ids[0] == ids[2])
        (True, False)
    """
    batch = entries[0].shape[:batch_dims]
    h = np.zeros(batch, np.uint64)
    for k, entry in enumerate(entries):
        raw = np.ascontiguousarray(entry).reshape(*batch, -1).view(np.uint8)
        words = raw.view(np.uint32) if raw.shape[-1] % 4 == 0 else raw  # [*batch, W]
        multipliers = _mix64(np.arange(words.shape[-1], dtype=np.uint64) + np.uint64(k << 32))
        multipliers |= np.uint64(1)  # odd: no word's bits are lost
        # sum_w word_w * multiplier_w, wrapping mod 2**64 (einsum: twice as fast as * and sum)
        h = _mix64(h ^ np.einsum("...w,w->...", words.astype(np.uint64), multipliers))
    return h


def _index(storage: TransitionStorage) -> EpisodeIndex:
    if storage.index is None:
        raise ValueError(
            "EpochSampler: cannot sample: the buffer holds no transition yet; extend it first."
        )
    return storage.index


def epoch_order(
    n: int, ensemble_size: int | None, bootstrap: bool, generator: torch.Generator | None
) -> torch.Tensor:
    """Positions ``0 .. n-1`` in the order one epoch visits them.

    ``[n]`` for a single model: a permutation (each position once). ``[E, n]``
    for an ensemble of ``E``: one independent permutation per member, or with
    ``bootstrap`` ``n`` draws *with* replacement per member (each member then
    trains on its own bootstrap resample of the data).

    Examples:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> sorted(epoch_order(5, None, False, g).tolist())
        [0, 1, 2, 3, 4]
        >>> epoch_order(5, 3, True, g).shape
        torch.Size([3, 5])
    """
    if ensemble_size is None:
        return torch.randperm(n, generator=generator)
    if bootstrap:
        return torch.randint(n, (ensemble_size, n), generator=generator)
    return torch.stack([torch.randperm(n, generator=generator) for _ in range(ensemble_size)])


class EpochSampler(Sampler):
    """Epochs over the live transitions of an :class:`~torchrl_ext.storages.TransitionStorage`.

    One epoch visits every training transition once (all env streams
    together), in a random order, ``batch_size`` at a time; the last batch of
    an epoch is smaller when ``batch_size`` does not divide the count, and
    never empty. ``rb.sample()`` serves the next batch of the current epoch
    and starts a new epoch (a fresh permutation over the transitions live at
    that moment) after the last one; :attr:`ran_out` is set when an epoch's
    last batch is served, so ``for batch in rb:`` iterates exactly one epoch.
    Transitions written during an epoch wait for the next one; a transition
    overwritten during an epoch is skipped (never replaced by the row's new
    content), so every epoch is a consistent set, and :attr:`ran_out` is set
    by the write that leaves nothing of the epoch to serve.

    Holdout: with ``holdout_fraction = p``, each transition is held out with
    probability ``p`` by a hash of its identity (see :func:`holdout_mask`):
    held-out transitions are never in a training epoch, the split stays fixed
    until :meth:`resplit`, and new transitions are split in the same
    proportion. :meth:`holdout_rows` gives them, to evaluate a model on.

    Ensembles: with ``ensemble_size = E``, indices and batches are ``[E, b]``:
    each member follows its own permutation, or with ``bootstrap`` its own
    resample with replacement (PETS / MBPO style). A transition overwritten
    mid-epoch drops its whole column of the batch.

    Randomness comes from the buffer's generator, else ``generator``, else
    torch's global RNG; the holdout seed is drawn from it on first use. Both,
    and the epoch's position, are in :meth:`state_dict`.

    Keyword Args:
        holdout_fraction (float): in ``[0, 1)``. Defaults to ``0.0``.
        ensemble_size (int, optional): number of ensemble members ``E``.
        bootstrap (bool): members resample with replacement (needs ``ensemble_size``).
        generator (torch.Generator, optional): RNG used when the buffer sets none.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import make_replay_buffer
        >>> from torchrl_ext.samplers import EpochSampler
        >>> rb = make_replay_buffer(64, batch_size=4, sampler=EpochSampler(), seed=0)
        >>> _ = rb.extend(TensorDict({"observation": torch.arange(10.).view(1, 10, 1),
        ...     "action": torch.zeros(1, 10, 1), "next": {"observation": torch.arange(1., 11.).view(1, 10, 1),
        ...     "reward": torch.zeros(1, 10, 1), "done": torch.zeros(1, 10, 1, dtype=torch.bool)}}, [1, 10]))
        >>> batches = [b["observation"].view(-1) for b in rb]  # one epoch
        >>> [len(b) for b in batches], sorted(torch.cat(batches).tolist()) == list(range(10))
        ([4, 4, 2], True)
    """

    # settings a checkpoint must be loaded with (torchrl_ext._checkpoint)
    checkpoint_settings: ClassVar[tuple[str, ...]] = ("holdout_fraction", "ensemble_size", "bootstrap")

    def __init__(
        self,
        *,
        holdout_fraction: float = 0.0,
        ensemble_size: int | None = None,
        bootstrap: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if check_number("EpochSampler", "holdout_fraction", holdout_fraction, 0.0) >= 1.0:
            raise ValueError(
                f"EpochSampler: holdout_fraction={holdout_fraction}, expected a value in [0, 1)."
            )
        if ensemble_size is not None:  # 2.5 and "3" refused, not truncated or parsed
            check_count("EpochSampler", "ensemble_size", ensemble_size)
        bootstrap = check_flag("EpochSampler", "bootstrap", bootstrap)
        if bootstrap and ensemble_size is None:
            raise ValueError(
                "EpochSampler: bootstrap=True resamples per ensemble member; pass ensemble_size=E."
            )
        self.holdout_fraction = float(holdout_fraction)
        self.ensemble_size = None if ensemble_size is None else int(ensemble_size)
        self.bootstrap = bootstrap
        self.generator = generator
        self.split_seed: int | None = None
        self.epochs = 0  # epochs started
        self._ran_out = False
        self._clear_epoch()

    def _clear_epoch(self) -> None:
        self._rows = torch.empty(0, dtype=torch.int64)  # [n] training rows of the epoch
        self._tau = np.empty(0, dtype=np.int64)  # [n] their logical time (liveness check)
        self._order: torch.Tensor | None = None  # [n] or [E, n] positions into _rows
        self._position = 0

    def _generator(self) -> torch.Generator | None:
        return self._rng if self._rng is not None else self.generator

    # ------------------------------------------------------------------ split
    def _seed(self) -> int:
        if self.split_seed is None:
            self.split_seed = int(torch.randint(2**62, (), generator=self._generator()))
        return self.split_seed

    def resplit(self, seed: int | None = None) -> None:
        """Draw a new holdout split (from the generator, or ``seed``).

        The current epoch is abandoned: the next batch starts a new one.
        """
        self.split_seed = None if seed is None else int(seed)
        self._seed()
        self._clear_epoch()

    def _split(
        self, storage: TransitionStorage, rows: torch.Tensor | None
    ) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
        """``(rows, tau, held_out)`` of the candidate transitions."""
        index = _index(storage)
        rows = storage.live_transition_rows() if rows is None else torch.as_tensor(rows).long()
        tau, stream = index.row_coordinates(rows.numpy())
        return rows, tau, holdout_mask(stream, tau, self.holdout_fraction, self._seed())

    def train_rows(self, storage: TransitionStorage, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Rows of the training transitions among ``rows`` (default: every live transition)."""
        rows, _, held = self._split(storage, rows)
        return rows[torch.from_numpy(~held)]

    def holdout_rows(self, storage: TransitionStorage, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Rows of the held-out transitions among ``rows`` (default: every live transition)."""
        rows, _, held = self._split(storage, rows)
        return rows[torch.from_numpy(held)]

    # ------------------------------------------------------------------ epochs
    def start_epoch(
        self,
        storage: TransitionStorage,
        rows: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> int:
        """Start a new epoch now, over the training transitions among ``rows``.

        Args:
            storage: the buffer's storage.
            rows: candidate transition rows (e.g. a facade's time window);
                defaults to every live transition.
            generator: draws this epoch's order instead of the sampler's RNG
                (DataLoader workers agreeing on one epoch).

        Returns:
            the number of training transitions ``n`` of the epoch.

        Raises:
            ValueError: there is no training transition.
        """
        rows, tau, held = self._split(storage, rows)
        keep = ~held
        if not keep.any():
            raise ValueError(
                f"EpochSampler: no training transition among {rows.numel()} candidates "
                f"(holdout_fraction={self.holdout_fraction}); add data or lower the holdout."
            )
        self._rows = rows[torch.from_numpy(keep)]
        self._tau = tau[keep]
        self._order = epoch_order(
            self._rows.numel(), self.ensemble_size, self.bootstrap,
            self._generator() if generator is None else generator,
        )
        self._position = 0
        self._ran_out = False
        self.epochs += 1
        return self._rows.numel()

    @property
    def epoch_size(self) -> int:
        """Training transitions in the current epoch (0 before the first)."""
        return 0 if self._order is None else self._rows.numel()

    @property
    def position(self) -> int:
        """Transitions of the current epoch served so far (per member)."""
        return self._position

    def end_epoch(self) -> None:
        """Mark the current epoch as served (the next sample starts a new one)."""
        self._position = self._rows.numel()
        self._ran_out = True

    def epoch_state(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(rows, order)`` of the current epoch: batch ``j`` of size ``B`` is
        ``rows[order[..., j * B : (j + 1) * B]]``."""
        if self._order is None:
            raise RuntimeError("EpochSampler.epoch_state: no epoch started yet.")
        return self._rows, self._order

    def sample(self, storage: TransitionStorage, batch_size: int) -> tuple[torch.Tensor, dict]:
        """The next ``batch_size`` rows of the epoch (``[b]`` or ``[E, b]``, ``1 <= b``)."""
        if int(batch_size) < 1:
            raise ValueError(f"EpochSampler: batch_size={batch_size}, expected >= 1.")
        for _ in range(2):  # the current epoch's rest, else one fresh epoch
            if self._order is None or self._position >= self._rows.numel():
                self.start_epoch(storage)
            self._skip_dead(storage)  # rows overwritten since the last look
            order = self._order
            if order is None or self._position >= self._rows.numel():
                continue
            lo, self._position = self._position, self._position + int(batch_size)
            picks = order[..., lo : self._position]
            alive = self._alive(storage, picks)  # the first pick is alive
            rows = self._rows[picks]
            if not bool(alive.all()):
                rows = rows[alive] if rows.ndim == 1 else rows[:, alive]
            self._skip_dead(storage)
            return rows, {}
        raise RuntimeError("EpochSampler: every transition of a fresh epoch was overwritten.")

    def _alive(self, storage: TransitionStorage, picks: torch.Tensor) -> torch.Tensor:
        """``[k]`` whether each pick (each column of an ensemble) still holds its transition."""
        tau, _ = _index(storage).row_coordinates(self._rows[picks].numpy())
        alive = torch.from_numpy(tau == self._tau[picks.numpy()])
        return alive if alive.ndim == 1 else alive.all(0)

    def _skip_dead(self, storage: TransitionStorage) -> None:
        # Move past rows rewritten since the epoch started (they hold other
        # transitions now), so ran_out is set as soon as nothing live is left.
        n, order = self._rows.numel(), self._order
        chunk = 256
        while order is not None and self._position < n:
            alive = self._alive(storage, order[..., self._position : self._position + chunk])
            if bool(alive.any()):
                self._position += int(alive.int().argmax())
                break
            self._position += alive.numel()
        self._ran_out = self._position >= n

    def mark_update(self, index: Any, *, storage: Any = None) -> None:
        """After a write (the buffer passes its storage): skip the epoch's rows it
        overwrote (may end the epoch)."""
        if self._order is not None and storage is not None:
            self._skip_dead(storage)

    def extend(self, index: Any) -> None:
        """Nothing: the write's :meth:`mark_update` came first."""

    def add(self, index: Any) -> None:
        """Nothing: the write's :meth:`mark_update` came first."""

    @property
    def ran_out(self) -> bool:  # type: ignore[override]
        """Whether the last batch served ended an epoch (TorchRL's iteration stop)."""
        return self._ran_out

    @ran_out.setter
    def ran_out(self, value: bool) -> None:
        self._ran_out = bool(value)

    # ------------------------------------------------------------ checkpoints
    def _empty(self) -> None:
        self._clear_epoch()
        self._ran_out = False

    def state_dict(self) -> dict[str, Any]:
        state = generator_state(self.generator)
        state.update(
            split_seed=self.split_seed,
            epochs=self.epochs,
            ran_out=self._ran_out,
            rows=self._rows.clone(),
            tau=torch.from_numpy(self._tau.copy()),
            order=None if self._order is None else self._order.clone(),
            position=self._position,
        )
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.generator = restore_generator(self.generator, state_dict)
        self.split_seed = state_dict["split_seed"]
        self.epochs = int(state_dict["epochs"])
        self._ran_out = bool(state_dict["ran_out"])
        self._rows = state_dict["rows"].clone()
        self._tau = state_dict["tau"].numpy().copy()
        order = state_dict["order"]
        self._order = None if order is None else order.clone()
        self._position = int(state_dict["position"])

    def dumps(self, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        torch.save(self.state_dict(), path / "epoch_sampler.pt")

    def loads(self, path: str | Path) -> None:
        self.load_state_dict(torch.load(Path(path) / "epoch_sampler.pt"))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(holdout_fraction={self.holdout_fraction}, "
            f"ensemble_size={self.ensemble_size}, bootstrap={self.bootstrap}, "
            f"epochs={self.epochs}, position={self._position}/{self.epoch_size})"
        )
