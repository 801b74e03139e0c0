"""pytorchrl transition dicts -> TorchRL ``[N, T]`` batches for :class:`MBReplayBuffer`.

Validation (keys, shapes, dtypes, named as pytorchrl names them), the autoreset
rules that decide which steps are real transitions, per-step staging (a step is
one copy into preallocated blocks; the rest is vectorised per block of steps),
and the episode cuts the episode-aware writer needs.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from torchrl_ext.envs._chunk import follow_on
from torchrl_ext.envs._inputs import put_final
from torchrl_ext.envs.gym import AutoresetMode, GymVectorAdapter
from torchrl_ext.facades._batching import steps_held
from torchrl_ext.facades._convert import discrete_n, to_numpy
from torchrl_ext.facades._mb_trees import specs_json, specs_of_json, tree_leaves

OBS, RHS, DONE, ACT, REW = "Observation", "RecurrentHiddenStates", "Done", "Action", "Reward"
OBS2, RHS2, DONE2, INFO = "NextObservation", "NextRecurrentHiddenStates", "NextDone", "EnvironmentInformation"
#: extra slice entry: the row is not a real transition (never trained on)
BOUNDARY = "Boundary"
STORAGE_TENSORS = (OBS, RHS, DONE, ACT, REW, OBS2, RHS2, DONE2)

# pytorchrl key -> TorchRL key of the stored row (Done, RHS and NextDone verbatim
# under "pytorchrl"; the writer's bool done flags are derived from NextDone / Boundary)
STORED = {
    OBS: ("observation",),
    OBS2: ("next", "observation"),
    ACT: ("action",),
    REW: ("next", "reward"),
    DONE: ("pytorchrl", DONE),
    DONE2: ("pytorchrl", DONE2),
    RHS: ("pytorchrl", RHS),
    RHS2: ("pytorchrl", RHS2),
    BOUNDARY: ("next", "boundary"),
}
DONE_KEY, BOUNDARY_KEY = ("next", "done"), ("next", "boundary")
TRAJ_KEY = ("collector", "traj_ids")  # the writer starts an episode where it changes
_FLAGS = (STORED[DONE], STORED[DONE2], STORED[REW], BOUNDARY_KEY)  # [..., N, 1] each
_DONE_FLAGS = (STORED[DONE], STORED[DONE2])  # 0 / 1 (or bool) only


def entry_name(key: tuple[str, ...]) -> str:
    """The pytorchrl name of a stored entry: ``'Observation'``, ``"RecurrentHiddenStates['h']"``."""
    for name, prefix in STORED.items():
        if key[: len(prefix)] == prefix:
            return repr(name) + "".join(f"[{k!r}]" for k in key[len(prefix):])
    return repr(key)


def done_error(key: tuple[str, ...], value: np.ndarray, where: str) -> ValueError | None:
    """The error for a done flag holding a value other than 0 or 1 (0.5, NaN: a mistake upstream,
    never a done); ``None`` if every value is 0 or 1."""
    invalid = (value != 0) & (value != 1)  # NaN: invalid
    if not invalid.any():
        return None
    return ValueError(
        f"{where}: {entry_name(key)} holds {np.unique(value[invalid]).tolist()[:8]}, expected 0 or 1 "
        "(done flags: pass the env's terminated | truncated as bool, int or float)."
    )


def _check_done_flags(leaves: Mapping[tuple[str, ...], np.ndarray], where: str) -> None:
    for key in _DONE_FLAGS:
        value = leaves.get(key)
        error = None if value is None or value.dtype == bool else done_error(key, value, where)
        if error is not None:
            raise error


_FINAL = "final_obs"  # SAME_STEP: the infos dict's final observations
_LEGACY_FINAL = "terminal_observation"  # LEGACY: each env's info dict's


class PytorchrlSteps:
    """Validates pytorchrl transition dicts of ``N`` envs and makes TorchRL batches of them.

    The first insert fixes the key set, every entry's shape and dtype and
    ``N``; later inserts are checked against them, errors naming the pytorchrl
    key. ``("next", "boundary")`` marks the steps that are not real transitions:
    in NEXT_STEP autoreset mode a step starting at a final observation
    (``"Done"`` set, the reset step); in SAME_STEP mode a done step whose true
    final observation is not in ``EnvironmentInformation["final_obs"]`` (warned
    once); a slice's own ``"Boundary"`` when it has one.
    """

    def __init__(
        self, mode: AutoresetMode, reward_required: bool, num_actions: int | None, chunk: int
    ) -> None:
        self.mode = mode
        # a done step's next observation is a reset observation; its true final one is in
        # the infos (SAME_STEP: gymnasium's "final_obs"; LEGACY: SB3's per-env dicts)
        self._same_step = mode in (AutoresetMode.SAME_STEP, AutoresetMode.LEGACY)
        self.reward_required = reward_required
        self.num_actions = num_actions
        self.chunk = chunk
        self.num_envs = 0
        self.specs: dict[tuple[str, ...], tuple[tuple[int, ...], np.dtype]] | None = None
        self.keys: frozenset[str] = frozenset()
        # (name, shape, dtype, ndim, size, staging block [chunk, *shape]) of every entry of
        # the first insert, when each was one non-empty array: a step laid out the same is
        # checked and staged in one pass (``block[i] = value``: no view object per step, which
        # costs a cache miss per entry once other work has run between inserts)
        self._layout: tuple[tuple[str, tuple[int, ...], np.dtype, int, int, np.ndarray], ...] | None = None
        self.warned = False
        # staging blocks [chunk, N, ...] by stored key: time-major, a step is one block per
        # entry, and the writer reads the time-first batch in place
        self._stage: dict[tuple[str, ...], np.ndarray] = {}
        # step i's boundary is left to the autoreset rule (a bytearray: a cheaper item write than numpy's)
        self._derived = bytearray(chunk)
        self.staged = 0
        # episode cuts: per env, an episode counter, whether the last step left its
        # episode open, and that step's next observation entries
        self._traj = np.zeros(0, np.int64)
        self._open = np.zeros(0, bool)
        self._last_next: dict[tuple[str, ...], np.ndarray] = {}

    # ------------------------------------------------------------- validation
    def step(self, sample: Any, where: str) -> dict[tuple[str, ...], np.ndarray]:
        """One step's entries ``[N, ...]`` by stored key, with ``("next", "boundary")``."""
        present = self._present(sample, where)
        leaves = self._collect(sample, present)
        self._check(leaves, where, present, ())
        n = self.num_envs
        boundary = np.zeros((n, 1), bool)
        if BOUNDARY_KEY in leaves:  # resolved data: authoritative
            boundary = leaves[BOUNDARY_KEY] != 0
        elif self.mode is AutoresetMode.NEXT_STEP:
            boundary = leaves[STORED[DONE]] != 0  # the step after a done: the reset step
        elif self._same_step:
            done = leaves[STORED[DONE2]][:, 0] != 0
            if done.any():
                boundary[:, 0] = self._final_observations(sample, leaves, done, where)
        leaves[BOUNDARY_KEY] = boundary
        return leaves

    def slice(self, data: dict[str, Any], where: str) -> dict[tuple[str, ...], np.ndarray]:
        """A slice's entries ``[T, N, ...]`` by stored key, with ``("next", "boundary")``.

        A slice has no ``EnvironmentInformation``: in SAME_STEP mode its done steps
        are boundaries unless the slice brings its own ``"Boundary"`` (slices from
        :meth:`MBReplayBuffer.get_data_slice` do).
        """
        present = self._present(data, where)
        leaves = self._collect(data, present)
        T = next(iter(leaves.values())).shape[0]
        self._check(leaves, where, present, (T,))
        if BOUNDARY in present:
            boundary = leaves[BOUNDARY_KEY] != 0
        elif self.mode is AutoresetMode.NEXT_STEP:
            boundary = leaves[STORED[DONE]] != 0
        elif self._same_step:
            boundary = leaves[STORED[DONE2]] != 0
            self._warn(int(boundary.sum()))
        else:
            boundary = np.zeros((T, self.num_envs, 1), bool)
        leaves[BOUNDARY_KEY] = boundary
        return leaves

    def stage_known(self, sample: Any, where: str) -> bool | None:
        """Check and stage a step laid out exactly like the first insert's; ``None`` if it is not.

        Same names (``EnvironmentInformation`` aside), each one array or tensor of
        the first insert's shape and dtype: each is copied straight into its
        staging block, and only discrete actions and SAME_STEP final observations
        are looked at further. Anything else (``None`` included) goes through
        :meth:`step`, whose checks name what is wrong. Returns whether ``chunk``
        steps are held.
        """
        layout = self._layout
        if layout is None or type(sample) is not dict or len(sample) - (INFO in sample) != len(layout):
            return None
        i = self.staged
        try:
            for name, _, dtype, ndim, size, block in layout:
                value = sample[name]
                # numpy's builtin dtypes are singletons: ``is`` settles the usual case
                if value.dtype is not dtype:
                    if type(value) is not np.ndarray:
                        if not isinstance(value, torch.Tensor):
                            return None
                        value = to_numpy(value)
                    if value.dtype != dtype:
                        return None
                # the first insert's ndim and size: an array that also broadcasts to the
                # block's row (else numpy raises) has its shape (no entry is empty)
                if value.ndim != ndim or value.size != size:
                    return None
                block[i] = value
        except (KeyError, AttributeError, ValueError):  # another key; None, a list...; another shape
            return None
        if self.num_actions is not None:
            self._check_actions(self._stage[STORED[ACT]][i], where)
        if self._same_step:
            stage = self._stage
            boundary = stage[BOUNDARY_KEY][i, :, 0]
            boundary[:] = False
            done = stage[STORED[DONE2]][i, :, 0] != 0
            if done.any():
                staged = {k: v[i] for k, v in stage.items()}  # views: final observations go in place
                boundary[:] = self._final_observations(sample, staged, done, where, in_place=True)
        else:
            self._derived[i] = 1
        self.staged = i = i + 1
        return i == self.chunk

    def _allocate(self, sample: Any, leaves: dict[tuple[str, ...], np.ndarray], present: set[str]) -> None:
        """The staging blocks, and the fast layout when every entry of the first step was one array.

        At most ``SLAB_BYTES`` of steps are staged: large observations are written more often.
        """
        n = self.num_envs
        self.chunk = chunk = steps_held(self.chunk, sum(v.nbytes for v in leaves.values()))
        self._stage = {k: np.empty((chunk, n, *v.shape[1:]), v.dtype) for k, v in leaves.items()}
        if BOUNDARY in present or not all(
            isinstance(sample[name], (np.ndarray, torch.Tensor)) for name in present
        ):
            return
        entries = [(name, tuple(sample[name].shape), to_numpy(sample[name]).dtype) for name in present]
        if all(math.prod(shape) for _, shape, _ in entries):  # else (an empty entry) all go through step()
            self._layout = self._fast_layout(entries)

    def _fast_layout(self, entries: Iterable[tuple[str, tuple[int, ...], np.dtype]]) -> tuple:
        """``(name, shape, dtype, ndim, size, staging block)`` of each entry, for :meth:`stage_known`."""
        return tuple((name, shape, dtype, len(shape), math.prod(shape), self._block(name, shape))
                     for name, shape, dtype in entries)

    def _block(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """``name``'s staging block as ``[chunk, *shape]`` (a view: a flag given as ``[N]`` is staged ``[chunk, N, 1]``)."""
        block = self._stage[STORED[name]]
        return block[..., 0] if len(shape) == 1 and STORED[name] in _FLAGS else block

    def __getstate__(self) -> dict[str, Any]:
        # a copy (deepcopy, pickle) does not keep views as views: the layout's
        # flag views are made again over the copy's own staging blocks
        layout = self._layout
        if layout is not None:
            return {**self.__dict__, "_layout": tuple(entry[:3] for entry in layout)}
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        entries: tuple[tuple[str, tuple[int, ...], np.dtype], ...] | None = state["_layout"]
        if entries is not None:
            self._layout = self._fast_layout(entries)

    def state_dict(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The layout and each env's episode cut, JSON-ready, and its arrays (nothing may be staged).

        :meth:`load_state_dict` gives an equal object: the next steps are checked against
        the same layout and join (or start) the same episodes.
        """
        assert not self.staged, "write the staged steps first"
        meta = {"num_envs": self.num_envs, "keys": sorted(self.keys), "warned": self.warned,
                "specs": specs_json(self.specs), "last_next": [list(k) for k in self._last_next]}
        arrays = {"traj": self._traj, "open": self._open,
                  **{f"last_next.{i}": v for i, v in enumerate(self._last_next.values())}}
        return meta, arrays

    def load_state_dict(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """Restore :meth:`state_dict` (staging blocks come with the next step, as after a first insert)."""
        self.num_envs, self.keys, self.warned = meta["num_envs"], frozenset(meta["keys"]), meta["warned"]
        self.specs = specs_of_json(meta["specs"])
        self._traj, self._open = arrays["traj"], arrays["open"]
        self._last_next = {tuple(k): arrays[f"last_next.{i}"] for i, k in enumerate(meta["last_next"])}
        self._stage, self._layout, self.staged = {}, None, 0

    def _present(self, sample: Any, where: str) -> set[str]:
        if not isinstance(sample, Mapping):
            raise TypeError(f"{where}: expected a dict of transition entries, got {type(sample).__name__}.")
        present = {k for k, v in sample.items() if v is not None and k != INFO}
        if not present <= STORED.keys():
            raise KeyError(
                f"{where}: unknown keys {sorted(map(str, present - STORED.keys()))}; expected keys "
                f"of MBReplayBuffer.storage_tensors {list(STORAGE_TENSORS)}, {BOUNDARY!r} or {INFO!r}."
            )
        keys = present - {BOUNDARY}
        if self.specs is not None and keys == self.keys:
            return present  # the first insert's keys, validated then
        required = {OBS, ACT, OBS2, DONE2} | ({REW} if self.reward_required else set())
        if self.mode is AutoresetMode.NEXT_STEP and BOUNDARY not in present:
            required.add(DONE)  # a Done step is the reset step, not a transition
        missing = sorted(required - present)
        if missing:
            raise KeyError(
                f"{where}: missing keys {missing} (present: {sorted(present)}); "
                f"{REW!r} may only be left out when actor.dynamics_model.reward_function is set"
                f"{', and Done marks reset steps in NEXT_STEP autoreset mode' if DONE in missing else ''}."
            )
        if self.specs is not None:
            raise KeyError(
                f"{where}: keys {sorted(keys)} differ from the first insert's {sorted(self.keys)}; "
                "every insert must carry the same keys."
            )
        return present

    @staticmethod
    def _collect(sample: Mapping[str, Any], present: set[str]) -> dict[tuple[str, ...], np.ndarray]:
        leaves: dict[tuple[str, ...], np.ndarray] = {}
        for name, key in STORED.items():  # checked in this order: Observation first
            if name in present:
                value = sample[name]
                if type(value) is np.ndarray:
                    leaves[key] = value
                else:
                    leaves.update(tree_leaves(value, key))
        return leaves

    def _check(self, leaves: dict, where: str, present: set[str], lead: tuple[int, ...]) -> None:
        nl = len(lead)
        if self.specs is None:
            first = leaves[STORED[OBS]] if STORED[OBS] in leaves else next(iter(leaves.values()))
            self.num_envs = int(first.shape[nl]) if first.ndim > nl else 0
            if self.num_envs < 1:
                raise ValueError(f"{where}: {OBS!r} has shape {first.shape}, expected (num_envs, ...).")
        n = self.num_envs
        for key in _FLAGS:  # [..., N] -> [..., N, 1], as stored
            value = leaves.get(key)
            if value is not None and value.shape == lead + (n,):
                leaves[key] = value.reshape(*lead, n, 1)
        specs = self.specs
        if specs is not None and all(  # the common case: exactly the first insert's entries
            (spec := specs.get(k)) is not None and v.shape[nl:] == spec[0] and v.shape[:nl] == lead
            and v.dtype == spec[1]
            for k, v in leaves.items() if k != BOUNDARY_KEY
        ):
            _check_done_flags(leaves, where)
            self._check_actions(leaves[STORED[ACT]], where)
            return
        rows = ", ".join(map(str, lead + (n,)))
        for key, value in leaves.items():
            if value.shape[: nl + 1] != lead + (n,):
                raise ValueError(
                    f"{where}: {entry_name(key)} has shape {value.shape}, expected ({rows}, ...)"
                    f"{' (one row per env)' if not nl else ' (time, env, ...)'}."
                )
            if key in _FLAGS and value.shape[nl:] != (n, 1):
                raise ValueError(f"{where}: {entry_name(key)} has shape {value.shape}, expected ({rows}, 1).")
            if specs is None or key == BOUNDARY_KEY:
                continue
            want = specs.get(key)
            if want is None:
                raise KeyError(f"{where}: entry {entry_name(key)} was not in the first insert.")
            if value.shape[nl:] != want[0]:
                raise ValueError(
                    f"{where}: {entry_name(key)} has shape {value.shape}, expected "
                    f"{lead + want[0]} as in the first insert."
                )
            if value.dtype != want[1]:
                raise TypeError(
                    f"{where}: {entry_name(key)} has dtype {value.dtype}, expected {want[1]} as in "
                    "the first insert."
                )
        if specs is None:  # the first insert fixes the layout: one the model pairs can take
            for key, value in leaves.items():
                if value.dtype.kind not in "biuf":  # str, object, complex: no tensor, no model feature
                    raise TypeError(
                        f"{where}: {entry_name(key)} has dtype {value.dtype}, expected a bool, integer "
                        "or floating dtype (entries are stored as tensors and fed to the model as floats)."
                    )
            self._check_action_layout(leaves, where, lead)
            self._check_next_observation(leaves, where, lead)
        _check_done_flags(leaves, where)
        self._check_actions(leaves[STORED[ACT]], where)
        if specs is None:
            self.specs = {k: (v.shape[nl:], v.dtype) for k, v in leaves.items() if k != BOUNDARY_KEY}
            self.keys = frozenset(present - {BOUNDARY})

    def _check_action_layout(self, leaves: dict, where: str, lead: tuple[int, ...]) -> None:
        action = leaves.get(STORED[ACT])
        rows = lead + (self.num_envs,)
        if action is None:  # a dict of entries: the model input takes one action array
            names = sorted(k[-1] for k in leaves if k[:1] == STORED[ACT])
            raise TypeError(
                f"{where}: 'Action' is a dict (keys {names}), expected one array "
                f"({', '.join(map(str, rows))}, ...) of actions."
            )
        n = self.num_actions
        if n is not None and action.shape[len(rows):] not in ((), (1,)):
            raise ValueError(
                f"{where}: 'Action' has shape {action.shape}, expected {rows} or {rows + (1,)}: one "
                f"action index per env for the Discrete({n}) action space."
            )

    @staticmethod
    def _check_next_observation(leaves: dict, where: str, lead: tuple[int, ...]) -> None:
        """``NextObservation`` must be laid out as ``Observation`` (the target is their difference)."""
        obs, nxt = (
            {k[len(STORED[name]):]: v for k, v in leaves.items() if k[: len(STORED[name])] == STORED[name]}
            for name in (OBS, OBS2)
        )
        if obs.keys() != nxt.keys():
            held = ", ".join(sorted(entry_name(STORED[OBS2] + k) for k in nxt))
            entries = ", ".join(sorted(entry_name(STORED[OBS] + k) for k in obs))
            raise KeyError(f"{where}: {OBS2!r} holds {held}; expected the entries of {OBS!r}: {entries}.")
        nl = len(lead)
        for sub, value in nxt.items():
            want = obs[sub]
            if value.shape[nl:] != want.shape[nl:] or value.dtype != want.dtype:
                raise ValueError(
                    f"{where}: {entry_name(STORED[OBS2] + sub)} has shape {value.shape} and dtype "
                    f"{value.dtype}, expected {value.shape[:nl] + want.shape[nl:]} and {want.dtype} as "
                    f"{entry_name(STORED[OBS] + sub)}."
                )

    def _check_actions(self, action: np.ndarray, where: str) -> None:
        n = self.num_actions
        if n is not None and not ((action >= 0) & (action < n) & (action == np.round(action))).all():
            raise ValueError(
                f"{where}: 'Action' holds {np.unique(action).tolist()[:8]}, expected integers in "
                f"[0, {n}) for the Discrete({n}) action space."
            )

    def _final_observations(
        self, sample: Mapping[str, Any], leaves: dict, done: np.ndarray, where: str, in_place: bool = False
    ) -> np.ndarray:
        """SAME_STEP / LEGACY: put the true final observation in the next observation of done envs; ``[N]`` unknown ones.

        SAME_STEP reads ``final_obs`` (and ``_final_obs``) of the infos dict,
        LEGACY each done env's ``"terminal_observation"`` of the list of dicts
        an SB3 ``VecEnv`` returns.

        ``in_place``: ``leaves`` are staging views, written to; else they may be
        the caller's arrays, copied before the first write.
        """
        info = sample.get(INFO)
        final = has = None
        if isinstance(info, Mapping):
            final, has = info.get(_FINAL), info.get("_final_obs")
        elif isinstance(info, (list, tuple)) and len(info) == self.num_envs:  # SB3's per-env dicts
            final = [i.get(_LEGACY_FINAL) if isinstance(i, Mapping) else None for i in info]
            has = [value is not None for value in final]
        unknown = np.zeros(self.num_envs, bool)
        prefix = STORED[OBS2]
        targets = None  # the next observation's arrays, written to (copied first unless in_place)
        for i in np.flatnonzero(done).tolist():
            if final is None or has is None or not has[i]:
                unknown[i] = True  # the next observation is a reset observation: keep, never train
                continue
            if targets is None:
                targets = {k: v if in_place else v.copy() for k, v in leaves.items() if k[: len(prefix)] == prefix}
                leaves.update(targets)
            put_final(where, self._final_name(i), targets, i, dict(tree_leaves(final[i], prefix)), entry_name)
        self._warn(int(unknown.sum()))
        return unknown

    def _final_name(self, env: int | str) -> str:
        """Where the infos hold env ``env``'s true final observation, for messages."""
        if self.mode is AutoresetMode.LEGACY:
            return f"{INFO}[{env}][{_LEGACY_FINAL!r}]"
        return f"{INFO}[{_FINAL!r}][{env}]"

    def _warn(self, count: int) -> None:
        if count and not self.warned:
            self.warned = True
            warnings.warn(
                f"MBReplayBuffer: {count} done step(s) without their true final observation "
                f"({self._final_name('i')} missing in {self.mode.name} autoreset mode): they "
                "are stored but never trained on. Pass the vector env's infos to train on them.",
                UserWarning,
                stacklevel=4,
            )

    # ---------------------------------------------------------------- staging
    def stage(self, sample: Any, leaves: dict[tuple[str, ...], np.ndarray]) -> bool:
        """Copy one checked step (from :meth:`step`) into the staging blocks; True when ``chunk`` steps are held."""
        if not self._stage:
            self._allocate(sample, leaves, self._present(sample, ""))
        i = self.staged
        for key, value in leaves.items():
            self._stage[key][i] = value
        self._derived[i] = 0
        self.staged = i + 1
        return self.staged == self.chunk

    def first_bad_done(
        self, leaves: dict[tuple[str, ...], np.ndarray], where: str
    ) -> tuple[int, ValueError] | None:
        """The first of the held ``[N, T]`` steps whose done flag is not 0 or 1, with its error.

        Steps staged by :meth:`stage_known` are checked here, when they are
        written, in one pass over the block: a check at each insert costs more
        than the insert's copies. ``None`` if every flag is 0 or 1.
        """
        first: tuple[int, ValueError] | None = None
        for key in _DONE_FLAGS:
            value = leaves.get(key)
            if value is None or value.dtype == bool:
                continue
            bad = (value != 0) & (value != 1)
            if not bad.any():  # the usual case stops here (a reduction per step is slow)
                continue
            steps = np.flatnonzero(bad.any(axis=(0, 2)))
            if first is None or steps[0] < first[0]:
                t = int(steps[0])
                error = done_error(key, value[:, t], where)
                assert error is not None  # step t holds a value other than 0 or 1
                first = (t, error)
        return first

    def take(self) -> dict[tuple[str, ...], np.ndarray]:
        """The staged steps ``[N, T, ...]`` (views, valid until the next :meth:`stage`)."""
        T, self.staged = self.staged, 0
        leaves = {k: v[:T].swapaxes(0, 1) for k, v in self._stage.items()}
        derived = np.frombuffer(self._derived, bool, T)
        if not self._same_step and derived.any():
            boundary = leaves[BOUNDARY_KEY]
            if self.mode is AutoresetMode.NEXT_STEP:  # a Done step is the reset step
                boundary[:, derived] = leaves[STORED[DONE]][:, derived] != 0
            else:
                boundary[:, derived] = False
        return leaves

    # ------------------------------------------------------------------ batch
    def batch(self, leaves: dict[tuple[str, ...], np.ndarray]) -> TensorDict:
        """``[N, T, ...]`` steps as the writer's time-first ``[T, N]`` TorchRL TensorDict.

        The steps' memory is read as it lies: views of time-major blocks (the
        staged steps, a slice) give the batch without a copy.

        Adds ``("next", "done")`` (bool, from ``"NextDone"``), a zero reward when a
        reward function replaces it, and trajectory ids that start a new episode
        wherever a step does not start at the previous step's next observation
        (bit for bit: :func:`~torchrl_ext.envs._chunk.follow_on`, as the
        facades' adapter) while that episode was still open (unrelated slices
        one after the other): rows keep each observation once, so such steps
        must not be joined.
        """
        done = leaves[STORED[DONE2]] != 0  # [N, T, 1]
        ends = (done | leaves[BOUNDARY_KEY])[..., 0]  # [N, T]
        n, T = ends.shape
        if not self._traj.size:
            self._traj, self._open = np.zeros(n, np.int64), np.zeros(n, bool)
        jump = np.zeros((n, T), bool)
        for key, nxt in leaves.items():
            if key[:2] != STORED[OBS2]:
                continue
            jump |= ~follow_on(leaves[key[1:]], nxt, self._last_next.get(key))
            self._last_next[key] = nxt[:, -1].copy()
        went_on = np.empty((n, T), bool)  # the episode was open before the step
        went_on[:, 0] = self._open
        np.logical_not(ends[:, :-1], out=went_on[:, 1:])
        traj = self._traj[:, None] + np.cumsum(went_on & jump, 1)  # [N, T]
        self._traj, self._open = traj[:, -1].copy(), ~ends[:, -1]
        entries = dict(leaves)
        entries[DONE_KEY] = done
        entries[TRAJ_KEY] = traj
        if STORED[REW] not in entries:  # a reward function is known; the writer wants an entry
            entries[STORED[REW]] = np.zeros((n, T, 1), np.float32)
        return GymVectorAdapter.to_tensordict(
            {k: v.swapaxes(0, 1) for k, v in entries.items()}, [T, n], time_first=True)


def discrete_count(space: Any) -> int | None:
    """One-hot width of a gym / gymnasium ``Discrete`` space; ``None`` for ``Box``."""
    n = discrete_n(space)
    if n is not None or type(space).__name__ == "Box":
        return n
    raise TypeError(
        f"MBReplayBuffer: actor.action_space is {type(space).__name__}, expected a gym or "
        "gymnasium Discrete or Box space."
    )
