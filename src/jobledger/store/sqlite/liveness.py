"""Is a lease holder still alive? A lock each worker holds, that dies with its process.

A worker takes an exclusive ``flock`` on its own file in ``<database>-owners/`` for as long as it
runs. The kernel drops that lock the moment the process ends, however it ends (SIGKILL, a
crash, the machine's power is the exception: then nothing runs to reclaim anyway). So when
another process can take the lock, the owner is certainly gone and its leases can be reclaimed
at once instead of after they expire. A file that does not exist says nothing (the owner never
took one: a script calling ``run_next``, say), and then its leases simply run out. The check is
only meaningful on one machine: a SQLite database is not shared across machines.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from pathlib import Path

__all__ = ["OwnerLock", "owner_gone", "owners_directory"]


def owners_directory(database: Path) -> Path:
    return Path(f"{database}-owners")


def _lock_path(database: Path, owner_id: str) -> Path:
    digest = hashlib.sha256(owner_id.encode("utf-8")).hexdigest()[:32]
    return owners_directory(database) / f"{digest}.lock"


class OwnerLock:
    """The lock a live owner holds (see the module docstring); :meth:`close` gives it up."""

    kind = "flock"

    def __init__(self, database: Path, owner_id: str) -> None:
        directory = owners_directory(database)
        directory.mkdir(mode=0o700, exist_ok=True)
        self.path = _lock_path(database, owner_id)
        self._fd: int | None = os.open(
            self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._fd)
            self._fd = None
            raise

    @property
    def held(self) -> bool:
        return self._fd is not None

    def refresh(self) -> None:
        """An ``flock`` cannot be lost while its process lives: nothing to do."""

    def close(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(fd)


def owner_gone(database: Path, owner_id: str) -> bool:
    """True when ``owner_id`` held a lock file and no process holds it now."""
    path = _lock_path(database, owner_id)
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        # Gone. Remove the file while holding the lock, so the next check is a cheap miss.
        with contextlib.suppress(OSError):
            path.unlink()
        return True
    finally:
        os.close(fd)
