"""The SQLite schema: exact creation, verification on every open, refusal, and v1 → v2 upgrade."""

from __future__ import annotations

import hashlib
import multiprocessing
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import jobledger
from jobledger import contract
from jobledger.errors import SchedulerError
from jobledger.store.sqlite import SQLiteStore
from jobledger.store.sqlite.schema import (
    MIGRATIONS,
    _statements,
    expected_columns,
    schema_fingerprint,
)
from jobledger.testing import FakeClock
from tests.sqlite.support import (
    APPLICATION_ID,
    V1_CHECKSUM,
    V1_FINGERPRINT,
    V1_TABLES,
    pragma,
    read_only,
    sha256_file,
    sidecars,
    table_rows,
)

NOW = 1_767_225_600_000
V2_TABLES = ["events", "jobledger_requeues", "jobs", "migrations", "occurrences"]
V2_INDEXES = [
    "jobledger_requeues_occurrence",
    "scheduler_events_job",
    "scheduler_events_occurrence",
    "scheduler_occurrences_claim",
    "scheduler_occurrences_idempotency",
    "scheduler_occurrences_job",
]
AUTHORITY = {"principal": {"type": "user", "id": "tester"}}


def _open(path: Path | str, clock: FakeClock | None = None, **options: Any) -> SQLiteStore:
    store = jobledger.open_store(path, clock=clock or FakeClock(NOW), **options)
    assert isinstance(store, SQLiteStore)
    return store


def _fresh(path: Path) -> Path:
    """A fresh v2 database, closed (WAL checkpointed), with one job and one occurrence."""
    store = _open(path)
    try:
        store.create_job(id="job-a", kind="email", authority=AUTHORITY, payload={"n": 1})
        store.enqueue_occurrence(job_id="job-a", scheduled_for=NOW, trigger_key="t")
    finally:
        store.close()
    assert sidecars(path) == []
    return path


def _plain(conn: sqlite3.Connection) -> sqlite3.Cursor:
    cursor = conn.cursor()
    cursor.row_factory = None
    return cursor


# -- a fresh database --------------------------------------------------------------------------


def test_fresh_database_schema_info(tmp_path: Path) -> None:
    clock = FakeClock(NOW + 123)
    store = _open(tmp_path / "db" / "fresh.sqlite", clock)
    try:
        info = store.schema_info()
        assert info.application_id == APPLICATION_ID == 1128485707
        assert info.schema_version == 2
        assert [(m.version, m.name, m.checksum, m.applied_at) for m in info.migrations] == [
            (1, "scheduler-kernel-v1", V1_CHECKSUM, NOW + 123),
            (2, "jobledger-requeue-v2", MIGRATIONS[1].checksum, NOW + 123),
        ]
        assert info.migration == info.migrations[-1]
        assert store.backup_path is None
        raw = store._connection.raw
        assert pragma(raw, "user_version") == 2
        assert pragma(raw, "application_id") == APPLICATION_ID
        assert pragma(raw, "journal_mode") == "wal"
        assert pragma(raw, "synchronous") == 2  # FULL
        assert pragma(raw, "foreign_keys") == 1
        assert schema_fingerprint(raw) == MIGRATIONS[1].fingerprint
    finally:
        store.close()


def test_migration_checksums_follow_the_reference_rule() -> None:
    for migration in MIGRATIONS:
        text = migration.ddl.strip().replace("\r\n", "\n")
        assert migration.checksum == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert MIGRATIONS[0].checksum == V1_CHECKSUM
    assert [(m.version, m.name) for m in MIGRATIONS] == [
        (1, "scheduler-kernel-v1"),
        (2, "jobledger-requeue-v2"),
    ]


