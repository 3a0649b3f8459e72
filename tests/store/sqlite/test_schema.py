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
from tests.store.sqlite.handmade import NOW, fresh_latest, listing, open_at, tamper
from tests.store.sqlite.support import (
    APPLICATION_ID,
    V1_CHECKSUM,
    V1_FINGERPRINT,
    pragma,
    sha256_file,
    sidecars,
)

# The tables and indexes of the latest rung (v5 added jobledger_tags).
TABLES = [
    "events",
    "jobledger_adjudications",
    "jobledger_audit",
    "jobledger_authorities",
    "jobledger_dependencies",
    "jobledger_keys",
    "jobledger_liveness",
    "jobledger_queues",
    "jobledger_rate_windows",
    "jobledger_requeues",
    "jobledger_schedules",
    "jobledger_store",
    "jobledger_tags",
    "jobledger_throughput",
    "jobledger_workers",
    "jobs",
    "migrations",
    "occurrences",
]
INDEXES = [
    "jobledger_dependencies_child",
    "jobledger_events_type",
    "jobledger_keys_key",
    "jobledger_keys_occurrence",
    "jobledger_occurrences_dead_letters",
    "jobledger_occurrences_dead_letters_job",
    "jobledger_occurrences_held",
    "jobledger_occurrences_job",
    "jobledger_occurrences_lanes",
    "jobledger_occurrences_leases",
    "jobledger_occurrences_outcome_unknown",
    "jobledger_occurrences_partition",
    "jobledger_occurrences_queue",
    "jobledger_occurrences_ready",
    "jobledger_occurrences_ready_workspace",
    "jobledger_occurrences_running",
    "jobledger_occurrences_status",
    "jobledger_occurrences_waiting",
    "jobledger_rate_windows_wake",
    "jobledger_requeues_occurrence",
    "jobledger_schedules_due",
    "scheduler_events_job",
    "scheduler_events_occurrence",
]
LATEST = ladder.LATEST_VERSION
# A fresh database's history: every rung of the ladder, v1 with the reference's checksum.
HISTORY = [
    {"version": version, "name": name, "checksum": MIGRATIONS[version - 1].checksum}
    for version, name in ladder.LADDER
]
assert HISTORY[0]["checksum"] == V1_CHECKSUM


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
        assert info.schema_version == LATEST
        assert [(m.version, m.name, m.checksum, m.applied_at) for m in info.migrations] == [
            (h["version"], h["name"], h["checksum"], NOW + 123) for h in HISTORY
        ]
        assert info.migration == info.migrations[-1]
        assert store.backup_path is None
        raw = store._connection.raw
        assert pragma(raw, "user_version") == LATEST
        assert pragma(raw, "application_id") == APPLICATION_ID
        assert pragma(raw, "journal_mode") == "wal"
        assert pragma(raw, "synchronous") == 2  # FULL
        assert pragma(raw, "foreign_keys") == 1
        assert schema_fingerprint(raw) == MIGRATIONS[-1].fingerprint
        assert store.verify().ok
        # the store's identity is made once, with the schema
        (store_id,) = _plain(raw).execute("SELECT store_id FROM jobledger_store").fetchall()
        assert len(store_id[0]) == 32
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
            (4, "jobledger-queues-v4"),
            (5, "jobledger-operators-v5"),
        ]
    )
    assert sqlite_schema.LATEST_VERSION == ladder.LATEST_VERSION == len(ladder.LADDER)
    for migration in MIGRATIONS:
        text = migration.ddl.strip().replace("\r\n", "\n")
        assert migration.checksum == hashlib.sha256(text.encode("utf-8")).hexdigest()
        assert list(migration.tables) == sorted(expected_columns(migration.version))
    assert MIGRATIONS[0].checksum == V1_CHECKSUM
    assert list(MIGRATIONS[-1].tables) == TABLES
    assert list(MIGRATIONS[3].tables) == [table for table in TABLES if table != "jobledger_tags"]


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
        assert len(set(fingerprints)) == len(MIGRATIONS)
        # v3 and v4 rebuilt occurrences and dropped the older claim indexes with it
        assert "scheduler_occurrences_claim" not in _names(conn, "index")
        assert "jobledger_occurrences_final_leases" not in _names(conn, "index")
        assert _names(conn, "index") == INDEXES
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
        assert _names(raw, "table") == TABLES
        shapes = expected_columns(LATEST)
        assert sorted(shapes) == TABLES
        for table in TABLES:
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
        # the reference's 10 job columns, then v4's five
        assert shapes["jobs"][:10] == expected_columns(1)["jobs"]
        assert [c[0] for c in shapes["jobs"][10:]] == [
            "queue",
            "priority",
            "on_lost_lease",
            "run_revision",
            "authority_id",
            "declared_json",
            "operator_set_json",
        ]
        # occurrences: seq (the rowid) first; the reference's columns without the idempotency
        # key (derived from the id) and with the authority stored once (authority_id); v3's
        # three; v4's lane and the columns of results, dependencies and adjudication; then
        # v5's attempt start
        v1 = [c for c in expected_columns(1)["occurrences"] if c[0] != "idempotency_key"]
        v1 = [["authority_id", "INTEGER", 1, 0] if c[0] == "authority_json" else c for c in v1]
        v1 = [[c[0], c[1], c[2], 0] for c in v1]  # occurrence_id is UNIQUE, no longer the key
        assert shapes["occurrences"][0] == ["seq", "INTEGER", 0, 1]
        assert shapes["occurrences"][1:20] == v1
        assert shapes["occurrences"][20:23] == [
            ["kind", "TEXT", 1, 0],
            ["workspace_id", "TEXT", 0, 0],
            ["runnable", "INTEGER", 1, 0],
        ]
        assert [c[0] for c in shapes["occurrences"][23:]] == [
            "queue",
            "priority",
            "partition_key",
            "gate",
            "adjudicate",
            "snoozes",
            "pending_parents",
            "on_parent_failure",
            "result_read_at",
            "trace_json",
            "started_at",
            "tags_json",
            "meta_json",
            "progress_json",
        ]
        assert _names(raw, "index") == INDEXES
        assert _names(raw, "trigger") == _names(raw, "view") == []
        # 'cancelled' (v3) and 'blocked' (v4) are statuses now
        sql = (
            _plain(raw)
            .execute("SELECT sql FROM sqlite_master WHERE name = 'occurrences'")
            .fetchone()[0]
        )
        assert "'cancelled'" in sql and "'blocked'" in sql
        # the claim lane's partial indexes hold only the rows their query may take
        ready = (
            _plain(raw)
            .execute("SELECT sql FROM sqlite_master WHERE name = 'jobledger_occurrences_ready'")
            .fetchone()[0]
        )
        assert "WHERE status IN ('queued', 'retry_wait') AND gate = 0 AND runnable = 1" in ready
    finally:
        store.close()


