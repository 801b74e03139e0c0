"""Serve a replay buffer to ``torch.utils.data.DataLoader`` worker processes."""
from __future__ import annotations

import itertools
import multiprocessing
import multiprocessing.connection
from typing import Any, Callable, Generic, Iterable, Iterator, Sequence, TypeVar

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey
from torch.utils.data import DataLoader, IterableDataset, get_worker_info
from torchrl.data import TensorDictReplayBuffer

from torchrl_ext._worker_batches import _CollateByValue, _WidePipeLoader
from torchrl_ext.buffer import TransitionReplayBuffer
from torchrl_ext.core.checks import check_count, check_seed
from torchrl_ext.core.schema import as_key, missing_entry
from torchrl_ext.storages.transition import TransitionStorage

__all__ = [
    "DEFAULT_CONTEXT",
    "ReplayDataset",
    "RestartingIterator",
    "SampleStream",
    "make_loader",
    "worker_loader",
]

#: Start method of loader workers: ``"fork"`` where the platform has it (see :func:`make_loader`).
DEFAULT_CONTEXT = "fork" if "fork" in multiprocessing.get_all_start_methods() else None


class SampleStream(IterableDataset):
    """Base of the endless sample streams that ``DataLoader`` workers iterate.

    Each worker samples the *whole* store (shared memory), with its own
    generator seeded from the DataLoader's per-worker seed, so workers draw
    different samples and a run is reproducible given the loader's
    ``generator``. In the main process (``num_workers=0``) the generator is
    :meth:`in_process_generator`. A subclass defines :meth:`batches` (and
    pickles only what a worker needs).

    Keyword Args:
        num_batches (int, optional): items per worker; ``None`` for endless.

    Examples:
        >>> import torch
        >>> class Noise(SampleStream):
        ...     def batches(self, generator):
        ...         while True:
        ...             yield torch.rand(2, generator=generator)
        ...     def in_process_generator(self):
        ...         return torch.Generator().manual_seed(0)
        >>> [x.shape for x in Noise(num_batches=2)]
        [torch.Size([2]), torch.Size([2])]
    """

    def __init__(self, *, num_batches: int | None = None) -> None:
        self.num_batches = None if num_batches is None else check_count(
            type(self).__name__, "num_batches", num_batches)

    def batches(self, generator: torch.Generator | None) -> Iterator[Any]:
        """The endless items of one iteration, drawn with ``generator``."""
        raise NotImplementedError(f"{type(self).__name__} must define batches(generator).")

    def in_process_generator(self) -> torch.Generator | None:
        """The generator of in-process iteration; ``None`` keeps the store's own."""
        return None

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        if info is not None:  # a worker: its own stream, derived from the loader's seed
            generator: torch.Generator | None = torch.Generator().manual_seed(info.seed)
        else:
            generator = self.in_process_generator()
        return itertools.islice(self.batches(generator), self.num_batches)


def worker_loader(
    stream: SampleStream,
    *,
    batch_size: int | None,
    collate_fn: Callable[[Any], Any],
    num_workers: int,
    pin_memory: bool = False,
    seed: int | None = None,
    multiprocessing_context: str | None = None,
    prefetch_factor: int | None = None,
    owner: str = "make_loader",
) -> DataLoader:
    """The ``DataLoader`` over a :class:`SampleStream`, as every loader here builds it.

    ``seed`` seeds the per-worker generators; ``multiprocessing_context``
    defaults to :data:`DEFAULT_CONTEXT` (only used with workers).

    Raises:
        ValueError: ``pin_memory`` without CUDA (torch would only warn, and not pin).

    Examples:
        >>> import torch
        >>> class Zeros(SampleStream):
        ...     def batches(self, generator):
        ...         while True:
        ...             yield torch.zeros(3)
        >>> loader = worker_loader(Zeros(num_batches=2), batch_size=2, collate_fn=torch.stack, num_workers=0)
        >>> [x.shape for x in loader]
        [torch.Size([2, 3])]
    """
    num_workers = check_count(owner, "num_workers", num_workers, 0)
    if pin_memory and not torch.cuda.is_available():
        raise ValueError(f"{owner}: pin_memory=True needs CUDA, which is not available.")
    return _WidePipeLoader(
        stream,
        batch_size=batch_size,
        collate_fn=_CollateByValue(collate_fn),
        num_workers=num_workers,
        pin_memory=bool(pin_memory),
        generator=None if (seed := check_seed(owner, seed)) is None else torch.Generator().manual_seed(seed),
        multiprocessing_context=(multiprocessing_context or DEFAULT_CONTEXT) if num_workers else None,
        prefetch_factor=prefetch_factor if num_workers else None,
        persistent_workers=False,
    )


