"""Facade inputs (numpy or torch, per env) to the numpy arrays the adapter resolves."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch

from torchrl_ext.core.kernels.writes import any_outside, any_outside_each
from torchrl_ext.core.schema import EntryKeyError

__all__ = ["BATCH_ENTRIES", "SpaceInput", "check_rows_per_env", "discrete_n", "space_error", "step_inputs",
           "to_numpy"]

#: root entries of a stored or sampled row that are not observations: a ``Dict``
#: observation entry of one of these names would be overwritten by them
BATCH_ENTRIES = ("action", "next", "collector", "discount", "steps_to_next_obs", "index",
                 "n_step", "her")


def space_error(owner: str, name: str, space: Any, expected: str = "a gymnasium Space") -> TypeError:
    """The ``TypeError`` for a constructor argument that is not the space expected.

    Examples:
        >>> raise space_error("Facade", "action_space", 3)
        Traceback (most recent call last):
        ...
        TypeError: Facade: action_space is int, expected a gymnasium Space.
    """
    return TypeError(f"{owner}: {name} is {type(space).__name__}, expected {expected}.")


def discrete_n(space: Any) -> int | None:
    """The ``n`` of a ``Discrete`` space of gymnasium or of the older gym; ``None`` for any other space.

    Told by the classes' names (a subclass of either counts): old gym's spaces
    (d3rlpy 1.0's batch envs, pytorchrl's) are not gymnasium's classes, and an
    ``isinstance`` test would take their ``Discrete`` for a continuous space.

    Examples:
        >>> discrete_n(gym.spaces.Discrete(3)), discrete_n(gym.spaces.Box(-1, 1, (2,)))
        (3, None)
    """
    if hasattr(space, "n") and any(kind.__name__ == "Discrete" for kind in type(space).__mro__):
        return int(space.n)
    return None


def check_rows_per_env(owner: str, storage_size: int, num_envs: int, rows: int, least: int) -> None:
    """Refuse a ``storage_size`` that leaves an env's ring ``rows < 2`` rows.

    An episode of ``L`` steps uses ``L + 1`` rows of its env's ring, so one
    row holds no transition. ``least`` is the smallest ``storage_size`` that
    gives 2 rows per env, as the facade splits it.

    Examples:
        >>> check_rows_per_env("Facade", 3, 3, rows=1, least=6)
        Traceback (most recent call last):
        ...
        ValueError: Facade: storage_size=3 gives 1 row(s) to each of num_envs=3 envs, expected at least 2 (an episode of L steps uses L + 1 rows of its env's ring); pass storage_size >= 6.
    """
    if rows < 2:
        raise ValueError(
            f"{owner}: storage_size={storage_size} gives {rows} row(s) to each of "
            f"num_envs={num_envs} envs, expected at least 2 (an episode of L steps uses "
            f"L + 1 rows of its env's ring); pass storage_size >= {least}."
        )


def to_numpy(value: Any) -> np.ndarray:
    """A numpy array; tensors are detached and moved to CPU.

    Examples:
        >>> import torch
        >>> to_numpy(torch.ones(2)).tolist()
        [1.0, 1.0]
    """
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


class SpaceInput:
    """Checks and converts one facade argument (``[num_envs, ...]`` per step) against its space.

    Built once per facade argument, so that each ``add`` compares shapes,
    dtypes and dict keys against a cached spec (no per-element Python loop):

    * a ``Dict`` space: the same keys, each entry checked against its subspace;
    * any other space: ``[num_envs, *space.shape]`` (``Discrete`` actions also
      ``[num_envs, 1]``), cast to the space's dtype. Floats for an integer
      space must be integral (``2.0`` is ``2``; ``0.9999999`` is refused, never
      truncated), values cast to an integer dtype must fit it (``300`` for
      ``uint8`` is refused, never wrapped to ``44``), and ``Discrete`` values
      lie in ``[start, start + n)``.

    ``Tuple`` spaces are refused at construction: their batches are tuples
    that numpy would stack across envs; use a ``Dict`` space.

    Args:
        owner (str): who checks (``"NStepReplayStorage.add"``), for messages.
        name (str): the argument (``"observations"``).
        space (gym.Space): the declared space.
        num_envs (int): rows of every input.

    Keyword Args:
        column (bool): store ``Discrete`` values as ``[num_envs, 1]``; without it,
            in the form of the first value, to which later values of the
            other form are reshaped.

    Raises:
        TypeError: ``space`` is or holds a ``Tuple`` / ``Sequence`` / ``Graph`` space.

    Examples:
        >>> import gymnasium as gym, numpy as np
        >>> actions = SpaceInput("add", "actions", gym.spaces.Discrete(3), num_envs=2, column=True)
        >>> actions(np.array([2.0, 1.0])).tolist()
        [[2], [1]]
        >>> actions(np.array([0.9999999, 1.0]))
        Traceback (most recent call last):
        ...
        ValueError: add: actions holds 0.9999999 (env 0), not an integer, for Discrete(3); pass integer actions (e.g. np.rint(a).astype(int) if the rounding is meant).
    """

    def __init__(
        self, owner: str, name: str, space: gym.Space, num_envs: int, *, column: bool = False
    ) -> None:
        self.owner, self.name, self.space, self.num_envs = owner, name, space, num_envs
        self.children: dict[str, SpaceInput] | None = None
        if isinstance(space, gym.spaces.Dict):
            self.children = {
                key: SpaceInput(owner, f"{name}[{key!r}]", sub, num_envs, column=column)
                for key, sub in space.spaces.items()
            }
            return
        if isinstance(space, (gym.spaces.Tuple, gym.spaces.Sequence, gym.spaces.Graph)):
            raise TypeError(
                f"{owner}: the space of {name}, {space}, is a {type(space).__name__} space, which is not supported: its batches are "
                "tuples that would be transposed across envs. Use a Dict space (e.g. "
                "gymnasium.spaces.Dict({'a': ..., 'b': ...})) or flatten it "
                "(gymnasium.wrappers.FlattenObservation)."
            )
        self.dtype = None if space.dtype is None else np.dtype(space.dtype)
        self.shape = (num_envs, *space.shape) if space.shape is not None else None
        self.discrete = isinstance(space, gym.spaces.Discrete)
        self.column = column and self.discrete
        self.shapes = [self.shape]
        if self.discrete:
            self.shapes.append((num_envs, 1))
        # without column: the form of the first value, [num_envs] or [num_envs, 1], which
        # the storage then holds; values of the other form are laid out as it
        self._form: tuple[int, ...] | None = None
        self.integral = self.dtype is not None and self.dtype.kind in "iub"
        # a Discrete space's values, start .. start + n - 1 (as Python ints, read once)
        self._range = (0, 0)
        if isinstance(space, gym.spaces.Discrete):
            self._range = (int(space.start), int(space.start) + int(space.n))
        # a MultiDiscrete / MultiBinary space's values per element: [low, high)
        self._elements: tuple[np.ndarray, np.ndarray] | None = None
        if isinstance(space, gym.spaces.MultiDiscrete):
            start = np.asarray(space.start, np.int64)
            self._elements = (start, start + np.asarray(space.nvec, np.int64))
        elif isinstance(space, gym.spaces.MultiBinary):
            self._elements = (np.zeros(space.shape, np.int64), np.full(space.shape, 2, np.int64))
        # one-byte values with the same bounds everywhere (every MultiBinary): the bytes of
        # the values allowed, which _check_bytes deletes
        self._allowed: bytes | None = None
        if self._elements is not None and self.dtype is not None and self.dtype.kind in "iu" \
                and self.dtype.itemsize == 1:
            low, high = np.unique(self._elements[0]), np.unique(self._elements[1])
            info = np.iinfo(self.dtype)
            if low.size == high.size == 1 and info.min <= low[0] and high[0] - 1 <= info.max:
                self._allowed = np.arange(low[0], high[0]).astype(self.dtype).tobytes()
        # the largest finite value of a float dtype: casts of larger ones would be infinite
        self._float_max = float(np.finfo(self.dtype).max) if self.dtype is not None and \
            self.dtype.kind == "f" else None
        # the values an integer dtype holds: casts of others would wrap around
        self.bounds = (0, 1) if self.dtype == np.bool_ else (
            (int(np.iinfo(self.dtype).min), int(np.iinfo(self.dtype).max)) if self.integral else None)

    def value_check(self, name: str | None = None) -> Callable[[np.ndarray], None] | None:
        """What :meth:`__call__` still checks in an array of exactly the space's shape and dtype.

        A ``Discrete``, ``MultiDiscrete`` or ``MultiBinary`` space's range (raising its ``ValueError``); ``None``
        where the shape and dtype say everything (the array is returned as
        is). ``name``: that entry of a ``Dict`` space.

        Examples:
            >>> import gymnasium as gym, numpy as np
            >>> SpaceInput("add", "obs", gym.spaces.Box(0, 1, (3,)), 2).value_check() is None
            True
            >>> check = SpaceInput("add", "actions", gym.spaces.Discrete(3), 2).value_check()
            >>> check(np.array([0, 3]))
            Traceback (most recent call last):
            ...
            ValueError: add: actions holds values in [0, 3], outside Discrete(3) (values 0 .. 2).
        """
        node = self if name is None else (self.children or {}).get(name)
        if node is None or node.children is not None:
            return None
        if node._elements is not None:
            return node._elements_check()
        return node._check_range if node.discrete else None

    def __call__(self, value: Any) -> Any:
        """``value`` checked and converted (a dict of arrays for a ``Dict`` space)."""
        if self.children is not None:
            return self._dict(value)
        if isinstance(value, tuple) and value and isinstance(value[0], (np.ndarray, torch.Tensor)):
            raise TypeError(
                f"{self.owner}: {self.name} is a tuple of {len(value)} arrays, but the space "
                f"is {self.space}; a tuple batch would be stacked across envs. Pass one "
                f"[{self.num_envs}, ...] array."
            )
        array = to_numpy(value)
        if self.shape is not None and array.shape not in self.shapes:
            raise ValueError(
                f"{self.owner}: {self.name} has shape {array.shape}, expected "
                f"{' or '.join(map(str, self.shapes))} (num_envs={self.num_envs}, then the "
                f"shape of the declared space {self.space})."
            )
        if self.dtype is None or array.dtype == self.dtype:
            out = array
        else:
            if array.dtype.kind not in "biuf":
                self._check_numeric(array)
            if self.integral:
                if array.dtype.kind not in "iub":
                    self._check_integral(array)
                self._check_fits(array)
            elif self._float_max is not None and (
                    array.dtype.kind == "f" and array.dtype.itemsize > self.dtype.itemsize
                    or array.dtype.kind in "iu" and self.dtype.itemsize < 4):  # float16 holds ints < 65520
                self._check_fits_float(array)
            out = array.astype(self.dtype)
        if self._elements is not None:
            self._elements_check()(out)
        if self.discrete:
            self._check_range(out)
            if self.column:
                out = out.reshape(self.num_envs, 1)
            elif self._form is None:  # the first value's form is the stored one
                self._form = out.shape
            elif out.shape != self._form:  # the other accepted form: as the first
                out = out.reshape(self._form)
        return out

    def _dict(self, value: Any) -> dict[str, Any]:
        children = self.children or {}
        if not isinstance(value, dict):
            raise TypeError(
                f"{self.owner}: {self.name} is {type(value).__name__}, expected a dict with "
                f"the keys of the Dict space: {list(children)}."
            )
        if value.keys() != children.keys():
            missing = [k for k in children if k not in value]
            extra = [k for k in value if k not in children]
            raise EntryKeyError(
                f"{self.owner}: {self.name} has keys {list(value)}, expected the Dict space's "
                f"{list(children)} (missing {missing}, not in the space {extra}). Pass "
                "every entry of the space and no other (or declare the others in the space)."
            )
        return {key: check(value[key]) for key, check in children.items()}

    def _check_numeric(self, array: np.ndarray) -> None:
        """Refuse strings, complex numbers and dates, which a cast would parse or truncate ("0.5" -> 0.5).

        Object arrays (of Python numbers) are left to the cast where the space holds
        floats, which reads them exactly; an integer space refuses them.
        """
        if array.dtype.kind == "O" and not self.integral:
            return
        raise TypeError(
            f"{self.owner}: {self.name} has dtype {array.dtype}, expected numbers (bool, int "
            f"or float) for {self.space} of dtype {self.dtype}; pass a numeric array (e.g. "
            f"np.asarray(x).astype({self.dtype.name if self.dtype is not None else 'float'}) if "
            "a conversion is meant)."
        )

    def _check_integral(self, array: np.ndarray) -> None:
        off = np.flatnonzero(np.rint(array) != array)  # NaN is never integral
        if off.size:
            flat = array.reshape(-1)
            env = int(off[0]) // max(1, flat.size // self.num_envs)
            raise ValueError(
                f"{self.owner}: {self.name} holds {flat[off[0]].item()!r} (env {env}), not an integer, "
                f"for {self.space}; pass integer {self.name.split('[')[0]} (e.g. "
                "np.rint(a).astype(int) if the rounding is meant)."
            )

    def _check_fits(self, array: np.ndarray) -> None:
        """Refuse values the cast to the space's integer dtype would wrap around (300 -> 44 in uint8)."""
        dtype, bounds = self.dtype, self.bounds
        if dtype is None or bounds is None or not array.size or np.can_cast(array.dtype, dtype):
            return
        (lo, hi), (low, high) = bounds, _min_max(array)
        if low < lo or high > hi:
            raise ValueError(
                f"{self.owner}: {self.name} holds values in [{low}, {high}], outside "
                f"{dtype.name}'s [{lo}, {hi}] (the dtype of {self.space}); they would wrap "
                f"around. Pass values in that range (np.clip(x, {lo}, {hi}) if clipping is meant)."
            )

    def _check_fits_float(self, array: np.ndarray) -> None:
        """Refuse finite values the cast to the space's float dtype would make infinite (1e40 -> inf in float32).

        Two reductions when every value fits (no warning from the cast then);
        values that came infinite or NaN are left to the finite check
        (``check_finite``), which names them so.
        """
        largest = cast(float, self._float_max)
        if not array.size or (np.maximum.reduce(array, axis=None) <= largest
                              and np.minimum.reduce(array, axis=None) >= -largest):
            return
        flat = array.reshape(-1)
        with np.errstate(over="ignore", invalid="ignore"):  # the cast's overflow, reported below
            out = flat.astype(self.dtype)
        # made infinite by the cast (a value just past the largest rounds to it: it fits)
        off = np.flatnonzero(~np.isfinite(out) & np.isfinite(flat))
        if off.size:
            env = int(off[0]) // max(1, flat.size // self.num_envs)
            raise ValueError(
                f"{self.owner}: {self.name} holds {flat[off[0]].item()!r} (env {env}), which does not "
                f"fit {self.dtype}, the dtype of {self.space} (finite values within +-{largest:.7g}): it "
                f"would be stored as {out[off[0]].item()}. Pass values in that range (or "
                "declare the space with a wider dtype)."
            )

    def _elements_check(self) -> Callable[[np.ndarray], None]:
        """The range check of a ``MultiDiscrete`` / ``MultiBinary`` array of the space's dtype."""
        return self._check_bytes if self._allowed is not None else self._check_elements

    def _check_bytes(self, array: np.ndarray) -> None:
        """A one-byte space with one bound everywhere: its allowed bytes deleted, none may be left
        (~0.2 µs a step; a kernel's dispatch costs ~1 µs); else the full check names the value."""
        if array.tobytes().translate(None, cast(bytes, self._allowed)):
            self._check_elements(array)

    def _check_elements(self, array: np.ndarray) -> None:
        low, high = cast(tuple[np.ndarray, np.ndarray], self._elements)
        # else one pass of a kernel (numpy's compare and any cost ~4 µs a step of a small space)
        values = array.reshape(-1)
        if values.dtype == np.bool_:
            values = values.view(np.uint8)
        if values.dtype.kind in "iu" and not any_outside_each(values, low.reshape(-1), high.reshape(-1)):
            return
        off = (array < low) | (array >= high)
        if off.any():
            at = tuple(int(i) for i in np.argwhere(off)[0])
            raise ValueError(
                f"{self.owner}: {self.name} holds {array[at].item()!r} at {at} (env {at[0]}), "
                f"outside {self.space} (values {int(low[at[1:]])} .. {int(high[at[1:]]) - 1} there)."
            )

    def _check_range(self, array: np.ndarray) -> None:
        lo, hi = self._range
        # int64 in one contiguous row: the kernel's one signature (the usual actions as they are)
        values = array if array.ndim == 1 else array.reshape(-1)
        if values.dtype != np.int64 or values.strides[0] != 8:
            values = np.ascontiguousarray(values, np.int64)
        if not values.size or not any_outside(values, lo, hi):
            return
        low, high = _min_max(array)
        if low < lo or high >= hi:
            raise ValueError(
                f"{self.owner}: {self.name} holds values in [{int(low)}, "
                f"{int(high)}], outside {self.space} (values {lo} .. {hi - 1})."
            )


def _min_max(array: np.ndarray) -> tuple[Any, Any]:
    """The smallest and largest value of a non-empty array, as Python numbers."""
    if array.size <= 256:  # a step's actions: Python's min / max beat numpy's reduction setup
        values = array.reshape(-1).tolist()
        return min(values), max(values)
    return array.min().item(), array.max().item()


def step_inputs(
    owner: str, observation_space: gym.Space, action_space: gym.Space, num_envs: int,
    *, column: bool = False,
) -> tuple[SpaceInput, SpaceInput, SpaceInput]:
    """The checks of a facade's ``add``: observations, next observations, actions.

    ``column``: ``Discrete`` values (the action, and the ``Discrete`` entries of
    the observations) are stored as ``[num_envs, 1]``, as rllte and SB3 store them.

    Raises:
        ValueError: a ``Dict`` observation space has an entry named like a
            batch entry (:data:`BATCH_ENTRIES`: ``"action"``, ``"discount"``...),
            which its rows' own entry would overwrite.

    Examples:
        >>> import gymnasium as gym
        >>> obs, nxt, act = step_inputs("F.add", gym.spaces.Box(0, 1, (2,)), gym.spaces.Discrete(2), 4)
        >>> nxt.name, act.shape
        ('next_observations', (4,))
    """
    if isinstance(observation_space, gym.spaces.Dict):
        for name in observation_space.spaces:
            if name in BATCH_ENTRIES:
                raise ValueError(
                    f"{owner.split('.')[0]}: observation_space has an entry {name!r}, the name "
                    f"of a batch entry ({', '.join(map(repr, BATCH_ENTRIES))}): the batch's own "
                    f"{name!r} would overwrite it. Expected entry names other than those; "
                    "rename it (e.g. a wrapper that maps the env's observation dict)."
                )
    return (
        SpaceInput(owner, "observations", observation_space, num_envs, column=column),
        SpaceInput(owner, "next_observations", observation_space, num_envs, column=column),
        SpaceInput(owner, "actions", action_space, num_envs, column=column),
    )
