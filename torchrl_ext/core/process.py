"""This process's id, read without a system call.

A buffer checks on every write that it runs in the process that built it (a
copy forked into a collector's worker is a writer of its own). ``os.getpid()``
is a system call each time (glibc stopped caching it), about 1 µs of a
40 µs write once the caches are cold; the id changes only at a fork, where
``os.register_at_fork`` refreshes it. A spawned process imports this module
afresh.
"""
from __future__ import annotations

import os

__all__ = ["current_pid"]

_pid = os.getpid()


def _after_fork() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_after_fork)


def current_pid() -> int:
    """``os.getpid()``, kept since the last fork.

    Examples:
        >>> import os
        >>> current_pid() == os.getpid()
        True
    """
    return _pid
