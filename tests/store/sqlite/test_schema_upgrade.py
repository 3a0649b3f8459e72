"""Upgrading SQLite files to the latest rung: v1, v2 and v3 files keep every row, gain what v3
and v4 derive from their jobs (kind, workspace, runnable; the default queue and priority, the
gate, the authority stored once, a key row per idempotency key), are copied first, and are
refused unchanged without ``migrate``; concurrent first opens and concurrent upgrades converge
on one current database with one migration history. (v4 → v5 from a file the v4 release wrote:
``test_v4_release.py``.)"""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

import jobledger
from jobledger.errors import SchedulerError
from jobledger.store.migrations import LADDER, LATEST_VERSION
from jobledger.store.sqlite.schema import MIGRATIONS, SQLiteSchema, schema_fingerprint
from jobledger.testing import FakeClock
from tests.store.sqlite.handmade import (
    APPLIED_AT,
    MAKERS,
    NOW,
    V1_JOB_COLUMNS,
    V3_ROWS,
    key_rows,
    listing,
    make_v1,
    open_at,
    tamper,
    v1_occurrences,
    v3_occurrences,
    v4_lanes,
)
from tests.store.sqlite.support import V1_CHECKSUM, pragma, read_only, sha256_file, table_rows

LATEST = LATEST_VERSION
V2_TABLES = ("events", "jobledger_requeues", "jobs", "migrations", "occurrences")
V3_TABLES = (*V2_TABLES, *sorted(V3_ROWS))
OLD_TABLES = {1: ("events", "jobs", "migrations", "occurrences"), 2: V2_TABLES, 3: V3_TABLES}
HISTORY = [(version, name, MIGRATIONS[version - 1].checksum) for version, name in LADDER]
assert HISTORY[0][2] == V1_CHECKSUM
NEW_TABLES = (
    "jobledger_adjudications",
    "jobledger_authorities",
    "jobledger_dependencies",
    "jobledger_keys",
    "jobledger_liveness",
    "jobledger_queues",
    "jobledger_rate_windows",
    "jobledger_store",
)


def _rows(conn: sqlite3.Connection, table: str) -> list[tuple[Any, ...]]:
    if table in ("jobs", "occurrences", "events", "migrations"):
        return table_rows(conn, table)
    cursor = conn.cursor()
    cursor.row_factory = None
    return cursor.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()


def _snapshot(path: Path, version: int) -> dict[str, list[tuple[Any, ...]]]:
    conn = read_only(path)
    try:
        return {table: _rows(conn, table) for table in OLD_TABLES[version]}
    finally:
        conn.close()


def _count(conn: sqlite3.Connection, table: str) -> int:
    return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


