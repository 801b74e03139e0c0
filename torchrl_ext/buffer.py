"""Assemble the components into a plain TorchRL replay buffer."""
from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, overload

import torch
from tensordict import TensorDict, TensorDictBase
from torch.nn.modules import module as nn_module
from torchrl.data import TensorDictReplayBuffer

from torchrl_ext._atomic import atomic_dir, reading
from torchrl_ext._checkpoint import check_components, check_saved_components, components, write_components
from torchrl_ext.core.checks import as_priorities, check_count
from torchrl_ext.core.process import current_pid, guard_forks
from torchrl_ext.core.schema import key_str, set_unchecked
from torchrl_ext.sample_index import SampleIndex
from torchrl_ext.samplers.prioritized import PrioritizedTransitionSampler
from torchrl_ext.samplers.refining import drawing_sampler
from torchrl_ext.storages._memory import move_together
from torchrl_ext.writers.handle import WriterHandle

__all__ = ["TransitionReplayBuffer"]

# the buffer's own locks held across a fork (guard_forks); a lock shared between
# processes (a shared buffer's write lock) is not copied by a fork: left alone
_THREAD_LOCKS = (type(threading.Lock()), type(threading.RLock()))
_MAX_REDRAWS = 100
# torchrl >= 0.14 reads a checkpoint's components under its replay lock
_CAPTURES_UNDER_LOCK = hasattr(TensorDictReplayBuffer, "_capture_prefetch_state")
_MODULE_CALL = torch.nn.Module.__call__


def _sample_time_only(transform: Any) -> bool:
    """Whether every transform of a buffer's ``Compose`` (or ``None``) acts at sample time only.

    Only those (:class:`~torchrl_ext.transforms.NStepTransform`...) let
    :meth:`TransitionReplayBuffer.extend` skip TorchRL's inverse transforms.
    """
    return all(getattr(t, "_sample_time_only", False) for t in _members(transform))


def _members(transform: Any) -> tuple:
    """The transforms of a buffer's ``Compose`` (TorchRL keeps one, maybe empty), or of ``None``.

    Read from the Compose's ModuleList through nn.Module's ``_modules``: its
    ``__getattr__`` costs more than the rest of a sample's bookkeeping, about
    4 µs per sample once the gather has cooled the caches.
    """
    if transform is None:
        return ()
    return tuple(transform._modules["transforms"]._modules.values())


def _forward(transform: Any, data: TensorDictBase) -> TensorDictBase:
    """``transform(data)``, calling ``transform.forward`` itself when that is all ``__call__`` would do.

    With no hook, no ``Module.compile()`` and nn.Module's own ``__call__``, it
    only calls ``forward``, through two more Python frames: 2-5% of a W1
    sample through ``NStepReplayStorage`` (in-process A/B, 2-CPU Xeon).
    Otherwise (a hook of the transform's own or a global one, a compiled
    module, a class with its own ``__call__``) it is called as usual. (Tracing,
    the last case ``__call__`` handles, does not take TensorDicts.)
    """
    if (
        transform._forward_hooks or transform._forward_pre_hooks
        or transform._backward_hooks or transform._backward_pre_hooks
        or nn_module._global_forward_hooks or nn_module._global_forward_pre_hooks
        or nn_module._global_backward_hooks or nn_module._global_backward_pre_hooks
        or transform._compiled_call_impl is not None
        or type(transform).__call__ is not _MODULE_CALL
    ):
        return transform(data)
    return transform.forward(data)


