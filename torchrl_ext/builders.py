"""Builders: one call assembles the components into a :class:`~torchrl_ext.TransitionReplayBuffer`.

Nothing is hidden: the result is a plain TorchRL replay buffer whose storage,
writer, sampler and transforms are the components of :mod:`torchrl_ext`.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch
from tensordict.utils import NestedKey
from torchrl.data.replay_buffers.samplers import Sampler
from torchrl.envs.transforms import Compose, Transform

from torchrl_ext.buffer import TransitionReplayBuffer
from torchrl_ext.core.checks import check_count, check_seed
from torchrl_ext.core.schema import as_key
from torchrl_ext.samplers.frames import FrameStackSampler
from torchrl_ext.samplers.hindsight import HindsightSampler, HindsightStrategy
from torchrl_ext.samplers.masks import BootstrapMaskSampler
from torchrl_ext.samplers.nstep import NStepSampler
from torchrl_ext.samplers.uniform import UniformTransitionSampler
from torchrl_ext.storages.transition import Backend, TransitionStorage
from torchrl_ext.transforms.hindsight import HindsightTransform
from torchrl_ext.transforms.nstep import NStepTransform
from torchrl_ext.writers.transition import DEFAULT_DONE_KEYS, TransitionWriter

if TYPE_CHECKING:
    from torchrl_ext.remote import RayTransitionReplayBuffer

__all__ = ["make_her_replay_buffer", "make_replay_buffer"]


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
    done = [as_key(k, f"done_keys[{i}]", where)
            for i, k in enumerate([done_keys] if isinstance(done_keys, str) else done_keys)]
    if as_key(terminated_key, "terminated_key", where) not in done:
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
    seed = check_seed("make_replay_buffer", seed)
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
    Batches hold real rows first, relabelled rows last. With ``n_step=1`` and
    ``discount_key=None`` the n-step layer has nothing to do and is left out
    (``rb.sampler.base`` is the transition sampler itself): batches are one-step transitions,
    with ``"steps_to_next_obs"`` (all 1) and no discount.

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
    base = sampler if sampler is not None else UniformTransitionSampler()
    # one-step transitions with no discount wanted leave the n-step layer nothing to do
    windows = n_step > 1 or discount_key is not None
    sampler = HindsightSampler(strategy, num_goals, base=NStepSampler(n_step, base=base) if windows else base)
    _check_terminated_key(
        "make_her_replay_buffer", terminated_key, kwargs.get("done_keys", DEFAULT_DONE_KEYS)
    )
    her = HindsightTransform(
        reward_fn, goal_key=goal_key, achieved_goal_key=achieved_goal_key,
        reward_key=reward_key, terminated_key=terminated_key, terminated_fn=terminated_fn,
        info_key=info_key,
    )
    # built either way: it checks gamma and the keys
    nstep = NStepTransform(gamma, reward_key=reward_key, terminated_key=terminated_key,
                           discount_key=discount_key)
    return make_replay_buffer(capacity, sampler=sampler, transform=Compose(her, nstep) if windows else her,
                              reward_key=reward_key, terminated_key=terminated_key, **kwargs)
