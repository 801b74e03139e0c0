"""Our own on-disk episode format: memory-mapped TorchRL transitions, reloadable into our buffers."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl_ext._atomic import atomic_dir, atomic_write_text
from torchrl_ext.export.episodes import HeldEpisode, episodes_of

__all__ = ["load_buffer", "load_episodes", "save_episodes"]

_FORMAT = "torchrl_ext.episodes/2"  # what save_episodes writes
# what load_episodes reads: 2 adds each episode's first held step (first_step)
# to its record; 1 had four fields (read as first_step = 1 for an incomplete
# episode, the least it lost)
_READS = ("torchrl_ext.episodes/2", "torchrl_ext.episodes/1")


def save_episodes(rb: Any, path: str | Path) -> None:
    """Write the episodes ``rb`` holds under ``path`` (a new or empty directory).

    ``path/steps``: every held transition as a memory-mapped TensorDict (the
    stored entries, next observations included), episodes one after another;
    ``path/meta.json``: the format (``torchrl_ext.episodes/2``), each
    episode's stream, length, ``finished``, ``complete`` and ``first_step``
    (see :class:`~torchrl_ext.export.HeldEpisode`), and the
    buffer's ``max_size`` and stream count. Read it back with
    :func:`load_episodes` or :func:`load_buffer`.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict, TensorDictBase
        >>> from torchrl_ext import make_replay_buffer
        >>> rb = make_replay_buffer(32)
        >>> _ = rb.extend(TensorDict({"observation": torch.zeros(2, 1), "action": torch.zeros(2, 1),
        ...     "next": {"observation": torch.ones(2, 1), "reward": torch.ones(2, 1),
        ...              "done": torch.tensor([[True], [False]])}}, [2]))
        >>> with tempfile.TemporaryDirectory() as path:
        ...     save_episodes(rb, path)
        ...     [(e.stream, e.finished) for e in load_episodes(path)]
        [(0, True), (1, False)]
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if (path / "meta.json").exists():
        raise FileExistsError(f"save_episodes: {path} already holds an export; pass a new directory.")
    episodes = episodes_of(rb)
    storage = getattr(rb, "storage", rb)
    meta = {
        "format": _FORMAT,
        "max_size": storage.max_size,
        "num_streams": storage.num_streams,
        "episodes": [[e.stream, len(e), e.finished, e.complete, e.first_step] for e in episodes],
    }
    if episodes:  # the steps whole first, meta.json last: a crash leaves no export
        with atomic_dir(path / "steps") as tmp:
            cast(TensorDictBase, torch.cat([e.steps for e in episodes])).memmap(tmp)
    atomic_write_text(path / "meta.json", json.dumps(meta))


def _meta(path: Path) -> dict[str, Any]:
    try:
        meta = json.loads((path / "meta.json").read_text())
    except (OSError, ValueError) as error:
        raise ValueError(
            f"{path} holds no complete export ({error}); save_episodes writes meta.json last."
        ) from error
    if meta.get("format") not in _READS:
        raise ValueError(
            f"{path}: format {meta.get('format')!r}, expected one of "
            f"{', '.join(map(repr, _READS))} (save_episodes)."
        )
    return meta


def load_episodes(path: str | Path) -> list[HeldEpisode]:
    """The episodes :func:`save_episodes` wrote, memory-mapped (no copy).

    Reads formats 2 and 1 (exports before ``first_step`` was recorded: an
    incomplete episode reads as ``first_step=1``).

    Raises:
        ValueError: ``path`` holds no export, or one of another format.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import make_replay_buffer
        >>> from torchrl_ext.export import save_episodes
        >>> rb = make_replay_buffer(32)
        >>> _ = rb.extend(TensorDict({"observation": torch.zeros(2, 1), "action": torch.zeros(2, 1),
        ...     "next": {"observation": torch.ones(2, 1), "reward": torch.ones(2, 1),
        ...              "done": torch.tensor([[True], [False]])}}, [2]))
        >>> with tempfile.TemporaryDirectory() as path:
        ...     save_episodes(rb, path)
        ...     [(len(e), e.finished) for e in load_episodes(path)]
        [(1, True), (1, False)]
    """
    path = Path(path)
    meta = _meta(path)
    if not meta["episodes"]:
        return []
    steps = TensorDict.load_memmap(path / "steps")
    out, lo = [], 0
    for stream, length, finished, complete, *first in meta["episodes"]:
        # format 1 had no first_step: 1, the least an incomplete episode lost
        first_step = first[0] if first else int(not complete)
        out.append(HeldEpisode(stream, steps[lo : lo + length], finished, complete, first_step))
        lo += length
    return out