class ReplayDataset(SampleStream):
    """An endless (or ``num_batches`` long) stream of ``rb.sample()`` batches.

    Every worker samples from the *whole* buffer: the storage and the episode
    index live in shared memory (or memmap files), so rows the main process
    writes after the workers started are visible to them, with fork and spawn
    alike. Each worker reseeds the buffer's generator from its DataLoader seed,
    so workers draw different batches and a run is reproducible given the
    DataLoader's ``generator``.

    Args:
        rb (TensorDictReplayBuffer): a buffer over an :class:`~torchrl_ext.storages.TransitionStorage`
            that already holds data (its rows must exist before workers start).

    Keyword Args:
        batch_size (int, optional): defaults to the buffer's batch size.
        num_batches (int, optional): batches per worker; ``None`` for endless.
        seed (int, optional): in the main process (``num_workers=0``), the buffer
            samples with a generator seeded with it when the first iteration
            starts; later iterations go on with that generator (new batches each
            epoch, as with workers). Workers are seeded by the DataLoader (see
            :func:`make_loader`).
        keys (sequence of NestedKey, optional): the entries each batch keeps
            (``batch.select(*keys)``, made where the batch is sampled: in a
            worker, before it crosses to the main process); ``None`` keeps them all.

    Raises:
        TypeError: ``rb`` is not over a ``TransitionStorage``, or a key is not a
            string or a tuple of strings.
        ValueError: the buffer is empty, or has no batch size and none is given;
            ``keys`` is empty.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import make_replay_buffer
        >>> from torchrl_ext.loader import ReplayDataset
        >>> rb = make_replay_buffer(100, seed=0)
        >>> _ = rb.extend(TensorDict({"observation": torch.zeros(2, 3), "action": torch.zeros(2, 1),
        ...     "next": {"observation": torch.ones(2, 3), "reward": torch.ones(2, 1),
        ...              "done": torch.zeros(2, 1, dtype=torch.bool)}}, [2]))
        >>> batches = list(ReplayDataset(rb, batch_size=2, num_batches=3))
        >>> len(batches), batches[0].batch_size
        (3, torch.Size([2]))
    """

    def __init__(
        self,
        rb: TensorDictReplayBuffer,
        *,
        batch_size: int | None = None,
        num_batches: int | None = None,
        seed: int | None = None,
        keys: Sequence[NestedKey] | None = None,
    ) -> None:
        if not isinstance(getattr(rb, "storage", None), TransitionStorage):
            raise TypeError(
                f"ReplayDataset: rb is {type(rb).__name__} with storage "
                f"{type(getattr(rb, 'storage', None)).__name__}, expected a replay buffer over a "
                "TransitionStorage (its rows are shared with worker processes)."
            )
        if rb.storage.schema is None:
            raise ValueError(
                "ReplayDataset: the buffer is empty; write at least one step before "
                "starting workers, so its rows exist in shared memory."
            )
        batch_size = batch_size if batch_size is not None else rb.batch_size
        if batch_size is None:
            raise ValueError("ReplayDataset: batch_size is None and the buffer has none.")
        super().__init__(num_batches=num_batches)
        self.rb = rb
        self.batch_size = check_count("ReplayDataset", "batch_size", batch_size)
        self.seed = seed
        self.keys = None if keys is None else _batch_keys(keys)
        self._generator: torch.Generator | None = None  # in-process, made once (see below)

    def __getstate__(self) -> dict[str, Any]:
        # Workers only sample: send the storage, sampler and transform, not the
        # buffer. (TorchRL's ReplayBuffer pickles its generator state as a
        # transient tensor that a spawned process cannot open.)
        rb = self.rb
        return {
            "parts": (rb.storage, rb.sampler, rb.transform),
            "batch_size": self.batch_size,
            "num_batches": self.num_batches,
            "seed": self.seed,
            "keys": self.keys,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        storage, sampler, transform = state["parts"]
        self.rb = TransitionReplayBuffer(storage=storage, sampler=sampler, transform=transform)
        self.batch_size = state["batch_size"]
        self.num_batches = state["num_batches"]
        self.seed = state["seed"]
        self.keys = state["keys"]
        self._generator = None

    def in_process_generator(self) -> torch.Generator | None:
        """A generator seeded with ``seed`` once, then continued; ``None`` (the buffer's own) without one.

        Made once, not per iteration: each epoch of the loader (``for batch in
        loader``) draws new batches, as the DataLoader's per-worker seeds do.
        """
        if self.seed is not None and self._generator is None:
            self._generator = torch.Generator().manual_seed(self.seed)
        return self._generator

    def batches(self, generator: torch.Generator | None) -> Iterator[TensorDictBase]:
        """Endless ``rb.sample(batch_size)`` (their ``keys``), after handing ``generator`` to the buffer.

        Raises:
            KeyError: a batch lacks one of ``keys`` (naming it and the entries it holds).
        """
        if generator is not None:
            self.rb.set_rng(generator)
        keys = self.keys
        while True:
            batch = self.rb.sample(self.batch_size)
            if keys is None:
                yield batch
                continue
            try:
                selected = batch.select(*keys, strict=True)
            except KeyError:
                held = {as_key(k) for k in batch.keys(include_nested=True)}
                missing = [k for k in keys if k not in held]
                if not missing:
                    raise
                raise missing_entry("ReplayDataset", "keys", missing[0], held,
                                    "entries of the sampled batches") from None
            yield selected


def _batch_keys(keys: Sequence[NestedKey]) -> list[tuple[str, ...]]:
    """``keys`` as tuples of strings, each checked."""
    if isinstance(keys, str):
        keys = [keys]  # one key, not the sequence of its characters
    if not len(keys):
        raise ValueError("ReplayDataset: keys is empty; pass keys=None to keep every entry.")
    out = []
    for key in keys:
        try:
            out.append(as_key(key))
        except TypeError:
            raise TypeError(
                f"ReplayDataset: keys holds {key!r}, expected a key (a string or a tuple of strings)."
            ) from None
    return out


def make_loader(
    rb: TensorDictReplayBuffer,
    *,
    batch_size: int | None = None,
    num_workers: int = 0,
    pin_memory: bool = False,
    num_batches: int | None = None,
    multiprocessing_context: str | None = None,
    seed: int | None = None,
    prefetch_factor: int | None = None,
    keys: Sequence[NestedKey] | None = None,
) -> DataLoader:
    """A ``DataLoader`` whose workers each sample the whole buffer.

    Args:
        rb (TensorDictReplayBuffer): buffer over an ``TransitionStorage``, already written to.

    Keyword Args:
        batch_size (int, optional): defaults to the buffer's.
        num_workers (int): worker processes; 0 samples in the main process.
        pin_memory (bool): pin batches (only useful with a GPU; without CUDA a ValueError).
        num_batches (int, optional): batches per worker; ``None`` for endless.
        multiprocessing_context (str, optional): ``"fork"``, ``"spawn"`` or
            ``"forkserver"``. Defaults to ``"fork"`` where the platform has it:
            importing torchrl sets the global start method to ``"spawn"``, whose
            workers spend seconds importing torch and torchrl again. Workers only
            sample CPU rows from shared memory, which both methods share
            correctly (spawn is tested too); pass ``"spawn"`` if the parent holds
            state that must not be forked.
        seed (int, optional): seeds the per-worker streams, or the buffer's generator
            when ``num_workers=0`` (reproducible runs either way).
        prefetch_factor (int, optional): batches each worker prepares ahead.
        keys (sequence of NestedKey, optional): the entries each batch keeps,
            selected in the worker: the fewer entries a batch holds, the less
            each costs to cross to this process. ``None`` keeps them all.

    Returns:
        a :class:`torch.utils.data.DataLoader` yielding TensorDict batches.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import make_replay_buffer
        >>> from torchrl_ext.loader import make_loader
        >>> rb = make_replay_buffer(100, batch_size=2, seed=0)
        >>> _ = rb.extend(TensorDict({"observation": torch.zeros(2, 3), "action": torch.zeros(2, 1),
        ...     "next": {"observation": torch.ones(2, 3), "reward": torch.ones(2, 1),
        ...              "done": torch.zeros(2, 1, dtype=torch.bool)}}, [2]))
        >>> next(iter(make_loader(rb, num_batches=1)))["observation"].shape
        torch.Size([2, 3])
        >>> batch = next(iter(make_loader(rb, num_batches=1, keys=["observation", ("next", "reward")])))
        >>> sorted(batch.keys(include_nested=True, leaves_only=True), key=str)
        [('next', 'reward'), 'observation']
    """
    return worker_loader(
        ReplayDataset(rb, batch_size=batch_size, num_batches=num_batches, seed=seed, keys=keys),
        batch_size=None,
        collate_fn=_identity,
        num_workers=num_workers,
        pin_memory=pin_memory,
        seed=seed,
        multiprocessing_context=multiprocessing_context,
        prefetch_factor=prefetch_factor,
    )


T = TypeVar("T")


class RestartingIterator(Generic[T]):
    """The endless iterator of a loader that a failure does not leave dead.

    A ``DataLoader`` iterator whose workers raised (sampling before there was
    anything to sample, a worker killed) is finished for good: every later
    ``next`` raises a bare ``StopIteration``. This one drops such an iterator
    and lets the error through, so the next call starts the loader again, once
    data exists. The end of the stream, which an endless loader only reaches
    when its workers are gone, is an error too, never ``StopIteration``.

    Args:
        start (callable): returns the iterable to iterate (a ``DataLoader``); called
            on the first ``next`` and again after a failure. May raise (e.g.
            :class:`~torchrl_ext.samplers.uniform.EmptyBufferError`).
        name (str): who iterates, for the error message.

    Keyword Args:
        before (callable, optional): called at every ``next`` before a batch is
            taken (a facade writes the steps it holds, so that an iterator kept
            by the caller sees every added step).

    Examples:
        >>> calls = []
        >>> def start():
        ...     calls.append(1)
        ...     if len(calls) == 1:
        ...         raise ValueError("nothing to sample yet")
        ...     return iter(range(3))
        >>> batches = RestartingIterator(start, "demo")
        >>> try:
        ...     next(batches)
        ... except ValueError as e:
        ...     print(e)
        nothing to sample yet
        >>> next(batches), next(batches)
        (0, 1)
    """

    def __init__(
        self, start: Callable[[], Iterable[T]], name: str, *, before: Callable[[], None] | None = None
    ) -> None:
        self.start = start
        self.name = name
        self.before = before
        self._iterator: Iterator[T] | None = None

    def __iter__(self) -> RestartingIterator[T]:
        return self

    def __next__(self) -> T:
        if self.before is not None:
            self.before()
        if self._iterator is None:
            self._iterator = iter(self.start())
        else:
            dead = _dead_workers(self._iterator)
            if dead:  # reported, if at all, from DataLoader's SIGCHLD handler, wherever that ran
                self.close()
                raise RuntimeError(
                    f"{self.name}: DataLoader worker(s) (pid(s) {', '.join(map(str, dead))}) "
                    "exited unexpectedly; the next call starts new workers."
                )
        try:
            return next(self._iterator)
        except StopIteration:
            self.close()
            raise RuntimeError(
                f"{self.name}: the sampling stream ended (its worker processes stopped); "
                "the next call starts it again."
            ) from None
        except BaseException:
            self.close()  # a worker's error ends a DataLoader iterator
            raise

    def close(self) -> None:
        """Stop the running iterator's workers; the next call starts a new one.

        Stopped now, not when the iterator is collected: a caller holding the
        error holds the failed iterator too (its traceback), and DataLoader would
        go on reporting its dead workers from its ``SIGCHLD`` handler.
        """
        iterator, self._iterator = self._iterator, None
        shutdown = getattr(iterator, "_shutdown_workers", None)  # DataLoader's multi-process iterator
        if shutdown is not None:
            shutdown()


def _dead_workers(iterator: Any) -> list[int]:
    """Pids of the running workers of a multi-process DataLoader iterator that have died.

    A worker killed by a signal is reported by DataLoader's ``SIGCHLD`` handler,
    which raises wherever the main thread then is: often outside the iterator,
    which then still holds the dead workers (and the batches they had sent) and
    would report them only after waiting for a batch that never comes.

    Asked before every batch, so in one wait on the workers' sentinels (a
    process's sentinel is ready once it has ended, whoever reaped it), not a
    ``waitpid`` per worker.
    """
    workers = getattr(iterator, "_workers", None) or ()
    running = getattr(iterator, "_workers_status", None) or [True] * len(workers)
    watched = {w.sentinel: w.pid for w, on in zip(workers, running) if on}
    if not watched:
        return []
    return [watched[sentinel] for sentinel in multiprocessing.connection.wait(list(watched), timeout=0)]


def _identity(batch: TensorDictBase) -> TensorDictBase:
    return batch
