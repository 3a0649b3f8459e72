"""Is a lease holder still alive? A lock each worker holds, that dies with its process.

A worker takes an exclusive ``flock`` on its own file in ``<database>-owners/`` for as long as it
runs. The kernel drops that lock the moment the process ends, however it ends (SIGKILL, a
crash, the machine's power is the exception: then nothing runs to reclaim anyway). So when
another process can take the lock, the owner is certainly gone and its leases can be reclaimed
at once instead of after they expire. A file that does not exist says nothing (the owner never
took one: a script calling ``run_next``, say), and then its leases simply run out. The check is
only meaningful on one machine: a SQLite database is not shared across machines.

The same lock also says an owner is certainly *alive* (:func:`owner_held`): claims do not take
over an expired lease whose owner still holds its lock, and that owner may still renew or settle
it (a forward step of the clock expires every lease at once while their holders run).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
from pathlib import Path

from .. import forks

__all__ = ["OwnerLock", "UnsafeOwnersDirectory", "owner_gone", "owner_held", "owners_directory"]

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeOwnersDirectory(OSError):
    """``<database>-owners`` is not a private directory of ours (a symlink, another owner's)."""


def owners_directory(database: Path) -> Path:
    return Path(f"{database}-owners")


def _lock_name(owner_id: str) -> str:
    return hashlib.sha256(owner_id.encode("utf-8")).hexdigest()[:32] + ".lock"


def _open_directory(database: Path, *, create: bool) -> int:
    """A descriptor of ``<database>-owners``, refusing a symlink or a directory we do not own:
    lock files are created and unlinked only through it, so nothing outside is ever touched."""
    path = owners_directory(database)
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
    try:
        fd = os.open(path, _DIRECTORY_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeOwnersDirectory(f"{path} is not a directory") from None
        raise
    info = os.fstat(fd)
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        os.close(fd)
        raise UnsafeOwnersDirectory(f"{path} is not private to this user")
    return fd


class OwnerLock:
    """The lock a live owner holds (see the module docstring); :meth:`close` gives it up."""

    kind = "flock"
    refresh_interval = None  # the kernel holds it for exactly the process's life

    def __init__(self, database: Path, owner_id: str) -> None:
        self._name = _lock_name(owner_id)
        self.path = owners_directory(database) / self._name
        self._directory = _open_directory(database, create=True)
        self._fd: int | None = None
        try:
            self._fd = os.open(
                self._name,
                os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
                dir_fd=self._directory,
            )
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            os.close(self._directory)
            raise
        forks.register(self)

    def _after_fork_in_child(self) -> None:
        """In a forked child the lock is the parent's (an ``flock`` belongs to the file
        description both share): close this process's copies without unlocking or unlinking,
        so the lock still ends exactly when the parent does, and a close here is a no-op."""
        fd, self._fd = self._fd, None
        if fd is not None:
            for descriptor in (fd, self._directory):
                with contextlib.suppress(OSError):
                    os.close(descriptor)

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
            os.unlink(self._name, dir_fd=self._directory)
        os.close(fd)
        os.close(self._directory)


def owner_gone(database: Path, owner_id: str) -> bool:
    """True when ``owner_id`` held a lock file and no process holds it now.

    Anything unexpected (no directory, a symlink, a file we cannot open or lock) answers
    ``False``: "not known to be gone", so its leases simply run out instead.
    """
    name = _lock_name(owner_id)
    try:
        directory = _open_directory(database, create=False)
    except OSError:
        return False
    try:
        try:
            fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
        except OSError:
            return False
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return False
            # Gone. Remove the file while holding the lock, so the next check is a cheap miss.
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=directory)
            return True
        finally:
            os.close(fd)
    finally:
        os.close(directory)


def owner_held(database: Path, owner_id: str) -> bool:
    """True when some process holds ``owner_id``'s lock now: that owner is certainly alive.

    A shared lock is tried and given back at once; it fails only while an owner holds its
    exclusive one. No file, or anything unexpected, answers ``False`` ("not known to be
    alive"): the owner's leases then expire as they always did. Nothing is removed.
    """
    try:
        directory = _open_directory(database, create=False)
    except OSError:
        return False
    try:
        try:
            fd = os.open(
                _lock_name(owner_id), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory
            )
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return False
        finally:
            os.close(fd)  # closing gives back a shared lock taken just now
        return False
    finally:
        os.close(directory)
