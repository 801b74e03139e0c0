"""rllte's ``NStepReplayStorage`` API over the episode-aware components."""
from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, NamedTuple, Sequence

import gymnasium as gym
import numpy as np
import torch
from torch.utils.data import DataLoader
from tensordict import TensorDictBase

from torchrl_ext._atomic import atomic_dir, recover
from torchrl_ext.builders import make_replay_buffer
from torchrl_ext.envs.gym import AutoresetMode, GymVectorAdapter
from torchrl_ext.facades._batching import ADD_CHUNK, HeldStepsFacade, StepBatcher
from torchrl_ext.core.checks import check_count, check_device, check_dir, check_flag
from torchrl_ext.core.schema import get_unchecked
from torchrl_ext.facades._convert import check_rows_per_env, space_error, step_inputs
from torchrl_ext.facades._tensorclass import (
    TensorclassBatch,
    as_float32,
    documented_tensorclass,
)
from torchrl_ext.loader import RestartingIterator, make_loader
from torchrl_ext.samplers.uniform import EmptyBufferError

__all__ = ["NStepReplayBatch", "NStepReplayStorage", "NStepReplayTuple"]


class NStepReplayTuple(NamedTuple):
    """rllte's ``NStepReplayBatch``: five float32 tensors, in its field names and order.

    What :meth:`NStepReplayStorage.sample` returns by default, as the original
    did: ``obs, act, rew, disc, next_obs = storage.sample()``, ``batch[0]``,
    ``batch._fields`` and ``batch.observations`` all work. Observations of a
    ``Dict`` space are a dict of float32 tensors.

    Attributes:
        observations: ``o_t``.
        actions: ``a_t``.
        rewards: ``[B, 1]`` ``sum_{i<k} gamma**i r_{t+i}``.
        discounts: ``[B, 1]`` ``gamma**k * (1 - terminated)``.
        next_observations: ``o_{t+k}``.

    Examples:
        >>> import torch
        >>> batch = NStepReplayTuple(torch.zeros(2, 3), torch.zeros(2, 1), torch.ones(2, 1),
        ...                          torch.full((2, 1), 0.5), torch.ones(2, 3))
        >>> obs, act, rew, disc, next_obs = batch
        >>> batch._fields[3], len(batch), (rew + disc * 10.0).view(-1).tolist()
        ('discounts', 5, [6.0, 6.0])
    """

    observations: Any
    actions: torch.Tensor
    rewards: torch.Tensor
    discounts: torch.Tensor
    next_observations: Any


@documented_tensorclass
class NStepReplayBatch(TensorclassBatch):
    """A batch of n-step transitions in stored dtypes, rllte's fields plus the episode facts.

    What :meth:`NStepReplayStorage.sample` returns with ``native=True``.

    ``target = rewards + discounts * V(next_observations)``.

    Attributes:
        observations: ``o_t`` (a TensorDict for dict observation spaces).
        actions: ``a_t``, in their stored dtype.
        rewards: ``[B, 1]`` ``sum_{i<k} gamma**i r_{t+i}``.
        discounts: ``[B, 1]`` ``gamma**k * (1 - terminated)``.
        next_observations: ``o_{t+k}`` (the true final observation at an episode end).
        terminateds: ``[B, 1]`` the window's last step terminated its episode.
        truncateds: ``[B, 1]`` the window's last step truncated its episode.
        steps: ``[B, 1]`` ``k``, the window length.

    Examples:
        >>> import torch
        >>> ones = torch.ones(2, 1)
        >>> flags = torch.zeros(2, 1, dtype=torch.bool)
        >>> batch = NStepReplayBatch(observations=torch.zeros(2, 3), actions=torch.zeros(2, 1),
        ...     rewards=ones, discounts=0.9 * ones, next_observations=torch.ones(2, 3),
        ...     terminateds=flags, truncateds=flags, steps=torch.ones(2, 1, dtype=torch.long),
        ...     batch_size=[2])
        >>> (batch.rewards + batch.discounts * 10.0).view(-1).tolist()  # TD target with V = 10
        [10.0, 10.0]
    """

    observations: Any
    actions: torch.Tensor
    rewards: torch.Tensor
    discounts: torch.Tensor
    next_observations: Any
    terminateds: torch.Tensor
    truncateds: torch.Tensor
    steps: torch.Tensor

    if TYPE_CHECKING:  # the constructor tensorclass generates, for type checkers

        def __init__(
            self,
            *,
            observations: Any,
            actions: torch.Tensor,
            rewards: torch.Tensor,
            discounts: torch.Tensor,
            next_observations: Any,
            terminateds: torch.Tensor,
            truncateds: torch.Tensor,
            steps: torch.Tensor,
            batch_size: Sequence[int] | torch.Size,
            device: torch.device | str | None = None,
        ) -> None: ...


