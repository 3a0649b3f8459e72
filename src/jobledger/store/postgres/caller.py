"""Running the store's named queries inside a caller's PostgreSQL transaction (SPEC §8).

The caller owns the transaction: nothing here sends ``BEGIN``, ``COMMIT`` or ``ROLLBACK``.
The work runs inside ``SAVEPOINT jobledger_enqueue``, so a jobledger error (a payload mismatch,
a missing job, a refused connection) rolls back exactly what jobledger did and leaves the
caller's transaction usable. One round trip opens it: the savepoint, the caller's isolation
level, the database clock, this store's id read from the schema the store uses, and
``search_path`` pointed at that schema for the store's unqualified queries (``set_config(...,
true)``: scoped to the transaction, and set back to the caller's value before the savepoint is
released). ``pg_temp`` is named last in it: left out, PostgreSQL searches the session's temp
schema *first* for tables, so a caller's ``CREATE TEMP TABLE events (…)`` would take the
store's reads and writes (issue 30, item 4). Named last, every jobledger table resolves in the
store's schema; the temp schema is never searched for functions or operators, and PostgreSQL
has no temporary triggers or rules on permanent tables, so nothing in the caller's temp schema
can reach what jobledger reads or writes. One more closes it: the caller's ``search_path``
back, ``NOTIFY`` when new work was written (delivered by the server only if the caller
commits), ``RELEASE SAVEPOINT``.

A psycopg ``AsyncConnection`` is driven from a worker thread: each statement is handed to the
event loop that owns the connection and awaited there (:class:`BlockingAsyncConnection`), so
the same synchronous store code serves both, and the loop stays free meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar, cast

import psycopg
from psycopg import pq
from psycopg.rows import dict_row

from ...clock import Clock
from ...errors import InvalidArgument, SchedulerError
from ..caller import CallerLink, not_in_transaction
from ..tx import Tx
from .connection import PgConnection, storage_failure

__all__ = ["BlockingAsyncConnection", "run_in_caller_transaction"]

T = TypeVar("T")
SAVEPOINT = "jobledger_enqueue"
_CLOCK_SQL = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms"
# READ COMMITTED only: a key taken by a transaction that commits while this one waits is read
# back by the next statement; at REPEATABLE READ the snapshot would not show it (SPEC §8).
_ISOLATION = "read committed"
# undefined_table, invalid_schema_name: the caller's database has no jobledger schema here.
_NOT_THIS_STORE = frozenset({"42P01", "3F000"})


def _literal(text: str) -> str:
    """``text`` as an escape-string literal (safe whatever ``standard_conforming_strings`` is)."""
    return "E'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def another_store(driver: str, why: str) -> InvalidArgument:
    return InvalidArgument(
        f"conn is not on this jobledger store ({why}): a caller's transaction must be on the "
        "store's own database and schema",
        details={"field": "conn", "reason": "another_store", "driver": driver},
    )


class _Fetched:
    """A cursor's results read eagerly on the event loop (what ``_PostgresTx`` reads back)."""

    description = ()

    def __init__(self, owner: BlockingAsyncConnection) -> None:
        self._owner = owner
        self._sets: list[tuple[list[Any], int]] = [([], -1)]
        self._index = 0

    def fill(self, sets: list[tuple[list[Any], int]]) -> _Fetched:
        self._sets, self._index = sets or [([], -1)], 0
        return self

    def executemany(
        self, sql: str, params: Sequence[Mapping[str, Any]], *, returning: bool = False
    ) -> None:
        self.fill(self._owner.call(self._owner.gather(sql, params, many=True)))

    @property
    def rowcount(self) -> int:
        return self._sets[self._index][1]

    def fetchone(self) -> Any:
        rows = self._sets[self._index][0]
        return rows.pop(0) if rows else None

    def fetchall(self) -> list[Any]:
        rows = self._sets[self._index][0]
        self._sets[self._index] = ([], self.rowcount)
        return rows

    def nextset(self) -> bool:
        if self._index + 1 >= len(self._sets):
            return False
        self._index += 1
        return True