def test_catalog_fingerprint_after_migration_1_is_the_reference_v1() -> None:
    conn = sqlite3.connect(":memory:")
    try:
        for statement in _statements(MIGRATIONS[0].ddl):
            conn.execute(statement)
        assert schema_fingerprint(conn) == V1_FINGERPRINT == MIGRATIONS[0].fingerprint
        for statement in _statements(MIGRATIONS[1].ddl):
            conn.execute(statement)
        assert schema_fingerprint(conn) == MIGRATIONS[1].fingerprint
        assert MIGRATIONS[1].fingerprint != V1_FINGERPRINT
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
    store = _open(tmp_path / "db" / "fresh.sqlite")
    try:
        raw = store._connection.raw
        tables = [
            r[0]
            for r in _plain(raw).execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' "
                "ORDER BY name"
            )
        ]
        assert tables == V2_TABLES
        shapes = expected_columns(2)
        assert sorted(shapes) == V2_TABLES
        for table in V2_TABLES:
            actual = [
                [row[1], row[2].upper(), row[3], row[5]]
                for row in _plain(raw).execute(f"PRAGMA table_info({table})")
            ]
            assert actual == shapes[table], table
        # spot-check the reference's v1 shapes literally (not only against our own table)
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
        assert len(shapes["occurrences"]) == 20
        assert len(shapes["jobs"]) == 10
        indexes = [
            r[0]
            for r in _plain(raw).execute(
                "SELECT name FROM sqlite_master WHERE type='index' "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        assert indexes == V2_INDEXES
        assert (
            _plain(raw)
            .execute("SELECT COUNT(*) FROM sqlite_master WHERE type IN ('trigger', 'view')")
            .fetchone()[0]
            == 0
        )
    finally:
        store.close()


def test_fresh_memory_database_is_v2() -> None:
    store = _open(":memory:")
    try:
        info = store.schema_info()
        assert info.schema_version == 2
        assert [m.version for m in info.migrations] == [1, 2]
        assert store.backup_path is None
    finally:
        store.close()


def test_reopening_a_v2_database_changes_nothing(tmp_path: Path) -> None:
    path = _fresh(tmp_path / "db" / "x.sqlite")
    digest = sha256_file(path)
    before = sorted(p.name for p in path.parent.iterdir())
    store = _open(path, FakeClock(NOW + 10_000), migrate=False)
    try:
        assert store.schema_info().migration.applied_at == NOW
        assert store.get_job("job-a") is not None
    finally:
        store.close()
    assert sha256_file(path) == digest
    assert sorted(p.name for p in path.parent.iterdir()) == before


# -- refusal of damaged and unknown databases --------------------------------------------------


def _tamper(sql: str) -> Callable[[Path], None]:
    def apply(path: Path) -> None:
        conn = sqlite3.connect(path)
        try:
            conn.executescript(sql)
        finally:
            conn.close()

    return apply


def _garbage(path: Path) -> None:
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.write_bytes(bytes(range(256)) * 64)


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:512])