class NStepReplayStorage(HeldStepsFacade):
    """n-step replay with the constructor and methods of rllte's ``NStepReplayStorage``.

    Every env of a vector env is stored (the original kept env 0 only), the
    true next observation comes from ``next_observations`` and the gymnasium
    autoreset mode, terminated and truncated are kept apart, and a window
    ``t .. t+k-1`` with ``k = min(n_step, steps left in the episode)`` gives
    ``rewards = sum_{i<k} discount**i r_{t+i}`` and
    ``discounts = discount**k * (1 - terminated)``: a terminal never
    bootstraps, and every step of every episode is sampled, uniformly over
    transitions. The original, by contrast, stored a discount of 1 for every
    step (a terminal bootstrapped), never sampled the last ``n - 1`` steps of
    an episode, crashed on episodes shorter than ``n`` and on worker seeding
    under Python 3.11, kept env 0 only, wrote episode files to the working
    directory, served each batch from one worker's shard and cast everything
    to float32; the regression tests ``test_n1_*`` .. ``test_n18_*`` in
    ``tests/facades/test_nstep_storage.py`` pin each fix.

    Batches come as the original returned them: :meth:`sample` gives an
    :class:`NStepReplayTuple` of float32 tensors on ``device`` and
    ``next(replay_iter)`` a list ``[obs, action, reward, discount, next_obs]``
    in stored dtypes, while the rows stay in their own dtypes in memory (uint8
    pixels take a quarter of float32's memory). ``native=True`` opts out of the
    float32 cast (N18): :meth:`sample` gives an :class:`NStepReplayBatch` in
    stored dtypes with ``terminateds``, ``truncateds`` and ``steps``, and
    ``replay_iter`` yields TensorDicts.

    ``add`` holds steps and writes them a chunk at a time; every read (and
    ``rb``, the TorchRL buffer underneath, for direct use) writes the held
    ones first.

    Workers of :attr:`replay_iter` sample the whole buffer from shared memory:
    no episode files, no shards, new steps visible at once. ``fetch_every``
    bounds staleness through the DataLoader's prefetch: a worker serves at
    most ``fetch_every`` samples prepared before a write. Within that bound a
    worker draws up to 4 batches at a time (one draw of their rows, which are
    i.i.d. uniform, split into batches), so that the cost of crossing to this
    process is paid once for them.

    Args:
        observation_space (gym.Space): a ``Box`` / ``Discrete`` / ... space, or a
            ``Dict`` space (its entries become root entries of the stored rows).
        action_space (gym.Space): the action space (actions keep its dtype).
        device (str): where the rows live and batches come out. On an
            accelerator (``"cuda"``) rows are stored and sampled there, with no
            copy per batch, in this process (``num_workers`` is then not used:
            CUDA does not run in forked workers); memory grows with the rows on
            either. With ``save_snapshot`` rows stay in their files and batches
            are moved. Defaults to ``"cpu"``.
        storage_size (int): capacity in rows, for all envs together (each
            episode of ``L`` steps uses ``L + 1``), ``storage_size // num_envs``
            per env, at least 2. Defaults to ``1_000_000``.
        num_envs (int): number of envs of the vector env. Defaults to ``1``.
        batch_size (int): batch size of :meth:`sample`. Defaults to ``256``.
        num_workers (int): DataLoader workers of :attr:`replay_iter`; ``0``
            samples in the caller's process. Defaults to ``4``.
        pin_memory (bool): pin batches; only applied when CUDA is available.
        n_step (int): maximum window length. Defaults to ``3``.
        discount (float): ``gamma``. Defaults to ``0.99``.
        fetch_every (int): staleness bound of worker samples (see above).
        save_snapshot (bool): keep the buffer on disk in ``snapshot_dir``: rows
            are memory-mapped there, :meth:`save` writes a complete checkpoint
            (rows, episode index, cursors, RNG) beside them, and a new storage
            with the same ``snapshot_dir`` reopens it.

    Keyword Args:
        autoreset_mode (AutoresetMode or str): the vector env's autoreset mode.
            Defaults to gymnasium's default, ``NEXT_STEP``.
        snapshot_dir (str or Path, optional): directory for ``save_snapshot``.
            Nothing is ever written to the current directory.
        seed (int, optional): seeds sampling.
        check_finite (bool): raise on a NaN or infinite reward, observation
            or action, naming the entry, env and step, when the chunk of added
            steps holding it is written (by the :meth:`add` that fills it, or
            the next read); the steps before it are stored, it and the rest of
            its chunk are not. Defaults to ``True``.
        native (bool): batches in stored dtypes (:class:`NStepReplayBatch`,
            TensorDicts from ``replay_iter``) instead of the original's float32
            :class:`NStepReplayTuple`. Defaults to ``False``.

    Raises:
        TypeError: a space is not a gymnasium space, is a ``Tuple`` space, a
            count (``num_envs``, ``n_step``, ...) is not an int, ``device`` is
            not a device or string, or ``snapshot_dir`` not a str or path.
        ValueError: a count is out of range, ``device`` is a string torch does
            not parse (``"gpu"``), ``save_snapshot`` without ``snapshot_dir``,
            ``snapshot_dir=""``, or a ``Dict`` space has an entry named like a
            batch entry (``"action"``, ``"discount"``, ``"next"``...).

    Examples:
        >>> import gymnasium as gym
        >>> import numpy as np
        >>> from torchrl_ext import NStepReplayStorage
        >>> space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        >>> storage = NStepReplayStorage(space, gym.spaces.Discrete(2), num_envs=2,
        ...     batch_size=4, num_workers=0, n_step=3, discount=0.5, seed=0)
        >>> obs = np.zeros((2, 3), np.float32)
        >>> for t in range(4):
        ...     done = np.array([t == 3, False])
        ...     storage.add(obs, np.array([0, 1]), np.ones(2), done, np.zeros(2, bool), {}, obs + 1)
        ...     obs = obs + 1  # each observation is the previous next observation
        >>> obs_b, act_b, rew_b, disc_b, next_obs_b = storage.sample()
        >>> rew_b.shape, act_b.dtype, len(storage)
        (torch.Size([4, 1]), torch.float32, 8)
        >>> native = NStepReplayStorage(space, gym.spaces.Discrete(2), storage_size=100, num_envs=2,
        ...     num_workers=0, native=True)
        >>> native.add(obs, np.array([0, 1]), np.ones(2), np.ones(2, bool), np.zeros(2, bool), {}, obs)
        >>> native.sample().actions.dtype
        torch.int64
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        device: str = "cpu",
        storage_size: int = 1_000_000,
        num_envs: int = 1,
        batch_size: int = 256,
        num_workers: int = 4,
        pin_memory: bool = True,
        n_step: int = 3,
        discount: float = 0.99,
        fetch_every: int = 1000,
        save_snapshot: bool = False,
        *,
        autoreset_mode: AutoresetMode | str | Any | None = None,
        snapshot_dir: str | Path | None = None,
        seed: int | None = None,
        check_finite: bool = True,
        native: bool = False,
    ) -> None:
        owner = "NStepReplayStorage"
        for name, space in (("observation_space", observation_space), ("action_space", action_space)):
            if not isinstance(space, gym.Space):
                raise space_error(owner, name, space)
        for name, count, low in (("storage_size", storage_size, 1), ("num_envs", num_envs, 1),
                                 ("batch_size", batch_size, 1), ("num_workers", num_workers, 0),
                                 ("n_step", n_step, 1), ("fetch_every", fetch_every, 1)):
            check_count(owner, name, count, low)
        check_rows_per_env(owner, storage_size, num_envs, storage_size // num_envs, 2 * num_envs)
        where = check_device(owner, "device", device)
        snapshots = check_dir(owner, "snapshot_dir", snapshot_dir)
        self.save_snapshot = check_flag(owner, "save_snapshot", save_snapshot)
        if self.save_snapshot and snapshots is None:
            raise ValueError(
                "NStepReplayStorage: save_snapshot=True needs snapshot_dir=...; "
                "nothing is written to the current directory."
            )
        self.observation_space = observation_space
        self.action_space = action_space
        self.device = where
        # the entries of a Dict observation space; None for one "observation" tensor
        self._obs_keys = list(observation_space.spaces) if isinstance(
            observation_space, gym.spaces.Dict) else None
        # where the original's batch moves: nowhere on the CPU, where every batch is
        # (as_float32 then tests no tensor's device)
        self._move_to = None if self.device.type == "cpu" else self.device
        self.num_envs = int(num_envs)
        self.batch_size = int(batch_size)
        self.num_workers = int(num_workers)
        self.pin_memory = bool(pin_memory) and torch.cuda.is_available()
        self.fetch_every = int(fetch_every)
        self.snapshot_dir = snapshots
        self.seed = seed
        self.native = check_flag(owner, "native", native)
        self.adapter = GymVectorAdapter(
            self.num_envs, autoreset_mode=autoreset_mode, check_finite=check_finite
        )
        self._observations, self._next_observations, self._actions = step_inputs(
            f"{owner}.add", observation_space, action_space, self.num_envs
        )
        self._rb = make_replay_buffer(
            storage_size,
            batch_size=self.batch_size,
            backend="memmap" if self.save_snapshot else "tensor",
            scratch_dir=None if self.snapshot_dir is None else self.snapshot_dir / "rows",
            num_streams=self.num_envs,
            device=None if self.save_snapshot else self.device,
            n_step=n_step,
            gamma=discount,
            seed=seed,
        )
        if self.snapshot_dir is not None and self.save_snapshot:
            if recover(self.snapshot_dir / "buffer").exists():
                self._reopen(self.snapshot_dir / "buffer")
        # workers see added steps once written: at most min(ADD_CHUNK, fetch_every) held
        self._batcher = StepBatcher(self._rb, self.adapter, chunk=min(ADD_CHUNK, self.fetch_every),
                                    inputs=(self._observations, self._actions, self._next_observations))
        # rows on an accelerator are sampled in this process
        self._workers = self.num_workers if self._rb.storage.device.type == "cpu" else 0
        self._per_item, self._prefetch = _worker_items(self.fetch_every // self.batch_size, self._workers)
        # the workers' items: restarted after a failure (sampling too early, a worker
        # killed); each next writes the held steps first (an iterator kept by the caller
        # sees every added step, bar the batches the workers prepared before)
        self._iter = RestartingIterator(self._loader, "NStepReplayStorage",
                                        before=self._batcher.flush)
        self._held_batches: deque[Any] = deque()  # the rest of the last item, served in order
        self._batches = iter(self._next_batch, None)  # (never None: an endless iterator)

    # ------------------------------------------------------------------ seed API
    def reset(self) -> None:
        """Restart the sampling workers; the stored data is kept."""
        self._batcher.flush()
        self._iter.close()
        self._held_batches.clear()

    def _load_own_state(self, meta: dict[str, Any]) -> None:
        self.reset()  # no batch the workers drew before the load is served after it

    def add(
        self,
        observations: Any,
        actions: Any,
        rewards: Any,
        terminateds: Any,
        truncateds: Any,
        infos: dict[str, Any] | list[dict] | None,
        next_observations: Any,
    ) -> None:
        """Add one step of every env (``[num_envs, ...]`` inputs, numpy or torch).

        An observation that is not its env's previous next observation (the
        env was reset by hand mid-episode) ends that env's running episode
        (cut, no done flag) and opens a new one.

        Raises:
            ValueError: an input does not match its space (shape; a non-integral
                value for an integer space; a value its float dtype cannot hold,
                1e40 for float32), does not have ``num_envs`` rows, is not finite
                (``check_finite``: raised when its chunk is written), or the infos
                contradict the autoreset mode (the message names the entry and the fix).
            TypeError: observations or actions that are not numbers (strings).
            KeyError: dict observations whose keys are not the ``Dict`` space's.
        """
        # observations and actions are checked against, and cast to, the spaces (by
        # the batcher, unless laid out as the steps before); the adapter converts the rest
        self._batcher.add(  # written in chunks, flushed before any read
            observations, actions, rewards, terminateds, truncateds, infos, next_observations
        )

    @property
    def replay_iter(self) -> Iterator[Any]:
        """An iterator over batches from ``num_workers`` DataLoader workers.

        Each worker samples the whole buffer (no shards); steps added later,
        also after the iterator was taken, are seen by the workers too (each
        ``next`` writes the held steps first). Each item is, as in the original, a list
        ``[obs, action, reward, discount, next_obs]`` of CPU tensors in stored
        dtypes (a TensorDict with ``native=True``).
        """
        return self._batches

    def sample(self) -> NStepReplayTuple | NStepReplayBatch:
        """A batch of ``batch_size`` n-step transitions on ``device``.

        Returns:
            An :class:`NStepReplayTuple` of float32 tensors (the original's
            batch), or with ``native=True`` an :class:`NStepReplayBatch` in
            stored dtypes.
        """
        if self._workers > 0:
            data = self._next_batch()
        else:
            self._batcher.flush()
            data = self._rb.sample_batch(self.batch_size)  # the original's batch has no "index": not set
            data = data if self.native else self._five(data)
        if not self.native:
            obs, action, reward, discount, next_obs = data
            device = self._move_to
            return NStepReplayTuple(as_float32(obs, device), as_float32(action, device),
                                    as_float32(reward, device), as_float32(discount, device),
                                    as_float32(next_obs, device))
        obs, action, reward, discount, next_obs = self._five(data)
        return NStepReplayBatch(
            observations=obs,
            actions=action,
            rewards=reward,
            discounts=discount,
            next_observations=next_obs,
            terminateds=data["next", "terminated"],
            truncateds=data["next", "truncated"],
            steps=data["steps_to_next_obs"],
            batch_size=data.batch_size,
        ).to(self.device)

    def _loader(self) -> DataLoader:
        """The DataLoader of :attr:`replay_iter` (started on first use, and after a failure)."""
        if len(self._rb) == 0:
            raise EmptyBufferError(
                "NStepReplayStorage: the storage is empty; add steps before sampling."
            )
        return make_loader(
            self._rb,
            batch_size=self._per_item * self.batch_size,
            num_workers=self._workers,
            pin_memory=self.pin_memory and self._workers > 0,
            prefetch_factor=self._prefetch,
            seed=self.seed,
            # the original's batch: only its five entries cross from the workers
            keys=None if self.native else self._five_keys(),
        )

    def _next_batch(self) -> Any:
        """The next batch of :attr:`replay_iter`: a TensorDict (``native``) or the original's list.

        One of the ``_per_item`` batches of a loader item, whose rows are i.i.d.
        uniform draws (split in order); the held steps are written first.
        """
        self._batcher.flush()
        if not self._held_batches:
            item = next(self._iter)
            B = self.batch_size
            if self.native:
                self._held_batches.extend(item.split(B) if self._per_item > 1 else (item,))
            else:  # [obs, action, reward, discount, next_obs] of each batch
                sizes = [B] * self._per_item  # (a tensor's split_with_sizes: a third of split's cost)
                parts = (x.split_with_sizes(sizes) if type(x) is torch.Tensor else x.split(B)
                         for x in self._five(item))
                self._held_batches.extend(map(list, zip(*parts)))
        return self._held_batches.popleft()

    def _five_keys(self) -> list[tuple[str, ...]]:
        """The entries :meth:`_five` reads."""
        obs = [(k,) for k in self._obs_keys or ["observation"]]
        return [*obs, ("action",), ("next", "reward"), ("discount",), *(("next", *k) for k in obs)]

    def _five(self, data: TensorDictBase) -> list[Any]:
        """``[obs, action, reward, discount, next_obs]`` of a sampled TensorDict.

        Observations of a ``Dict`` space are a TensorDict of its entries (even
        a single ``"observation"`` entry), others the tensor itself.
        """
        nxt = get_unchecked(data, "next")  # (entries read without TensorDict's layers)
        keys = self._obs_keys
        if keys is None:
            obs, next_obs = get_unchecked(data, "observation"), get_unchecked(nxt, "observation")
        else:
            obs, next_obs = data.select(*keys), nxt.select(*keys)
        return [obs, get_unchecked(data, "action"), get_unchecked(nxt, "reward"),
                get_unchecked(data, "discount"), next_obs]

    def update(self, *args: Any) -> None:
        """No-op, as in the original (its training loop passes metrics here)."""

    # ----------------------------------------------------------------- extras
    def save(self) -> None:
        """Write the episode index and cursors beside the rows in ``snapshot_dir``."""
        if not self.save_snapshot or self.snapshot_dir is None:  # the constructor pairs them
            raise ValueError("NStepReplayStorage.save: only with save_snapshot=True.")
        self._batcher.flush()
        with atomic_dir(self.snapshot_dir / "buffer") as tmp:  # all or nothing on a crash
            self._rb.dumps(tmp)
            (tmp / "adapter.json").write_text(json.dumps(self.adapter.state_dict()))

    def _reopen(self, path: Path) -> None:
        adapter = path / "adapter.json"
        if not adapter.exists():
            raise ValueError(
                f"NStepReplayStorage: {path} is not a complete snapshot (no adapter.json); "
                "it was not written by save(). Move it away or pick another snapshot_dir."
            )
        n_step = self._rb.sampler.n
        self._rb.loads(path)
        self._rb.sampler.n = n_step  # the constructor's, not the snapshot's
        self._check_snapshot_observations(path)
        self.adapter.load_state_dict(json.loads(adapter.read_text()))

    def _check_snapshot_observations(self, path: Path) -> None:
        """Refuse a snapshot whose observations are not of ``observation_space`` (its ``Box`` entries)."""
        space = self.observation_space
        entries = space.spaces if isinstance(space, gym.spaces.Dict) else {"observation": space}
        leaves = self._rb.storage.schema.leaves
        for name, sub in entries.items():
            if not isinstance(sub, gym.spaces.Box):
                continue
            want = (tuple(sub.shape), torch.from_numpy(np.zeros(0, sub.dtype)).dtype)
            spec = leaves.get((name,))
            held = None if spec is None else (tuple(spec.shape), spec.dtype)
            if held != want:
                raise ValueError(
                    f"NStepReplayStorage: the snapshot in {path} holds observations {name!r} of "
                    f"(shape, dtype) {held}, but observation_space gives {want}; reopen it with "
                    "the observation_space it was saved with, or pick another snapshot_dir."
                )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(transitions={len(self)}, num_envs={self.num_envs}, "
            f"n_step={self._rb.sampler.n}, batch_size={self.batch_size})"
        )


#: most batches a worker draws at a time (see :func:`_worker_items`)
_MAX_PER_ITEM = 4


def _worker_items(ahead: int, workers: int) -> tuple[int, int]:
    """``(batches per loader item, items each worker prefetches)`` with ``ahead`` batches of staleness allowed.

    A worker has up to ``prefetch`` items of ``K`` batches in flight, and this
    process holds up to ``K - 1`` batches of its last item: ``(prefetch * K +
    K - 1)`` batches at most were prepared before a write, kept within
    ``ahead = fetch_every // batch_size`` (at least one batch). In this
    process (no workers) an item is one batch.

    Examples:
        >>> _worker_items(3, 4), _worker_items(2, 4), _worker_items(16, 4), _worker_items(16, 0)
        ((2, 1), (1, 2), (4, 2), (1, 2))
    """
    ahead = max(1, ahead)
    per_item = 1 if workers == 0 else max(1, min(_MAX_PER_ITEM, (ahead + 1) // 2))
    return per_item, max(1, min(2, (ahead - per_item + 1) // per_item))
