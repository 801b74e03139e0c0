"""The buffer in a Ray actor: TorchRL's ``RayReplayBuffer`` whose clients are writers of their own."""
from __future__ import annotations

import warnings
from typing import Any

with warnings.catch_warnings():
    # RayReplayBuffer imports torchrl.collectors, which warns about its own
    # weight updaters (torchrl 0.14) when first imported
    warnings.filterwarnings(
        "ignore", message=r"Creating \w+ which inherits from WeightUpdaterBase",
        category=DeprecationWarning,
    )
    import torchrl.collectors.distributed  # noqa: F401
from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer

from torchrl_ext.buffer import TransitionReplayBuffer
from torchrl_ext.writers.handle import WriterHandle

__all__ = ["RayTransitionReplayBuffer", "ActorReplayBuffer"]


class ActorReplayBuffer(TransitionReplayBuffer):
    """The :class:`~torchrl_ext.TransitionReplayBuffer` a Ray actor runs: samples leave it compact.

    A sampled batch's entries are views of two gathered blocks of rows; pickled
    one by one, each view would carry its whole block (5x the batch's bytes,
    over Ray's 100 KB inline limit for a 256-transition batch). The actor
    returns a copy with one compact tensor per entry instead.

    Takes the arguments of :class:`~torchrl_ext.TransitionReplayBuffer`.

    Examples:
        >>> import pickle
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext.remote import ActorReplayBuffer
        >>> from torchrl_ext.storages import TransitionStorage
        >>> from torchrl_ext.writers import TransitionWriter
        >>> rb = ActorReplayBuffer(storage=TransitionStorage(1000), writer=TransitionWriter(),
        ...     batch_size=256)
        >>> _ = rb.extend(TensorDict({"observation": torch.randn(2, 100, 4),
        ...     "action": torch.randn(2, 100, 1), "next": {"observation": torch.randn(2, 100, 4),
        ...     "reward": torch.ones(2, 100, 1), "done": torch.zeros(2, 100, 1, dtype=torch.bool)}},
        ...     [2, 100]))
        >>> len(pickle.dumps(rb.sample())) < 30_000  # 256 transitions of ~40 bytes, plus framing
        True
        >>> len(pickle.dumps(rb.sample_batch())) < 30_000
        True
    """

    def sample(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`TransitionReplayBuffer.sample`, each entry copied out of the gathered rows."""
        out = super().sample(*args, **kwargs)
        if isinstance(out, tuple):
            return out[0].clone(), out[1]
        return out.clone()

    def sample_batch(self, batch_size: int | None = None) -> Any:
        """:meth:`TransitionReplayBuffer.sample_batch`, each entry copied out of the gathered rows."""
        return super().sample_batch(batch_size).clone()


class RayTransitionReplayBuffer(RayReplayBuffer):
    """TorchRL's :class:`~torchrl.data.RayReplayBuffer`, each client a writer of its own.

    The buffer (storage, episode index, writer, sampler, transforms) lives in
    one Ray actor; ``extend``, ``sample``, ``update_tensordict_priority``,
    ``dumps`` / ``loads`` and the rest go to it. What this class adds: every
    :meth:`client` (one per remote collector, as
    :class:`~torchrl.collectors.distributed.RayCollector` asks for with
    ``clients(num_collectors)``) is a :class:`~torchrl_ext.writers.WriterHandle`
    with a fresh writer id, so each remote collector's envs get streams of
    their own and their episodes never mix, though every collector numbers its
    trajectories from 0. Writes made through this object itself are one more
    writer (the actor's default one).

    Build it with :func:`~torchrl_ext.make_replay_buffer` (``service_backend="ray"``),
    or directly with ``replay_buffer_cls=ActorReplayBuffer`` (or
    ``TransitionReplayBuffer``) and the components (as objects or constructors). Needs the ``ray`` extra
    (``pip install "torchrl_ext[ray]"``).

    Examples:
        >>> import ray
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import make_replay_buffer
        >>> _ = ray.init(num_cpus=1, include_dashboard=False, object_store_memory=100 * 2**20,
        ...              log_to_driver=False)
        >>> rb = make_replay_buffer(64, num_streams=4, batch_size=2, seed=0,
        ...     service_backend="ray", service_backend_options={"remote_config": {"num_cpus": 0}})
        >>> writer = rb.client()  # what a remote collector gets
        >>> step = TensorDict({"observation": torch.zeros(2, 1, 3), "action": torch.zeros(2, 1, 1),
        ...     "next": {"observation": torch.ones(2, 1, 3), "reward": torch.ones(2, 1, 1),
        ...              "done": torch.zeros(2, 1, 1, dtype=torch.bool)}}, [2, 1])
        >>> _ = writer.extend(step)
        >>> writer.writer_id, len(rb), rb.sample()["observation"].shape
        (1, 2, torch.Size([2, 3]))
        >>> rb.shutdown(); ray.shutdown()
    """

    def client(self) -> WriterHandle:
        """A picklable client of the actor that writes as a new writer (:class:`WriterHandle`)."""
        base = super().client()
        return WriterHandle(base, base.new_writer_id(), writer_key=base.writer_key())

    def writer_handle(self, writer_id: int | None = None) -> WriterHandle:
        """A client writing as ``writer_id`` (a fresh id when ``None``), e.g. for a local loop."""
        if writer_id is None:
            return self.client()
        base = super().client()
        return WriterHandle(base, writer_id, writer_key=base.writer_key())

    def release_writer(self, writer_id: int | None = None) -> None:
        """End a writer's running episodes and free its streams, in the actor.

        ``None``: the writer of what was written through this object itself
        (the actor's default writer, not writer ``0``: the buffer was built
        in another process).
        """
        return self._client.release_writer(writer_id)

    def end_episodes(self, envs: Any, writer_id: int | None = None) -> None:
        """End the running episodes of a writer's envs ``envs``, in the actor (see
        :meth:`TransitionReplayBuffer.end_episodes <torchrl_ext.TransitionReplayBuffer.end_episodes>`)."""
        return self._client.end_episodes(envs, writer_id)