class BlockingAsyncConnection:
    """The part of psycopg's ``Connection`` the store uses, over an ``AsyncConnection``.

    Call it from a thread other than the loop's: each statement is awaited on ``loop`` and its
    results are read there in full (``dict_row``)."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], loop: asyncio.AbstractEventLoop) -> None:
        self._conn = conn
        self._loop = loop

    @property
    def info(self) -> Any:
        return self._conn.info

    @property
    def autocommit(self) -> bool:
        return self._conn.autocommit

    @property
    def closed(self) -> bool:
        return self._conn.closed

    def call(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result()

    async def gather(
        self, sql: str, params: Any, *, many: bool = False
    ) -> list[tuple[list[Any], int]]:
        cursor = self._conn.cursor(row_factory=dict_row)
        if many:
            await cursor.executemany(sql, params, returning=True)
        else:
            await cursor.execute(sql, params)
        sets: list[tuple[list[Any], int]] = []
        while True:
            rows = await cursor.fetchall() if cursor.description is not None else []
            sets.append((list(rows), cursor.rowcount))
            if not cursor.nextset():
                return sets

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> _Fetched:
        return _Fetched(self).fill(self.call(self.gather(sql, params)))

    def batch(self, sql: str) -> list[list[Any]]:
        """Run several parameterless statements in one round trip; their rows, per statement."""
        return [rows for rows, _ in self.call(self.gather(sql, None))]

    def cursor(self) -> _Fetched:
        return _Fetched(self)


class _DictRows:
    """The caller's synchronous psycopg connection, with the store's ``dict_row`` cursors
    (the caller's own row factory is left as it was)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        self.info = conn.info
        self.autocommit = conn.autocommit
        self.closed = conn.closed

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> Any:
        return self._conn.cursor(row_factory=dict_row).execute(sql, params)

    def cursor(self) -> Any:
        return self._conn.cursor(row_factory=dict_row)

    def batch(self, sql: str) -> list[list[Any]]:
        """Run several parameterless statements in one round trip (the simple query protocol,
        never prepared); their rows, per statement."""
        cursor = self._conn.cursor(row_factory=dict_row)
        cursor.execute(sql, prepare=False)
        found: list[list[Any]] = []
        while True:
            found.append(list(cursor.fetchall()) if cursor.description is not None else [])
            if not cursor.nextset():
                return found


def _require_transaction(conn: Any, link: CallerLink) -> None:
    if conn.closed:
        raise InvalidArgument(
            "conn is closed", details={"field": "conn", "reason": "closed", "driver": link.driver}
        )
    status = conn.info.transaction_status
    if status == pq.TransactionStatus.INERROR:
        raise InvalidArgument(
            "the caller's transaction has failed: roll it back first",
            details={"field": "conn", "reason": "transaction_failed", "driver": link.driver},
        )
    if status == pq.TransactionStatus.INTRANS:
        return
    if status == pq.TransactionStatus.IDLE and not conn.autocommit:
        return  # psycopg opens the transaction at the first statement; the caller commits it
    raise not_in_transaction(
        link.driver,
        "use `with conn.transaction():`, or a connection with autocommit off"
        if status == pq.TransactionStatus.IDLE
        else "the connection is busy with another statement",
    )


def run_in_caller_transaction(
    link: CallerLink,
    *,
    schema: str,
    channel: str,
    store_id: str,
    clock: Clock | None,
    make_tx: Callable[[PgConnection, Clock | None, int], Any],
    body: Callable[[Tx], T],
    loop: asyncio.AbstractEventLoop | None = None,
) -> T:
    """Run ``body`` inside the caller's transaction on ``link`` (see the module docstring).

    ``NOTIFY`` is sent when ``body`` wrote work that is claimable at once. ``make_tx`` builds
    the store's ``Tx`` over the connection. For an async link, call this from a worker thread
    and pass the connection's ``loop``."""
    conn: Any
    if link.is_async:
        assert loop is not None
        conn = BlockingAsyncConnection(link.raw, loop)
    else:
        conn = _DictRows(link.raw)
    _require_transaction(conn, link)
    opened = False
    try:
        _, [setting], stored, _ = conn.batch(
            f"SAVEPOINT {SAVEPOINT}; "
            "SELECT current_setting('transaction_isolation') AS isolation, "
            f"current_setting('search_path') AS search_path, {_CLOCK_SQL}; "
            f"SELECT store_id || '/' || current_database() AS store_id "
            f'FROM "{schema}".jobledger_store; '
            f"SELECT set_config('search_path', '\"{schema}\", pg_temp', true)"
        )
        opened = True
        if setting["isolation"] != _ISOLATION:
            raise InvalidArgument(
                f"the caller's transaction runs at {setting['isolation'].upper()}; enqueue in "
                "a caller's transaction needs READ COMMITTED (PostgreSQL's default)",
                details={"field": "conn", "reason": "isolation", "driver": link.driver},
            )
        if [row["store_id"] for row in stored] != [store_id]:
            raise another_store(link.driver, "its jobledger schema has another store id")
        tx = make_tx(cast(PgConnection, conn), clock, int(setting["now_ms"]))
        result = body(tx)
        notify = f"NOTIFY {channel}; " if tx.wakes else ""
        conn.batch(
            f"SELECT set_config('search_path', {_literal(setting['search_path'])}, true); "
            f"{notify}RELEASE SAVEPOINT {SAVEPOINT}"
        )
        return result
    except BaseException as exc:
        # A failed opening batch may have taken the savepoint before the statement that failed.
        undone = _undo(conn) if opened or isinstance(exc, psycopg.Error) else True
        if isinstance(exc, SchedulerError) or not isinstance(exc, psycopg.Error):
            raise
        if getattr(exc, "sqlstate", None) in _NOT_THIS_STORE and undone:
            raise another_store(link.driver, f"no jobledger schema {schema!r} there") from None
        mapped = storage_failure(exc, phase="write", commit_state="not_committed")
        assert mapped is not None
        raise mapped from exc


def _undo(conn: Any) -> bool:
    """Roll back to the savepoint and release it; True when the caller's transaction is usable."""
    try:
        conn.batch(f"ROLLBACK TO SAVEPOINT {SAVEPOINT}; RELEASE SAVEPOINT {SAVEPOINT}")
    except psycopg.Error:
        return False
    return True
