"""LISTEN/NOTIFY: wake this process's idle workers when another process enqueues work.

A notification is only a latency hint. Workers still poll and leases still expire, so a
notification lost while the listener reconnects costs at most one poll interval; after every
(re)connection the listener bumps the signal once anyway, in case work arrived meanwhile.

The listener holds one dedicated connection (``LISTEN`` needs a session, so it cannot go
through PgBouncer's transaction mode — open the store with ``listen=False`` there).
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from collections.abc import Callable

import psycopg

from .. import forks
from ..ledger import WorkSignal
from ..settle_signal import SettleSignal

__all__ = ["NotificationListener"]

INITIAL_BACKOFF_S = 0.1
MAX_BACKOFF_S = 5.0
# How long the connection may stay silent before a SELECT 1 checks it is still alive.
KEEPALIVE_S = 10.0


class NotificationListener:
    """A daemon thread that ``LISTEN``s on ``channel`` and bumps ``signal`` per notification
    (or hands its payload to ``on_payload``), and once after every (re)connection."""

    def __init__(
        self,
        conninfo: str,
        *,
        channel: str,
        signal: WorkSignal | SettleSignal,
        connect_timeout: int,
        on_payload: Callable[[str], None] | None = None,
    ) -> None:
        self._conninfo = conninfo
        self._channel = channel
        self._signal = signal
        # Given: each notification's payload goes there instead of a plain bump of the signal.
        self._on_payload = on_payload
        self._connect_timeout = connect_timeout
        self._stopping = threading.Event()
        self._wake_read, self._wake_write = os.pipe()
        # Guards the pipe's descriptors: closed exactly once, never written after closing (a
        # reused descriptor number could belong to someone else's file by then).
        self._pipe_lock = threading.Lock()
        self._pipe_open = True
        self.connected = threading.Event()
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self.connections = 0  # how many times a LISTEN connection was established
        self.backend_pid: int | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"jobledger-listen-{channel}", daemon=True
        )

    def start(self) -> None:
        """Start listening (once; a stopped listener stays stopped)."""
        if self._stopping.is_set() or self._thread.ident is not None:
            return
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the thread; wait at most ``timeout_s`` for it (it may be stuck connecting).

        A thread still blocked after the wait is a daemon that exits on its own once the
        blocking call returns; it closes the pipe itself, so nothing it uses is closed under it.
        """
        if self._stopping.is_set():
            return
        self._stopping.set()
        with self._pipe_lock:
            if self._pipe_open:
                with contextlib.suppress(OSError):
                    os.write(self._wake_write, b"x")
        if self._thread.ident is None:  # never started: nothing else will close the pipe
            self._close_pipe()
        elif self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def disown_in_child(self) -> None:
        """In a forked child: leave the parent's LISTEN connection and wake pipe alone — the
        socket is pointed at /dev/null (closing it here would end the parent's session), this
        process's copies of the pipe are closed (a write would wake the parent's thread), and
        the object is kept, never started or stopped again (forks.py)."""
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(Exception):
                forks.disown_socket(conn.pgconn.socket)
        self._stopping.set()
        self._pipe_lock = threading.Lock()
        self._close_pipe()
        forks.abandon(self, conn)

    def _close_pipe(self) -> None:
        with self._pipe_lock:
            if not self._pipe_open:
                return
            self._pipe_open = False
            for descriptor in (self._wake_read, self._wake_write):
                with contextlib.suppress(OSError):
                    os.close(descriptor)

    def _sleep(self, seconds: float) -> bool:
        """Wait ``seconds`` or until stopped; True when stopping."""
        with contextlib.suppress(OSError, ValueError):
            select.select([self._wake_read], [], [], seconds)
        return self._stopping.is_set()

    def _run(self) -> None:
        try:
            self._listen_until_stopped()
        finally:
            self._close_pipe()

    def _listen_until_stopped(self) -> None:
        backoff = INITIAL_BACKOFF_S
        while not self._stopping.is_set():
            conn: psycopg.Connection[tuple[object, ...]] | None = None
            try:
                conn = psycopg.connect(
                    self._conninfo,
                    autocommit=True,
                    connect_timeout=self._connect_timeout,
                    application_name="jobledger-listener",
                    # On a silently cut network the keepalive SELECT 1 would otherwise wait
                    # for TCP's own give-up (minutes); these make it fail within ~30 s.
                    keepalives=1,
                    keepalives_idle=10,
                    keepalives_interval=5,
                    keepalives_count=3,
                    tcp_user_timeout=30_000,
                )
                self._conn = conn
                conn.execute(f"LISTEN {self._channel}")
                self.backend_pid = conn.info.backend_pid
                self.connections += 1
                self.connected.set()
                backoff = INITIAL_BACKOFF_S
                self._signal.notify()  # work may have been enqueued while nobody listened
                self._pump(conn)
            except (psycopg.Error, OSError):
                pass  # reconnect below; the worker's polling covers the gap
            finally:
                self.connected.clear()
                self._conn = None
                if conn is not None:
                    with contextlib.suppress(psycopg.Error, OSError):
                        conn.close()
            if self._sleep(backoff):
                return
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _pump(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        while not self._stopping.is_set():
            ready, _, _ = select.select([conn.fileno(), self._wake_read], [], [], KEEPALIVE_S)
            if self._wake_read in ready:
                return
            if not ready:
                conn.execute("SELECT 1")  # raises if the server went away silently
            for notification in conn.notifies(timeout=0.0):
                if self._on_payload is not None:
                    self._on_payload(notification.payload)
                else:
                    self._signal.notify()