# -- v1, v2 and v3 → the latest rung ---------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2, 3])
def test_an_old_file_is_upgraded_to_the_latest_keeping_every_row(
    version: int, tmp_path: Path
) -> None:
    path = tmp_path / "db" / f"v{version}.sqlite"
    made = MAKERS[version](path)
    before = _snapshot(path, version)

    clock = FakeClock(NOW + 60_000)
    store = open_at(path, clock)
    try:
        info = store.schema_info()
        assert info.schema_version == LATEST
        assert [(m.version, m.name, m.checksum) for m in info.migrations] == HISTORY
        # the old rungs keep their applied_at; only the new ones are stamped now
        applied = [APPLIED_AT[v] for v in range(1, version + 1)]
        applied += [NOW + 60_000] * (LATEST - version)
        assert [m.applied_at for m in info.migrations] == applied
        assert store.backup_path == path.with_name(f"v{version}.sqlite.v{version}.bak")

        raw = store._connection.raw
        assert schema_fingerprint(raw) == MIGRATIONS[LATEST - 1].fingerprint
        assert pragma(raw, "user_version") == LATEST
        kept = ["events", *(t for t in OLD_TABLES[version] if t.startswith("jobledger_"))]
        for table in kept:
            # later rungs may add columns (v5: jobledger_requeues.revived_children): the old
            # columns keep exactly what they held
            old = before[table]
            width = len(old[0]) if old else 0
            assert [row[:width] for row in _rows(raw, table)] == old, table
        # jobs: the old columns exactly, then v4's defaults and the authority stored once
        jobs = _rows(raw, "jobs")
        assert [row[:V1_JOB_COLUMNS] for row in jobs] == before["jobs"]
        authorities = dict(
            raw.execute("SELECT authority_id, authority_json FROM jobledger_authorities").fetchall()
        )
        assert sorted(authorities.values()) == sorted(set(made["authorities"].values()))
        for row in jobs:
            revision, authority_json = row[6], row[4]
            assert row[V1_JOB_COLUMNS : V1_JOB_COLUMNS + 4] == ("default", 0, "retry", revision)
            assert authorities[row[V1_JOB_COLUMNS + 4]] == authority_json
        # occurrences: every old column (the idempotency key is derived, the authority is
        # the job's envelope stored once), then v4's lane
        if version == 3:
            assert v3_occurrences(raw) == before["occurrences"]
        else:
            assert v1_occurrences(raw) == before["occurrences"]
        assert {
            row[0]: row[1]
            for row in raw.execute(
                "SELECT o.occurrence_id, a.authority_json FROM occurrences AS o "
                "JOIN jobledger_authorities AS a ON a.authority_id = o.authority_id"
            )
        } == made["authorities"]
        assert v4_lanes(raw) == made["lanes"]
        # seq keeps the old insertion order
        seqs = [row[0] for row in raw.execute("SELECT occurrence_id FROM occurrences ORDER BY seq")]
        assert seqs == [made[name] for name in ("queued", "dead", "paused", "keyed", "twin")]
        assert key_rows(raw) == made["keys"]
        for table in NEW_TABLES:
            expected = {"jobledger_authorities": len(authorities), "jobledger_keys": 1}
            assert _count(raw, table) == expected.get(table, 1 if table == "jobledger_store" else 0)
        if version < 3:
            for table in V3_ROWS:
                assert _count(raw, table) == 0
        assert store.verify().ok

        # through the public API: kinds and lanes on occurrences, history and dead letters
        for key, lane in made["lanes"].items():
            occurrence = store.get_occurrence(key)
            assert occurrence is not None
            assert (occurrence.kind, occurrence.queue, occurrence.priority) == (
                lane[0],
                "default",
                0,
            )
            assert occurrence.authority == jobledger.normalize_authority(
                {"principal": {"type": "user", "id": "tester"}}
                | ({"workspaceId": "ws-1"} if lane[1] else {})
            )
        job = store.get_job("job-v1")
        assert job is not None
        assert (job.payload, job.revision, job.enabled) == ({"to": "a"}, 1, True)
        assert [o.id for o in store.list_dead_letters()] == [made["dead"]]
        assert len(store.history(limit=200)) == made["events"]

        # the key of two occurrences answers with the older one, without a data-corruption
        # error (v3 refused a later enqueue of such a key)
        again = store.enqueue_occurrence_once_per_trigger(
            job_id="job-v1", scheduled_for=NOW + 9000, trigger_key="key:order-1"
        )
        assert (again.id, again.deduplicated) == (made["keyed"], True)

        # the upgraded file works: the disabled job's row is not claimable, a workspace claim
        # finds the due rows in due order (not the one waiting for 2100), settle, then requeue
        # the dead letter (a v2 feature) and cancel it
        assert store.claim_next(owner_id="w2", lease_ms=1000, job_kind="sms") is None
        claimed = store.claim_next(owner_id="w2", lease_ms=1000, workspace_id="ws-1")
        assert claimed is not None
        assert (claimed.id, claimed.kind) == (made["queued"], "email")
        store.settle(occurrence_id=claimed.id, owner_id="w2", fence=1, outcome="succeeded")
        twin = store.claim_next(owner_id="w2", lease_ms=1000)
        assert twin is not None and twin.id == made["twin"]
        assert store.claim_next(owner_id="w2", lease_ms=1000) is None
        requeued = store.requeue_dead_letter(
            occurrence_id=made["dead"], expected_fence=made["dead_fence"], reason="r", actor="ops"
        )
        assert requeued.status == "retry_wait"
        cancelled = store.cancel_occurrence(occurrence_id=made["dead"], actor="ops", reason="x")
        assert cancelled.status == "cancelled"
        assert store.verify().ok
    finally:
        store.close()

    # the backup is the untouched old file
    backup_path = path.with_name(f"v{version}.sqlite.v{version}.bak")
    with read_only(backup_path) as backup:
        assert pragma(backup, "user_version") == version
        assert schema_fingerprint(backup) == MIGRATIONS[version - 1].fingerprint
    backup.close()
    assert _snapshot(backup_path, version) == before

    # reopening is a plain open: no second backup
    again_store = open_at(path, FakeClock(NOW + 120_000))
    try:
        assert again_store.backup_path is None
        assert again_store.schema_info().migrations == info.migrations
    finally:
        again_store.close()
    assert sorted(p.name for p in path.parent.glob("*.bak")) == [backup_path.name]


