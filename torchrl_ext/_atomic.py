"""Crash-safe writes: the one place that turns a save into write-then-rename.

A snapshot directory is written whole into a hidden sibling, flushed to disk,
then swapped in by renames; the previous complete snapshot stays until the new
one is in place. :func:`recover` (called before every reopen) finishes or undoes
a swap a crash interrupted, so a reopen sees the previous or the new snapshot,
never a mix of both.

Saves and reads of one path, in any process, take turns on an advisory lock
(``flock`` of a hidden ``.<name>.lock`` sibling, removed on release and
released by the kernel when a process dies, even by ``kill -9``): a process reloading a checkpoint that
another keeps saving waits for the save in progress, instead of reading files
of two snapshots or taking the half-written one for a crash's leftover.
"""
from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # not on Windows: saves and reads of one path do not take turns
    fcntl = None  # type: ignore[assignment]

__all__ = ["atomic_dir", "atomic_write_text", "reading", "recover"]


def _sibling(path: Path, tag: str) -> Path:
    return path.parent / f".{path.name}.{tag}"


@contextlib.contextmanager
def _turn(path: Path) -> Iterator[None]:
    """Hold the lock of ``path`` (exclusive, blocking) for the duration of the block.

    Where the lock file cannot be created (a read-only checkpoint, a missing
    parent) nobody can be saving there, and the block runs unlocked.
    """
    lock = _sibling(path, "lock")
    while True:
        descriptor = None
        if fcntl is not None:
            with contextlib.suppress(OSError):
                descriptor = os.open(lock, os.O_RDWR | os.O_CREAT)
        if descriptor is None:
            yield
            return
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        # the holder before us removes the file on release (no lock files left
        # behind): the lock is ours only if the file we hold is still the one there
        with contextlib.suppress(OSError):
            if os.fstat(descriptor).st_ino == os.stat(lock).st_ino:
                break
        os.close(descriptor)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(descriptor)  # releases the lock


def _recover(path: Path) -> Path:
    old, new = _sibling(path, "old"), _sibling(path, "new")
    if not path.exists() and old.exists():
        os.replace(old, path)
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(new, ignore_errors=True)
    return path


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
    with _turn(path):  # a save in progress in another process is no crash's leftover
        return _recover(path)


@contextlib.contextmanager
def reading(path: str | Path) -> Iterator[Path]:
    """:func:`recover` ``path``, then keep saves of it out while the block reads it.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> snap = Path(tempfile.mkdtemp()) / "snap"
        >>> with atomic_dir(snap) as tmp:
        ...     _ = (tmp / "a.txt").write_text("1")
        >>> with reading(snap) as path:
        ...     (path / "a.txt").read_text()
        '1'
    """
    path = Path(path)
    with _turn(path):
        yield _recover(path)


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
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _turn(path):
        _recover(path)
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
