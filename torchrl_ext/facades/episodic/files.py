"""``IndividualFileDataset``: one file per episode, served from memory."""
from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
import warnings
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl_ext.facades.episodic.dataset import EpisodeDataset
from torchrl_ext.facades.episodic.evictors import Evictor
from torchrl_ext.facades.episodic.fields import EpisodeDatasetInfo

__all__ = ["IndividualFileDataset", "NumpyCompressedSerialization", "TorchSerialization"]

_NAME = re.compile(r"^(\d{7,})_(\d+)_\d{8}-\d{6}(\.\w+)$")


class NumpyCompressedSerialization:
    """Episodes as compressed ``.npz`` files (numpy dtypes only).

    Examples:
        >>> import io, torch
        >>> f = io.BytesIO()
        >>> NumpyCompressedSerialization().save({"obs": torch.ones(2, 3)}, f)
        >>> _ = f.seek(0)
        >>> NumpyCompressedSerialization().load(f)["obs"].shape
        torch.Size([2, 3])
    """

    suffix = ".npz"

    def save(self, episode: dict[str, torch.Tensor], file: Any) -> None:
        arrays = {}
        for key, value in episode.items():
            try:
                arrays[key] = value.detach().cpu().numpy()
            except TypeError as error:
                raise TypeError(
                    f"NumpyCompressedSerialization: field {key!r} has dtype {value.dtype}, "
                    "which numpy cannot store; use serialization_strategy='pt'."
                ) from error
        np.savez_compressed(file, **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds as the allow_pickle flag

    def load(self, file: Any) -> dict[str, torch.Tensor]:
        with np.load(file) as data:
            return {key: torch.from_numpy(data[key]) for key in data.files}


class TorchSerialization:
    """Episodes as ``torch.save`` files (``.pt``, any dtype).

    Examples:
        >>> import io, torch
        >>> f = io.BytesIO()
        >>> TorchSerialization().save({"obs": torch.ones(2, dtype=torch.bfloat16)}, f)
        >>> _ = f.seek(0)
        >>> TorchSerialization().load(f)["obs"].dtype
        torch.bfloat16
    """

    suffix = ".pt"

    def save(self, episode: dict[str, torch.Tensor], file: Any) -> None:
        torch.save({key: value.detach().cpu() for key, value in episode.items()}, file)

    def load(self, file: Any) -> dict[str, torch.Tensor]:
        return torch.load(file, weights_only=True)


_STRATEGIES = {"npz": NumpyCompressedSerialization, "pt": TorchSerialization}


class IndividualFileDataset(EpisodeDataset):
    """Episodes persisted one file each, sampled from memory.

    Each added episode is written to ``directory`` as
    ``{id:07d}_{length}_{YYYYmmdd-HHMMSS}{suffix}``: first to a hidden
    temporary file, then renamed, so a crash mid-write never leaves a partial
    episode file (a leftover temporary file is removed on reopen). An evicted
    episode's file is deleted (B1). A dataset created on a directory that
    holds episode files reopens them, oldest id first, evicting from memory as
    needed to fit ``capacity`` (B14); opening never deletes a file: those that
    do not fit stay on disk, with a warning. A truncated or corrupt file is
    skipped with a warning naming it; files written with the other built-in
    strategy (``.npz`` / ``.pt``) are read with that strategy.

    Samples are served from an in-memory copy (shared memory, see
    :class:`~torchrl_ext.storages.pool.EpisodePool`), so neither the main
    process nor DataLoader workers read a file per sample (B15), and every
    worker samples the whole dataset (B13).

    Args:
        capacity (int): capacity in steps, in memory and on disk.
        info (EpisodeDatasetInfo, optional): fields and verification mode.
        evictor (Evictor, optional): defaults to FIFO.
        directory (str or Path, optional): where the files live. Defaults to a
            new temporary directory, removed when the dataset is garbage
            collected; a given directory is kept. Relative paths are resolved
            once, at construction.
        serialization_strategy: ``"npz"`` (default), ``"pt"`` or an object
            with ``suffix``, ``save(dict, file)`` and ``load(file)``.
        max_sampling_attempts (int): rejection rounds before sampling counts
            the valid windows exactly.

    Examples:
        >>> import torch, tempfile
        >>> directory = tempfile.mkdtemp()
        >>> dataset = IndividualFileDataset(100, directory=directory)
        >>> dataset.add_episode({"obs": torch.arange(6.).view(6, 1)})
        >>> reopened = IndividualFileDataset(100, directory=directory)
        >>> reopened.num_episodes, reopened.episode_lengths
        (1, [6])
    """

    def __init__(
        self,
        capacity: int,
        info: EpisodeDatasetInfo | None = None,
        evictor: Evictor | None = None,
        directory: str | Path | None = None,
        serialization_strategy: Any = None,
        max_sampling_attempts: int = 100,
    ) -> None:
        if int(max_sampling_attempts) < 1:
            raise ValueError(
                f"IndividualFileDataset: max_sampling_attempts={max_sampling_attempts}, "
                "expected >= 1."
            )
        self.serialization = _strategy(serialization_strategy)
        self.max_sampling_attempts = int(max_sampling_attempts)
        if directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix="episodes-"))
            self._cleanup = weakref.finalize(self, shutil.rmtree, self.directory, True)
        else:
            self.directory = Path(directory).expanduser().resolve()
            self.directory.mkdir(parents=True, exist_ok=True)
        self._files: list[Path] = []  # file of each stored episode, oldest first
        self._next_id = 0
        self._reopening: Path | None = None  # the file of the episode being reloaded
        self._kept: list[Path] | None = None  # files evicted while reopening (kept on disk)
        super().__init__(capacity, info, evictor)
        self._reopen()

    def _reopen(self) -> None:
        for leftover in self.directory.glob(".*.tmp"):
            leftover.unlink()
        found = []
        for path in self.directory.iterdir():
            match = _NAME.match(path.name)
            if match:
                found.append((int(match.group(1)), path))
        kept: list[Path] = []  # reopening evicts from memory only: files stay on disk
        origin = None if self.fields is None else "info.fields"  # what fixed the fields
        for _, path in sorted(found):
            episode = self._read(path)
            if episode is None:
                continue
            if episode.shape[0] > self.capacity:  # never fits: kept on disk like the evicted
                kept.append(path)
                continue
            self._reopening, self._kept = path, kept
            try:
                self.add_episode(episode)
            except (KeyError, TypeError, ValueError) as error:  # fields unlike the others'
                raise type(error)(
                    f"IndividualFileDataset: cannot reopen {path.name} in {self.directory} "
                    f"(the fields are fixed by {origin}; move it to another directory): {error}"
                ) from error
            finally:
                self._reopening = self._kept = None
            origin = origin or path.name
        if kept:
            warnings.warn(
                f"IndividualFileDataset: {len(kept)} older episode files in {self.directory} "
                f"do not fit capacity={self.capacity} and were not loaded (kept on disk, "
                f"oldest: {kept[0].name}); reopen with a larger capacity to load them.",
                stacklevel=3,
            )
        self._next_id = max((i for i, _ in found), default=-1) + 1

    def _read(self, path: Path) -> TensorDictBase | None:
        """One episode file, by its suffix's strategy; ``None`` (warned) if unreadable."""
        strategy = self.serialization
        if path.suffix != strategy.suffix:
            if path.suffix[1:] not in _STRATEGIES:
                warnings.warn(
                    f"IndividualFileDataset: {path.name} has suffix {path.suffix!r}, which "
                    f"no known serialization strategy ({sorted(_STRATEGIES)}) reads; skipped.",
                    stacklevel=4,
                )
                return None
            strategy = _STRATEGIES[path.suffix[1:]]()  # written with another strategy
        try:
            with open(path, "rb") as file:  # closed even when the strategy fails
                episode = TensorDict(strategy.load(file), batch_size=[])
        except Exception as error:  # truncated or corrupt: this file only
            warnings.warn(
                f"IndividualFileDataset: skipped the unreadable episode file {path} "
                f"({type(error).__name__}: {error}).",
                stacklevel=4,
            )
            return None
        return episode.auto_batch_size_(1)

    def _max_sampling_rounds(self) -> int:
        return self.max_sampling_attempts

    def _stored(self, episode: TensorDictBase) -> None:
        if self._reopening is not None:
            self._files.append(self._reopening)
            return
        length = int(episode.shape[0])
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = self.directory / f"{self._next_id:07d}_{length}_{stamp}{self.serialization.suffix}"
        temporary = self.directory / f".{path.name}.tmp"
        try:
            with open(temporary, "wb") as file:
                self.serialization.save(dict(episode.items()), file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            # keep memory and disk in step: the episode is not stored
            EpisodeDataset.evict_episode(self, self.num_episodes - 1)
            raise
        self._next_id += 1
        self._files.append(path)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`, writing each episode's file in ``directory``.

        Memory and disk stay in step, so later evictions delete the right files.
        """
        super().load_state_dict(state)
        self._files = []
        for position in range(self.num_episodes):
            self._stored(self.episode(position))

    def evict_episode(self, idx: int) -> None:
        """Evict the episode at position ``idx`` (0 = oldest) and delete its file."""
        super().evict_episode(idx)
        path = self._files.pop(idx)
        if self._kept is not None:  # reopening: never delete on open
            self._kept.append(path)
        else:
            path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f", directory={str(self.directory)!r})"


def _strategy(strategy: Any) -> Any:
    if strategy is None:
        return NumpyCompressedSerialization()
    if isinstance(strategy, str):
        if strategy not in _STRATEGIES:
            raise ValueError(
                f"IndividualFileDataset: serialization_strategy={strategy!r}, expected "
                f"one of {sorted(_STRATEGIES)} or a strategy object."
            )
        return _STRATEGIES[strategy]()
    for attribute in ("suffix", "save", "load"):
        if not hasattr(strategy, attribute):
            raise TypeError(
                f"IndividualFileDataset: serialization_strategy {type(strategy).__name__} "
                f"has no {attribute!r}; expected suffix, save(dict, file) and load(file)."
            )
    return strategy