def test_upgrade_does_not_overwrite_an_existing_backup(tmp_path: Path) -> None:
    path = tmp_path / "db" / "v1.sqlite"
    make_v1(path)
    existing = path.with_name("v1.sqlite.v1.bak")
    existing.write_bytes(b"keep me")
    store = open_at(path)
    try:
        assert store.backup_path == path.with_name("v1.sqlite.v1.1.bak")
    finally:
        store.close()
    assert existing.read_bytes() == b"keep me"
    with read_only(path.with_name("v1.sqlite.v1.1.bak")) as backup:
        assert pragma(backup, "user_version") == 1
    backup.close()


@pytest.mark.parametrize("version", [1, 2, 3])
def test_an_old_file_without_migrate_is_refused_unchanged(version: int, tmp_path: Path) -> None:
    path = tmp_path / "db" / f"v{version}.sqlite"
    MAKERS[version](path)
    digest = sha256_file(path)
    with pytest.raises(SchedulerError) as refused:
        open_at(path, migrate=False)
    assert refused.value.code == "SCHEDULER_MIGRATION_REQUIRED"
    assert refused.value.details == {"schemaVersion": version, "requiredVersion": LATEST}
    assert "jobledger db migrate" in refused.value.message
    assert sha256_file(path) == digest
    assert listing(path.parent) == [path.name]


@pytest.mark.parametrize(
    ("version", "damage"),
    [
        (1, "DROP INDEX scheduler_occurrences_job;"),
        (2, "DROP INDEX jobledger_requeues_occurrence;"),
        (2, "DROP INDEX scheduler_occurrences_claim;"),
        (2, "CREATE INDEX jobledger_occurrences_ready ON occurrences(status);"),
        (3, "DROP INDEX jobledger_occurrences_final_leases;"),
        (3, "CREATE INDEX jobledger_occurrences_held ON occurrences(status);"),
        (3, "CREATE TRIGGER t AFTER INSERT ON jobledger_audit BEGIN SELECT 1; END;"),
    ],
)
def test_a_damaged_old_file_is_refused_before_any_backup(
    version: int, damage: str, tmp_path: Path
) -> None:
    path = tmp_path / "db" / f"v{version}.sqlite"
    MAKERS[version](path)
    tamper(damage)(path)
    digest = sha256_file(path)
    for migrate in (True, False):
        with pytest.raises(SchedulerError) as refused:
            open_at(path, migrate=migrate)
        assert refused.value.code == "SCHEDULER_SCHEMA_CORRUPT"
        assert f"v{version}" in refused.value.message
    assert sha256_file(path) == digest
    assert listing(path.parent) == [path.name]


# -- concurrent first opens and upgrades -------------------------------------------------------


def _settled(path: Path) -> sqlite3.Connection:
    """A plain connection for checks after concurrent openers: when the last of them closed
    while another was still opening, SQLite may rightly leave committed pages in the -wal
    file, which an ``immutable`` read-only connection would not see."""
    return sqlite3.connect(path)


def _assert_single_schema(path: Path, applied_at: list[int]) -> None:
    with _settled(path) as conn:
        rows = table_rows(conn, "migrations")
        assert [row[:3] for row in rows] == HISTORY
        assert [row[3] for row in rows] == applied_at
        assert schema_fingerprint(conn) == MIGRATIONS[LATEST - 1].fingerprint
        assert pragma(conn, "user_version") == LATEST
    conn.close()


