"""A queue in front of SQLite's write lock, so writers on one file take turns fairly.

SQLite's busy handler makes a blocked writer *sleep* 1, 2, 5, 10 … 100 ms between retries,
while the process that just committed takes the lock again microseconds later. Under load the
sleepers keep missing the lock: measured with four processes draining one file, one process
got no claim at all in a 4 s drain and another waited 5.6 s for its first one.

The gate is an ``flock`` on a private ``<database>-writelock`` file taken around every write
transaction. A blocked ``flock`` sleeps in the kernel and wakes as soon as the lock is free, so
writers hand the lock over in turn. It is an optimisation only: ``BEGIN IMMEDIATE`` inside the
gate still decides who writes, so a process that does not use the gate (or a gate that timed
out) stays correct.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from pathlib import Path

__all__ = ["WriteGate", "gate_path"]


def gate_path(database: Path) -> Path:
    return Path(f"{database}-writelock")


class WriteGate:
    """An inter-process exclusive lock with a bounded wait.

    ``flock`` has no timeout, so a contended acquire waits in a helper thread; if the wait
    outlasts ``timeout_s`` the caller goes ahead without the gate (SQLite's own busy timeout
    then applies) and the helper drops the lock as soon as it gets it.
    """

    def __init__(self, database: Path, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        self._fd = os.open(
            gate_path(database), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        self._held = False

    def acquire(self) -> bool:
        """Take the gate; False when it could not be had within the timeout."""
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return self._acquire_slowly()
        self._held = True
        return True

    def _acquire_slowly(self) -> bool:
        granted = threading.Event()
        state_lock = threading.Lock()
        abandoned = False

        def wait_for_lock() -> None:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            with state_lock:
                if abandoned:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
                    return
                granted.set()

        threading.Thread(target=wait_for_lock, name="jobledger-write-gate", daemon=True).start()
        if not granted.wait(self._timeout_s):
            with state_lock:
                if not granted.is_set():
                    abandoned = True
                    return False
        self._held = True
        return True

    def release(self) -> None:
        if self._held:
            self._held = False
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        self.release()
        os.close(self._fd)

    def drop_in_child(self) -> None:
        """In a forked child: close this process's copy of the descriptor without unlocking —
        ``flock`` belongs to the open file description the parent shares, so an unlock here
        would release the parent's lock."""
        self._held = False
        with contextlib.suppress(OSError):
            os.close(self._fd)