def load_buffer(path: str | Path, **kwargs: Any) -> Any:
    """A new buffer holding what :func:`save_episodes` wrote, ready to sample and to extend.

    Built by :func:`~torchrl_ext.make_replay_buffer` with the saved
    ``max_size`` and stream count (override with ``capacity=`` /
    ``num_streams=``; other keywords go to ``make_replay_buffer``). Each
    stream's episodes are written back in order; an episode that was still
    being written stays open, so writing the stream's next steps continues it,
    one that ended without a done flag (cut) stays ended, and one whose first
    rows the ring had overwritten stays incomplete (no frame stack, sequence
    or goal reaches before its oldest saved step).

    Raises:
        ValueError: the directory is not an export of :func:`save_episodes`.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext import make_replay_buffer
        >>> from torchrl_ext.export import save_episodes
        >>> rb = make_replay_buffer(32)
        >>> _ = rb.extend(TensorDict({"observation": torch.zeros(2, 1), "action": torch.zeros(2, 1),
        ...     "next": {"observation": torch.ones(2, 1), "reward": torch.ones(2, 1),
        ...              "done": torch.tensor([[True], [False]])}}, [2]))
        >>> with tempfile.TemporaryDirectory() as path:
        ...     save_episodes(rb, path)
        ...     restored = load_buffer(path, batch_size=4)
        ...     len(restored), restored.sample()["next", "reward"].shape
        (2, torch.Size([4, 1]))
    """
    from torchrl_ext.builders import make_replay_buffer

    path = Path(path)
    meta = _meta(path)
    num_streams = kwargs.pop("num_streams", meta["num_streams"])
    rb = make_replay_buffer(kwargs.pop("capacity", meta["max_size"]), num_streams=num_streams, **kwargs)
    # Each stream's episodes go back in order, one write per run of episodes
    # the writer can tell apart by their done flags. An episode that ended
    # without one (cut: an env reset by hand, a writer released) ends its
    # run, and is ended after the write as it was in the saved buffer:
    # written on, the next episode would be joined to it.
    runs: list[list[list[TensorDictBase]]] = [[[]] for _ in range(num_streams)]
    episodes = load_episodes(path)
    for episode in episodes:
        runs[episode.stream][-1].append(episode.steps)
        if episode.finished and not _done_flagged(rb.writer, episode.steps[-1]):
            runs[episode.stream].append([])  # cut: the next episode starts a new run
    for j in range(max(len(r) for r in runs)):
        parts = [r[j] if j < len(r) else [] for r in runs]
        _write_run(rb, [cast(TensorDictBase, torch.cat(p)) if p else None for p in parts])
        cut = [s for s, r in enumerate(runs) if j < len(r) - 1]
        if cut:
            rb.writer.end_episodes(cut)
    # An episode whose first rows the ring had overwritten (each stream's first one at
    # most) begins before its rows again: no window reaches into the rows it lost. (A
    # stream this reload already overwrote has lost rows of its own: left as it is.)
    index = rb.storage.index
    first_steps = {e.stream: e.first_step for e in reversed(episodes)}  # each stream's first
    for stream, first_step in first_steps.items():
        if first_step and int(index.written[stream]) <= index.stream_capacity:
            index.backdate(stream, first_step)
    return rb


def _done_flagged(writer: Any, step: TensorDictBase) -> bool:
    """Whether one of ``writer``'s done entries is set at ``step``."""
    return any(bool(step.get(key).any()) for key in writer.done_keys if key in step.keys(True))


def _write_run(rb: Any, joined: list[TensorDictBase | None]) -> None:
    """Write ``joined[s]`` (steps in time order, or None) to stream ``s``: one ``[streams, T]`` write."""
    present = [j for j in joined if j is not None]
    if not present:
        return
    T = max(len(j) for j in present)
    data = present[0][:1].expand(len(joined), T).clone()  # [streams, T]
    mask = torch.zeros(len(joined), T, dtype=torch.bool)
    for s, steps in enumerate(joined):
        if steps is not None:
            data[s, : len(steps)] = steps
            mask[s, : len(steps)] = True
    data.set(rb.writer.mask_key, mask)
    rb.extend(data)
