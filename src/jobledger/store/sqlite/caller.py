"""Running the store's named queries inside a caller's SQLite transaction (SPEC §8), and the
connection :meth:`SQLiteStore.connect` hands out for it.

The caller owns the transaction (``BEGIN IMMEDIATE`` on its connection): nothing here sends
``BEGIN``, ``COMMIT`` or ``ROLLBACK``. The work runs inside ``SAVEPOINT jobledger_enqueue``, so
a jobledger error rolls back exactly what jobledger wrote and leaves the caller's transaction
open and usable. The connection must be on the store's own file (the same inode, and the same
store id in ``jobledger_store``). Workers find the new occurrence by polling once the caller
commits: SQLite has no cross-process notification.
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

__all__ = ["SAVEPOINT", "connect", "run_in_caller_transaction"]

T = TypeVar("T")
SAVEPOINT = "jobledger_enqueue"


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
        return _in_savepoint(conn, store_id, make_tx, body)
    finally:
        conn.row_factory = factory


def _in_savepoint(
    conn: sqlite3.Connection,
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
