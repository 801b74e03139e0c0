"""Assemble the components into a plain TorchRL replay buffer."""
from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, Sequence, overload

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey
from torchrl.data import TensorDictReplayBuffer
from torchrl.data.replay_buffers.samplers import Sampler
from torchrl.envs.transforms import Compose, Transform

from torchrl_ext._atomic import atomic_dir, reading
from torchrl_ext._checkpoint import check_saved_components, write_components
from torchrl_ext.core.checks import check_count
from torchrl_ext.core.schema import as_key
from torchrl_ext.sample_index import SampleIndex
from torchrl_ext.samplers.frames import FrameStackSampler
from torchrl_ext.samplers.masks import BootstrapMaskSampler
from torchrl_ext.samplers.hindsight import HindsightSampler, HindsightStrategy
from torchrl_ext.samplers.nstep import NStepSampler
from torchrl_ext.samplers.prioritized import PrioritizedTransitionSampler
from torchrl_ext.samplers.refining import RefiningSampler
from torchrl_ext.samplers.uniform import UniformTransitionSampler
from torchrl_ext.storages._memory import move_together
from torchrl_ext.storages.transition import Backend, TransitionStorage
from torchrl_ext.transforms.hindsight import HindsightTransform
from torchrl_ext.transforms.nstep import NStepTransform
from torchrl_ext.writers.handle import WriterHandle
from torchrl_ext.writers.transition import DEFAULT_DONE_KEYS, TransitionWriter

if TYPE_CHECKING:
    from torchrl_ext.remote import RayTransitionReplayBuffer

__all__ = ["TransitionReplayBuffer", "make_her_replay_buffer", "make_replay_buffer"]

