"""A v4 SQLite file written by the last v4 code (``tests/fixtures/v4-release``, commit 8746642)
opens with the current code: it is backed up, upgraded to the latest rung, keeps every row of
every table (read back as v4 read it: queues, priorities, partitions, snoozes, results,
adjudications, flows, keys), keeps working, and verifies."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from jobledger.errors import SchedulerError
from jobledger.store.migrations import LATEST_VERSION
from jobledger.store.sqlite.schema import MIGRATIONS, schema_fingerprint
from jobledger.testing import FakeClock
from tests.fixtures.release_support import private_copy, raw_sqlite
from tests.fixtures.v4_release import (
    V4_RELEASE,
    assert_reads_back,
    assert_work_continues,
    load_manifest,
)
from tests.store.sqlite.handmade import listing, open_at
from tests.store.sqlite.support import pragma, read_only, sha256_file

FIXTURE = V4_RELEASE / "v4.sqlite"


@pytest.fixture
def manifest() -> dict[str, Any]:
    return load_manifest("sqlite")


@pytest.fixture
def v4_file(tmp_path: Path) -> Path:
    return private_copy(FIXTURE, tmp_path)


def _tables(conn: sqlite3.Connection) -> dict[str, list[str]]:
    names = [
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    ]
    return {name: [row[1] for row in conn.execute(f"PRAGMA table_info({name})")] for name in names}


def _rows(conn: sqlite3.Connection, table: str, columns: list[str]) -> list[tuple[Any, ...]]:
    listed = ", ".join(columns)
    return conn.execute(f"SELECT {listed} FROM {table} ORDER BY {columns[0]}").fetchall()


def test_the_fixture_is_a_v4_file_written_by_the_release(manifest: dict[str, Any]) -> None:
    with read_only(FIXTURE) as conn:
        assert pragma(conn, "user_version") == 4
        assert schema_fingerprint(conn) == MIGRATIONS[3].fingerprint
        history = conn.execute("SELECT version, name, checksum, applied_at FROM migrations")
        assert [list(row) for row in history] == manifest["migrations"]
        # the story holds what v4 added: a row in each of its tables but the liveness one
        for table in (
            "jobledger_queues",
            "jobledger_rate_windows",
            "jobledger_keys",
            "jobledger_dependencies",
            "jobledger_adjudications",
            "jobledger_authorities",
        ):
            assert conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] > 0, table
    conn.close()
    assert FIXTURE.stat().st_size < 300_000


def test_a_v4_file_of_the_release_upgrades_keeping_every_row(
    v4_file: Path, manifest: dict[str, Any]
) -> None:
    with read_only(FIXTURE) as before_conn:
        before = {
            table: (columns, _rows(before_conn, table, columns))
            for table, columns in _tables(before_conn).items()
        }
    before_conn.close()
    end = manifest["clock"]["end"]
    store = open_at(v4_file, FakeClock(end))
    try:
        outcome = store.schema_outcome
        assert (outcome.found, outcome.upgraded_from, outcome.version) == (4, 4, LATEST_VERSION)
        info = store.schema_info()
        assert [[m.version, m.name, m.checksum, m.applied_at] for m in info.migrations] == [
            *manifest["migrations"],
            *([m.version, m.name, m.checksum, end] for m in MIGRATIONS[4:]),
        ]
        raw_conn = store._connection.raw
        assert schema_fingerprint(raw_conn) == MIGRATIONS[-1].fingerprint
        # every column of every v4 table holds exactly what it held (a later rung only adds),
        # migrations aside (a row per new rung)
        cursor = raw_conn.cursor()
        cursor.row_factory = None
        for table, (columns, rows) in before.items():
            after = cursor.execute(
                f"SELECT {', '.join(columns)} FROM {table} ORDER BY {columns[0]}"
            ).fetchall()
            assert (after[: len(rows)] if table == "migrations" else after) == rows, table
        assert_reads_back(store, manifest, raw_sqlite(store))
        assert store.verify().ok
    finally:
        store.close()
    assert store.backup_path == v4_file.with_name("v4.sqlite.v4.bak")
    with read_only(store.backup_path) as backup:
        assert pragma(backup, "user_version") == 4
        assert {table: (c, _rows(backup, table, c)) for table, c in _tables(backup).items()} == (
            before
        )
    backup.close()


def test_work_continues_on_the_upgraded_file(v4_file: Path, manifest: dict[str, Any]) -> None:
    with open_at(v4_file, FakeClock(manifest["clock"]["end"])) as store:
        assert_work_continues(store, manifest)


def test_the_release_file_without_migrate_is_refused_unchanged(v4_file: Path) -> None:
    digest = sha256_file(v4_file)
    with pytest.raises(SchedulerError) as refused:
        open_at(v4_file, migrate=False)
    assert refused.value.code == "SCHEDULER_MIGRATION_REQUIRED"
    assert refused.value.details == {"schemaVersion": 4, "requiredVersion": LATEST_VERSION}
    assert sha256_file(v4_file) == digest
    assert listing(v4_file.parent) == ["v4.sqlite"]
