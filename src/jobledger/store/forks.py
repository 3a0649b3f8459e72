"""Fork safety (SPEC §14): a store used before ``os.fork()`` keeps working in both processes.

gunicorn ``--preload`` and multiprocessing's ``fork`` start method copy a process whose store
may already hold connections: a PostgreSQL pool and LISTEN connections, SQLite connections and
lock descriptors. A connection used by two processes interleaves their protocol messages (the
server answers one process's query to the other), so the child must never touch the parent's.
Every store registers here; right after a fork, in the child (``os.register_at_fork``), each one
drops what it inherited and opens its own on first use. The parent keeps everything.

Dropping must not disturb the parent either: closing a psycopg connection sends PostgreSQL a
Terminate message on the socket both processes share, which would end the *parent's* session.
So the child first points its copy of each such socket at ``/dev/null``
(:func:`disown_socket`): whatever later closes the object writes nowhere, and the parent's
socket stays as it was. Objects that cannot be closed safely in the child are kept referenced
(:func:`abandon`) so that nothing finalizes them while the child runs.

Threads do not survive a fork (only the forking thread runs in the child): listener and watcher
threads are started again by the child's first wait, and locks that another thread may have
held at the instant of the fork are replaced.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import weakref
from typing import Protocol

__all__ = ["abandon", "disown_socket", "register"]

logger = logging.getLogger("jobledger.store")


class _ForkAware(Protocol):
    def _after_fork_in_child(self) -> None: ...


_registered: weakref.WeakSet[_ForkAware] = weakref.WeakSet()
_abandoned: list[object] = []


def register(handle: _ForkAware) -> None:
    """Have ``handle._after_fork_in_child()`` run in the child after every fork."""
    _registered.add(handle)


def abandon(*objects: object) -> None:
    """Keep ``objects`` (inherited, unusable in this process) referenced for its life."""
    _abandoned.extend(objects)


def disown_socket(fd: int | None) -> None:
    """Point this process's descriptor ``fd`` at ``/dev/null``: closing the connection that
    owns it later writes nothing to the socket the parent still uses (and the descriptor number
    stays taken, so it cannot be reused for another file under the connection)."""
    if fd is None or fd < 0:
        return
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        try:
            os.dup2(devnull, fd, inheritable=False)
        finally:
            os.close(devnull)


def _in_child() -> None:
    for handle in list(_registered):
        try:
            handle._after_fork_in_child()
        except Exception:  # the child must start; its first use reports what is wrong
            logger.exception("resetting %r after fork failed", handle)


def _reset_locks_in_child() -> None:
    # Class-level locks another thread may have held at the fork.
    from .operations.base import OperationsBase
    from .operations.caller_tx import CallerTxOperations

    OperationsBase._job_cache_lock = threading.Lock()
    CallerTxOperations._store_id_lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_reset_locks_in_child)
    os.register_at_fork(after_in_child=_in_child)
