"""The embedded store: one SQLite file (or ``:memory:``), nothing to install or run.

Safe from several threads of one process (one connection under a lock) and from several
processes on one file (``BEGIN IMMEDIATE`` per write, WAL, a busy timeout).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ...clock import Clock, system_clock
from ...contract import normalize_identifier
from ...errors import (
    InvalidArgument,
    SchedulerError,
    SchemaCorrupt,
    UnsafePath,
)
from ...models import SchemaInfo, VerifyReport
from .. import common, forks
from ..base import NoOwnerLock, OwnerLockHandle
from ..caller import CallerLink
from ..ledger import LedgerStore, Row, Tx, validate_clock_reading
from ..migrations import SchemaOutcome
from ..sql import load_store_queries
from ..tx import table_parameter
from . import caller, schema
from .connection import (
    SQLiteConnection,
    prepare_database_files,
    storage_failure,
    tighten_database_files,
)
from .liveness import OwnerLock, UnsafeOwnersDirectory, owner_gone, owner_held
from .qualify import qualify_all
from .shared_file import OWN_TABLES
from .wake import WakeFile

__all__ = ["DEFAULT_BUSY_TIMEOUT_MS", "SQLiteStore"]

T = TypeVar("T")
DEFAULT_BUSY_TIMEOUT_MS = 5_000
SYNCHRONOUS_MODES = ("FULL", "NORMAL")
MAX_BUSY_TIMEOUT_MS = 60_000
QUERIES = load_store_queries(Path(__file__).with_name("queries.sql"), pyformat=False)
# The same queries with every table name written ``main.<name>``, for a caller's connection: it
# may hold temp tables named like jobledger's, and SQLite looks in ``temp`` first
# (``qualify.py``). The store's own connections never hold a temp object.
CALLER_QUERIES = qualify_all(QUERIES, OWN_TABLES)


class _SQLiteTx:
    __slots__ = ("_clock", "_conn", "_queries", "wakes")

    def __init__(
        self, conn: sqlite3.Connection, clock: Clock, queries: Mapping[str, str] = QUERIES
    ) -> None:
        self._conn = conn
        self._clock = clock
        self._queries = queries
        self.wakes = False

    def wake(self) -> None:
        self.wakes = True

    def one(self, query: str, params: Mapping[str, Any] | None = None) -> Row | None:
        rows = self._conn.execute(self._queries[query], params or {}).fetchall()
        return rows[0] if rows else None

    def all(self, query: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        return self._conn.execute(self._queries[query], params or {}).fetchall()

    def run(self, query: str, params: Mapping[str, Any] | None = None) -> int:
        return self._conn.execute(self._queries[query], params or {}).rowcount

    def many(self, query: str, params: Sequence[Mapping[str, Any]]) -> None:
        self._conn.executemany(self._queries[query], params)

    def rows_many(self, query: str, params: Sequence[Mapping[str, Any]]) -> list[Row | None]:
        sql = self._queries[query]
        execute = self._conn.execute
        return [execute(sql, item).fetchone() for item in params]

    def now(self) -> int:
        return validate_clock_reading(self._clock())

    def id_list(self, values: Sequence[str] | Sequence[int]) -> object:
        return json.dumps(list(values))

    def table(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, object]:
        return table_parameter(rows)


class SQLiteStore(LedgerStore):
    """A :class:`~jobledger.store.base.Store` on one SQLite database.

    Open it with :func:`jobledger.open_store` (or :meth:`open`). ``backup_path`` names the copy
    taken before a schema upgrade during this open, if one ran; ``schema_outcome`` says what
    this open did to the schema (see :class:`~jobledger.store.migrations.SchemaOutcome`).
    """

    def __init__(
        self,
        connection: SQLiteConnection,
        clock: Clock,
        schema_outcome: SchemaOutcome,
        *,
        synchronous: str = "FULL",
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        shared_file: bool = False,
    ) -> None:
        self._connection = connection
        self.shared_file = shared_file
        self._synchronous = synchronous
        self._busy_timeout_ms = busy_timeout_ms
        self._clock = clock
        self._target = connection.target
        self.schema_outcome = schema_outcome
        self.backup_path = schema_outcome.backup
        # Other processes' idle workers hear this process's new work through the wake file
        # (wake.py); this process's workers hear theirs through a watcher started by the first
        # wait for work. A memory database has no other process.
        self.wake_file: WakeFile | None = None
        if not connection.is_memory:
            self.wake_file = WakeFile(Path(connection.target))
        self._feed_work_signal()
        forks.register(self)

    def _feed_work_signal(self) -> None:
        wake_file = self.wake_file
        if wake_file is not None:
            signal = self.work_signal
            signal.feed_from(lambda: wake_file.watch(signal))

    def _after_fork_in_child(self) -> None:
        """In a forked child: connections of its own, a wake file descriptor and watcher of
        its own, fresh signals (their locks and waiters were the parent's) — forks.py."""
        self._connection.after_fork_in_child(self._synchronous)
        if self.wake_file is not None:
            self.wake_file.after_fork_in_child()
        self._work_signal = None
        self._settle_signal = None
        self._feed_work_signal()

    @classmethod
    def open(
        cls,
        target: str | Path,
        *,
        clock: Clock | None = None,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        migrate: bool = True,
        synchronous: str = "FULL",
        shared_file: bool = False,
    ) -> SQLiteStore:
        """Open (creating if needed), verify and, unless ``migrate=False``, upgrade a database.

        ``migrate=False`` neither creates nor upgrades: a missing file raises
        ``SCHEDULER_STORE_NOT_FOUND`` and an older schema ``SCHEDULER_MIGRATION_REQUIRED``.
        ``synchronous`` is SQLite's durability setting: ``"FULL"`` (the default) makes every
        commit survive power loss; ``"NORMAL"`` (in WAL mode) survives process crashes but can
        lose the last commits on power loss or an operating-system crash, for fewer fsyncs.
        ``shared_file`` lets the application's own tables live in the same file: verification
        then covers exactly jobledger's objects (``shared_file.py``, docs/transactions.md).
        """
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
        if type(shared_file) is not bool:
            raise InvalidArgument("shared_file must be a boolean")
        if synchronous not in SYNCHRONOUS_MODES:
            raise InvalidArgument(
                'synchronous must be "FULL" or "NORMAL"', details={"field": "synchronous"}
            )
        now = validate_clock_reading(clock())
        location = str(target)
        path: Path | None = None
        if location != ":memory:":
            path = Path(location).expanduser().absolute()
            location = str(path)
        connection: SQLiteConnection | None = None
        try:
            # Checks only (a missing file is STORE_NOT_FOUND unless migrating): nothing on disk
            # changes before the schema is verified, except a database this open creates.
            if path is not None:
                prepare_database_files(path, create=migrate)
            connection = SQLiteConnection(location, busy_timeout_ms=busy_timeout_ms)
            outcome = schema.ensure_schema(connection, now=now, migrate=migrate, shared=shared_file)
            if path is not None:
                connection.enable_wal()
            connection.raw.execute(f"PRAGMA synchronous = {synchronous}")
            connection.open_reader()
            if path is not None and migrate:
                tighten_database_files(path)  # created or verified as ours, opened to write
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
                    raise UnsafePath(f"Refusing an unsafe database location: {exc}") from exc
                raise SchemaCorrupt("Scheduler database could not be opened or verified") from exc
            if isinstance(exc, UnicodeDecodeError):  # damaged catalog text
                raise SchemaCorrupt("Scheduler database could not be opened or verified") from exc
            raise
        return cls(
            connection,
            clock,
            outcome,
            synchronous=synchronous,
            busy_timeout_ms=busy_timeout_ms,
            shared_file=shared_file,
        )

    # -- engine hooks ---------------------------------------------------------------------

    def _assert_open(self) -> None:
        self._connection.assert_open()

    def now(self) -> int:
        """The store's clock (injected, or the system clock): no database read needed."""
        self._assert_open()
        return validate_clock_reading(self._clock())

    def _write(self, body: Callable[[Tx], T]) -> T:
        made: list[_SQLiteTx] = []

        def transaction(conn: sqlite3.Connection) -> T:
            tx = _SQLiteTx(conn, self._clock)
            made.append(tx)
            return body(tx)

        result = self._connection.write(transaction)
        if made and made[-1].wakes:  # committed: a slot freed (tx.wake), announce it
            self._after_enqueue()
        return result

    def _after_enqueue(self) -> None:
        """New work committed: wake this process's idle workers, and other processes' through
        the wake file."""
        super()._after_enqueue()
        if self.wake_file is not None:
            self.wake_file.touch()

    def _read(self, body: Callable[[Tx], T]) -> T:
        with self._connection.reading() as conn:
            return body(_SQLiteTx(conn, self._clock))

    def _in_caller_transaction(
        self,
        link: CallerLink,
        body: Callable[[Tx], T],
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> T:
        if link.dialect != "sqlite":
            raise InvalidArgument(
                f"conn is not on this jobledger store (a {link.driver} on a SQLite store)",
                details={"field": "conn", "reason": "another_store", "driver": link.driver},
            )
        return caller.run_in_caller_transaction(
            link,
            target=self._target,
            is_memory=self._connection.is_memory,
            store_id=self._own_store_id(),
            make_tx=lambda conn: _SQLiteTx(conn, self._clock, CALLER_QUERIES),
            body=body,
        )

    def connect(self) -> sqlite3.Connection:
        """A new ``sqlite3`` connection on this store's file, configured as the store's own
        (``isolation_level=None``: the caller sends ``BEGIN IMMEDIATE``), for enqueuing in the
        caller's transaction (SPEC §8). The caller closes it."""
        self._assert_open()
        if self._connection.is_memory:
            raise InvalidArgument(
                "a :memory: store cannot be shared with another connection; use a file"
            )
        try:
            return caller.connect(
                self._target,
                busy_timeout_ms=self._busy_timeout_ms,
                synchronous=self._synchronous,
            )
        except sqlite3.Error as exc:
            mapped = storage_failure(exc, phase="open", commit_state="not_committed")
            if mapped is None:
                raise
            raise mapped from None

    def _take_locks(self, tx: Tx, *, shared: Sequence[str], exclusive: Sequence[str]) -> None:
        """Nothing to take: every write transaction is ``BEGIN IMMEDIATE``, and SQLite lets one
        writer at a time in, so claims, pauses and admissions are already serialized."""

    def schema_info(self) -> SchemaInfo:
        with self._connection.reading() as conn:
            return schema.read_schema_info(conn)

    # -- owner liveness ---------------------------------------------------------------------

    def hold_owner_lock(self, owner_id: str) -> OwnerLockHandle:
        """Hold a lock that lives exactly as long as this process (see ``liveness.py``)."""
        owner = normalize_identifier(owner_id, "ownerId")
        self._assert_open()
        if self._connection.is_memory:
            return NoOwnerLock()  # nothing else can open a memory database
        try:
            return OwnerLock(Path(self._target), owner)
        except UnsafeOwnersDirectory as exc:
            raise UnsafePath(f"Refusing an unsafe liveness-lock directory: {exc}") from None
        except OSError as exc:
            raise common.liveness_lock_unavailable(exc) from None

    def owner_gone(self, owner_id: str) -> bool:
        owner = normalize_identifier(owner_id, "ownerId")
        self._assert_open()
        if self._connection.is_memory:
            return False
        return owner_gone(Path(self._target), owner)

    def _held_owners(self, owners: Collection[str]) -> frozenset[str]:
        """The owners among ``owners`` whose lock file some process holds now (one ``flock``
        try each): claims leave their expired leases alone, and they may still renew them."""
        if self._connection.is_memory or not owners:
            return frozenset()
        database = Path(self._target)
        return frozenset(owner for owner in owners if owner_held(database, owner))

    def verify(self) -> VerifyReport:
        """``integrity_check``, foreign keys, the schema catalog, every stored authority and
        every occurrence's ``occurrence_enqueued`` event."""
        self._assert_open()
        with self._connection.reading() as conn:
            report = schema.verify_database(conn, shared=self.shared_file)
            tx = _SQLiteTx(conn, self._clock)
            return self._with_enqueue_events(report, tx, (sqlite3.DatabaseError,))

    def close(self) -> None:
        if self.wake_file is not None:
            self.wake_file.close()
        self._connection.close()

    @property
    def closed(self) -> bool:
        return self._connection.closed

    def __enter__(self) -> SQLiteStore:
        return self

    def __repr__(self) -> str:
        return f"SQLiteStore({self._target!r})"
