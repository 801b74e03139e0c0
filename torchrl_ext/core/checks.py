"""Argument checks shared by the builders, facades and components (counts, flags, devices, finite values...) and their errors."""
from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = [
    "EMPTY_BUFFER", "EmptyBufferError", "as_priorities", "check_count", "check_device", "check_dir",
    "check_finite_entries", "check_finite_rows", "check_number", "is_flags", "sums_finite",
]

EMPTY_BUFFER = "cannot sample: the buffer holds no transition yet; extend it first."


class EmptyBufferError(RuntimeError, ValueError):
    """Sampling a buffer (or facade) that holds no transition yet.

    A ``RuntimeError``, as TorchRL raises for an empty storage (what its users
    catch), and a ``ValueError``, as bad input.

    Examples:
        >>> from torchrl_ext import make_replay_buffer
        >>> try:
        ...     make_replay_buffer(8, batch_size=2).sample()
        ... except RuntimeError as err:
        ...     print(type(err).__name__, err)
        EmptyBufferError cannot sample: the buffer holds no transition yet; extend it first.
    """


def check_count(owner: str, name: str, value: Any, minimum: int = 1) -> int:
    """``value`` as an ``int >= minimum``; floats, bools and strings are refused, not truncated.

    Raises:
        TypeError: not an integer (``3.0`` neither: say ``3``).
        ValueError: below ``minimum``.

    Examples:
        >>> check_count("Storage", "n_step", 3)
        3
        >>> check_count("Storage", "n_step", 2.5)
        Traceback (most recent call last):
        ...
        TypeError: Storage: n_step=2.5 (float), expected an int >= 1.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(
            f"{owner}: {name}={value!r} ({type(value).__name__}), expected an int >= {minimum}."
        )
    if value < minimum:
        raise ValueError(f"{owner}: {name}={value}, expected an int >= {minimum}.")
    return int(value)


def check_seed(owner: str, seed: Any) -> int | None:
    """A seed: ``None`` or an int (numpy's too); ``1.5`` or ``"7"`` are refused, not truncated or parsed.

    Examples:
        >>> check_seed("make_replay_buffer", 7), check_seed("make_replay_buffer", None)
        (7, None)
        >>> check_seed("make_replay_buffer", 1.5)
        Traceback (most recent call last):
        ...
        TypeError: make_replay_buffer: seed=1.5 (float), expected an int or None.
    """
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"{owner}: seed={seed!r} ({type(seed).__name__}), expected an int or None.")
    if not 0 <= seed < 2**63:  # what every generator here takes
        raise ValueError(f"{owner}: seed={seed}, expected an int in [0, 2**63).")
    return int(seed)


def check_flag(owner: str, name: str, value: Any) -> bool:
    """``value`` as a bool: ``True`` / ``False`` (numpy's too) or a number ``1`` / ``0``; nothing else is read as one.

    Raises:
        TypeError: another value (``"no"``, ``None``, ``0.5``), which ``bool()`` would take.

    Examples:
        >>> check_flag("Storage", "native", 1)
        True
        >>> check_flag("Storage", "native", "no")
        Traceback (most recent call last):
        ...
        TypeError: Storage: native='no' (str), expected True or False.
    """
    if isinstance(value, (bool, np.bool_)) or (
        isinstance(value, (int, float, np.integer, np.floating)) and value in (0, 1)
    ):
        return bool(value)
    raise TypeError(f"{owner}: {name}={value!r} ({type(value).__name__}), expected True or False.")


def check_device(owner: str, name: str, value: Any) -> torch.device:
    """``value`` as a ``torch.device``: a device, a string torch parses (``"cpu"``, ``"cuda:0"``) or a CUDA index.

    Raises:
        TypeError: another type (``None``, a bool, a float).
        ValueError: a string (or index) torch does not read as a device.

    Examples:
        >>> check_device("Storage", "device", "cpu")
        device(type='cpu')
        >>> check_device("Storage", "device", "gpu")
        Traceback (most recent call last):
        ...
        ValueError: Storage: device='gpu' is not a device torch knows, expected a torch.device or a string such as 'cpu', 'cuda' or 'cuda:0'.
    """
    if isinstance(value, torch.device):
        return value
    expected = "expected a torch.device or a string such as 'cpu', 'cuda' or 'cuda:0'."
    if isinstance(value, bool) or not isinstance(value, (str, int, np.integer)):
        raise TypeError(f"{owner}: {name}={value!r} ({type(value).__name__}), {expected}")
    try:
        return torch.device(value if isinstance(value, str) else int(value))
    except RuntimeError as err:  # torch's own reason follows as the cause
        if isinstance(value, str):
            raise ValueError(f"{owner}: {name}={value!r} is not a device torch knows, {expected}") from err
        raise ValueError(  # an index: of the accelerator, which this machine may lack
            f"{owner}: {name}={value!r} names accelerator {int(value)}, which torch cannot give here "
            f"({err}); {expected}"
        ) from err


def check_dir(owner: str, name: str, value: Any, *, optional: bool = True) -> Path | None:
    """``value`` as a directory ``Path``, or ``None`` (if ``optional``); an empty string (the current directory) is refused.

    Raises:
        TypeError: not a ``str`` or ``os.PathLike`` (an int, bytes).
        ValueError: ``""``, which would write to the current directory.

    Examples:
        >>> check_dir("Storage", "snapshot_dir", "/tmp/buffer").name
        'buffer'
        >>> check_dir("Storage", "snapshot_dir", 3)
        Traceback (most recent call last):
        ...
        TypeError: Storage: snapshot_dir=3 (int), expected a str or os.PathLike naming a directory, or None.
    """
    if value is None and optional:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(
            f"{owner}: {name}={value!r} ({type(value).__name__}), expected a str or os.PathLike "
            f"naming a directory{', or None' if optional else ''}."
        )
    path = os.fspath(value)
    if not isinstance(path, str):  # a PathLike of bytes, which Path refuses
        raise TypeError(f"{owner}: {name}={value!r} names {path!r} (bytes), expected a str path.")
    if path == "":
        raise ValueError(f"{owner}: {name}='' is the current directory, expected a directory path; "
                         "nothing is written to the current directory.")
    return Path(path)


def check_number(owner: str, name: str, value: Any, low: float, high: float = math.inf,
                 *, low_open: bool = False) -> float:
    """``value`` as a float in ``[low, high]`` (``(low, high]`` with ``low_open``), finite.

    A number, or a one-element tensor or array; bools and strings are refused,
    not converted.

    Raises:
        TypeError: not a number.
        ValueError: NaN, infinite, or out of the range.

    Examples:
        >>> check_number("NStepTransform", "gamma", 0.99, 0.0, 1.0)
        0.99
        >>> check_number("Sampler", "alpha", "0.5", 0.0)
        Traceback (most recent call last):
        ...
        TypeError: Sampler: alpha='0.5' (str), expected a finite number >= 0.
    """
    bounds = f"in {'(' if low_open else '['}{low:g}, {high:g}]" if math.isfinite(high) else (
        f"{'>' if low_open else '>='} {low:g}")
    try:  # a number, or a one-element tensor or array; not a flag or a string
        number = None if isinstance(value, (bool, str, bytes)) else float(value)
    except (TypeError, ValueError):
        number = None
    if number is None:
        raise TypeError(
            f"{owner}: {name}={value!r} ({type(value).__name__}), expected a finite number {bounds}."
        )
    if not (math.isfinite(number) and (number > low if low_open else number >= low) and number <= high):
        raise ValueError(f"{owner}: {name}={value}, expected a finite number {bounds}.")
    return number


def as_priorities(priority: Any) -> torch.Tensor:
    """``update_priority``'s ``priority`` as a tensor of numbers (int or float), not yet cast.

    Raises:
        TypeError: ``torch.as_tensor`` does not take it (a string, ``None``), or
            it holds bools or complex numbers, which a cast would read silently.

    Examples:
        >>> as_priorities([1.0, 2.5])
        tensor([1.0000, 2.5000])
        >>> as_priorities("x")
        Traceback (most recent call last):
        ...
        TypeError: update_priority: priority='x' (str), expected a float tensor, array or number: one priority per index (or one for all), e.g. td_error.abs().
    """
    try:
        values: torch.Tensor | None = torch.as_tensor(priority)
    except (TypeError, ValueError, RuntimeError):  # a string, None, a ragged list
        values = None
    if values is not None and values.dtype != torch.bool and not values.is_complex():
        return values
    shown = repr(priority)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    dtype = "" if values is None else f", dtype {values.dtype}"
    raise TypeError(
        f"update_priority: priority={shown} ({type(priority).__name__}{dtype}), expected a float tensor, "
        "array or number: one priority per index (or one for all), e.g. td_error.abs()."
    )


def is_flags(array: np.ndarray) -> bool:
    """Whether ``array`` holds flags: booleans, or numbers that are all 0 or 1.

    Examples:
        >>> is_flags(np.array([True, False])), is_flags(np.array([0.0, 1.0])), is_flags(np.array([0.5]))
        (True, True, False)
        >>> is_flags(np.array(["True"])), is_flags(np.array([np.nan]))
        (False, False)
    """
    if array.dtype == np.bool_:
        return True
    return array.dtype.kind in "biuf" and bool(((array == 0) | (array == 1)).all())


def sums_finite(values: Iterable[np.ndarray]) -> bool:
    """True if every value of the floating arrays ``values`` is finite, in one reduction per array.

    The sum of finite values is finite unless it overflows, so ``True`` is
    certain and ``False`` means a value may not be finite: the callers then
    look value by value (an overflow costs time, never a wrong answer).
    Arrays of other kinds are skipped.

    Examples:
        >>> sums_finite([np.zeros(3), np.ones(2, bool)]), sums_finite([np.array([1.0, np.nan])])
        (True, False)
    """
    total = 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        for value in values:
            if value.dtype.kind == "f":
                total += np.add.reduce(value, axis=None)
    return bool(np.isfinite(total))


def check_finite_rows(where: str, name: Any, value: np.ndarray) -> None:
    """Raise if a floating ``[num_envs, ...]`` array holds NaN or an infinity, naming the env.

    One reduction per call in the usual (finite) case: the sum of finite
    values is finite unless it overflows, and only then is each value checked.

    Args:
        where: the caller (and step), for the message.
        name: the entry (a key tuple is shown as written), for the message.
        value: the array.

    Raises:
        ValueError: naming ``name``, the first env with a non-finite value and the value.

    Examples:
        >>> check_finite_rows("add", "rewards", np.array([0.5, 1.0]))
        >>> check_finite_rows("add", "rewards", np.array([0.5, np.nan]))
        Traceback (most recent call last):
        ...
        ValueError: add: rewards of env 1 is nan; NaN and infinities poison the n-step returns and every target bootstrapped from them. Fix the env or reward code (or pass check_finite=False to store it anyway).
    """
    if value.dtype.kind != "f" or sums_finite((value,)):
        return
    finite = np.isfinite(value)
    if finite.all():
        return  # the sum overflowed; every value is finite
    bad = np.argwhere(~finite)[0]
    shown = name if isinstance(name, str) else str(tuple(name) if len(name) > 1 else name[0])
    found = value[tuple(bad)]
    # a stored array: a value beyond its dtype's range came in finite and was cast to inf
    cast = f" (or a value beyond {value.dtype.name}'s range, +-{np.finfo(value.dtype).max:.4g}, cast to it)" \
        if np.isinf(found) and value.dtype.itemsize < 8 else ""
    raise ValueError(
        f"{where}: {shown} of env {int(bad[0])} is {found}{cast}; NaN and infinities "
        "poison the n-step returns and every target bootstrapped from them. Fix the env "
        "or reward code (or pass check_finite=False to store it anyway)."
    )


def check_finite_entries(where: str, entries: dict[Any, np.ndarray]) -> None:
    """:func:`check_finite_rows` of every floating entry, in one test when all are finite.

    The per-entry sums add up to a finite total unless a value is not finite
    (or a sum overflows); only then is each entry checked, so the error names
    the first bad entry and env as :func:`check_finite_rows` does.

    Examples:
        >>> check_finite_entries("add", {"obs": np.zeros((2, 3)), "done": np.ones(2, bool)})
        >>> check_finite_entries("add", {"obs": np.zeros(2), "reward": np.array([1.0, np.inf])})
        Traceback (most recent call last):
        ...
        ValueError: add: reward of env 1 is inf; NaN and infinities poison the n-step returns and every target bootstrapped from them. Fix the env or reward code (or pass check_finite=False to store it anyway).
    """
    if sums_finite(entries.values()):
        return
    for name, value in entries.items():  # an overflowing sum is checked entry by entry
        check_finite_rows(where, name, value)