@pytest.mark.parametrize("round_", range(5))
def test_concurrent_first_open_from_two_threads(round_: int, tmp_path: Path) -> None:
    path = tmp_path / "db" / "shared.sqlite"
    barrier = threading.Barrier(2)
    results: list[Any] = [None, None]

    def open_it(index: int) -> None:
        barrier.wait(timeout=30)
        try:
            store = open_at(path)
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
    assert results[0].schema_version == LATEST
    _assert_single_schema(path, [NOW] * LATEST)


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
    assert outcomes == [("ok", LATEST), ("ok", LATEST)]
    _assert_single_schema(path, [NOW] * LATEST)


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


@pytest.mark.parametrize("version", [1, 3])
def test_concurrent_upgrade_of_an_old_file_from_three_processes(
    version: int, tmp_path: Path
) -> None:
    """Several processes opening the same old file at once: every one succeeds, it is
    upgraded once, and one backup is kept."""
    rounds, workers = 12, 3
    paths = [tmp_path / f"round-{i}" / f"v{version}.sqlite" for i in range(rounds)]
    for path in paths:
        MAKERS[version](path)
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
    assert outcomes == [("ok", LATEST)] * (rounds * workers)
    for path in paths:
        applied = [APPLIED_AT[v] for v in range(1, version + 1)]
        _assert_single_schema(path, applied + [NOW + 1] * (LATEST - version))
        with _settled(path) as conn:
            assert len(table_rows(conn, "jobs")) == 2
            assert len(table_rows(conn, "occurrences")) == 5
            assert len(key_rows(conn)) == 1
        conn.close()
        backups = sorted(path.parent.glob("*.bak"))
        # Only the opener that ran the upgrade keeps its backup; the others remove theirs.
        assert len(backups) == 1
        with read_only(backups[0]) as copy:
            assert pragma(copy, "user_version") == version
            assert schema_fingerprint(copy) == MIGRATIONS[version - 1].fingerprint
        copy.close()


@pytest.mark.parametrize("version", [1, 2, 3])
def test_an_open_that_loses_the_upgrade_race_sees_the_upgraded_file(
    version: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What concurrent opens can interleave into, made deterministic: this open reads the old
    history, then another opener upgrades the file before this one verifies it."""
    path = tmp_path / "db" / f"v{version}.sqlite"
    MAKERS[version](path)
    read_history = SQLiteSchema.read_history
    raced: list[Path | None] = []

    def read_then_lose_the_race(schema: SQLiteSchema) -> list[dict[str, Any]] | None:
        history = read_history(schema)
        if not raced:
            raced.append(None)
            other = open_at(path)  # its own reads of the history go straight through
            raced[0] = other.backup_path
            assert other.schema_outcome.upgraded_from == version
            assert not other.schema_outcome.by_another_process
            other.close()
        return history

    monkeypatch.setattr(SQLiteSchema, "read_history", read_then_lose_the_race)
    store = open_at(path)
    try:
        assert store.schema_info().schema_version == LATEST
        assert raced[0] is not None  # the other opener upgraded and kept its backup
        assert store.backup_path is None
        # This open reports what it did (nothing) and what it found (the old version).
        outcome = store.schema_outcome
        assert (outcome.found, outcome.version) == (version, LATEST)
        assert (outcome.created, outcome.upgraded_from, outcome.backup) == (False, None, None)
        assert outcome.by_another_process
    finally:
        store.close()


def test_the_outcome_says_what_this_open_did(tmp_path: Path) -> None:
    fresh = tmp_path / "db" / "fresh.sqlite"
    with open_at(fresh) as store:
        outcome = store.schema_outcome
        assert (outcome.found, outcome.version, outcome.created) == (0, LATEST, True)
        assert not outcome.by_another_process
    with open_at(fresh) as store:
        outcome = store.schema_outcome
        assert (outcome.found, outcome.created, outcome.upgraded_from) == (LATEST, False, None)
        assert not outcome.by_another_process
    old = tmp_path / "db" / "v1.sqlite"
    make_v1(old)
    with open_at(old) as store:
        outcome = store.schema_outcome
        assert (outcome.found, outcome.upgraded_from) == (1, 1)
        assert outcome.backup == store.backup_path is not None
        assert not outcome.by_another_process
