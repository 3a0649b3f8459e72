"""Is a lease holder still alive? A session lock each worker holds, that dies with its session.

A worker holds a session-level advisory lock, keyed by its owner id (and the store's schema),
on a connection of its own, for as long as it runs. PostgreSQL releases it the moment that
session ends — the process was killed, crashed, or lost its connection (the server notices a
dead client through TCP keepalives). When another session can take the lock, the owner is gone
and its leases can be reclaimed at once. Only owners registered in ``jobledger_workers`` with
``"liveness": "advisory"`` are checked this way; anything else waits for its leases to expire.

A session can also end while its worker lives (a terminated backend, a server restart or
failover). The worker checks its session every ``LIVENESS_REFRESH`` and takes the lock again on
a new one; others count an owner gone only when they saw its lock free at two checks at least
``LIVENESS_CONFIRM`` apart, longer than a live worker needs to take it back — so a restart does
not make every worker reap every other's leases (and run their work twice).

What still waits for lease expiry: an owner whose session is alive but which cannot reach the
database otherwise (its session still holds the lock), and a partition in which the server has
not yet noticed the client is gone (bounded by the keepalive settings).
"""

from __future__ import annotations

import contextlib
import hashlib
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from ... import contract
from ..common import liveness_lock_unavailable
from ..sql import load_queries
from .connection import PgConnection, connection_kwargs

__all__ = [
    "LIVENESS_CONFIRM",
    "LIVENESS_REFRESH",
    "AdvisoryOwnerLock",
    "liveness_key",
    "lock_free",
]

# How often a worker checks its liveness session (one SELECT 1), and how long others must see
# its lock free before it counts as gone: the window covers a refresh plus a reconnect.
LIVENESS_REFRESH = timedelta(milliseconds=500)
LIVENESS_CONFIRM = timedelta(milliseconds=1500)
QUERIES = load_queries(Path(__file__).with_name("liveness.sql"))


def liveness_key(schema: str, owner_id: str) -> int:
    digest = hashlib.sha256(f"jobledger.liveness:{schema}:{owner_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class AdvisoryOwnerLock:
    """A dedicated connection holding this owner's advisory lock (see the module docstring)."""

    kind = "advisory"
    refresh_interval = LIVENESS_REFRESH

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
            locked = conn.execute(QUERIES["liveness_take"], {"key": self.key}).fetchone()
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
                conn.execute(QUERIES["liveness_ping"])
                return
            except psycopg.Error:
                conn.close()
        self._conn = None
        try:
            self._connect()
        except (psycopg.Error, RuntimeError) as exc:
            # Coded, so the worker's housekeeping logs it and tries again next time.
            raise liveness_lock_unavailable(exc, again=True) from None

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            # If this fails, the session ends below, which releases the lock anyway.
            with contextlib.suppress(psycopg.Error):
                conn.execute(QUERIES["liveness_give_back"], {"key": self.key})
            conn.close()


def lock_free(conn: PgConnection, owner_id: str, key: int) -> bool:
    """On a pooled connection: True when ``owner_id`` registered with an advisory lock and
    nobody holds ``key`` now (taken and given back at once). One observation: the store
    confirms it over ``LIVENESS_CONFIRM`` before it calls the owner gone."""
    row = conn.execute(QUERIES["liveness_registration"], {"owner": owner_id}).fetchone()
    if row is None:
        return False
    info = contract.parse_stored_json(row["info_json"])
    if not isinstance(info, dict) or info.get("liveness") != AdvisoryOwnerLock.kind:
        return False
    taken = conn.execute(QUERIES["liveness_take"], {"key": key}).fetchone()
    if taken is None or not taken["locked"]:
        return False
    conn.execute(QUERIES["liveness_give_back"], {"key": key})
    return True