_MAX_REDRAWS = 100


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

    def _lean(self) -> bool:
        return (
            not self._prefetch
            and getattr(self, "_sample_unit", None) is None  # torchrl >= 0.14
            and not self._pin_memory
            and not getattr(self._writer, "tracks_generations", False)  # torchrl >= 0.14
            and getattr(self, "_sample_dependency", None) is None
        )

    def _transforms(self) -> list:
        if self._transform is None:
            return []
        transforms = self._transform.transforms  # TorchRL keeps a Compose
        return list(transforms) if len(transforms) else []

    def extend(
        self, tensordicts: TensorDictBase, *, update_priority: bool | None = None
    ) -> torch.Tensor:
        """Write ``tensordicts`` (see :class:`~torchrl_ext.writers.TransitionWriter`); returns their rows.

        Raises:
            ValueError: this is a copy of a buffer with a
                :class:`~torchrl_ext.samplers.PrioritizedTransitionSampler` in
                another process (e.g. ``MultiSyncCollector(replay_buffer=rb)``'s
                workers, or a process forked with it): the priorities live in the process that built the
                buffer, and rows written here would never get one.
        """
        self._check_priorities_here()
        if (
            not isinstance(tensordicts, TensorDictBase)
            or not self._lean()
            # a transform with an inverse (write-time) part needs TorchRL's path
            or not all(getattr(t, "_sample_time_only", False) for t in self._transforms())
            or self.priority_key in tensordicts.keys(include_nested=True)
        ):
            return super().extend(tensordicts, update_priority=update_priority)
        with self._replay_lock, self._write_lock:
            index = self._writer.extend(tensordicts)
            self._sampler.extend(index)
        return index

    @contextlib.contextmanager
    def _capture_prefetch_state(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        # TorchRL's dumps and state_dict read every component inside this, under the
        # replay lock; writers in other processes (workers of a shared buffer) take
        # the write lock only: without it a checkpoint mixes rows of two moments.
        with super()._capture_prefetch_state(**kwargs) as state, self._write_lock:
            yield state

    def dumps(self, path: str | Path) -> None:
        """TorchRL's ``dumps``, atomic as a whole (see :func:`torchrl_ext._atomic.atomic_dir`).

        Storage, sampler, writer and RNG are written into a hidden sibling of
        ``path`` and renamed into place: a process killed at any moment leaves
        the previous complete checkpoint or the new one, never parts of both.
        How the sampler and writer were built goes along (``components.json``).
        """
        with atomic_dir(path) as tmp:
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
        self._check_priorities_here()
        return super().add(data)

    def _check_priorities_here(self) -> None:
        built_in = self._built_in_pid
        if built_in == os.getpid():
            return
        if isinstance(_base_sampler(self._sampler), PrioritizedTransitionSampler):
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
        sampler = _base_sampler(self._sampler)
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
        """Sample ``batch_size`` transitions; ``"index"`` and sampler info are entries of the result."""
        if not self._lean() or include_info is not None or getattr(
            self, "_service_shutdown", False  # torchrl >= 0.14
        ):
            return super().sample(batch_size, return_info=return_info, include_info=include_info)
        batch_size = self._batch_size if batch_size is None else batch_size
        if batch_size is None:
            raise RuntimeError(
                "batch_size not specified: pass it to the constructor or to sample()."
            )
        with self._replay_lock, self._write_lock:
            index, info, data = self._draw(batch_size)
        for transform in self._transforms():
            data = transform(data)
        # the sample keeps the plain [B, k] index; on a device, the entries go in one transfer
        values = tuple(
            v.as_subclass(torch.Tensor) if isinstance(v, SampleIndex) else v for v in info.values()
        )
        if data.device is not None:
            values = move_together(values, data.device)
        for key, value in zip(info, values):
            if value.ndim < data.ndim:
                value = value.expand(data.shape)
            data.set(key, value)
        return (data, info) if return_info else data


def _check_terminated_key(
    where: str, terminated_key: NestedKey, done_keys: Sequence[NestedKey]
) -> None:
    """Raise unless ``terminated_key`` is one of ``done_keys``.

    Windows (n-step, HER) end where the writer ends episodes, at the done
    entries; the transform reads ``terminated_key`` to stop bootstrapping. A
    terminated entry that does not end episodes, or custom done entries of
    which none is the terminated one, would bootstrap past terminal states.

    Examples:
        >>> _check_terminated_key("make_replay_buffer", ("next", "term"),
        ...                       [("next", "term"), ("next", "trunc")])
        >>> _check_terminated_key("make_replay_buffer", ("next", "terminated"), [("next", "done")])
        Traceback (most recent call last):
        ...
        ValueError: make_replay_buffer: terminated_key=('next', 'terminated') is not one of done_keys=[('next', 'done')]: ...
    """
    done = [as_key(k) for k in done_keys]
    if as_key(terminated_key) not in done:
        raise ValueError(
            f"{where}: terminated_key={as_key(terminated_key)!r} is not one of "
            f"done_keys={done!r}: n-step windows would not stop at terminations, "
            "or would bootstrap through them. Pass terminated_key= the done entry "
            "that marks terminations (e.g. terminated_key=('next', 'term')), or add it "
            "to done_keys."
        )


def _check_counts(owner: str, minimum: int = 1, **counts: Any) -> None:
    """Each count given (not None) is an ``int >= minimum``: a float is refused, not truncated."""
    for name, value in counts.items():
        if value is not None:
            check_count(owner, name, value, minimum)


def _base_sampler(sampler: Sampler) -> Sampler:
    """The sampler whose draws the refining samplers around it refine."""
    while isinstance(sampler, RefiningSampler):
        sampler = sampler.base
    return sampler


def make_replay_buffer(
    capacity: int,
    *,
    batch_size: int | None = None,
    backend: Backend = "tensor",
    compress: dict[Any, str] | None = None,
    scratch_dir: str | Path | None = None,
    device: torch.device | str | None = None,
    num_streams: int | None = None,
    sampler: Sampler | None = None,
    transform: Transform | None = None,
    n_step: int | None = None,
    gamma: float = 0.99,
    n_frames: int | None = None,
    mask_size: int | None = None,
    mask_p: float = 0.5,
    done_keys: Sequence[NestedKey] = DEFAULT_DONE_KEYS,
    terminated_key: NestedKey = ("next", "terminated"),
    reward_key: NestedKey = ("next", "reward"),
    traj_key: NestedKey = ("collector", "traj_ids"),
    mask_key: NestedKey = ("collector", "mask"),
    discount_key: NestedKey | None = "discount",
    seed: int | None = None,
    service_backend: str | None = None,
    service_backend_options: dict[str, Any] | None = None,
) -> TransitionReplayBuffer | RayTransitionReplayBuffer:
    """Build a replay buffer over an episode-aware storage.

    Equivalent to::

        TransitionReplayBuffer(
            storage=TransitionStorage(capacity, backend=backend, scratch_dir=scratch_dir,
                                      device=device),
            writer=TransitionWriter(num_streams=num_streams, done_keys=done_keys,
                                    reward_key=reward_key, traj_key=traj_key, mask_key=mask_key),
            sampler=sampler or UniformTransitionSampler(),
            transform=transform, batch_size=batch_size, generator=generator)

    The components stay reachable as ``rb.storage``, ``rb.writer`` and
    ``rb.sampler``; nothing is hidden.

    Args:
        capacity (int): rows of the storage. An episode of ``L`` steps uses
            ``L + 1`` rows of its stream (each observation is stored once).

    Keyword Args:
        batch_size (int, optional): default ``rb.sample()`` size.
        backend (str): ``"tensor"`` (shared memory) or ``"memmap"`` (disk). Defaults to ``"tensor"``.
        scratch_dir (str or Path, optional): memmap directory.
        device (torch.device or str, optional): where the rows live and batches
            come out (e.g. ``"cuda"``): data written from any device goes
            there, and sampling reads it there (see
            :class:`~torchrl_ext.storages.TransitionStorage`). Defaults to CPU.
        compress (dict, optional): observation entries kept compressed in
            memory: ``{"pixels": "zstd"}`` (see
            :class:`~torchrl_ext.storages.TransitionStorage`). Needs the ``compress`` extra.
        num_streams (int, optional): number of envs; inferred from the first write.
        sampler (Sampler, optional): defaults to :class:`~torchrl_ext.samplers.UniformTransitionSampler`.
        transform (Transform, optional): sample-time transform.
        n_step (int, optional): serve n-step transitions: wraps the sampler in
            :class:`~torchrl_ext.samplers.NStepSampler` and appends
            :class:`~torchrl_ext.transforms.NStepTransform` (``gamma``).
        gamma (float): discount of the n-step returns. Defaults to ``0.99``.
        n_frames (int, optional): serve frame stacks of ``n_frames`` observations:
            wraps the sampler (after ``n_step``) in
            :class:`~torchrl_ext.samplers.FrameStackSampler`.
        mask_size (int, optional): attach ``mask_size`` bootstrap-mask bits
            (Bernoulli(``mask_p``)) to every sampled transition, as ``"mask"``:
            wraps the sampler in :class:`~torchrl_ext.samplers.BootstrapMaskSampler`,
            keyed by the buffer's generator.
        mask_p (float): probability of each mask bit. Defaults to ``0.5``.
        done_keys (sequence of NestedKey): entries ending an episode (OR-ed).
        terminated_key (NestedKey): the entry of ``done_keys`` that marks a
            termination (no bootstrap); read by the n-step transform. Defaults
            to ``("next", "terminated")``.
        reward_key (NestedKey): the reward entry. Defaults to ``("next", "reward")``.
        traj_key (NestedKey): trajectory ids of flat batches. Defaults to
            ``("collector", "traj_ids")``.
        mask_key (NestedKey): steps where it is False are skipped. Defaults to
            ``("collector", "mask")``.
        discount_key (NestedKey, optional): where n-step batches get
            ``gamma**k * (1 - terminated)``; None for none. Defaults to ``"discount"``.
        seed (int, optional): seeds the buffer's ``torch.Generator`` (checkpointed
            by ``rb.dumps``). Without it, a generator is seeded from torch's global RNG.
        service_backend (str, optional): ``"ray"``: the same buffer in a Ray
            actor, as TorchRL's ``ReplayBuffer(..., service_backend="ray")``,
            returned as a :class:`~torchrl_ext.remote.RayTransitionReplayBuffer`
            whose clients (one per ``RayCollector`` worker) are writers of their
            own. Needs the ``ray`` extra. Defaults to ``None`` (in process).
        service_backend_options (dict, optional): keywords of TorchRL's
            ``RayReplayBuffer``: ``ray_init_config``, ``remote_config``, ``transport``.

    Raises:
        ValueError: with ``n_step``, ``terminated_key`` is not one of
            ``done_keys`` (a termination would not end its episode, and windows
            would run past it); a count (``capacity``, ``batch_size``,
            ``num_streams``, ``n_step``, ``n_frames``, ``mask_size``) below 1.
        TypeError: a count that is not an int (``n_step=2.5`` is refused, not truncated).

    Returns:
        the assembled :class:`TransitionReplayBuffer` (a
        :class:`~torchrl.data.TensorDictReplayBuffer`), or its Ray version.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import make_replay_buffer
        >>> rb = make_replay_buffer(1000, batch_size=8, seed=0)
        >>> step = TensorDict({"observation": torch.randn(8, 4), "action": torch.randn(8, 2),
        ...     "next": {"observation": torch.randn(8, 4), "reward": torch.randn(8, 1),
        ...              "terminated": torch.zeros(8, 1, dtype=torch.bool),
        ...              "truncated": torch.zeros(8, 1, dtype=torch.bool),
        ...              "done": torch.zeros(8, 1, dtype=torch.bool)}}, batch_size=[8])
        >>> _ = rb.extend(step)  # one step of 8 envs
        >>> batch = rb.sample()
        >>> batch.batch_size, batch["next", "observation"].shape
        (torch.Size([8]), torch.Size([8, 4]))
    """
    _check_counts("make_replay_buffer", capacity=capacity, batch_size=batch_size,
                  num_streams=num_streams, n_step=n_step, n_frames=n_frames, mask_size=mask_size)
    generator = torch.Generator()
    generator.manual_seed(int(torch.randint(2**62, ()).item()) if seed is None else seed)
    sampler = sampler if sampler is not None else UniformTransitionSampler()
    if n_step is not None:
        _check_terminated_key("make_replay_buffer", terminated_key, done_keys)
        sampler = NStepSampler(n_step, base=sampler)
        nstep = NStepTransform(gamma, reward_key=reward_key, terminated_key=terminated_key,
                               discount_key=discount_key)
        transform = nstep if transform is None else Compose(nstep, transform)
    if n_frames is not None:
        sampler = FrameStackSampler(n_frames, base=sampler)
    if mask_size is not None:
        sampler = BootstrapMaskSampler(mask_size, mask_p, base=sampler)
    parts = dict(
        storage=TransitionStorage(capacity, backend=backend, scratch_dir=scratch_dir,
                                  compress=compress, device=device),
        writer=TransitionWriter(num_streams=num_streams, done_keys=done_keys,
                                reward_key=reward_key, traj_key=traj_key, mask_key=mask_key),
        sampler=sampler,
        transform=transform,
        batch_size=batch_size,
        generator=generator,
    )
    if service_backend is None:
        if service_backend_options:
            raise ValueError(
                "make_replay_buffer: service_backend_options given without "
                "service_backend; pass service_backend='ray'."
            )
        return TransitionReplayBuffer(**parts)
    if service_backend != "ray":
        raise ValueError(
            f"make_replay_buffer: service_backend={service_backend!r}, expected None "
            "(in process) or 'ray'."
        )
    if importlib.util.find_spec("ray") is None:
        raise ImportError(
            "make_replay_buffer: service_backend='ray' needs Ray; install the extra: "
            'pip install "torchrl_ext[ray]".'
        )
    from torchrl_ext.remote import ActorReplayBuffer, RayTransitionReplayBuffer

    return RayTransitionReplayBuffer(
        replay_buffer_cls=ActorReplayBuffer, **parts, **(service_backend_options or {})
    )


def make_her_replay_buffer(
    capacity: int,
    reward_fn: Callable[..., Any],
    *,
    strategy: HindsightStrategy | str = HindsightStrategy.FUTURE,
    num_goals: int = 4,
    n_step: int = 1,
    gamma: float = 0.99,
    goal_key: NestedKey = "desired_goal",
    achieved_goal_key: NestedKey = "achieved_goal",
    terminated_fn: Callable[..., Any] | None = None,
    info_key: NestedKey | None = None,
    sampler: Sampler | None = None,
    reward_key: NestedKey = ("next", "reward"),
    terminated_key: NestedKey = ("next", "terminated"),
    discount_key: NestedKey | None = "discount",
    **kwargs: Any,
) -> TransitionReplayBuffer | RayTransitionReplayBuffer:
    """A replay buffer relabelling goals in hindsight (HER), optionally n-step.

    ``sampler`` (uniform by default, or prioritized) picks transitions,
    :class:`~torchrl_ext.samplers.NStepSampler` makes ``n_step`` windows,
    :class:`~torchrl_ext.samplers.HindsightSampler` picks goals, then
    :class:`~torchrl_ext.transforms.HindsightTransform` relabels and
    :class:`~torchrl_ext.transforms.NStepTransform` sums the rewards.
    Batches hold real rows first, relabelled rows last.

    Args:
        capacity (int): rows of the storage.
        reward_fn (callable): batched ``reward_fn(achieved_goal, desired_goal, infos)``.

    Keyword Args:
        strategy (str): ``"future"``, ``"final"``, ``"episode"`` or ``"random"``.
        num_goals (int): ``k``; a fraction ``k / (k + 1)`` of each batch is relabelled.
        n_step (int): window length (1: one-step transitions). Defaults to ``1``.
        gamma (float): discount of n-step returns. Defaults to ``0.99``.
        goal_key (NestedKey): defaults to ``"desired_goal"``.
        achieved_goal_key (NestedKey): defaults to ``"achieved_goal"``.
        terminated_fn (callable, optional): recomputes termination of relabelled
            one-step transitions.
        info_key (NestedKey, optional): a ``"next"`` entry passed to ``reward_fn``
            as ``infos`` (see :class:`~torchrl_ext.transforms.HindsightTransform`).
        sampler (Sampler, optional): picks the transitions.
        reward_key (NestedKey): the reward entry, recomputed for relabelled goals.
            Defaults to ``("next", "reward")``.
        terminated_key (NestedKey): the done entry that marks terminations
            (recomputed by ``terminated_fn``; stops the n-step bootstrap).
            Defaults to ``("next", "terminated")``.
        discount_key (NestedKey, optional): where ``gamma**k * (1 - terminated)``
            goes; None for none. Defaults to ``"discount"``.
        **kwargs: the other keywords of :func:`make_replay_buffer` (``batch_size``,
            ``backend``, ``device``, ``done_keys``, ``seed``, ``num_streams``,
            ``service_backend="ray"``...).

    Raises:
        ValueError: ``terminated_key`` is not one of ``done_keys``.

    Returns:
        the assembled :class:`TransitionReplayBuffer`.

    Examples:
        >>> import torch
        >>> from torchrl_ext import make_her_replay_buffer
        >>> rb = make_her_replay_buffer(1000, lambda a, d, i: -(a != d).any(-1).float(),
        ...     strategy="future", num_goals=4, batch_size=10)
        >>> rb.sampler.n_virtual(10)
        8
    """
    _check_counts("make_her_replay_buffer", capacity=capacity, n_step=n_step)
    _check_counts("make_her_replay_buffer", minimum=0, num_goals=num_goals)
    sampler = HindsightSampler(
        strategy,
        num_goals,
        base=NStepSampler(n_step, base=sampler if sampler is not None else UniformTransitionSampler()),
    )
    _check_terminated_key(
        "make_her_replay_buffer", terminated_key, kwargs.get("done_keys", DEFAULT_DONE_KEYS)
    )
    her = HindsightTransform(
        reward_fn, goal_key=goal_key, achieved_goal_key=achieved_goal_key,
        reward_key=reward_key, terminated_key=terminated_key, terminated_fn=terminated_fn,
        info_key=info_key,
    )
    nstep = NStepTransform(gamma, reward_key=reward_key, terminated_key=terminated_key,
                           discount_key=discount_key)
    return make_replay_buffer(capacity, sampler=sampler, transform=Compose(her, nstep),
                              reward_key=reward_key, terminated_key=terminated_key, **kwargs)