REFUSALS: dict[str, tuple[Callable[[Path], None], str]] = {
    "user-version-7": (_tamper("PRAGMA user_version = 7;"), "SCHEDULER_SCHEMA_UNKNOWN"),
    "user-version-0": (_tamper("PRAGMA user_version = 0;"), "SCHEDULER_SCHEMA_UNKNOWN"),
    "application-id": (_tamper("PRAGMA application_id = 7;"), "SCHEDULER_SCHEMA_UNKNOWN"),
    "dropped-index": (
        _tamper("DROP INDEX scheduler_occurrences_claim;"),
        "SCHEDULER_SCHEMA_CORRUPT",
    ),
    "dropped-v2-index": (
        _tamper("DROP INDEX jobledger_requeues_occurrence;"),
        "SCHEDULER_SCHEMA_CORRUPT",
    ),
    "added-trigger": (
        _tamper("CREATE TRIGGER jobs_touch AFTER UPDATE ON jobs BEGIN SELECT 1; END;"),
        "SCHEDULER_SCHEMA_CORRUPT",
    ),
    "added-view": (
        _tamper("CREATE VIEW job_ids AS SELECT job_id FROM jobs;"),
        "SCHEDULER_SCHEMA_CORRUPT",
    ),
    "added-index": (
        _tamper("CREATE INDEX extra_jobs_kind ON jobs(kind);"),
        "SCHEDULER_SCHEMA_CORRUPT",
    ),
    "tampered-v2-checksum": (
        _tamper("UPDATE migrations SET checksum = 'x' WHERE version = 2;"),
        "SCHEDULER_SCHEMA_UNKNOWN",
    ),
    "tampered-v1-checksum": (
        _tamper(f"UPDATE migrations SET checksum = '{'0' * 64}' WHERE version = 1;"),
        "SCHEDULER_SCHEMA_UNKNOWN",
    ),
    "renamed-migration": (
        _tamper("UPDATE migrations SET name = 'other' WHERE version = 2;"),
        "SCHEDULER_SCHEMA_UNKNOWN",
    ),
    "extra-table": (
        _tamper("CREATE TABLE user_notes (id INTEGER); INSERT INTO user_notes VALUES (1);"),
        "SCHEDULER_SCHEMA_UNKNOWN",
    ),
    "missing-v2-table": (
        _tamper("DROP TABLE jobledger_requeues;"),
        "SCHEDULER_SCHEMA_UNKNOWN",
    ),
    "broken-foreign-key": (
        _tamper(
            "PRAGMA foreign_keys = OFF; "
            "INSERT INTO events (job_id, event_type, occurred_at, data_json) "
            "VALUES ('no-such-job', 'job_created', 1, '{}');"
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
    path = _fresh(tmp_path / "db" / "x.sqlite")
    damage(path)
    assert sidecars(path) == []
    digest = sha256_file(path)
    before = sorted(p.name for p in path.parent.iterdir())
    with pytest.raises(SchedulerError) as refused:
        _open(path, migrate=migrate)
    assert refused.value.code == code
    assert sha256_file(path) == digest
    assert sidecars(path) == []
    assert sorted(p.name for p in path.parent.iterdir()) == before  # no backup, no new file


def test_refusal_details_name_what_is_wrong(tmp_path: Path) -> None:
    path = _fresh(tmp_path / "a" / "x.sqlite")
    _tamper("CREATE TABLE user_notes (id INTEGER PRIMARY KEY);")(path)
    with pytest.raises(SchedulerError) as refused:
        _open(path)
    assert refused.value.details == {"expected": V2_TABLES, "actual": [*V2_TABLES, "user_notes"]}

    path = _fresh(tmp_path / "b" / "x.sqlite")
    _tamper("PRAGMA user_version = 7;")(path)
    with pytest.raises(SchedulerError) as refused:
        _open(path)
    assert refused.value.details == {"applicationId": APPLICATION_ID, "userVersion": 7}

    path = _fresh(tmp_path / "c" / "x.sqlite")
    _tamper("UPDATE migrations SET checksum = 'x' WHERE version = 2;")(path)
    with pytest.raises(SchedulerError) as refused:
        _open(path)
    assert refused.value.details == {
        "migrations": [
            {"version": 1, "name": "scheduler-kernel-v1", "checksum": V1_CHECKSUM},
            {"version": 2, "name": "jobledger-requeue-v2", "checksum": "x"},
        ]
    }


def test_tampered_stored_authority_opens_but_reads_as_data_corrupt(tmp_path: Path) -> None:
    path = _fresh(tmp_path / "db" / "x.sqlite")
    _tamper("""UPDATE jobs SET authority_json = '{"schemaVersion":2}' WHERE job_id = 'job-a';""")(
        path
    )
    store = _open(path)
    try:
        with pytest.raises(SchedulerError) as corrupt:
            store.get_job("job-a")
        assert corrupt.value.code == "SCHEDULER_DATA_CORRUPT"
        # the occurrence kept its own (valid) copy of the authority and still reads
        (occurrence,) = store.list_occurrences_by_trigger(job_id="job-a", trigger_key="t")
        assert occurrence.authority["principal"] == {"type": "user", "id": "tester"}
        # and a write that must read the job refuses too, changing nothing
        before = [e.event_id for e in store.history()]
        with pytest.raises(SchedulerError) as refused:
            store.enqueue_occurrence(job_id="job-a", scheduled_for=NOW + 1, trigger_key="u")
        assert refused.value.code == "SCHEDULER_DATA_CORRUPT"
        assert [e.event_id for e in store.history()] == before
    finally:
        store.close()


def test_row_violating_a_check_constraint_is_refused_at_open(tmp_path: Path) -> None:
    """quick_check also verifies CHECK constraints: invalid stored JSON is caught on open."""
    path = _fresh(tmp_path / "db" / "x.sqlite")
    _tamper(
        "PRAGMA ignore_check_constraints = ON; "
        "UPDATE jobs SET payload_json = '{not json' WHERE job_id = 'job-a';"
    )(path)
    digest = sha256_file(path)
    with pytest.raises(SchedulerError) as refused:
        _open(path)
    assert refused.value.code == "SCHEDULER_SCHEMA_CORRUPT"
    assert refused.value.details is not None
    assert refused.value.details["result"] != ["ok"]
    assert sha256_file(path) == digest
    assert sidecars(path) == []


# -- v1 → v2 upgrade of a hand-made v1 database ------------------------------------------------


def _make_v1(path: Path) -> dict[str, Any]:
    """A v1 database as the reference writes it, built with migration 1 only."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    authority = contract.canonical_json(contract.normalize_authority(AUTHORITY))
    queued_id, queued_key = contract.derive_occurrence_identity(
        job_id="job-v1", job_revision=1, scheduled_for=NOW, trigger_key="slot-1"
    )
    dead_id, dead_key = contract.derive_occurrence_identity(
        job_id="job-v1", job_revision=1, scheduled_for=NOW + 1000, trigger_key="slot-2"
    )
    error = '{"code":"boom","message":"failed"}'
    conn = sqlite3.connect(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        for statement in _statements(MIGRATIONS[0].ddl):
            conn.execute(statement)
        conn.execute(
            "INSERT INTO migrations VALUES (1, 'scheduler-kernel-v1', ?, ?)", (V1_CHECKSUM, NOW)
        )
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute("PRAGMA user_version = 1")
        conn.execute(
            "INSERT INTO jobs VALUES ('job-v1', 'email', '{}', '{\"to\":\"a\"}', ?, 1, 1, 1, ?, ?)",
            (authority, NOW, NOW),
        )
        conn.execute(
            "INSERT INTO occurrences VALUES "
            "(?, 'job-v1', 1, ?, 'slot-1', ?, ?, 'queued', 0, 1, 0, NULL, NULL, ?, "
            '\'{"to":"a"}\', NULL, NULL, ?, ?, NULL)',
            (queued_id, queued_key, NOW, NOW, authority, NOW, NOW),
        )
        conn.execute(
            "INSERT INTO occurrences VALUES "
            "(?, 'job-v1', 1, ?, 'slot-2', ?, ?, 'dead_letter', 1, 1, 1, NULL, NULL, ?, "
            '\'{"to":"a"}\', ?, NULL, ?, ?, ?)',
            (dead_id, dead_key, NOW + 1000, NOW + 1000, authority, error, NOW, NOW + 5, NOW + 5),
        )
        events = [
            ("job-v1", None, "job_created", NOW, None, None, '{"revision":1}'),
            ("job-v1", queued_id, "occurrence_enqueued", NOW, None, None, "{}"),
            ("job-v1", dead_id, "occurrence_enqueued", NOW, None, None, "{}"),
            ("job-v1", dead_id, "occurrence_claimed", NOW + 1, "w", 1, "{}"),
            ("job-v1", dead_id, "occurrence_dead_lettered", NOW + 5, "w", 1, "{}"),
        ]
        conn.executemany(
            "INSERT INTO events (job_id, occurrence_id, event_type, occurred_at, owner_id, "
            "fence, data_json) VALUES (?, ?, ?, ?, ?, ?, ?)",
            events,
        )
        conn.execute("COMMIT")
        conn.execute("PRAGMA journal_mode = WAL")
        assert schema_fingerprint(conn) == V1_FINGERPRINT
    finally:
        conn.close()
    return {"queued": queued_id, "dead": dead_id, "events": len(events)}


def test_hand_made_v1_database_is_upgraded_to_v2(tmp_path: Path) -> None:
    path = tmp_path / "db" / "v1.sqlite"
    made = _make_v1(path)
    with read_only(path) as conn:
        before = {table: table_rows(conn, table) for table in V1_TABLES}
    conn.close()

    clock = FakeClock(NOW + 60_000)
    store = _open(path, clock)
    try:
        info = store.schema_info()
        assert info.schema_version == 2
        assert [(m.version, m.applied_at) for m in info.migrations] == [
            (1, NOW),
            (2, NOW + 60_000),
        ]
        raw = store._connection.raw
        for table in ("jobs", "occurrences", "events"):
            assert table_rows(raw, table) == before[table]
        assert schema_fingerprint(raw) == MIGRATIONS[1].fingerprint
        assert store.backup_path == path.with_name("v1.sqlite.v1.bak")

        job = store.get_job("job-v1")
        assert job is not None
        assert (job.payload, job.revision, job.enabled) == ({"to": "a"}, 1, True)
        assert [o.id for o in store.list_dead_letters()] == [made["dead"]]
        assert len(store.history(limit=200)) == made["events"]

        # the upgraded database works: claim, settle, and the v2 feature (requeue)
        claimed = store.claim_next(owner_id="w2", lease_ms=1000)
        assert claimed is not None
        assert claimed.id == made["queued"]
        store.settle(occurrence_id=claimed.id, owner_id="w2", fence=1, outcome="succeeded")
        requeued = store.requeue_dead_letter(
            occurrence_id=made["dead"], expected_fence=1, reason="fixed", actor="ops"
        )
        assert requeued.status == "retry_wait"
        assert requeued.max_attempts == 2
        requeues = _plain(raw).execute("SELECT occurrence_id, reason FROM jobledger_requeues")
        assert requeues.fetchall() == [(made["dead"], "fixed")]
    finally:
        store.close()

    with read_only(path.with_name("v1.sqlite.v1.bak")) as backup:
        assert pragma(backup, "user_version") == 1
        assert schema_fingerprint(backup) == V1_FINGERPRINT
        for table in V1_TABLES:
            assert table_rows(backup, table) == before[table]
    backup.close()


def test_upgrade_does_not_overwrite_an_existing_backup(tmp_path: Path) -> None:
    path = tmp_path / "db" / "v1.sqlite"
    _make_v1(path)
    existing = path.with_name("v1.sqlite.v1.bak")
    existing.write_bytes(b"keep me")
    store = _open(path)
    try:
        assert store.backup_path == path.with_name("v1.sqlite.v1.1.bak")
    finally:
        store.close()
    assert existing.read_bytes() == b"keep me"
    with read_only(path.with_name("v1.sqlite.v1.1.bak")) as backup:
        assert pragma(backup, "user_version") == 1
    backup.close()


def test_hand_made_v1_database_without_migrate_is_refused_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "db" / "v1.sqlite"
    _make_v1(path)
    digest = sha256_file(path)
    with pytest.raises(SchedulerError) as refused:
        _open(path, migrate=False)
    assert refused.value.code == "SCHEDULER_MIGRATION_REQUIRED"
    assert sha256_file(path) == digest
    assert sorted(p.name for p in path.parent.iterdir()) == ["v1.sqlite"]


def test_damaged_v1_database_is_refused_before_any_backup(tmp_path: Path) -> None:
    path = tmp_path / "db" / "v1.sqlite"
    _make_v1(path)
    _tamper("DROP INDEX scheduler_occurrences_job;")(path)
    digest = sha256_file(path)
    with pytest.raises(SchedulerError) as refused:
        _open(path)
    assert refused.value.code == "SCHEDULER_SCHEMA_CORRUPT"
    assert sha256_file(path) == digest
    assert sorted(p.name for p in path.parent.iterdir()) == ["v1.sqlite"]


# -- concurrent first open ---------------------------------------------------------------------


def _settled(path: Path) -> sqlite3.Connection:
    """A plain connection for checks after concurrent openers: when the last of them closed
    while another was still opening, SQLite may rightly leave committed pages in the -wal
    file, which an ``immutable`` read-only connection would not see."""
    return sqlite3.connect(path)


def _assert_single_schema(path: Path) -> None:
    with _settled(path) as conn:
        assert table_rows(conn, "migrations") == [
            (1, "scheduler-kernel-v1", V1_CHECKSUM, NOW),
            (2, "jobledger-requeue-v2", MIGRATIONS[1].checksum, NOW),
        ]
        assert schema_fingerprint(conn) == MIGRATIONS[1].fingerprint
    conn.close()


@pytest.mark.parametrize("round_", range(5))
def test_concurrent_first_open_from_two_threads(round_: int, tmp_path: Path) -> None:
    path = tmp_path / "db" / "shared.sqlite"
    barrier = threading.Barrier(2)
    results: list[Any] = [None, None]

    def open_it(index: int) -> None:
        barrier.wait(timeout=30)
        try:
            store = _open(path)
        except BaseException as exc:
            results[index] = exc
            return
        try:
            results[index] = store.schema_info()
        finally:
            store.close()

    threads = [threading.Thread(target=open_it, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive()
    assert not any(isinstance(r, BaseException) for r in results), results
    assert results[0] == results[1]
    assert results[0].schema_version == 2
    _assert_single_schema(path)


def _open_in_process(path: str, barrier: Any, queue: Any) -> None:
    barrier.wait(timeout=60)
    try:
        store = jobledger.open_store(path, clock=FakeClock(NOW))
        try:
            queue.put(("ok", store.schema_info().schema_version))
        finally:
            store.close()
    except BaseException as exc:  # reported to the parent
        queue.put(("error", repr(exc)))


def test_concurrent_first_open_from_two_processes(tmp_path: Path) -> None:
    path = tmp_path / "db" / "shared.sqlite"
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    queue = context.Queue()
    processes = [
        context.Process(target=_open_in_process, args=(str(path), barrier, queue)) for _ in range(2)
    ]
    for process in processes:
        process.start()
    outcomes = [queue.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert outcomes == [("ok", 2), ("ok", 2)]
    _assert_single_schema(path)


def _upgrade_in_process(paths: list[str], barrier: Any, queue: Any) -> None:
    for path in paths:
        barrier.wait(timeout=60)
        try:
            store = jobledger.open_store(path, clock=FakeClock(NOW + 1))
            try:
                queue.put(("ok", store.schema_info().schema_version))
            finally:
                store.close()
        except BaseException as exc:  # reported to the parent
            queue.put(("error", repr(exc)))


def test_concurrent_upgrade_of_a_v1_database_from_three_processes(tmp_path: Path) -> None:
    """Several processes opening the same v1 file at once: every one succeeds, upgrade once."""
    rounds, workers = 20, 3
    paths = [tmp_path / f"round-{i}" / "v1.sqlite" for i in range(rounds)]
    for path in paths:
        _make_v1(path)
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(workers)
    queue = context.Queue()
    processes = [
        context.Process(target=_upgrade_in_process, args=([str(p) for p in paths], barrier, queue))
        for _ in range(workers)
    ]
    for process in processes:
        process.start()
    outcomes = [queue.get(timeout=120) for _ in range(rounds * workers)]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert outcomes == [("ok", 2)] * (rounds * workers)
    for path in paths:
        with _settled(path) as conn:
            assert [row[:2] for row in table_rows(conn, "migrations")] == [
                (1, "scheduler-kernel-v1"),
                (2, "jobledger-requeue-v2"),
            ]
            assert len(table_rows(conn, "jobs")) == 1
        conn.close()
        backups = sorted(path.parent.glob("*.bak"))
        # Only the opener that ran the upgrade keeps its backup; the others remove theirs.
        assert len(backups) == 1
        for backup in backups:
            with read_only(backup) as copy:
                assert pragma(copy, "user_version") == 1
                assert schema_fingerprint(copy) == V1_FINGERPRINT
            copy.close()