class TransitionReplayBuffer(TensorDictReplayBuffer):
    """A :class:`~torchrl.data.TensorDictReplayBuffer` with lean ``extend`` / ``sample``.

    TorchRL's generic paths clone the input for inverse transforms, merge info
    dicts through pytrees and handle prefetch, sample units and priorities on
    every call: about 50 µs each way, more than the episode-aware writer and
    sampler themselves spend. When none of those features is in use (no
    prefetch, no sample unit, no pinning, no priority entry in the data, only
    sample-time transforms such as :class:`~torchrl_ext.transforms.NStepTransform`)
    this buffer calls the writer, sampler, storage and transforms directly,
    under the same locks; otherwise it defers to TorchRL's implementation. Results
    are identical: same rows written, same indices drawn, same ``"index"``
    and info entries in the sample. A per-call ``batch_size`` that differs
    from the constructor's is accepted without TorchRL's warning.

    Takes the arguments of :class:`~torchrl.data.TensorDictReplayBuffer`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import TransitionReplayBuffer
        >>> from torchrl_ext.samplers import UniformTransitionSampler
        >>> from torchrl_ext.storages import TransitionStorage
        >>> from torchrl_ext.writers import TransitionWriter
        >>> rb = TransitionReplayBuffer(storage=TransitionStorage(100), writer=TransitionWriter(),
        ...     sampler=UniformTransitionSampler(), batch_size=2)
        >>> _ = rb.extend(TensorDict({"observation": torch.zeros(2, 3), "action": torch.zeros(2, 1),
        ...     "next": {"observation": torch.ones(2, 3), "reward": torch.ones(2, 1),
        ...              "done": torch.zeros(2, 1, dtype=torch.bool)}}, [2]))
        >>> rb.sample()["index"].shape
        torch.Size([2])
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # where the sampler's state (a PrioritizedTransitionSampler's priorities)
        # lives: copies keep it, unpickled (spawn) or inherited (fork) alike
        self._built_in_pid = os.getpid()
        guard_forks(self, level=0)  # no forked child inherits a lock held mid-call

    def _initialize_prioritized_sampler(self) -> None:
        """Priorities for a storage that already holds transitions when the buffer is built.

        TorchRL's gives rows ``arange(len(storage))`` its default priority.
        In a :class:`~torchrl_ext.storages.TransitionStorage` those are not
        the transitions (rows are laid out by stream), and a sampler that
        already holds priorities (a spawned DataLoader worker's, sharing the
        main process's tree) lost them to the maximum. Here a
        :class:`~torchrl_ext.samplers.PrioritizedTransitionSampler` that holds
        none gives its default priority to every live transition; one that
        holds some keeps them.
        """
        sampler = drawing_sampler(self._sampler)
        if not isinstance(sampler, PrioritizedTransitionSampler):
            super()._initialize_prioritized_sampler()
            return
        storage = self._storage
        if sampler.total == 0.0 and len(storage) > 0:
            rows = storage.live_transition_rows()
            sampler.update_priority(rows, torch.full(rows.shape, sampler.default_priority), storage=storage)

    def _fork_locks(self) -> list[Any]:
        """The locks :func:`~torchrl_ext.core.process.guard_forks` holds across a fork: ``extend``'s, in its order."""
        locks = (self.__dict__.get("_replay_lock"), self.__dict__.get("_write_lock"))
        return [lock for lock in locks if isinstance(lock, _THREAD_LOCKS)]

    def _before_fork(self) -> None:
        pass  # the storage moves its rows (TransitionStorage._before_fork)

    def _lean(self) -> bool:
        return (
            not self._prefetch
            and getattr(self, "_sample_unit", None) is None  # torchrl >= 0.14
            and not self._pin_memory
            and not getattr(self._writer, "tracks_generations", False)  # torchrl >= 0.14
            and getattr(self, "_sample_dependency", None) is None
        )

    def extend(
        self, tensordicts: TensorDictBase, *, update_priority: bool | None = None
    ) -> torch.Tensor:
        """Write ``tensordicts`` (see :class:`~torchrl_ext.writers.TransitionWriter`); returns their rows.

        Raises:
            ValueError: this is a copy of the buffer in another process, made
                before its first write (its storage would be this process's
                own); or a copy of a buffer with a
                :class:`~torchrl_ext.samplers.PrioritizedTransitionSampler` in
                another process (e.g. ``MultiSyncCollector(replay_buffer=rb)``'s
                workers, or a process forked with it): the priorities live in the process that built the
                buffer, and rows written here would never get one.
        """
        self._check_writes_here()
        priority = self.priority_key
        if (
            type(tensordicts) is not TensorDict and not isinstance(tensordicts, TensorDictBase)
            or not self._lean()
            # a transform with an inverse (write-time) part needs TorchRL's path
            or not _sample_time_only(self._transform)
            # a root key is found among the root keys (a fraction of the nested lookup)
            or priority in (tensordicts.keys() if isinstance(priority, str)
                            else tensordicts.keys(include_nested=True))
        ):
            return super().extend(tensordicts, update_priority=update_priority)
        with self._replay_lock, self._write_lock:
            index = self._writer.extend(tensordicts)
            self._sampler.extend(index)
        return index

    # A checkpoint (dumps, state_dict) reads every component at one moment: under the
    # replay lock, and under the write lock too, the only one that writers in other
    # processes (workers of a shared buffer) take. TorchRL >= 0.14 reads them inside
    # _capture_prefetch_state, under its replay lock: the write lock is added there,
    # in the order extend takes them. TorchRL 0.13 takes no lock: _captured does.
    @contextlib.contextmanager
    def _capture_prefetch_state(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        with super()._capture_prefetch_state(**kwargs) as state, self._write_lock:
            yield state

    @contextlib.contextmanager
    def _captured(self) -> Iterator[None]:
        if _CAPTURES_UNDER_LOCK:
            yield
        else:
            with self._replay_lock, self._write_lock:
                yield

    def state_dict(self) -> dict[str, Any]:
        """TorchRL's ``state_dict``, every component read at one moment (see :meth:`dumps`).

        With how the sampler and writer were built (``"components"``), which
        :meth:`load_state_dict` checks before loading anything.
        """
        with self._captured():
            state = super().state_dict()
            state["components"] = components(self._sampler, self._writer)
            return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """TorchRL's ``load_state_dict``, also for a state loaded onto another device.

        ``torch.load(..., map_location="cuda")`` moves every tensor of the
        state, the random generator's too, which ``Generator.set_state`` takes
        only as a CPU byte tensor: it is brought back first.

        Raises:
            ValueError: this buffer's sampler kinds, sampler settings or writer keys
                differ from the checkpoint's (each is named); nothing is loaded then.

        Examples:
            >>> import io
            >>> import torch
            >>> from tensordict import TensorDict
            >>> from torchrl_ext import make_replay_buffer
            >>> rb = make_replay_buffer(100, batch_size=2, seed=0)
            >>> _ = rb.extend(TensorDict({"observation": torch.arange(6.).view(2, 3),
            ...     "action": torch.zeros(2, 1), "next": {"observation": torch.ones(2, 3),
            ...     "reward": torch.ones(2, 1), "done": torch.zeros(2, 1, dtype=torch.bool)}}, [2]))
            >>> file = io.BytesIO()
            >>> torch.save(rb.state_dict(), file)
            >>> _ = file.seek(0)
            >>> copy = make_replay_buffer(100, batch_size=2, seed=0)
            >>> copy.load_state_dict(torch.load(file, map_location="cpu", weights_only=False))
            >>> torch.equal(copy.sample()["observation"], rb.sample()["observation"])
            True
        """
        saved = state_dict.get("components")  # (none in a state from before it was kept)
        if saved is not None:
            check_components("TransitionReplayBuffer.load_state_dict", saved,
                             components(self._sampler, self._writer))
            state_dict = {k: v for k, v in state_dict.items() if k != "components"}
        rng = state_dict.get("_rng")
        if rng is not None:
            state, device = rng
            state_dict = {**state_dict, "_rng": (state.cpu(), device)}
        super().load_state_dict(state_dict)

    def dumps(self, path: str | Path) -> None:
        """TorchRL's ``dumps``, atomic as a whole (see :func:`torchrl_ext._atomic.atomic_dir`).

        Storage, sampler, writer and RNG are written into a hidden sibling of
        ``path`` and renamed into place: a process killed at any moment leaves
        the previous complete checkpoint or the new one, never parts of both.
        How the sampler and writer were built goes along (``components.json``).
        """
        with atomic_dir(path) as tmp, self._captured():
            super().dumps(tmp)
            write_components(tmp, self._sampler, self._writer)

    def loads(self, path: str | Path) -> None:
        """TorchRL's ``loads``, after putting back the last complete checkpoint of a crashed :meth:`dumps`.

        Raises:
            ValueError: this buffer's sampler kinds, sampler settings or writer keys
                differ from the checkpoint's (each is named); nothing is loaded then.
        """
        with reading(path) as path:  # a save of path in another process finishes first
            check_saved_components("TransitionReplayBuffer.loads", path, self._sampler, self._writer)
            super().loads(path)

    def add(self, data: TensorDictBase) -> Any:
        """Write one transition (TorchRL's ``add``); refused where :meth:`extend` is."""
        self._check_writes_here()
        return super().add(data)

    def _check_writes_here(self) -> None:
        built_in = self._built_in_pid
        if built_in == current_pid():  # no system call: this runs on every write
            return
        if getattr(self._storage, "schema", True) is None:
            raise ValueError(
                f"extend: this buffer was copied to process {os.getpid()} (built in process "
                f"{built_in}) before its first write; its storage is allocated by the first "
                "write, so rows written here would stay in this process, unseen by the "
                "others. Write a first batch in the process that built the buffer before "
                "starting the other processes (TorchRL's multi-process collectors do), and "
                "rb.empty() it if it is not wanted."
            )
        if isinstance(drawing_sampler(self._sampler), PrioritizedTransitionSampler):
            raise ValueError(
                f"extend: this buffer was built in process {built_in} and copied to process "
                f"{os.getpid()} (a multi-process collector's worker?); its "
                "PrioritizedTransitionSampler keeps the priorities in the process that built "
                "it, so rows written here would never get one. Write from that process "
                "(collect without replay_buffer= and call rb.extend there), or build the "
                "buffer with make_replay_buffer(..., service_backend='ray'), where one actor "
                "writes and samples."
            )

    def writer_handle(self, writer_id: int | None = None) -> WriterHandle:
        """A handle writing into this buffer as a writer of its own.

        Give one to each collector (``replay_buffer=rb.writer_handle()``),
        thread or gymnasium loop that feeds this buffer: each handle's envs
        get their own streams, so their episodes never mix. See
        :class:`~torchrl_ext.writers.WriterHandle`.

        Args:
            writer_id (int, optional): the id to write as; a fresh one
                (:meth:`new_writer_id`) when ``None``.
        """
        if writer_id is None:
            writer_id = self.new_writer_id()
        return WriterHandle(self, writer_id, writer_key=self._writer.writer_key)

    def writer_key(self) -> tuple[str, ...]:
        """The entry carrying writer ids (the writer's ``writer_key``; a method, so Ray clients reach it)."""
        return self._writer.writer_key

    def new_writer_id(self) -> int:
        """A writer id never handed out by this buffer (see :meth:`TransitionWriter.new_writer_id`)."""
        with self._replay_lock, self._write_lock:
            return self._writer.new_writer_id()

    def release_writer(self, writer_id: int | None = None) -> None:
        """End a writer's running episodes and free its streams (see :meth:`TransitionWriter.release`)."""
        with self._replay_lock, self._write_lock:
            self._writer.release(writer_id)

    def end_episodes(self, envs: Any, writer_id: int | None = None) -> None:
        """End the running episodes of a writer's envs ``envs``, e.g. after ``env.reset()`` by hand.

        See :meth:`TransitionWriter.end_episodes
        <torchrl_ext.writers.TransitionWriter.end_episodes>`; a method of
        the buffer, so that a writer handle and a Ray client reach it.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> from torchrl_ext import make_replay_buffer
            >>> rb = make_replay_buffer(32)
            >>> obs = torch.arange(3.0).view(1, 3, 1)  # one env, three steps
            >>> running = torch.zeros(1, 3, 1, dtype=torch.bool)
            >>> _ = rb.extend(TensorDict({"observation": obs, "action": obs,
            ...     "next": {"observation": obs + 1, "reward": obs, "done": running}}, [1, 3]))
            >>> rb.end_episodes([0])  # the env was reset by hand
            >>> rb.storage.index.is_open.tolist()
            [False]
        """
        with self._replay_lock, self._write_lock:
            self._writer.end_episodes(envs, writer_id)

    def update_priority(self, index: Any, priority: Any) -> None:
        """Set the priorities of the rows ``index`` (``sample["index"]``), as TorchRL's.

        Raises:
            TypeError: ``priority`` is not numbers (a string, ``None``, bools),
                checked here before TorchRL converts it.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> from torchrl_ext import PrioritizedTransitionSampler, make_replay_buffer
            >>> rb = make_replay_buffer(16, sampler=PrioritizedTransitionSampler(), batch_size=2, seed=0)
            >>> no = torch.zeros(1, 3, 1, dtype=torch.bool)
            >>> _ = rb.extend(TensorDict({"observation": torch.arange(3.0).view(1, 3, 1), "action": torch.zeros(1, 3, 1),
            ...     "next": {"observation": torch.arange(1.0, 4.0).view(1, 3, 1), "reward": torch.ones(1, 3, 1),
            ...              "done": no, "terminated": no}}, [1, 3]))
            >>> batch = rb.sample()
            >>> rb.update_priority(batch["index"], torch.tensor([0.5, 2.0]))
            >>> rb.update_priority(batch["index"], "x")
            Traceback (most recent call last):
            ...
            TypeError: update_priority: priority='x' (str), expected a float tensor, array or number: one priority per index (or one for all), e.g. td_error.abs().
        """
        super().update_priority(index, as_priorities(priority))

    def update_tensordict_priority(self, data: TensorDictBase) -> None:
        """Update priorities from a sample's ``"index"`` and ``priority_key`` entries.

        TorchRL's version only acts for its own ``PrioritizedSampler`` class; this
        one passes the entries to a
        :class:`~torchrl_ext.samplers.PrioritizedTransitionSampler`, alone or
        under :class:`~torchrl_ext.samplers.NStepSampler` /
        :class:`~torchrl_ext.samplers.HindsightSampler` or any other
        refining sampler (whose ``[B, k]`` indices start with the row). As in TorchRL, it does nothing when
        the sampler keeps no priorities or the data has no ``priority_key``
        entry (``rb.add`` calls it on every write; new rows already got the
        maximum priority).
        """
        sampler = drawing_sampler(self._sampler)
        priority = data.get(self.priority_key, None)
        if not isinstance(sampler, PrioritizedTransitionSampler) or priority is None:
            return
        if not data.ndim:
            data, priority = data.unsqueeze(0), priority.reshape(1)
        self.update_priority(data.get("index"), priority.reshape(data.shape[0], -1).amax(-1))

    def __getstate__(self) -> dict[str, Any]:
        # TorchRL pickles the generator state as a tensor, which a process
        # spawned from it (a multi-process collector's worker getting
        # replay_buffer=rb) cannot always open: send its bytes instead.
        state = super().__getstate__()
        if state.get("_rng") is not None:
            state["_rng_bytes"] = bytes(state["_rng"]["rng_state"].numpy())
            state["_rng"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        rng_bytes = state.pop("_rng_bytes", None)
        super().__setstate__(state)
        guard_forks(self, level=0)
        if rng_bytes is not None:
            generator = torch.Generator()
            generator.set_state(torch.frombuffer(bytearray(rng_bytes), dtype=torch.uint8))
            self.set_rng(generator)

    def _draw(self, batch_size: int) -> tuple[Any, dict, TensorDictBase]:
        # In this process the locks keep writes out; a DataLoader worker reads
        # while the main process writes, and draws again the rare batch that
        # met a row being rewritten at the ring seam (TransitionStorage.stale).
        storage = self._storage
        for _ in range(_MAX_REDRAWS):
            token = storage.read_token()
            index, info = self._sampler.sample(storage, batch_size)
            data = storage.get(index)
            if not storage.stale(index, token):
                info["index"] = index
                return index, info, data
        raise RuntimeError(
            f"sample: {_MAX_REDRAWS} draws in a row met rows being rewritten; the "
            "writers outpace this reader (raise the capacity so fewer rows turn over)."
        )

    def _lean_sample(self) -> bool:
        """Whether :meth:`sample` (and :meth:`sample_batch`) take the lean path, not TorchRL's."""
        return self._lean() and not getattr(self, "_service_shutdown", False)  # torchrl >= 0.14

    def _transformed_draw(self, batch_size: int | None) -> tuple[TensorDictBase, dict]:
        """The lean sample's batch, transformed, and the sampler's info (``"index"``...), not yet entries of it."""
        batch_size = self._batch_size if batch_size is None else batch_size
        if batch_size is None:
            raise RuntimeError(
                "batch_size not specified: pass it to the constructor or to sample()."
            )
        with self._replay_lock, self._write_lock:
            _, info, data = self._draw(batch_size)
        for transform in _members(self._transform):
            data = _forward(transform, data)
        return data, info

    def sample_batch(self, batch_size: int | None = None) -> TensorDictBase:
        """:meth:`sample` without the sampler's entries (``"index"``, priority weights...).

        For a caller that reads the transitions only, as the rllte and HER
        facades do: setting those entries costs a few µs of a ~100 µs W1
        sample. The same draw as :meth:`sample` (the same generator, indices
        and batch);
        a buffer on TorchRL's generic path (see the class) gives
        :meth:`sample`'s batch, entries included.

        Raises:
            TypeError: ``batch_size`` is not an int.
            ValueError: ``batch_size`` < 1.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> from torchrl_ext import make_replay_buffer
            >>> rb = make_replay_buffer(100, batch_size=2, seed=0)
            >>> _ = rb.extend(TensorDict({"observation": torch.zeros(2, 3), "action": torch.zeros(2, 1),
            ...     "next": {"observation": torch.ones(2, 3), "reward": torch.ones(2, 1),
            ...              "done": torch.zeros(2, 1, dtype=torch.bool)}}, [2]))
            >>> batch = rb.sample_batch()
            >>> batch["next", "reward"].shape, "index" in batch.keys()
            (torch.Size([2, 1]), False)
        """
        if batch_size is not None and type(batch_size) is not int:  # numpy's ints are taken as ints
            batch_size = check_count("TransitionReplayBuffer.sample_batch", "batch_size", batch_size)
        if not self._lean_sample():
            return self.sample(batch_size)
        return self._transformed_draw(batch_size)[0]

    @overload
    def sample(
        self,
        batch_size: int | None = None,
        return_info: Literal[False] = False,
        include_info: bool | None = None,
    ) -> TensorDictBase: ...

    @overload
    def sample(
        self,
        batch_size: int | None = None,
        *,
        return_info: Literal[True],
        include_info: bool | None = None,
    ) -> tuple[TensorDictBase, dict]: ...

    @overload
    def sample(
        self, batch_size: int | None, return_info: Literal[True], include_info: bool | None = None
    ) -> tuple[TensorDictBase, dict]: ...

    def sample(
        self,
        batch_size: int | None = None,
        return_info: bool = False,
        include_info: bool | None = None,
    ) -> TensorDictBase | tuple[TensorDictBase, dict]:
        """Sample ``batch_size`` transitions; ``"index"`` and sampler info are entries of the result.

        Raises:
            TypeError: ``batch_size`` is not an int.
            ValueError: ``batch_size`` < 1.
        """
        if batch_size is not None and type(batch_size) is not int:  # numpy's ints are taken as ints
            batch_size = check_count("TransitionReplayBuffer.sample", "batch_size", batch_size)
        if include_info is not None or not self._lean_sample():
            return super().sample(batch_size, return_info=return_info, include_info=include_info)
        data, info = self._transformed_draw(batch_size)
        # the sample keeps the plain [B, k] index; on a device, the entries go in one transfer
        values = [v.plain if isinstance(v, SampleIndex) else v for v in info.values()]
        device = data.device
        if device is not None and device.type != "cpu":
            on_device = getattr(self._storage, "on_device", None)
            values = on_device(values, device) if on_device is not None else list(
                move_together(tuple(values), device))
        batch = data.batch_size
        dims = len(batch)
        for key, value in zip(info, values):
            if not isinstance(value, torch.Tensor):  # a custom sampler's: TensorDict converts it
                data.set(key, value)
                continue
            if value.shape != batch:  # (the usual [B] index fits as it is)
                if value.ndim < dims:
                    value = value.expand(batch)
                elif value.shape[:dims] != batch:  # a transform changed the batch's shape
                    raise ValueError(
                        f"TransitionReplayBuffer.sample: the sampler's entry {key_str(key)} has shape "
                        f"{tuple(value.shape)}, which does not fit the batch of shape {tuple(batch)} "
                        "the transforms returned; a sample-time transform must keep the batch's "
                        "leading dims (reshape the sample after rb.sample() instead)."
                    )
            set_unchecked(data, key, value)  # [B, ...] on the batch's device, as just checked
        return (data, info) if return_info else data
