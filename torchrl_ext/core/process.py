"""This process's id, read without a system call; what must hold across a fork.

A buffer checks on every write that it runs in the process that built it (a
copy forked into a collector's worker is a writer of its own). ``os.getpid()``
is a system call each time (glibc stopped caching it), about 1 µs of a
40 µs write once the caches are cold; the id changes only at a fork, where
``os.register_at_fork`` refreshes it. A spawned process imports this module
afresh.

A thread that forks while another thread holds a lock leaves the child a copy
of that lock, held by a thread the child does not have: the child's first use
of it (a DataLoader worker's first sample) waits forever. :func:`guard_forks`
has an object's thread locks taken before every fork and released after it,
on both sides.
"""
from __future__ import annotations

import fcntl
import os
import tempfile
import threading
import weakref
from typing import Any

__all__ = ["FileLock", "current_pid", "guard_forks", "process_exited"]

_pid = os.getpid()


def _after_fork() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_after_fork)

# the guarded objects by level: level 0's locks are taken first (see guard_forks)
_GUARDED: tuple[weakref.WeakSet[Any], weakref.WeakSet[Any]] = (weakref.WeakSet(), weakref.WeakSet())
_HELD: list[Any] = []


def guard_forks(owner: Any, *, level: int) -> None:
    """Hold ``owner``'s thread locks across every fork of this process.

    Before a fork, each guarded object's ``_fork_locks()`` are taken, level
    0's objects first and then level 1's (the order a write takes them: a
    buffer's locks, then its storage's), and its ``_before_fork()`` runs with
    them held (a storage moves its rows to shared memory there). After the
    fork both sides release them. Objects are held weakly.

    Examples:
        >>> import os, threading
        >>> class Owner:
        ...     def __init__(self):
        ...         self.lock, self.forks = threading.Lock(), 0
        ...     def _fork_locks(self):
        ...         return (self.lock,)
        ...     def _before_fork(self):
        ...         self.forks += 1
        >>> owner = Owner()
        >>> guard_forks(owner, level=0)
        >>> pid = os.fork()
        >>> if pid == 0:
        ...     os._exit(0 if owner.lock.acquire(blocking=False) else 1)  # the child's copy is free
        >>> os.waitpid(pid, 0)[1], owner.forks, owner.lock.locked()
        (0, 1, False)
    """
    _GUARDED[level].add(owner)


def _hold_before_fork() -> None:
    for group in _GUARDED:
        for owner in list(group):
            for lock in owner._fork_locks():
                lock.acquire()
                _HELD.append(lock)
            owner._before_fork()


def _release_after_fork() -> None:
    while _HELD:
        _HELD.pop().release()


os.register_at_fork(
    before=_hold_before_fork, after_in_parent=_release_after_fork, after_in_child=_release_after_fork
)


def current_pid() -> int:
    """``os.getpid()``, kept since the last fork.

    Examples:
        >>> import os
        >>> current_pid() == os.getpid()
        True
    """
    return _pid


def process_exited(pid: int) -> bool:
    """Whether no process ``pid`` runs on this machine any more.

    A process that exists but is not ours to signal counts as running (never
    taken for gone); so does a child that exited but was not waited for yet.

    Examples:
        >>> import os
        >>> process_exited(os.getpid())
        False
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class FileLock:
    """A reentrant lock held by one thread of one process at a time, among every process that has it.

    An exclusive ``flock`` of a lock file, which the kernel drops when its
    holder dies (a worker killed mid-write leaves no lock behind), taken by
    the outermost acquire of a thread of this process (a thread lock keeps
    the process's other threads out). It travels by its file's path, however
    it is pickled (spawned with a process, sent through a queue); a forked
    child opens the file again, as the descriptor it inherits shares the
    parent's lock. The process that made it removes the file when done with it.

    Examples:
        >>> lock = FileLock()
        >>> with lock, lock:  # reentrant
        ...     pass
    """

    def __init__(self, path: str | None = None) -> None:
        if path is None:
            descriptor, path = tempfile.mkstemp(prefix="torchrl_ext-writers-", suffix=".lock")
            os.close(descriptor)
            # removed when this lock is collected or at exit, by this process only (a forked child has a copy)
            self._removal = weakref.finalize(self, _remove, path, _pid)
        self.path = path
        self._bind()

    def _bind(self) -> None:
        self._thread = threading.RLock()  # held across forks by the storage (see its _fork_locks)
        self._depth = 0
        self._descriptor = -1
        self._opened_in: int | None = None

    def __enter__(self) -> FileLock:
        self._thread.acquire()
        if not self._depth:
            if self._opened_in != _pid:  # first use here, or a forked child
                self._descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
                self._opened_in = _pid
                weakref.finalize(self, os.close, self._descriptor)
            fcntl.flock(self._descriptor, fcntl.LOCK_EX)
        self._depth += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        self._depth -= 1
        if not self._depth:
            fcntl.flock(self._descriptor, fcntl.LOCK_UN)
        self._thread.release()

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = state["path"]
        self._bind()


def _remove(path: str, made_in: int) -> None:
    if _pid != made_in:  # a forked child dropping its copy: the file is its maker's
        return
    try:
        os.unlink(path)
    except OSError:
        pass
