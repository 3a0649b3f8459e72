"""Waking the idle workers of other processes on one SQLite file (SPEC §14): the cheap
wake-up that LISTEN/NOTIFY gives on PostgreSQL.

``<database>-wake`` holds 8 bytes. A commit that makes work claimable for workers of other
processes — an enqueue, a lease given back, a settle that freed a slot of a queue with a
``concurrency`` limit — rewrites them with random bytes (:meth:`WakeFile.touch`, one ``pwrite``).
In a process where a worker waits for work, a watcher thread (started by the first wait, like
PostgreSQL's LISTEN thread) reads them every :data:`WATCH_INTERVAL_S` and bumps the store's
:class:`~jobledger.store.tx.WorkSignal` when they changed. Reading 8 bytes from the page cache
100 times a second costs nothing measurable; like every wake-up it is a latency hint only —
workers still poll, so a lost one costs at most one poll interval.

Random bytes rather than a counter: two processes writing at once cannot write the same value
(a read-modify-write counter could), and unlike a timestamp no two writes within one clock tick
look alike. The descriptor belongs to the process that opened it; after ``fork()`` the child
opens its own (the watcher thread does not survive a fork; the child starts its own on its first
wait).
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

from ..tx import WorkSignal

__all__ = ["WATCH_INTERVAL_S", "WakeFile", "wake_path"]

WATCH_INTERVAL_S = 0.01
_SIZE = 8


def wake_path(database: Path) -> Path:
    return Path(f"{database}-wake")


class WakeFile:
    """The wake file of one database, for one store handle (module docstring)."""

    def __init__(self, database: Path) -> None:
        self._path = wake_path(database)
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._pid = os.getpid()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Set once this process's watcher has read the bytes it compares against (tests).
        self.watching = threading.Event()

    def _descriptor(self) -> int | None:
        """This process's descriptor (opened on first use; ``None`` if it cannot be opened:
        the wake-up is an optimisation, the poll still runs)."""
        with self._lock:
            if self._pid != os.getpid():  # inherited across fork(): the child opens its own
                self._pid, self._fd, self._thread = os.getpid(), None, None
                self.watching = threading.Event()
            if self._fd is None and not self._stop.is_set():
                try:
                    self._fd = os.open(
                        self._path,
                        os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                        0o600,
                    )
                except OSError:
                    return None
            return self._fd

    def touch(self) -> None:
        """Announce claimable work to the other processes' waiting workers."""
        fd = self._descriptor()
        if fd is not None:
            with contextlib.suppress(OSError):
                os.pwrite(fd, os.urandom(_SIZE), 0)

    def _read(self, fd: int) -> bytes:
        try:
            return os.pread(fd, _SIZE, 0)
        except OSError:
            return b""

    def watch(self, signal: WorkSignal) -> None:
        """Start the watcher thread that bumps ``signal`` when the bytes change (once per
        process; a no-op after :meth:`close`)."""
        fd = self._descriptor()
        if fd is None:
            return
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            thread = self._thread = threading.Thread(
                target=self._run, args=(fd, signal), name="jobledger-wake-watch", daemon=True
            )
        thread.start()

    def _run(self, fd: int, signal: WorkSignal) -> None:
        pid = os.getpid()
        seen = self._read(fd)
        self.watching.set()
        while not self._stop.wait(WATCH_INTERVAL_S) and os.getpid() == pid:
            current = self._read(fd)
            if current != seen:
                seen = current
                signal.notify()

    def after_fork_in_child(self) -> None:
        """In a forked child: its own descriptor (opened on next use) and watcher."""
        with contextlib.suppress(OSError):
            if self._fd is not None:
                os.close(self._fd)  # this process's copy; the parent's stays open
        self._lock = threading.Lock()
        self._fd, self._thread, self._pid = None, None, os.getpid()
        self._stop = threading.Event()
        self.watching = threading.Event()

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            thread, self._thread = self._thread, None
            fd, self._fd = self._fd, None
            mine = self._pid == os.getpid()
        if thread is not None and mine and thread is not threading.current_thread():
            thread.join(1.0)
        if fd is not None and mine:
            with contextlib.suppress(OSError):
                os.close(fd)
