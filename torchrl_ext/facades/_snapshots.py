"""A facade's checkpoint: its buffer's, beside what the facade holds between calls, in one atomic directory."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np

from torchrl_ext._atomic import atomic_dir, reading
from torchrl_ext.buffer import TransitionReplayBuffer
from torchrl_ext.core.checks import check_dir
from torchrl_ext.samplers.refining import RefiningSampler

__all__ = ["dump_facade", "load_facade"]

_ARRAYS, _META = "facade.npz", "facade.json"
#: the buffer to load, or a function of the facade's ``(arrays, meta)`` that builds it (``None``: none was saved)
Target = TransitionReplayBuffer | Callable[[dict[str, np.ndarray], dict[str, Any]], TransitionReplayBuffer | None]


def dump_facade(
    path: str | Path, rb: TransitionReplayBuffer | None, where: str, layout: dict[str, Any],
    arrays: dict[str, np.ndarray], meta: dict[str, Any],
) -> None:
    """Write ``rb`` (``rb.dumps``: rows, episode index, sampler, RNG) and the facade's state under ``path``.

    All or nothing: a process killed at any moment leaves the previous
    complete checkpoint or this one (:func:`~torchrl_ext._atomic.atomic_dir`).

    Args:
        path: the checkpoint directory.
        rb: the facade's buffer, its held steps written (``None``: a facade that builds
            it at its first step has none yet).
        where: the caller, for messages.
        layout: how the facade was built, JSON-ready, which :func:`load_facade` compares.
        arrays: the facade's numpy state by name.
        meta: the facade's other state, JSON-ready.
    """
    with atomic_dir(_directory(where, path)) as tmp:
        if rb is not None:
            rb.dumps(tmp / "buffer")
        with open(tmp / _ARRAYS, "wb") as file:
            cast(Any, np.savez)(file, **arrays)  # (numpy 2's stub reads the names as its flags)
        (tmp / _META).write_text(json.dumps({"layout": layout, **meta}))


def load_facade(
    path: str | Path, rb: Target, where: str, layout: dict[str, Any],
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read what :func:`dump_facade` wrote and load the buffer; returns the facade's ``(arrays, meta)``.

    Args:
        path: the checkpoint directory.
        rb: the facade's buffer, loaded in place; or a function of the facade's
            ``(arrays, meta)``, called once the layout matches, that builds the buffer
            to load (``None`` when the checkpoint holds none).
        where: the caller, for messages.
        layout: how this facade was built, as :func:`dump_facade` got it.

    The samplers' own settings (window length, goals, masks) stay this
    facade's: they are drawn at sample time from the stored steps.

    Raises:
        ValueError: ``path`` holds no such checkpoint, or one of a facade with
            another layout (each difference named; nothing is loaded then).
    """
    with reading(_directory(where, path)) as directory:
        if not (directory / _META).exists():
            raise ValueError(f"{where}: {directory} holds no checkpoint written by dumps() (no {_META}).")
        meta = json.loads((directory / _META).read_text())
        mine = json.loads(json.dumps(layout))  # as saved: tuples as lists
        differ = [f"{name}: the checkpoint has {meta['layout'].get(name)!r}, this one {value!r}"
                  for name, value in mine.items() if meta["layout"].get(name) != value]
        if differ:
            raise ValueError(
                f"{where}: {directory} was written by a facade built otherwise: {'; '.join(differ)}; "
                "build it as the saved one was."
            )
        with np.load(directory / _ARRAYS) as saved:
            arrays = {name: saved[name] for name in saved.files}
        # the facade's own settings stay (n_step, goals, mask size): drawn at sample time
        # from the stored steps, they are the constructor's, not the checkpoint's; but
        # for the masks' key, which fixes each stored transition's mask for its life
        if not isinstance(rb, TransitionReplayBuffer):
            built = rb(arrays, meta)
            if built is None:
                return arrays, meta
            rb = built
        settings = [(sampler, sampler.settings()) for sampler in _chain(rb.sampler)]
        rb.loads(directory / "buffer")
        for sampler, kept in settings:
            sampler.load_settings({**kept, **{k: v for k, v in sampler.settings().items() if k == "key"}})
    return arrays, meta


def _chain(sampler: Any) -> list[Any]:
    """The refining samplers of ``sampler``'s chain (those with settings of their own)."""
    out = []
    while isinstance(sampler, RefiningSampler):
        out.append(sampler)
        sampler = sampler.base
    return out


def _directory(where: str, path: Any) -> Path:
    """``path`` as the checkpoint's directory; a ``TypeError`` naming it if it is none (``3``, ``None``)."""
    return cast(Path, check_dir(where, "path", path, optional=False))