def test_fresh_memory_database_is_the_latest() -> None:
    store = open_at(":memory:")
    try:
        info = store.schema_info()
        assert info.schema_version == LATEST
        assert [m.version for m in info.migrations] == [version for version, _ in ladder.LADDER]
        assert store.backup_path is None
        report = store.verify()
        assert report.ok
        assert [c.name for c in report.checks] == [
            "integrity_check",
            "foreign_keys",
            "schema",
            "stored_authority",
            "enqueue_events",
        ]
    finally:
        store.close()


def test_reopening_a_current_database_changes_nothing(tmp_path: Path) -> None:
    path = fresh_latest(tmp_path / "db" / "x.sqlite")
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
    assert refused.value.details == {"schemaVersion": 0, "requiredVersion": LATEST}
    assert sha256_file(path) == digest
    assert sidecars(path) == []
    assert listing(path.parent) == ["empty.sqlite"]

    # migrate=True adopts it: an empty database becomes a fresh one at the latest rung
    store = open_at(path)
    try:
        assert store.schema_info().schema_version == LATEST
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
    "user-version-3": (tamper("PRAGMA user_version = 3;"), "SCHEDULER_SCHEMA_UNKNOWN"),
    "user-version-0": (tamper("PRAGMA user_version = 0;"), "SCHEDULER_SCHEMA_UNKNOWN"),
    "application-id": (tamper("PRAGMA application_id = 7;"), "SCHEDULER_SCHEMA_UNKNOWN"),
    "dropped-index": (
        tamper("DROP INDEX jobledger_occurrences_ready;"),
        "SCHEDULER_SCHEMA_CORRUPT",
    ),
    "dropped-waiting-index": (
        tamper("DROP INDEX jobledger_occurrences_waiting;"),
        "SCHEDULER_SCHEMA_CORRUPT",
    ),
    "changed-held-index": (
        tamper(
            "DROP INDEX jobledger_occurrences_held; "
            "CREATE INDEX jobledger_occurrences_held ON occurrences(queue, partition_key);"
        ),
        "SCHEDULER_SCHEMA_CORRUPT",
    ),
    "recreated-v3-final-lease-index": (
        tamper(
            "CREATE INDEX jobledger_occurrences_final_leases ON occurrences"
            "(lease_expires_at, occurrence_id) WHERE status = 'running';"
        ),
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
    "tampered-latest-checksum": (
        tamper(f"UPDATE migrations SET checksum = 'x' WHERE version = {LATEST};"),
        "SCHEDULER_SCHEMA_UNKNOWN",
    ),
    # The reference's order: the catalog (its fingerprint) before the history.
    "tampered-checksum-and-dropped-index": (
        tamper(
            f"UPDATE migrations SET checksum = 'x' WHERE version = {LATEST}; "
            "DROP INDEX jobledger_occurrences_ready;"
        ),
        "SCHEDULER_SCHEMA_CORRUPT",
    ),
    "tampered-checksum-and-added-trigger": (
        tamper(
            "UPDATE migrations SET checksum = 'x' WHERE version = 1; "
            "CREATE TRIGGER jobs_touch AFTER UPDATE ON jobs BEGIN SELECT 1; END;"
        ),
        "SCHEDULER_SCHEMA_CORRUPT",
    ),
    # ... and the table set before either.
    "extra-table-and-dropped-index": (
        tamper("CREATE TABLE user_notes (id INTEGER); DROP INDEX jobledger_occurrences_ready;"),
        "SCHEDULER_SCHEMA_UNKNOWN",
    ),
    "tampered-v1-checksum": (
        tamper(f"UPDATE migrations SET checksum = '{'0' * 64}' WHERE version = 1;"),
        "SCHEDULER_SCHEMA_UNKNOWN",
    ),
    "renamed-migration": (
        tamper(f"UPDATE migrations SET name = 'other' WHERE version = {LATEST};"),
        "SCHEDULER_SCHEMA_UNKNOWN",
    ),
    "forgotten-latest-migration": (
        # the history then claims the rung before, but the catalog is the latest one's: an
        # unknown table set when the latest rung added tables, else a catalog that does not
        # match the claimed rung's fingerprint (v5 added only columns and indexes)
        tamper(
            f"DELETE FROM migrations WHERE version = {LATEST}; PRAGMA user_version = {LATEST - 1};"
        ),
        "SCHEDULER_SCHEMA_UNKNOWN"
        if MIGRATIONS[-1].tables != MIGRATIONS[-2].tables
        else "SCHEDULER_SCHEMA_CORRUPT",
    ),
    "empty-history": (
        tamper("DELETE FROM migrations;"),
        "SCHEDULER_SCHEMA_UNKNOWN",
    ),
    "future-migration": (
        tamper(f"INSERT INTO migrations VALUES ({LATEST + 1}, 'from-the-future', 'x', 0);"),
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
    "missing-v4-table": (
        tamper("DROP TABLE jobledger_liveness;"),
        "SCHEDULER_SCHEMA_UNKNOWN",
    ),
    "dropped-v3-column": (
        tamper(
            "DROP INDEX jobledger_occurrences_ready_workspace; "
            "ALTER TABLE occurrences DROP COLUMN workspace_id;"
        ),
        "SCHEDULER_SCHEMA_CORRUPT",
    ),
    "dropped-v4-column": (
        tamper("ALTER TABLE occurrences DROP COLUMN trace_json;"),
        "SCHEDULER_SCHEMA_CORRUPT",
    ),
    "dropped-v5-column": (
        tamper("ALTER TABLE occurrences DROP COLUMN started_at;"),
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
    path = fresh_latest(tmp_path / "db" / "x.sqlite")
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
    path = fresh_latest(tmp_path / "a" / "x.sqlite")
    tamper("CREATE TABLE user_notes (id INTEGER PRIMARY KEY);")(path)
    with pytest.raises(SchedulerError) as refused:
        open_at(path)
    assert refused.value.details == {"expected": TABLES, "actual": [*TABLES, "user_notes"]}

    path = fresh_latest(tmp_path / "b" / "x.sqlite")
    tamper("PRAGMA user_version = 7;")(path)
    with pytest.raises(SchedulerError) as refused:
        open_at(path)
    assert refused.value.details == {"applicationId": APPLICATION_ID, "userVersion": 7}

    path = fresh_latest(tmp_path / "c" / "x.sqlite")
    tamper("UPDATE migrations SET checksum = 'x' WHERE version = 3;")(path)
    with pytest.raises(SchedulerError) as refused:
        open_at(path)
    assert refused.value.message == "Scheduler migration history is unknown"
    assert refused.value.details == {
        "migrations": [*HISTORY[:2], {**HISTORY[2], "checksum": "x"}, *HISTORY[3:]]
    }

    path = fresh_latest(tmp_path / "d" / "x.sqlite")
    tamper("DROP INDEX jobledger_occurrences_ready;")(path)
    with pytest.raises(SchedulerError) as refused:
        open_at(path)
    # the fingerprint check comes first; either way the message names the version
    assert refused.value.message == f"Scheduler sqlite_master catalog does not match v{LATEST}"
    assert refused.value.details is not None
    assert refused.value.details["expected"] == MIGRATIONS[-1].fingerprint

    # a tampered history does not hide a damaged catalog (the reference's order)
    path = fresh_latest(tmp_path / "e" / "x.sqlite")
    tamper(
        "UPDATE migrations SET checksum = 'x' WHERE version = 2; "
        "DROP INDEX jobledger_occurrences_leases;"
    )(path)
    with pytest.raises(SchedulerError) as refused:
        open_at(path)
    assert refused.value.code == "SCHEDULER_SCHEMA_CORRUPT"
    assert refused.value.message == f"Scheduler sqlite_master catalog does not match v{LATEST}"


def test_a_newer_history_says_the_database_is_newer(tmp_path: Path) -> None:
    path = fresh_latest(tmp_path / "db" / "x.sqlite")
    later = LATEST + 1
    tamper(
        f"INSERT INTO migrations VALUES ({later}, 'jobledger-later-v{later}', 'x', 0); "
        f"PRAGMA user_version = {later};"
    )(path)
    with pytest.raises(SchedulerError) as refused:
        open_at(path)
    assert refused.value.code == "SCHEDULER_SCHEMA_UNKNOWN"
    assert "newer" in refused.value.message
    assert refused.value.details == {
        "migrations": [
            *HISTORY,
            {"version": later, "name": f"jobledger-later-v{later}", "checksum": "x"},
        ]
    }
