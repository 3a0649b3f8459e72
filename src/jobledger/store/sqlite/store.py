"""The embedded store: one SQLite file (or ``:memory:``), nothing to install or run.

Safe from several threads of one process (one connection under a lock) and from several
processes on one file (``BEGIN IMMEDIATE`` per write, WAL, a busy timeout).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ...clock import Clock, system_clock
from ...errors import InvalidArgument, SchedulerError, SchemaCorrupt
from ...models import SchemaInfo
from ..common import load_queries
from ..engine import LedgerStore, Row, Tx, validate_clock_reading
from . import schema
from .connection import (
    SQLiteConnection,
    ensure_private_files,
    prepare_private_file,
    storage_failure,
)

__all__ = ["DEFAULT_BUSY_TIMEOUT_MS", "SQLiteStore"]

T = TypeVar("T")
DEFAULT_BUSY_TIMEOUT_MS = 5_000
MAX_BUSY_TIMEOUT_MS = 60_000
QUERIES = load_queries(Path(__file__).with_name("queries.sql"))


class _SQLiteTx:
    __slots__ = ("_clock", "_conn")

    def __init__(self, conn: sqlite3.Connection, clock: Clock) -> None:
        self._conn = conn
        self._clock = clock

    def one(self, query: str, params: Mapping[str, Any] | None = None) -> Row | None:
        rows = self._conn.execute(QUERIES[query], params or {}).fetchall()
        return rows[0] if rows else None

    def all(self, query: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        return self._conn.execute(QUERIES[query], params or {}).fetchall()

    def run(self, query: str, params: Mapping[str, Any] | None = None) -> int:
        return self._conn.execute(QUERIES[query], params or {}).rowcount

    def now(self) -> int:
        return validate_clock_reading(self._clock())


class SQLiteStore(LedgerStore):
    """A :class:`~jobledger.store.base.Store` on one SQLite database.

    Open it with :func:`jobledger.open_store` (or :meth:`open`). ``backup_path`` names the copy
    taken before a schema upgrade during this open, if one ran.
    """

    def __init__(
        self, connection: SQLiteConnection, clock: Clock, backup_path: Path | None
    ) -> None:
        self._connection = connection
        self._clock = clock
        self._target = connection.target
        self.backup_path = backup_path

    @classmethod
    def open(
        cls,
        target: str | Path,
        *,
        clock: Clock | None = None,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        migrate: bool = True,
    ) -> SQLiteStore:
        """Open (creating if needed), verify and, unless ``migrate=False``, upgrade a database."""
        if clock is None:
            clock = system_clock
        if not callable(clock):
            raise InvalidArgument("clock must be a function")
        if type(busy_timeout_ms) is not int or not 0 <= busy_timeout_ms <= MAX_BUSY_TIMEOUT_MS:
            raise InvalidArgument(
                f"busyTimeoutMs must be an integer between 0 and {MAX_BUSY_TIMEOUT_MS}"
            )
        if type(migrate) is not bool:
            raise InvalidArgument("migrate must be a boolean")
        now = validate_clock_reading(clock())
        location = str(target)
        path: Path | None = None
        if location != ":memory:":
            path = Path(location).expanduser().absolute()
            location = str(path)
        connection: SQLiteConnection | None = None
        try:
            if path is not None:
                prepare_private_file(path)
            connection = SQLiteConnection(location, busy_timeout_ms=busy_timeout_ms)
            backup = schema.ensure_schema(connection, now=now, migrate=migrate)
            if path is not None:
                connection.enable_wal()
            connection.raw.execute("PRAGMA synchronous = FULL")
            if path is not None:
                ensure_private_files(path)
        except BaseException as exc:
            if connection is not None:
                connection.close()
            if isinstance(exc, SchedulerError):
                raise
            if isinstance(exc, (sqlite3.Error, OSError)):
                mapped = storage_failure(exc, phase="open", commit_state="unknown")
                if mapped is not None and mapped.code == "SCHEDULER_STORAGE_UNAVAILABLE":
                    raise mapped from None
                if isinstance(exc, PermissionError | NotADirectoryError | IsADirectoryError):
                    raise SchedulerError(
                        f"Refusing an unsafe database location: {exc}",
                        code="SCHEDULER_UNSAFE_PATH",
                    ) from exc
                raise SchemaCorrupt("Scheduler database could not be opened or verified") from exc
            raise
        return cls(connection, clock, backup)

    # -- engine hooks ---------------------------------------------------------------------

    def _assert_open(self) -> None:
        self._connection.assert_open()

    def _write(self, body: Callable[[Tx], T]) -> T:
        return self._connection.write(lambda conn: body(_SQLiteTx(conn, self._clock)))

    def _read(self, body: Callable[[Tx], T]) -> T:
        with self._connection.reading() as conn:
            return body(_SQLiteTx(conn, self._clock))

    def schema_info(self) -> SchemaInfo:
        with self._connection.reading() as conn:
            return schema.read_schema_info(conn)

    def close(self) -> None:
        self._connection.close()

    @property
    def closed(self) -> bool:
        return self._connection.closed

    def __enter__(self) -> SQLiteStore:
        return self

    def __repr__(self) -> str:
        return f"SQLiteStore({self._target!r})"
