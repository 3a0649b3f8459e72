"""The SQLite schema: exact creation, verification on every open, and refusal.

Opening checks only the catalog (tables, shapes, identity pragmas, fingerprint, history,
indexes), in O(1) of the database size, so what it refuses is what those checks see. Damage
inside the rows is found by :meth:`~jobledger.Store.verify` (``test_verify.py``); upgrades are
in ``test_schema_upgrade.py``.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from jobledger.errors import MigrationRequired, NotFound, SchedulerError, StoreNotFound
from jobledger.store import migrations as ladder
from jobledger.store.sqlite import schema as sqlite_schema
from jobledger.store.sqlite.schema import (
    MIGRATIONS,
    _statements,
    expected_columns,
    schema_fingerprint,
)
from jobledger.testing import FakeClock
from tests.sqlite.handmade import NOW, fresh_v3, listing, open_at, tamper
from tests.sqlite.support import (
    APPLICATION_ID,
    V1_CHECKSUM,
    V1_FINGERPRINT,
    pragma,
    sha256_file,
    sidecars,
)

V3_TABLES = [
    "events",
    "jobledger_audit",
    "jobledger_requeues",
    "jobledger_schedules",
    "jobledger_throughput",
    "jobledger_workers",
    "jobs",
    "migrations",
    "occurrences",
]
V3_INDEXES = [
    "jobledger_occurrences_final_leases",
    "jobledger_occurrences_kind",
    "jobledger_occurrences_ready",
    "jobledger_occurrences_ready_workspace",
    "jobledger_occurrences_status",
    "jobledger_requeues_occurrence",
    "jobledger_schedules_due",
    "scheduler_events_job",
    "scheduler_events_occurrence",
    "scheduler_occurrences_idempotency",
    "scheduler_occurrences_job",
]
V3_HISTORY = [
    {"version": 1, "name": "scheduler-kernel-v1", "checksum": V1_CHECKSUM},
    {"version": 2, "name": "jobledger-requeue-v2", "checksum": MIGRATIONS[1].checksum},
    {"version": 3, "name": "jobledger-everyday-v3", "checksum": MIGRATIONS[2].checksum},
]


def _plain(conn: sqlite3.Connection) -> sqlite3.Cursor:
    cursor = conn.cursor()
    cursor.row_factory = None
    return cursor


def _names(conn: sqlite3.Connection, kind: str) -> list[str]:
    return [
        r[0]
        for r in _plain(conn).execute(
            "SELECT name FROM sqlite_master WHERE type = ? AND name NOT LIKE 'sqlite_%' "
            "ORDER BY name",
            (kind,),
        )
    ]


# -- a fresh database --------------------------------------------------------------------------


def test_fresh_database_schema_info(tmp_path: Path) -> None:
    clock = FakeClock(NOW + 123)
    store = open_at(tmp_path / "db" / "fresh.sqlite", clock)
    try:
        info = store.schema_info()
        assert info.application_id == APPLICATION_ID == 1128485707
        assert info.schema_version == 3
        assert [(m.version, m.name, m.checksum, m.applied_at) for m in info.migrations] == [
            (1, "scheduler-kernel-v1", V1_CHECKSUM, NOW + 123),
            (2, "jobledger-requeue-v2", MIGRATIONS[1].checksum, NOW + 123),
            (3, "jobledger-everyday-v3", MIGRATIONS[2].checksum, NOW + 123),
        ]
        assert info.migration == info.migrations[-1]
        assert store.backup_path is None
        raw = store._connection.raw
        assert pragma(raw, "user_version") == 3
        assert pragma(raw, "application_id") == APPLICATION_ID
        assert pragma(raw, "journal_mode") == "wal"
        assert pragma(raw, "synchronous") == 2  # FULL
        assert pragma(raw, "foreign_keys") == 1
        assert schema_fingerprint(raw) == MIGRATIONS[2].fingerprint
        assert store.verify().ok
    finally:
        store.close()


def test_synchronous_normal_is_an_option(tmp_path: Path) -> None:
    store = open_at(tmp_path / "db" / "fresh.sqlite", synchronous="NORMAL")
    try:
        assert pragma(store._connection.raw, "synchronous") == 1  # NORMAL
    finally:
        store.close()
    with pytest.raises(SchedulerError) as refused:
        open_at(tmp_path / "db" / "fresh.sqlite", synchronous="OFF")
    assert refused.value.code == "SCHEDULER_INVALID_ARGUMENT"


def test_migrations_follow_the_ladder_and_the_reference_checksum_rule() -> None:
    assert (
        [(m.version, m.name) for m in MIGRATIONS]
        == list(ladder.LADDER)
        == [
            (1, "scheduler-kernel-v1"),
            (2, "jobledger-requeue-v2"),
            (3, "jobledger-everyday-v3"),
        ]
    )
    assert sqlite_schema.LATEST_VERSION == ladder.LATEST_VERSION == 3
    for migration in MIGRATIONS:
        text = migration.ddl.strip().replace("\r\n", "\n")
        assert migration.checksum == hashlib.sha256(text.encode("utf-8")).hexdigest()
        assert list(migration.tables) == sorted(expected_columns(migration.version))
    assert MIGRATIONS[0].checksum == V1_CHECKSUM
    assert list(MIGRATIONS[2].tables) == V3_TABLES


def test_catalog_fingerprint_after_each_migration_is_the_recorded_one() -> None:
    conn = sqlite3.connect(":memory:")
    try:
        fingerprints = []
        for migration in MIGRATIONS:
            for statement in _statements(migration.ddl):
                conn.execute(statement)
            fingerprints.append(schema_fingerprint(conn))
        assert fingerprints == [m.fingerprint for m in MIGRATIONS]
        assert fingerprints[0] == V1_FINGERPRINT
        assert len(set(fingerprints)) == 3
        # v3 rebuilt occurrences and dropped the v1 claim index with it
        assert "scheduler_occurrences_claim" not in _names(conn, "index")
        assert _names(conn, "index") == V3_INDEXES
    finally:
        conn.close()


def test_fingerprint_ignores_whitespace_but_not_content() -> None:
    def fingerprint(ddl: str) -> str:
        conn = sqlite3.connect(":memory:")
        try:
            conn.execute(ddl)
            return schema_fingerprint(conn)
        finally:
            conn.close()

    assert fingerprint("CREATE TABLE t (a INTEGER)") == fingerprint(
        "CREATE   TABLE\tt (a\n   INTEGER)"
    )
    assert fingerprint("CREATE TABLE t (a INTEGER)") != fingerprint("CREATE TABLE t (a TEXT)")


def test_fresh_database_table_shapes_and_indexes(tmp_path: Path) -> None:
    store = open_at(tmp_path / "db" / "fresh.sqlite")
    try:
        raw = store._connection.raw
        assert _names(raw, "table") == V3_TABLES
        shapes = expected_columns(3)
        assert sorted(shapes) == V3_TABLES
        for table in V3_TABLES:
            actual = [
                [row[1], row[2].upper(), row[3], row[5]]
                for row in _plain(raw).execute(f"PRAGMA table_info({table})")
            ]
            assert actual == shapes[table], table
        # spot-check literally (not only against the module's own table)
        assert [c[0] for c in shapes["events"]] == [
            "event_id",
            "job_id",
            "occurrence_id",
            "event_type",
            "occurred_at",
            "owner_id",
            "fence",
            "data_json",
        ]
        assert len(shapes["jobs"]) == 10
        # the reference's 20 occurrence columns, then v3's three, in that order
        assert shapes["occurrences"][:20] == expected_columns(1)["occurrences"]
        assert shapes["occurrences"][20:] == [
            ["kind", "TEXT", 1, 0],
            ["workspace_id", "TEXT", 0, 0],
            ["runnable", "INTEGER", 1, 0],
        ]
        assert _names(raw, "index") == V3_INDEXES
        assert _names(raw, "trigger") == _names(raw, "view") == []
        # 'cancelled' is a status now; an unknown one is still refused by the CHECK
        sql = (
            _plain(raw)
            .execute("SELECT sql FROM sqlite_master WHERE name = 'occurrences'")
            .fetchone()[0]
        )
        assert "'cancelled'" in sql
    finally:
        store.close()


def test_fresh_memory_database_is_v3() -> None:
    store = open_at(":memory:")
    try:
        info = store.schema_info()
        assert info.schema_version == 3
        assert [m.version for m in info.migrations] == [1, 2, 3]
        assert store.backup_path is None
        report = store.verify()
        assert report.ok
        assert [c.name for c in report.checks] == [
            "integrity_check",
            "foreign_keys",
            "schema",
            "stored_authority",
        ]
    finally:
        store.close()


def test_reopening_a_v3_database_changes_nothing(tmp_path: Path) -> None:
    path = fresh_v3(tmp_path / "db" / "x.sqlite")
    digest = sha256_file(path)
    before = listing(path.parent)
    store = open_at(path, FakeClock(NOW + 10_000), migrate=False)
    try:
        assert store.schema_info().migration.applied_at == NOW
        assert store.get_job("job-a") is not None
        assert store.backup_path is None
    finally:
        store.close()
    assert sha256_file(path) == digest
    assert listing(path.parent) == before


# -- missing and empty databases ---------------------------------------------------------------


def test_migrate_false_on_a_missing_path_creates_nothing(tmp_path: Path) -> None:
    for path in (tmp_path / "x.sqlite", tmp_path / "no" / "such" / "dir" / "x.sqlite"):
        with pytest.raises(StoreNotFound) as refused:
            open_at(path, migrate=False)
        assert isinstance(refused.value, NotFound)
        assert refused.value.code == "SCHEDULER_STORE_NOT_FOUND"
        assert refused.value.details == {"target": str(path)}
        assert not path.exists()
    assert listing(tmp_path) == []  # not even the missing directories


@pytest.mark.parametrize("shape", ["zero-bytes", "no-tables"])
def test_migrate_false_on_an_empty_database_requires_a_migration(
    shape: str, tmp_path: Path
) -> None:
    path = tmp_path / "db" / "empty.sqlite"
    path.parent.mkdir(mode=0o700)
    if shape == "zero-bytes":
        path.touch(mode=0o600)
    else:  # a real SQLite file (header and one page) without a single table
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA page_size = 4096")
        conn.execute("VACUUM")
        conn.close()
        assert path.stat().st_size > 0
    path.chmod(0o600)
    digest = sha256_file(path)
    with pytest.raises(MigrationRequired) as refused:
        open_at(path, migrate=False)
    assert refused.value.code == "SCHEDULER_MIGRATION_REQUIRED"
    assert refused.value.details == {"schemaVersion": 0, "requiredVersion": 3}
    assert sha256_file(path) == digest
    assert sidecars(path) == []
    assert listing(path.parent) == ["empty.sqlite"]

    # migrate=True adopts it: an empty database becomes a fresh v3 one
    store = open_at(path)
    try:
        assert store.schema_info().schema_version == 3
        assert store.backup_path is None
    finally:
        store.close()


# -- refused at open: what the O(1) catalog checks see -----------------------------------------


def _garbage(path: Path) -> None:
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.write_bytes(bytes(range(256)) * 64)


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:512])


REFUSALS: dict[str, tuple[Callable[[Path], None], str]] = {
    "user-version-7": (tamper("PRAGMA user_version = 7;"), "SCHEDULER_SCHEMA_UNKNOWN"),
    "user-version-2": (tamper("PRAGMA user_version = 2;"), "SCHEDULER_SCHEMA_UNKNOWN"),
    "user-version-0": (tamper("PRAGMA user_version = 0;"), "SCHEDULER_SCHEMA_UNKNOWN"),
    "application-id": (tamper("PRAGMA application_id = 7;"), "SCHEDULER_SCHEMA_UNKNOWN"),
    "dropped-index": (
        tamper("DROP INDEX jobledger_occurrences_ready;"),
        "SCHEDULER_SCHEMA_CORRUPT",
    ),
    "dropped-v2-index": (
        tamper("DROP INDEX jobledger_requeues_occurrence;"),
        "SCHEDULER_SCHEMA_CORRUPT",
    ),
    "recreated-v1-claim-index": (
        tamper(
            "CREATE INDEX scheduler_occurrences_claim ON occurrences"
            "(status, available_at, lease_expires_at, scheduled_for, occurrence_id);"
        ),
        "SCHEDULER_SCHEMA_CORRUPT",
    ),
    "added-trigger": (
        tamper("CREATE TRIGGER jobs_touch AFTER UPDATE ON jobs BEGIN SELECT 1; END;"),
        "SCHEDULER_SCHEMA_CORRUPT",
    ),
    "added-view": (
        tamper("CREATE VIEW job_ids AS SELECT job_id FROM jobs;"),
        "SCHEDULER_SCHEMA_CORRUPT",
    ),
    "added-index": (
        tamper("CREATE INDEX extra_jobs_kind ON jobs(kind);"),
        "SCHEDULER_SCHEMA_CORRUPT",
    ),
    "tampered-v3-checksum": (
        tamper("UPDATE migrations SET checksum = 'x' WHERE version = 3;"),
        "SCHEDULER_SCHEMA_UNKNOWN",
    ),
    "tampered-v1-checksum": (
        tamper(f"UPDATE migrations SET checksum = '{'0' * 64}' WHERE version = 1;"),
        "SCHEDULER_SCHEMA_UNKNOWN",
    ),
    "renamed-migration": (
        tamper("UPDATE migrations SET name = 'other' WHERE version = 3;"),
        "SCHEDULER_SCHEMA_UNKNOWN",
    ),
    "forgotten-v3-migration": (
        # the history then claims v2, but the tables are v3's
        tamper("DELETE FROM migrations WHERE version = 3; PRAGMA user_version = 2;"),
        "SCHEDULER_SCHEMA_UNKNOWN",
    ),
    "future-migration": (
        tamper("INSERT INTO migrations VALUES (4, 'from-the-future', 'x', 0);"),
        "SCHEDULER_SCHEMA_UNKNOWN",
    ),
    "extra-table": (
        tamper("CREATE TABLE user_notes (id INTEGER); INSERT INTO user_notes VALUES (1);"),
        "SCHEDULER_SCHEMA_UNKNOWN",
    ),
    "missing-v2-table": (
        tamper("DROP TABLE jobledger_requeues;"),
        "SCHEDULER_SCHEMA_UNKNOWN",
    ),
    "missing-v3-table": (
        tamper("DROP TABLE jobledger_workers;"),
        "SCHEDULER_SCHEMA_UNKNOWN",
    ),
    "dropped-v3-column": (
        tamper(
            "DROP INDEX jobledger_occurrences_ready_workspace; "
            "ALTER TABLE occurrences DROP COLUMN workspace_id;"
        ),
        "SCHEDULER_SCHEMA_CORRUPT",
    ),
    "garbage-file": (_garbage, "SCHEDULER_SCHEMA_CORRUPT"),
    "truncated-file": (_truncate, "SCHEDULER_SCHEMA_CORRUPT"),
}


@pytest.mark.parametrize("migrate", [True, False])
@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_damaged_or_unknown_database_is_refused_unchanged(
    case: str, migrate: bool, tmp_path: Path
) -> None:
    damage, code = REFUSALS[case]
    path = fresh_v3(tmp_path / "db" / "x.sqlite")
    damage(path)
    assert sidecars(path) == []
    digest = sha256_file(path)
    before = listing(path.parent)
    with pytest.raises(SchedulerError) as refused:
        open_at(path, migrate=migrate)
    assert refused.value.code == code
    assert sha256_file(path) == digest
    assert sidecars(path) == []
    assert listing(path.parent) == before  # no backup, no new file


def test_refusal_details_name_what_is_wrong(tmp_path: Path) -> None:
    path = fresh_v3(tmp_path / "a" / "x.sqlite")
    tamper("CREATE TABLE user_notes (id INTEGER PRIMARY KEY);")(path)
    with pytest.raises(SchedulerError) as refused:
        open_at(path)
    assert refused.value.details == {"expected": V3_TABLES, "actual": [*V3_TABLES, "user_notes"]}

    path = fresh_v3(tmp_path / "b" / "x.sqlite")
    tamper("PRAGMA user_version = 7;")(path)
    with pytest.raises(SchedulerError) as refused:
        open_at(path)
    assert refused.value.details == {"applicationId": APPLICATION_ID, "userVersion": 7}

    path = fresh_v3(tmp_path / "c" / "x.sqlite")
    tamper("UPDATE migrations SET checksum = 'x' WHERE version = 3;")(path)
    with pytest.raises(SchedulerError) as refused:
        open_at(path)
    assert refused.value.message == "Scheduler migration history is unknown"
    assert refused.value.details == {
        "migrations": [*V3_HISTORY[:2], {**V3_HISTORY[2], "checksum": "x"}]
    }

    path = fresh_v3(tmp_path / "d" / "x.sqlite")
    tamper("DROP INDEX jobledger_occurrences_ready;")(path)
    with pytest.raises(SchedulerError) as refused:
        open_at(path)
    # the fingerprint check comes first; either way the message names the version
    assert "v3" in refused.value.message


def test_a_newer_history_says_the_database_is_newer(tmp_path: Path) -> None:
    path = fresh_v3(tmp_path / "db" / "x.sqlite")
    tamper(
        "INSERT INTO migrations VALUES (4, 'jobledger-later-v4', 'x', 0); PRAGMA user_version = 4;"
    )(path)
    with pytest.raises(SchedulerError) as refused:
        open_at(path)
    assert refused.value.code == "SCHEDULER_SCHEMA_UNKNOWN"
    assert "newer" in refused.value.message
    assert refused.value.details == {
        "migrations": [*V3_HISTORY, {"version": 4, "name": "jobledger-later-v4", "checksum": "x"}]
    }
