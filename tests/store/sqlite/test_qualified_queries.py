"""Every named SQLite query, as run on a caller's connection, reaches jobledger's tables in
``main``, never the caller's ``temp`` (issue 30, item 3): SQLite resolves an unqualified name
in ``temp`` first, and ``App.enqueue(..., conn=...)`` runs these queries on a connection the
caller owns."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

import jobledger
from jobledger.store.sqlite.qualify import qualify
from jobledger.store.sqlite.shared_file import OWN_TABLES
from jobledger.store.sqlite.store import CALLER_QUERIES, QUERIES
from jobledger.testing import FakeClock

_PARAMETER = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")
_TOUCH = {
    sqlite3.SQLITE_READ: "read",
    sqlite3.SQLITE_INSERT: "insert",
    sqlite3.SQLITE_UPDATE: "update",
    sqlite3.SQLITE_DELETE: "delete",
}


@pytest.fixture
def shadowed(tmp_path: Path) -> sqlite3.Connection:
    """A connection on a real store whose ``temp`` holds a table named like each of
    jobledger's (with a column no query uses)."""
    path = tmp_path / "store.sqlite3"
    app = jobledger.App(path, clock=FakeClock())
    app.create_job("confirm", "send_confirmation")
    app.close()
    conn = sqlite3.connect(path, isolation_level=None)
    for table in sorted(OWN_TABLES):
        conn.execute(f'CREATE TEMP TABLE "{table}" (shadow INTEGER)')
    return conn


def test_no_named_query_reaches_a_temp_table_named_like_jobledgers(
    shadowed: sqlite3.Connection,
) -> None:
    reached: list[str] = []
    current = [""]

    def authorizer(
        action: int, arg1: str | None, _arg2: str | None, db: str | None, _trigger: str | None
    ) -> int:
        if db == "temp" and action in _TOUCH:
            reached.append(f"{current[0]}: {_TOUCH[action]} temp.{arg1}")
        return sqlite3.SQLITE_OK

    shadowed.set_authorizer(authorizer)
    failed: list[str] = []
    assert CALLER_QUERIES.keys() == QUERIES.keys()
    for name, sql in sorted(CALLER_QUERIES.items()):
        current[0] = name
        params = dict.fromkeys(_PARAMETER.findall(sql))
        try:
            shadowed.execute("EXPLAIN " + sql, params).fetchall()
        except sqlite3.Error as exc:
            failed.append(f"{name}: {exc}")
    shadowed.close()
    assert failed == []
    assert reached == []
    assert len(CALLER_QUERIES) > 100


def test_qualify_leaves_columns_literals_and_common_table_expressions_alone() -> None:
    tables = {"events", "occurrences"}
    sql = (
        "WITH events AS (SELECT 1) SELECT occurrences.id, 'occurrences' FROM occurrences "
        'JOIN events ON 1 WHERE "occurrences" = main.occurrences.x'
    )
    assert qualify(sql, tables) == (
        "WITH events AS (SELECT 1) SELECT occurrences.id, 'occurrences' FROM main.occurrences "
        'JOIN events ON 1 WHERE "occurrences" = main.occurrences.x'
    )
    assert qualify("INSERT INTO events (a) SELECT a FROM t", tables) == (
        "INSERT INTO main.events (a) SELECT a FROM t"
    )
