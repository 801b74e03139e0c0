"""Facade writes in ``[num_envs, T]`` chunks: a step is copied into slabs, resolved a chunk at a time."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from torchrl.data import TensorDictReplayBuffer

from torchrl_ext.buffer import TransitionReplayBuffer
from torchrl_ext.envs.gym import (
    REWARD,
    TERMINATED,
    TRUNCATED,
    AutoresetMode,
    GymVectorAdapter,
)
from torchrl_ext.facades._convert import SpaceInput
from torchrl_ext.facades._snapshots import dump_facade, load_facade

__all__ = ["ADD_CHUNK", "SLAB_BYTES", "HeldStepsFacade", "StepBatcher", "steps_held"]

#: steps a facade holds before writing them: a write has a fixed cost of ~100 step copies
#: (W1, 16 envs: ~140 us for [16, 1] rows, ~0.9 ms for [16, 512]); 1024 measured 0.95x
#: the add cost of 512 (benchmarks/facade_add.py A/B), SLAB_BYTES bounding the held bytes
ADD_CHUNK = 1024
#: at most this many bytes of held steps (per facade): large observations write more often
SLAB_BYTES = 4 << 20


def steps_held(chunk: int, step_bytes: int) -> int:
    """Steps of ``step_bytes`` each held before a write: ``chunk``, fewer past :data:`SLAB_BYTES`, at least one.

    Examples:
        >>> steps_held(1024, 2_800), steps_held(1024, 700_000), steps_held(1024, 10 << 20)
        (1024, 5, 1)
    """
    return max(1, min(chunk, SLAB_BYTES // max(1, step_bytes)))

# positions of GymVectorAdapter.resolve's arguments
_OBS, _ACTION, _REWARD, _TERMINATED, _TRUNCATED, _INFOS, _NEXT = range(7)
# (position, key, the dtype a value must have to be copied as is: None for any)
_COLUMN_KEYS = ((_REWARD, REWARD, None), (_TERMINATED, TERMINATED, np.dtype(bool)),
                (_TRUNCATED, TRUNCATED, np.dtype(bool)))


class StepBatcher:
    """Hold vector-env steps in ``[chunk, num_envs, ...]`` slabs and write them ``chunk`` at a time.

    A buffer write costs about as much for one step as for a chunk of them,
    and so does most of the adapter's work (the autoreset rules, the
    follow-on and finite checks): a step is copied into the slabs as it
    comes (the caller may reuse its arrays), and
    :meth:`GymVectorAdapter.resolve_steps` resolves the chunk at once. Only
    a step with an episode end looks at its ``infos`` when it is added (the
    true final observations, contradictions with the autoreset mode).

    The facade calls :meth:`flush` before anything reads the buffer
    (``sample``, ``len``...), so reads always see every added step. The
    first step, and a step whose entries differ in shape or dtype from the
    held ones, is written at once, so a bad input raises at the ``add`` that
    brought it, with the facade's, the adapter's or the writer's message
    naming the entry. A step the adapter finds after an unseen reset
    (``env.reset()`` mid-episode) ends that env's running episode first, so
    the new episode is never glued onto the old one. A NaN or infinity
    (``check_finite``) raises when its chunk is written, naming the entry,
    env and step: the steps before it are stored, that step and those held
    after it are not, and the running episodes end there.

    Steps come in three ways, the first the usual one:

    1. laid out as the held steps (each observation entry and the action a
       numpy array of the held shape and dtype, flags and rewards ``[num_envs]``
       numpy arrays): copied into the slabs, checks of values aside (a
       ``Discrete`` action's range), with no conversion;
    2. otherwise (tensors, lists, other dtypes...): converted by the facade's
       checks and :meth:`GymVectorAdapter.convert`, then copied if the
       entries have the held shapes and dtypes;
    3. otherwise: written at once, and the slabs laid out for steps like it.

    Args:
        rb: the buffer (its writer takes ``[num_envs, T]`` data with a mask).
        adapter: resolves the steps' autoreset semantics.
        chunk: steps held before a write (fewer when ``chunk`` steps would
            take more than :data:`SLAB_BYTES`).
        inputs: the facade's checks of the observations, actions and next
            observations (in that order), run before the adapter sees them.
    """

    def __init__(
        self,
        rb: TensorDictReplayBuffer,
        adapter: GymVectorAdapter,
        chunk: int,
        inputs: Sequence[SpaceInput] = (),
    ) -> None:
        self.rb = rb
        self.adapter = adapter
        self.chunk = max(1, int(chunk))
        self.held_max = self.chunk  #: steps held before a write: chunk, fewer for large steps
        self._inputs = dict(zip((_OBS, _ACTION, _NEXT), inputs))
        self._held = 0
        # [chunk, num_envs, ...] by TorchRL key, in GymVectorAdapter.convert's order, then
        # the extra entries; reused chunk after chunk (each write copies them into the storage).
        # Time-major: a step is copied into one block of each slab, and the writer reads
        # time-first batches in place (no transposing copy)
        self._slabs: dict[tuple[str, ...], np.ndarray] = {}
        self._specs: dict[tuple[str, ...], tuple[tuple[int, ...], np.dtype]] = {}
        # way 1: per input array (position, shape, dtype, its slab as [held_max, *shape]),
        # per dict input (position, size, the same per entry) and per [num_envs] column
        # (and the facade's check of values, or None). A step is copied with
        # ``slab[i] = value``: a view object per held step would cost a cache miss per
        # entry once other work has run between adds
        self._arrays: list[tuple] | None = None
        self._dicts: list[tuple[int, int, list[tuple]]] = []
        self._columns: list[tuple[int, np.dtype | None, np.ndarray]] = []
        self._column_shape = (adapter.num_envs,)
        self._legacy = adapter.autoreset_mode is AutoresetMode.LEGACY
        # episode ends always need the infos in these modes (true final observations)
        self._final_obs = adapter.autoreset_mode in (AutoresetMode.SAME_STEP, AutoresetMode.LEGACY)
        self._extra_keys: tuple[tuple[str, ...], ...] = ()
        adapter.hold_steps(self.flush)  # a reset by hand resolves the held steps first

    # ------------------------------------------------------------------ adding
    def add(self, *step: Any, extra: dict[tuple[str, ...], np.ndarray] | None = None) -> None:
        """Hold one step (``GymVectorAdapter.resolve``'s arguments), plus ``extra`` entries by key."""
        if not (self._stage_as_held(step, extra) or self._stage_converted(step, extra)):
            return
        self._held += 1
        if self._held >= self.held_max:
            self.flush()

    def _stage_as_held(self, step: tuple, extra: dict | None) -> bool:
        """Way 1: copy a step laid out as the held ones; False (nothing held) if it is not."""
        arrays = self._arrays
        if arrays is None or (extra is not None or self._extra_keys) and (
                (tuple(extra) if extra else ()) != self._extra_keys):
            return False
        i = self._held
        ndarray = np.ndarray
        for pos, shape, dtype, slab, check in arrays:
            value = step[pos]
            # numpy's builtin dtypes are singletons: ``is`` settles the usual case
            if type(value) is not ndarray or value.shape != shape or (
                    value.dtype is not dtype and value.dtype != dtype):
                return False
            if check is not None:
                check(value)  # the facade's check of values (a Discrete range)
            slab[i] = value
        for pos, size, entries in self._dicts:
            value = step[pos]
            if type(value) is not dict or len(value) != size:
                return False
            for name, shape, dtype, slab, check in entries:
                item = value.get(name)
                if type(item) is not ndarray or item.shape != shape or (
                        item.dtype is not dtype and item.dtype != dtype):
                    return False
                if check is not None:
                    check(item)
                slab[i] = item
        legacy = False
        column_shape = self._column_shape
        for pos, dtype, slab in self._columns:
            value = step[pos]
            # rewards of any dtype: cast as GymVectorAdapter.convert's astype casts them;
            # flags other than bool arrays go through convert's 0 / 1 check
            if type(value) is not ndarray or value.shape != column_shape or (
                    dtype is not None and value.dtype is not dtype):
                if value is not None or pos != _TRUNCATED or not self._legacy:
                    return False
                legacy, value = True, False  # LEGACY dones: truncation from the infos, below
            slab[i] = value  # cast as astype does (float32 rewards)
        if extra:
            for key, value in extra.items():
                self._slabs[key][i] = value  # the facade builds them in the held specs
        if legacy or self._final_obs or step[_INFOS]:
            self._finish(i, step[_INFOS], legacy)
        return True

    def _stage_converted(self, step: tuple, extra: dict | None) -> bool:
        """Way 2, else 3: convert the step; copy it if its entries are laid out as held, else write it now.

        Returns whether the step is held.
        """
        args = list(step)
        for pos, check in self._inputs.items():
            args[pos] = check(args[pos])
        raw = self.adapter.convert(*args)
        raw.update(extra or {})
        specs = self._specs
        if raw.keys() != specs.keys() or any((v.shape, v.dtype) != specs[k] for k, v in raw.items()):
            self._write_now(step, args, extra, raw)
            return False
        i = self._held
        for key, value in raw.items():
            self._slabs[key][i] = value
        self._finish(i, args[_INFOS], legacy=False)
        return True

    def _finish(self, i: int, infos: Any, legacy: bool) -> None:
        """Held step ``i``'s episode ends: LEGACY truncation, final observations, mode checks."""
        slabs = self._slabs
        term, trunc = slabs[TERMINATED][i], slabs[TRUNCATED][i]
        if legacy:  # ``terminated`` held the dones (the infos are checked at every step)
            truncated = self.adapter.legacy_truncation(infos, term)
            trunc[...] = truncated
            term &= ~truncated
        if not (np.count_nonzero(term) or np.count_nonzero(trunc)):  # cheaper than any() on a step
            return
        done = term | trunc
        self.adapter.finish_step({k: v[i] for k, v in slabs.items()}, infos, done, owned=True,
                                 checks=self._final_checks())

    def _final_checks(self) -> dict[tuple[str, ...], Any]:
        """The next observations' value checks (a ``Discrete`` range...) by key, for final observations."""
        nxt = self._inputs.get(_NEXT)
        if nxt is None:
            return {}
        if nxt.children is None:
            checks = {("next", self.adapter.observation_key): nxt.value_check()}
        else:
            checks = {("next", name): nxt.value_check(name) for name in nxt.children}
        return {key: check for key, check in checks.items() if check is not None}

    def _write_now(
        self, step: tuple, args: list, extra: dict | None, raw: dict[tuple[str, ...], np.ndarray]
    ) -> None:
        """Way 3: write the held steps, then this one on its own; lay the slabs out for steps like it."""
        self.flush(pending=1)  # a NaN among the held steps: this step is not stored either
        entries = self.adapter.resolve(*args, final_checks=self._final_checks())
        if self.adapter.unseen_resets.any():
            # envs reset by hand mid-episode: their running episodes end before this step
            self.rb.writer.end_episodes(self.adapter.unseen_resets)
        if extra:
            entries.update(extra)
        self.rb.extend(self.adapter.to_tensordict(entries, [self.adapter.num_envs]))
        self._lay_out(step, args, raw, extra)  # reached only if the buffer took the step

    def _lay_out(
        self, step: tuple, args: list, raw: dict[tuple[str, ...], np.ndarray], extra: dict | None
    ) -> None:
        """Slabs, and way 1's layout, for steps laid out as ``step`` (as given), ``args`` (converted), ``raw``."""
        n = self.adapter.num_envs
        # as many steps as SLAB_BYTES hold (pixels), at most chunk
        self.held_max = steps_held(self.chunk, sum(v.nbytes for v in raw.values()))
        self._specs = {k: (v.shape, v.dtype) for k, v in raw.items()}
        self._slabs = {k: np.empty((self.held_max, n, *v.shape[1:]), v.dtype) for k, v in raw.items()}
        self._extra_keys = tuple(extra) if extra else ()
        self._columns = [(pos, dtype, self._slabs[key]) for pos, key, dtype in _COLUMN_KEYS]
        arrays, dicts = [], []
        key_of = self.adapter.observation_key
        for pos, prefix in ((_OBS, ()), (_ACTION, None), (_NEXT, ("next",))):
            value, given, check = args[pos], step[pos], self._inputs.get(pos)
            if isinstance(value, np.ndarray):
                key = ("action",) if prefix is None else (*prefix, key_of)
                arrays.append((pos, *self._entry(value, given, key, check and check.value_check())))
            elif prefix is not None and type(value) is dict and type(given) is dict and all(
                    type(v) is np.ndarray for v in value.values()):
                dicts.append((pos, len(value), [
                    (name, *self._entry(v, given.get(name), (*prefix, name),
                                        check and check.value_check(name)))
                    for name, v in value.items()
                ]))
            else:  # nested dicts...: way 2
                self._arrays = None
                return
        self._arrays, self._dicts = arrays, dicts

    def _entry(self, value: np.ndarray, given: Any, key: tuple[str, ...], check: Any) -> tuple:
        """``(shape, dtype, slab, check)`` of one input entry of way 1 (the slab ``[held_max, *shape]``).

        Without a check of values, the input must be laid out as it was
        converted (the facade's check then returns it as is). A checked entry
        (a ``Discrete`` action) is taken as given when only its shape differs
        from the converted one (``[num_envs]`` for ``[num_envs, 1]``).
        """
        slab = self._slabs[key]
        if check is not None and isinstance(given, np.ndarray) and given.shape != value.shape and (
                given.dtype == value.dtype and given.size == value.size):
            return given.shape, given.dtype, slab.reshape(slab.shape[0], *given.shape), check
        return value.shape, value.dtype, slab, check

    # ---------------------------------------------------------------- writing
    def flush(self, pending: int = 0) -> None:
        """Resolve the held steps and write them as ``[num_envs, T]`` batches.

        One batch, or one per run of steps between unseen resets (each ends
        the reset envs' running episodes before the step that opens the new ones).
        ``pending``: steps added after the held ones and not written if this
        raises (counted in its message).

        Raises:
            ValueError: a held step holds a NaN or infinity (``check_finite``):
                the steps before it are written first.
        """
        held = self._held
        if not held:
            return
        self._held = 0
        # the adapter reads [num_envs, T] views; the writer takes the time-major steps as they lie
        resolved = self.adapter.resolve_steps({k: v[:held].swapaxes(0, 1) for k, v in self._slabs.items()})
        kept, unseen = resolved.kept, resolved.unseen
        # runs of steps between unseen resets: [0, c1), [c1, c2), ..., [ck, kept)
        cuts = np.flatnonzero(unseen[:, :kept].any(0)).tolist()
        starts = [0, *(c for c in cuts if c)]
        for lo, hi in zip(starts, [*starts[1:], kept]):
            if unseen[:, lo].any():  # those envs' running episodes end before step lo
                self.rb.writer.end_episodes(unseen[:, lo])
            if hi > lo:
                steps = {k: v[:, lo:hi].swapaxes(0, 1) for k, v in resolved.entries.items()}
                self.rb.extend(self.adapter.to_tensordict(
                    steps, [hi - lo, self.adapter.num_envs], time_first=True))
        if resolved.error is not None:
            self.rb.writer.end_episodes(np.ones(self.adapter.num_envs, dtype=bool))
            self.adapter.episodes_ended_at(resolved)
            raise ValueError(
                f"{resolved.error} That step and the {held - kept - 1 + pending} added after it were not "
                "stored (steps are written in chunks); the running episodes end before it."
            ) from None

    def clear(self) -> None:
        """Drop held steps (the buffer is being emptied)."""
        self._held = 0

    def __len__(self) -> int:
        return self._held


class HeldStepsFacade:
    """A facade whose ``add`` a :class:`StepBatcher` holds: what reads the buffer writes the held steps first.

    Subclasses set ``_rb`` (the buffer), ``adapter`` and ``_batcher`` (its batcher).
    """

    _rb: TransitionReplayBuffer
    _batcher: StepBatcher
    adapter: GymVectorAdapter
    observation_space: Any
    action_space: Any

    @property
    def rb(self) -> TransitionReplayBuffer:
        """The TorchRL replay buffer underneath, with every added step written.

        ``add`` holds steps and writes them a chunk at a time; this (as every
        read) writes the held ones first, so the buffer can be sampled, saved
        or exported directly.

        Examples:
            >>> import gymnasium as gym
            >>> import numpy as np
            >>> from torchrl_ext import NStepReplayStorage
            >>> space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
            >>> storage = NStepReplayStorage(space, gym.spaces.Discrete(2), storage_size=100,
            ...     num_envs=2, num_workers=0)
            >>> obs, no = np.zeros((2, 3), np.float32), np.zeros(2, bool)
            >>> storage.add(obs, np.array([0, 1]), np.ones(2), no, no, {}, obs + 1)
            >>> len(storage.rb), storage.rb.sample(4)["next", "reward"].shape
            (2, torch.Size([4, 1]))
        """
        self._batcher.flush()
        return self._rb

    def __len__(self) -> int:
        """Number of stored transitions."""
        self._batcher.flush()
        return len(self._rb)

    def dumps(self, path: str | Path) -> None:
        """Checkpoint under ``path``, atomically: the buffer (``rb.dumps``: rows, episode
        index, sampler, RNG) and the adapter's state (each env's running episode).

        After :meth:`loads`, the next sample is the one this facade would draw,
        and the next ``add`` continues each env's episode.

        Examples:
            >>> import tempfile
            >>> import gymnasium as gym
            >>> import numpy as np
            >>> from torchrl_ext import NStepReplayStorage
            >>> space = gym.spaces.Box(-9.0, 9.0, (1,), np.float32)
            >>> def storage():
            ...     return NStepReplayStorage(space, space, storage_size=100, batch_size=4, num_workers=0, seed=0)
            >>> first, path, no = storage(), tempfile.mkdtemp() + "/ckpt", np.zeros(1, bool)
            >>> for t in range(3):
            ...     o = np.full((1, 1), t, np.float32)
            ...     first.add(o, o, np.ones(1), no, no, {}, o + 1)
            >>> first.dumps(path)
            >>> second = storage()
            >>> second.loads(path)
            >>> bool((second.sample().observations == first.sample().observations).all())
            True
        """
        self._batcher.flush()
        dump_facade(path, self._rb, f"{type(self).__name__}.dumps", self._layout(), {},
                    {"adapter": self.adapter.state_dict(), **self._own_state()})

    def loads(self, path: str | Path) -> None:
        """Restore what :meth:`dumps` wrote, in place.

        Raises:
            ValueError: the checkpoint is of another env count or autoreset
                mode, or of a buffer built otherwise (nothing is loaded then),
                or ``path`` holds no checkpoint.
        """
        self._batcher.flush()
        meta = load_facade(path, self._rb, f"{type(self).__name__}.loads", self._layout())[1]
        self.adapter.load_state_dict(meta["adapter"])
        self._load_own_state(meta)

    def _layout(self) -> dict[str, Any]:
        """How this facade was built, as a checkpoint must match it (what its stored steps hold)."""
        return {"num_envs": self.adapter.num_envs, "autoreset_mode": self.adapter.autoreset_mode.value,
                "observation_space": repr(self.observation_space), "action_space": repr(self.action_space)}

    def _own_state(self) -> dict[str, Any]:
        """What the subclass holds besides the buffer and the adapter, JSON-ready."""
        return {}

    def _load_own_state(self, meta: dict[str, Any]) -> None:
        """Restore :meth:`_own_state` from a checkpoint's ``meta``."""
