"""The PostgreSQL store: the same semantics as SQLite for many workers on many machines.

Open it with :func:`jobledger.open_store` and a ``postgresql://`` URL. Differences from SQLite
are operational, never semantic:

* Instants come from the **database clock** unless a clock is injected, so the lease a worker
  on one machine takes and the expiry check a worker on another machine makes use the same
  clock; node clock skew cannot let two owners hold one occurrence.
* Claims lock their candidate with ``FOR UPDATE SKIP LOCKED``, so concurrent workers each take a
  different row instead of queueing behind one.
* Enqueues send ``NOTIFY`` with their commit; with ``listen=True`` a listener thread bumps
  :attr:`work_signal` for work enqueued by any process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import psycopg

from ...clock import Clock
from ...errors import InvalidArgument, SchedulerError
from ...models import SchemaInfo
from ..common import load_queries
from ..engine import LedgerStore, Row, Tx, validate_clock_reading
from . import schema as schema_module
from .connection import (
    PgConnection,
    PostgresPool,
    connection_kwargs,
    redact_url,
    storage_failure,
    validate_schema_name,
)
from .listener import NotificationListener

__all__ = ["DEFAULT_SCHEMA", "PostgresStore"]

T = TypeVar("T")
DEFAULT_SCHEMA = "jobledger"
QUERIES = load_queries(Path(__file__).with_name("queries.sql"))
# A committed row from one of these makes work claimable now: its transaction sends NOTIFY.
_WAKING_QUERIES = frozenset({"insert_occurrence", "release_lease", "requeue_dead_letter"})
_URL_PREFIXES = ("postgresql://", "postgres://")


class _PostgresTx:
    """:class:`~jobledger.store.engine.Tx` over one open transaction on a pooled connection."""

    __slots__ = ("_clock", "_conn", "_db_now", "wakes")

    def __init__(self, conn: PgConnection, clock: Clock | None, db_now: int) -> None:
        self._conn = conn
        self._clock = clock
        self._db_now = db_now
        self.wakes = False

    def _execute(self, query: str, params: Mapping[str, Any] | None) -> psycopg.Cursor[Any]:
        cursor = self._conn.execute(QUERIES[query], params or {})
        if query in _WAKING_QUERIES and cursor.rowcount > 0:
            self.wakes = True
        return cursor

    def one(self, query: str, params: Mapping[str, Any] | None = None) -> Row | None:
        row: Row | None = self._execute(query, params).fetchone()
        return row

    def all(self, query: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        rows: list[Row] = self._execute(query, params).fetchall()
        return rows

    def run(self, query: str, params: Mapping[str, Any] | None = None) -> int:
        return self._execute(query, params).rowcount

    def now(self) -> int:
        """The injected clock, else the database clock read when this transaction began."""
        return validate_clock_reading(self._db_now if self._clock is None else self._clock())


def _option_int(value: object, name: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise InvalidArgument(f"{name} must be an integer between {low} and {high}")
    return value


def _option_seconds(value: object, name: str) -> float:
    if type(value) not in (int, float) or not 0 < float(value) <= 3600:  # type: ignore[arg-type]
        raise InvalidArgument(f"{name} must be a number of seconds between 0 and 3600")
    return float(value)  # type: ignore[arg-type]


class PostgresStore(LedgerStore):
    """A :class:`~jobledger.store.base.Store` on a PostgreSQL schema shared by many processes."""

    def __init__(
        self,
        *,
        pool: PostgresPool,
        clock: Clock | None,
        target: str,
        schema: str,
        listener: NotificationListener | None,
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._target = target
        self.schema = schema
        self.channel = pool.channel
        self.listener = listener

    @classmethod
    def open(
        cls,
        url: str,
        *,
        clock: Clock | None = None,
        migrate: bool = True,
        schema: str = DEFAULT_SCHEMA,
        pool_min_size: int = 1,
        pool_max_size: int = 10,
        pool_timeout: float = 30.0,
        listen: bool = True,
        connect_timeout: int = 10,
        prepare_threshold: int | None = 5,
    ) -> PostgresStore:
        """Connect, verify (creating or upgrading unless ``migrate=False``) and return a store.

        ``clock``: ``None`` (the default) reads every instant from the database clock; a
        callable returning epoch ms overrides it (tests). ``schema``: where jobledger's tables
        live. ``pool_min_size``/``pool_max_size``: connections kept open / allowed — one per
        concurrent store call. ``pool_timeout``: seconds a call waits for a free connection.
        ``listen``: run a LISTEN thread on one extra connection (turn off behind PgBouncer in
        transaction mode). ``connect_timeout``: seconds per connection attempt.
        ``prepare_threshold``: psycopg's automatic server-side prepared statements (``None``
        turns them off, for PgBouncer before 1.21).
        """
        if not isinstance(url, str) or not url.startswith(_URL_PREFIXES):
            raise InvalidArgument("PostgreSQL target must be a postgresql:// URL")
        if clock is not None and not callable(clock):
            raise InvalidArgument("clock must be a function")
        if type(migrate) is not bool:
            raise InvalidArgument("migrate must be a boolean")
        if type(listen) is not bool:
            raise InvalidArgument("listen must be a boolean")
        name = validate_schema_name(schema)
        min_size = _option_int(pool_min_size, "pool_min_size", 0, 1000)
        max_size = _option_int(pool_max_size, "pool_max_size", 1, 1000)
        if max_size < max(min_size, 1):
            raise InvalidArgument("pool_max_size must be at least pool_min_size and 1")
        timeout = _option_seconds(pool_timeout, "pool_timeout")
        connect = _option_int(connect_timeout, "connect_timeout", 1, 3600)
        if prepare_threshold is not None:
            _option_int(prepare_threshold, "prepare_threshold", 0, 1_000_000)
        target = redact_url(url)
        try:
            psycopg.conninfo.conninfo_to_dict(url)
        except psycopg.Error:
            raise InvalidArgument(f"not a valid PostgreSQL URL: {target}") from None
        if clock is not None:
            validate_clock_reading(clock())

        channel = f"jobledger_work_{name}"
        pool: PostgresPool | None = None
        listener: NotificationListener | None = None
        try:
            with psycopg.Connection[Any].connect(
                url, **connection_kwargs(connect_timeout=connect, prepare_threshold=None)
            ) as conn:
                schema_module.ensure_schema(conn, schema=name, clock=clock, migrate=migrate)
            pool = PostgresPool(
                url,
                schema=name,
                channel=channel,
                min_size=min_size,
                max_size=max_size,
                pool_timeout=timeout,
                connect_timeout=connect,
                prepare_threshold=prepare_threshold,
            )
            store = cls(pool=pool, clock=clock, target=target, schema=name, listener=None)
            if listen:
                listener = NotificationListener(
                    url, channel=channel, signal=store.work_signal, connect_timeout=connect
                )
                listener.start()
                store.listener = listener
        except BaseException as exc:
            if listener is not None:
                listener.stop()
            if pool is not None:
                pool.close()
            if isinstance(exc, SchedulerError):
                raise
            mapped = storage_failure(exc, phase="open", commit_state="not_committed")
            if mapped is None:
                raise
            raise mapped from exc
        return store

    # -- engine hooks ---------------------------------------------------------------------

    def _assert_open(self) -> None:
        self._pool.assert_open()

    def _write(self, body: Callable[[Tx], T]) -> T:
        def transaction(conn: PgConnection, db_now: int) -> tuple[T, bool]:
            tx = _PostgresTx(conn, self._clock, db_now)
            return body(tx), tx.wakes

        return self._pool.transaction(transaction)

    def _read(self, body: Callable[[Tx], T]) -> T:
        def transaction(conn: PgConnection, db_now: int) -> tuple[T, bool]:
            return body(_PostgresTx(conn, self._clock, db_now)), False

        return self._pool.transaction(transaction, read_only=True)

    def schema_info(self) -> SchemaInfo:
        self._assert_open()
        return self._pool.transaction(
            lambda conn, _now: (schema_module.read_schema_info(conn), False), read_only=True
        )

    def close(self) -> None:
        if self.listener is not None:
            self.listener.stop()
        self._pool.close()

    @property
    def closed(self) -> bool:
        return self._pool.closed

    def pool_stats(self) -> dict[str, int]:
        """psycopg_pool's counters (connections open, in use, waiting, …) for monitoring."""
        return self._pool.stats()

    def __enter__(self) -> PostgresStore:
        return self

    def __repr__(self) -> str:
        return f"PostgresStore({self._target!r}, schema={self.schema!r})"
