"""Crash-safe writes: the one place that turns a save into write-then-rename.

A snapshot directory is written whole into a hidden sibling, flushed to disk,
then swapped in by renames; the previous complete snapshot stays until the new
one is in place. :func:`recover` (called before every reopen) finishes or undoes
a swap a crash interrupted, so a reopen sees the previous or the new snapshot,
never a mix of both.
"""
from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_dir", "atomic_write_text", "recover"]


def _sibling(path: Path, tag: str) -> Path:
    return path.parent / f".{path.name}.{tag}"


def _fsync_tree(root: Path) -> None:
    for directory, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(directory, name), "rb") as file:
                os.fsync(file.fileno())
        _fsync_dir(Path(directory))


def _fsync_dir(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def recover(path: str | Path) -> Path:
    """Bring ``path`` back to its last complete snapshot after a crash.

    A crash between the two renames of :func:`atomic_dir` leaves the previous
    snapshot under a hidden ``.old`` name: it is put back. A half-written
    ``.new`` sibling is removed.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> root = Path(tempfile.mkdtemp())
        >>> with atomic_dir(root / "snap") as tmp:
        ...     _ = (tmp / "a.txt").write_text("1")
        >>> (recover(root / "snap") / "a.txt").read_text()
        '1'
    """
    path = Path(path)
    old, new = _sibling(path, "old"), _sibling(path, "new")
    if not path.exists() and old.exists():
        os.replace(old, path)
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(new, ignore_errors=True)
    return path


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a fresh hidden sibling of ``path`` to write a snapshot into.

    On a clean exit the sibling is flushed to disk and renamed to ``path``; the
    previous ``path`` is kept (renamed aside) until then and removed after. On
    an error the sibling is removed and ``path`` is untouched.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> snap = Path(tempfile.mkdtemp()) / "snap"
        >>> for text in ("first", "second"):
        ...     with atomic_dir(snap) as tmp:
        ...         _ = (tmp / "a.txt").write_text(text)
        >>> (snap / "a.txt").read_text()
        'second'
    """
    path = recover(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    new, old = _sibling(path, "new"), _sibling(path, "old")
    new.mkdir()
    try:
        yield new
        _fsync_tree(new)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    if path.exists():
        os.replace(path, old)
    os.replace(new, path)
    _fsync_dir(path.parent)
    shutil.rmtree(old, ignore_errors=True)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> target = Path(tempfile.mkdtemp()) / "meta.json"
        >>> atomic_write_text(target, "{}")
        >>> target.read_text()
        '{}'
    """
    path = Path(path)
    temporary = _sibling(path, "tmp")
    try:
        with open(temporary, "w") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
