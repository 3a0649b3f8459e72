"""Running the store's named queries inside a caller's SQLite transaction (SPEC §8), and the
connection :meth:`SQLiteStore.connect` hands out for it.

The caller owns the transaction (``BEGIN IMMEDIATE`` on its connection): nothing here sends
``BEGIN``, ``COMMIT`` or ``ROLLBACK``. The work runs inside ``SAVEPOINT jobledger_enqueue``, so
a jobledger error rolls back exactly what jobledger wrote and leaves the caller's transaction
open and usable. The connection must be on the store's own file (the same inode, and the same
store id in ``jobledger_store``). Workers find the new occurrence by polling once the caller
commits: SQLite has no cross-process notification.

The caller's ``temp`` schema is its own business: every table name in the store's queries is
qualified ``main.`` (``qualify.py``), so a temp table or view named ``events`` or ``jobs`` is
never read or written by jobledger. A temp *trigger* on one of jobledger's tables would fire on
jobledger's own writes and change them; one query on ``temp.sqlite_master`` per call finds
such triggers, and the call is refused (``SCHEDULER_INVALID_ARGUMENT``, naming them) before
anything is written.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from ...errors import InvalidArgument, SchedulerError
from ..caller import CallerLink, not_in_transaction
from ..tx import Tx
from .connection import schema_needs_trust, storage_failure
from .shared_file import OWN_TABLES

__all__ = ["SAVEPOINT", "connect", "run_in_caller_transaction", "temp_triggers"]

T = TypeVar("T")
SAVEPOINT = "jobledger_enqueue"
_TEMP_TRIGGERS = "SELECT name, tbl_name FROM temp.sqlite_master WHERE type = 'trigger'"
_OWN_TABLES = frozenset(table.lower() for table in OWN_TABLES)


def connect(target: str, *, busy_timeout_ms: int, synchronous: str) -> sqlite3.Connection:
    """A new connection on the store's file, configured as the store's own: ``isolation_level
    =None`` (the caller sends ``BEGIN IMMEDIATE``), WAL (set on the file when the store opened
    it), ``synchronous`` as the store's, foreign keys on, the store's busy timeout and
    ``trusted_schema``."""
    conn = sqlite3.connect(target, timeout=busy_timeout_ms / 1000, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(f"PRAGMA trusted_schema = {'ON' if schema_needs_trust() else 'OFF'}")
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute("PRAGMA journal_mode = WAL")
    except BaseException:
        conn.close()
        raise
    return conn


def _another_store(why: str) -> InvalidArgument:
    return InvalidArgument(
        f"conn is not on this jobledger store ({why}): a caller's SQLite connection must be on "
        "the store's own file (app.connect() makes one)",
        details={"field": "conn", "reason": "another_store", "driver": "sqlite3.Connection"},
    )


def _main_file(conn: sqlite3.Connection) -> str:
    cursor = conn.cursor()
    cursor.row_factory = None
    for _seq, name, file in cursor.execute("PRAGMA database_list").fetchall():
        if name == "main":
            return str(file or "")
    return ""


def temp_triggers(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """The connection's temp triggers on a table named like one of jobledger's, as (trigger,
    table): a temp trigger may be declared ``ON main.<table>`` and fire on jobledger's writes
    (which one a trigger is on is not in the catalog row; any such name counts)."""
    cursor = conn.cursor()
    cursor.row_factory = None
    return sorted(
        (str(name), str(table))
        for name, table in cursor.execute(_TEMP_TRIGGERS).fetchall()
        if str(table).lower() in _OWN_TABLES
    )


def _refuse_temp_triggers(conn: sqlite3.Connection, driver: str) -> None:
    found = temp_triggers(conn)
    if found:
        named = ", ".join(f"{name} ON {table}" for name, table in found)
        raise InvalidArgument(
            f"conn has TEMP triggers on jobledger's tables ({named}): they would fire on "
            "jobledger's own writes and change them; drop them (DROP TRIGGER temp.<name>) "
            "before enqueuing on this connection",
            details={
                "field": "conn",
                "reason": "temp_trigger",
                "driver": driver,
                "triggers": [{"name": name, "table": table} for name, table in found],
            },
        )


def _same_file(conn: sqlite3.Connection, target: str, is_memory: bool) -> None:
    main = _main_file(conn)
    if is_memory or not main:
        raise _another_store("a memory database is private to the store's own connection")
    try:
        same = os.path.samefile(main, target)
    except OSError:
        same = False
    if not same:
        raise _another_store("another file")


def run_in_caller_transaction(
    link: CallerLink,
    *,
    target: str,
    is_memory: bool,
    store_id: str,
    make_tx: Callable[[sqlite3.Connection], Tx],
    body: Callable[[Tx], T],
) -> T:
    """Run ``body`` inside the caller's open transaction on ``link`` (see the module docstring);
    ``make_tx`` builds the store's ``Tx`` over the connection (rows by name)."""
    conn: sqlite3.Connection = link.raw
    if not conn.in_transaction:
        raise not_in_transaction(
            link.driver, "send BEGIN IMMEDIATE first (app.connect() gives isolation_level=None)"
        )
    _same_file(conn, target, is_memory)
    factory = conn.row_factory
    # The store's queries read rows by column name; cursors the caller made keep their own.
    conn.row_factory = sqlite3.Row
    try:
        return _in_savepoint(conn, link.driver, store_id, make_tx, body)
    finally:
        conn.row_factory = factory


def _in_savepoint(
    conn: sqlite3.Connection,
    driver: str,
    store_id: str,
    make_tx: Callable[[sqlite3.Connection], Tx],
    body: Callable[[Tx], T],
) -> T:
    try:
        conn.execute(f"SAVEPOINT {SAVEPOINT}")
    except sqlite3.Error as exc:
        raise _mapped(exc) from exc
    try:
        found = conn.execute("SELECT store_id FROM main.jobledger_store").fetchall()
        if [row[0] for row in found] != [store_id]:
            raise _another_store("its jobledger_store names another store")
        _refuse_temp_triggers(conn, driver)
        result = body(make_tx(conn))
    except BaseException as exc:
        try:
            conn.execute(f"ROLLBACK TO {SAVEPOINT}")
            conn.execute(f"RELEASE {SAVEPOINT}")
        except sqlite3.Error:
            pass  # the error below says what happened; the caller rolls back
        if isinstance(exc, SchedulerError) or not isinstance(exc, sqlite3.Error | OSError):
            raise
        if "no such table" in str(exc):
            raise _another_store("no jobledger tables in it") from None
        raise _mapped(exc) from exc
    try:
        conn.execute(f"RELEASE {SAVEPOINT}")
    except sqlite3.Error as exc:
        raise _mapped(exc) from exc
    return result


def _mapped(exc: BaseException) -> Any:
    # A deferred transaction that cannot become the writer (SQLITE_BUSY) lands here: the
    # caller's transaction holds nothing of jobledger's, so it is "not_committed".
    mapped = storage_failure(exc, phase="write", commit_state="not_committed")
    return mapped if mapped is not None else exc
