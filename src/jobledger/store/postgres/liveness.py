"""Is a lease holder still alive? A session lock each worker holds, that dies with its session.

A worker holds a session-level advisory lock, keyed by its owner id (and the store's schema),
on a connection of its own, for as long as it runs. PostgreSQL releases it the moment that
session ends — the process was killed, crashed, or lost its connection (the server notices a
dead client through TCP keepalives). When another session can take the lock, the owner is gone
and its leases can be reclaimed at once. Only owners registered in ``jobledger_workers`` with
``"liveness": "advisory"`` are checked this way; anything else waits for its leases to expire.

What still waits for lease expiry: an owner whose session is alive but which cannot reach the
database otherwise (its session still holds the lock), and a partition in which the server has
not yet noticed the client is gone (bounded by the keepalive settings).
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Any

import psycopg

from .connection import PgConnection, connection_kwargs

__all__ = ["AdvisoryOwnerLock", "liveness_key", "owner_gone"]


def liveness_key(schema: str, owner_id: str) -> int:
    digest = hashlib.sha256(f"jobledger.liveness:{schema}:{owner_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class AdvisoryOwnerLock:
    """A dedicated connection holding this owner's advisory lock (see the module docstring)."""

    kind = "advisory"

    def __init__(self, conninfo: str, *, schema: str, owner_id: str, connect_timeout: int) -> None:
        self._conninfo = conninfo
        self._connect_timeout = connect_timeout
        self.key = liveness_key(schema, owner_id)
        self._conn: PgConnection | None = None
        self._connect()

    def _connect(self) -> None:
        kwargs: dict[str, Any] = connection_kwargs(
            connect_timeout=self._connect_timeout, prepare_threshold=None
        )
        kwargs["application_name"] = "jobledger-liveness"
        conn: PgConnection = psycopg.Connection.connect(self._conninfo, **kwargs)
        try:
            locked = conn.execute(
                "SELECT pg_try_advisory_lock(%(key)s) AS locked", {"key": self.key}
            ).fetchone()
        except BaseException:
            conn.close()
            raise
        if locked is None or not locked["locked"]:
            conn.close()
            raise RuntimeError("another live session already holds this owner's lock")
        self._conn = conn

    @property
    def held(self) -> bool:
        return self._conn is not None and not self._conn.closed

    def refresh(self) -> None:
        """Check the session is alive; take the lock again on a new one if it was lost."""
        conn = self._conn
        if conn is not None and not conn.closed:
            try:
                conn.execute("SELECT 1")
                return
            except psycopg.Error:
                conn.close()
        self._conn = None
        self._connect()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            # If this fails, the session ends below, which releases the lock anyway.
            with contextlib.suppress(psycopg.Error):
                conn.execute("SELECT pg_advisory_unlock(%(key)s)", {"key": self.key})
            conn.close()


def owner_gone(conn: PgConnection, key: int) -> bool:
    """On a pooled connection: True when nobody holds ``key`` (taken and given back at once)."""
    row = conn.execute("SELECT pg_try_advisory_lock(%(key)s) AS free", {"key": key}).fetchone()
    if row is None or not row["free"]:
        return False
    conn.execute("SELECT pg_advisory_unlock(%(key)s)", {"key": key})
    return True
