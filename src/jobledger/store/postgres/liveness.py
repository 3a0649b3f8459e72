"""Is a lease holder still alive? A session lock each worker holds, that dies with its session.

A worker holds a session-level advisory lock, keyed by its owner id (and the store's schema),
on a connection of its own, for as long as it runs. PostgreSQL releases it the moment that
session ends — the process was killed, crashed, or lost its connection (the server notices a
dead client through TCP keepalives). When another session can take the lock, the owner is gone
and its leases can be reclaimed at once. Only owners registered in ``jobledger_workers`` with
``"liveness": "advisory"`` are checked this way; anything else waits for its leases to expire.

A session can also end while its worker lives (a terminated backend, a flapping network or
pooler, a server restart or failover). The worker checks its session every ``LIVENESS_REFRESH``
and takes the lock again on a new one, bumping its **generation** (``jobledger_liveness``) in
the same statement. Another worker counts an owner gone only when it saw the lock free at two
samples at least ``LIVENESS_CONFIRM`` apart (longer than a live worker needs to take it back)
*and* the generation did not move between them: the lock stayed free, it was not merely free
again. So neither one restart nor a session cut every fraction of a second makes a worker reap
a live one's leases (and run its work twice). A sample reads the generation while holding the
owner's lock itself, so no take can commit unseen between the two readings.

What still waits for lease expiry: an owner whose session is alive but which cannot reach the
database otherwise (its session still holds the lock), and a partition in which the server has
not yet noticed the client is gone (bounded by the keepalive settings).
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from ... import contract
from .. import forks
from ..common import liveness_lock_unavailable
from ..sql import load_queries
from .connection import PgConnection, connection_kwargs

__all__ = [
    "LIVENESS_CONFIRM",
    "LIVENESS_REFRESH",
    "AdvisoryOwnerLock",
    "FreeSample",
    "liveness_key",
    "sample_free",
]

# How often a worker checks its liveness session (one SELECT 1), and how long others must see
# its lock free before it counts as gone: the window covers a refresh plus a reconnect.
LIVENESS_REFRESH = timedelta(milliseconds=500)
LIVENESS_CONFIRM = timedelta(milliseconds=1500)
QUERIES = load_queries(Path(__file__).with_name("liveness.sql"))


@dataclass(frozen=True, slots=True)
class FreeSample:
    """An owner's lock seen free: at ``at`` (store instant), its generation then."""

    at: int
    generation: int

    def confirms(self, later: FreeSample, confirm_ms: int) -> bool:
        """``later`` (also free) shows the owner gone: far enough apart, and no take between."""
        return later.generation == self.generation and later.at - self.at >= confirm_ms


def liveness_key(schema: str, owner_id: str) -> int:
    digest = hashlib.sha256(f"jobledger.liveness:{schema}:{owner_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class AdvisoryOwnerLock:
    """A dedicated connection holding this owner's advisory lock (see the module docstring)."""

    kind = "advisory"
    refresh_interval = LIVENESS_REFRESH

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str,
        owner_id: str,
        connect_timeout: int,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self._conninfo = conninfo
        self._connect_timeout = connect_timeout
        self._owner_id = owner_id
        self._clock = clock  # taken_at: the store's injected clock, else the database's
        self._take = QUERIES["liveness_take"].replace("{schema}", schema)
        self.key = liveness_key(schema, owner_id)
        self.generation = 0  # of the last take (1 for the first ever by this owner id)
        # refresh() runs on the worker's liveness thread, close() on its main thread.
        self._mutex = threading.Lock()
        self._closed = False
        self._conn: PgConnection | None = self._connect()
        forks.register(self)

    def _after_fork_in_child(self) -> None:
        """In a forked child the session — and so the lock — is the parent's: disown its socket
        (a close would end the parent's session, and with it the lock: the parent would look
        dead) and hold nothing here; ``refresh`` and ``close`` do nothing in the child."""
        conn, self._conn = self._conn, None
        self._mutex = threading.Lock()
        self._closed = True
        if conn is not None:
            with contextlib.suppress(Exception):
                forks.disown_socket(conn.pgconn.socket)
            forks.abandon(conn)

    def _connect(self) -> PgConnection:
        """A new session holding the lock (its take bumped the generation)."""
        kwargs: dict[str, Any] = connection_kwargs(
            connect_timeout=self._connect_timeout, prepare_threshold=None
        )
        kwargs["application_name"] = "jobledger-liveness"
        conn: PgConnection = psycopg.Connection.connect(self._conninfo, **kwargs)
        try:
            params = {
                "key": self.key,
                "owner": self._owner_id,
                "now": None if self._clock is None else self._clock(),
            }
            taken = conn.execute(self._take, params).fetchone()
        except BaseException:
            conn.close()  # a lock taken by a statement that failed would stay held otherwise
            raise
        if taken is None:
            conn.close()
            raise RuntimeError("another live session already holds this owner's lock")
        self.generation = int(taken["generation"])
        return conn

    @property
    def held(self) -> bool:
        return self._conn is not None and not self._conn.closed

    def refresh(self) -> None:
        """Check the session is alive; take the lock again on a new one if it was lost."""
        with self._mutex:
            if self._closed:
                return
            conn = self._conn
        if conn is not None and not conn.closed:
            try:
                conn.execute(QUERIES["liveness_ping"])
                return
            except psycopg.Error:
                conn.close()
        with self._mutex:
            if self._conn is conn:
                self._conn = None
        try:
            fresh = self._connect()
        except (psycopg.Error, RuntimeError) as exc:
            # Coded, so the worker logs it and tries again at its next check.
            raise liveness_lock_unavailable(exc, again=True) from None
        with self._mutex:
            if not self._closed:
                self._conn = fresh
                return
        fresh.close()  # closed while this reconnected: give the lock back with the session

    def close(self) -> None:
        with self._mutex:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            # If this fails, the session ends below, which releases the lock anyway.
            with contextlib.suppress(psycopg.Error):
                conn.execute(QUERIES["liveness_give_back"], {"key": self.key})
            conn.close()


def sample_free(conn: PgConnection, owner_id: str, key: int) -> int | None:
    """On a pooled connection, in a READ COMMITTED transaction: ``owner_id``'s generation when
    it registered with an advisory lock and nobody holds ``key`` now, else ``None``.

    The lock is taken for the reading, at transaction level (the transaction's end gives it
    back, whatever happens): while this session holds it the owner cannot take it, so the
    generation read is the one of every take that ended before.
    One observation: the store confirms it (:meth:`FreeSample.confirms`) before it calls the
    owner gone."""
    row = conn.execute(QUERIES["liveness_registration"], {"owner": owner_id}).fetchone()
    if row is None:
        return None
    info = contract.parse_stored_json(row["info_json"])
    if not isinstance(info, dict) or info.get("liveness") != AdvisoryOwnerLock.kind:
        return None
    taken = conn.execute(QUERIES["liveness_probe"], {"key": key}).fetchone()
    if taken is None or not taken["locked"]:
        return None
    found = conn.execute(QUERIES["liveness_generation"], {"owner": owner_id}).fetchone()
    # No row: no take recorded for this owner id (the lock was taken by no jobledger worker).
    return 0 if found is None else int(found["generation"])
