"""Databases written by the reference implementation (fixtures/reference-v1) open and keep working.

Every fixture is copied to a private temporary directory first; the shipped files are never
opened. Good files are upgraded v1 → the latest rung on open (after a backup) and must then
read back exactly as the manifest says (each occurrence now also carries its job's kind, the
default queue and priority) and continue exactly as the reference continued. Damaged files are
refused with the reference's code and left byte-for-byte unchanged: they are v1 files, so the
full checks (integrity, foreign keys) that precede every upgrade run on them, not only the
catalog checks of a plain open — in the reference's order.
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import jobledger
from jobledger.errors import SchedulerError
from jobledger.store.migrations import LADDER, LATEST_VERSION
from jobledger.store.sqlite import SQLiteStore
from jobledger.store.sqlite.schema import MIGRATIONS, schema_fingerprint
from jobledger.testing import FakeClock
from tests.store.sqlite.handmade import V1_JOB_COLUMNS, key_rows, tamper, v1_occurrences, v4_lanes
from tests.store.sqlite.support import (
    APPLICATION_ID,
    FIXTURES,
    V1_CHECKSUM,
    V1_FINGERPRINT,
    V1_TABLES,
    camel_to_snake,
    copy_fixture,
    load_manifest,
    pragma,
    read_only,
    sha256_file,
    sidecars,
    table_rows,
)

GOOD = ["empty", "lifecycle"]
DAMAGED = [
    "bad-app-id",
    "bad-dropped-index",
    "bad-extra-table",
    "bad-foreign",
    "bad-newer-version",
    "bad-trigger",
]
# Every damaged fixture is refused with the reference's code, message and details: jobledger
# checks the catalog of the version the history claims (v1 here) in the reference's order
# before it looks at the history, so even a user_version it does not know (99) fails the same
# identity check, with the same details, as in the reference.

JOB_FIELDS = (
    "id kind trigger payload authority enabled revision maxAttempts createdAt updatedAt".split()
)
OCCURRENCE_FIELDS = (
    "id jobId jobRevision idempotencyKey triggerKey scheduledFor availableAt status attempt "
    "maxAttempts fence leaseOwner leaseExpiresAt authority payload lastError result createdAt "
    "updatedAt settledAt"
).split()
EVENT_FIELDS = ("eventId", "jobId", "occurrenceId", "type", "occurredAt", "ownerId", "fence")
EVENT_FIELDS += ("data",)
TERMINAL = {"succeeded", "dead_letter"}


def _open(path: Path, clock: FakeClock, **options: Any) -> SQLiteStore:
    store = jobledger.open_store(path, clock=clock, **options)
    assert isinstance(store, SQLiteStore)
    return store


def _view(value: Any, fields: list[str] | tuple[str, ...]) -> dict[str, Any]:
    return {field: getattr(value, camel_to_snake(field)) for field in fields}


def _event_view(event: Any) -> dict[str, Any]:
    return _view(event, EVENT_FIELDS)


def _expected(record: dict[str, Any], fields: list[str] | tuple[str, ...]) -> dict[str, Any]:
    return {field: record[field] for field in fields}


def _snake_args(args: dict[str, Any]) -> dict[str, Any]:
    return {camel_to_snake(key): value for key, value in args.items()}


def _all_events(store: SQLiteStore) -> list[Any]:
    """Every event, oldest first (history is newest first and capped at 200 per call)."""
    events = store.history(limit=200)
    assert len(events) < 200, "test assumes fewer than 200 events"
    return list(reversed(events))


def _stored_event_json(store: SQLiteStore) -> dict[int, str]:
    cursor = store._connection.raw.cursor()
    cursor.row_factory = None
    return dict(cursor.execute("SELECT event_id, data_json FROM events").fetchall())


def test_every_fixture_is_covered_and_matches_its_manifest_hash() -> None:
    shipped = sorted(path.name.removesuffix(".sqlite") for path in FIXTURES.glob("*.sqlite"))
    assert shipped == sorted(GOOD + DAMAGED)
    for name in shipped:
        manifest = load_manifest(name)
        assert manifest["file"] == f"{name}.sqlite"
        assert sha256_file(FIXTURES / f"{name}.sqlite") == manifest["sha256"]
        assert manifest["expectedOpen"]["ok"] is (name in GOOD)


# -- good fixtures -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", GOOD)
def test_good_fixture_upgrades_and_reads_back_exactly(name: str, tmp_path: Path) -> None:
    manifest = load_manifest(name)
    pristine = copy_fixture(name, tmp_path / "pristine")
    path = copy_fixture(name, tmp_path / "db")
    with read_only(pristine) as before:
        assert pragma(before, "user_version") == 1
        assert pragma(before, "application_id") == manifest["schema"]["applicationId"]
        assert schema_fingerprint(before) == manifest["schema"]["fingerprint"] == V1_FINGERPRINT
        v1_rows = {table: table_rows(before, table) for table in V1_TABLES}
    before.close()

    end = manifest["clock"]["end"]
    store = _open(path, FakeClock(end))
    try:
        # schema: every later rung on top of the reference's v1 row, whose applied_at is kept
        info = store.schema_info()
        assert info.application_id == APPLICATION_ID
        assert info.schema_version == MIGRATIONS[-1].version == LATEST_VERSION
        assert info.migration.version == LATEST_VERSION
        assert info.migration.name == LADDER[-1][1]
        assert info.migration.checksum == MIGRATIONS[-1].checksum
        assert info.migration.applied_at == end
        (expected_v1,) = manifest["schema"]["migrations"]
        v1 = info.migrations[0]
        assert (v1.version, v1.name, v1.checksum, v1.applied_at) == (
            expected_v1["version"],
            expected_v1["name"],
            expected_v1["checksum"],
            expected_v1["appliedAt"],
        )
        assert v1.checksum == V1_CHECKSUM
        assert [m.version for m in info.migrations] == [version for version, _ in LADDER]

        # the upgrade kept every v1 row and event exactly (migrations: plus a row per later
        # rung; jobs: plus v4's columns; occurrences: in the v1 shape again — the idempotency
        # key derived from the id, the authority from the table that stores it once — plus
        # what v3 copies from the job and v4's lane)
        raw = store._connection.raw
        assert table_rows(raw, "events") == v1_rows["events"]
        jobs_after = table_rows(raw, "jobs")
        assert [row[:V1_JOB_COLUMNS] for row in jobs_after] == v1_rows["jobs"]
        assert v1_occurrences(raw) == v1_rows["occurrences"]
        jobs_by_id = {job["id"]: job for job in manifest["jobs"]}
        # A queued or retrying row is waiting (gate 1) when it is due after the upgrade's
        # wall clock — the fixture's instants are all in 2026-01, long past.
        assert v4_lanes(raw) == {
            o["id"]: (
                jobs_by_id[o["jobId"]]["kind"],
                jobs_by_id[o["jobId"]]["authority"]["workspaceId"],
                int(jobs_by_id[o["jobId"]]["enabled"]),
                "default",
                0,
                None,
                0,
                0,
                0,
                0,
            )
            for o in manifest["occurrences"]
        }
        # the reference's keys are slots, not 'key:' idempotency keys: no key rows
        assert all(not o["triggerKey"].startswith("key:") for o in manifest["occurrences"])
        assert key_rows(raw) == {}
        migrations_after = table_rows(raw, "migrations")
        assert migrations_after[:1] == v1_rows["migrations"]
        assert migrations_after[1:] == [
            (version, name, MIGRATIONS[version - 1].checksum, end) for version, name in LADDER[1:]
        ]
        assert schema_fingerprint(raw) == MIGRATIONS[-1].fingerprint
        assert store.verify().ok
        assert pragma(raw, "journal_mode") == manifest["schema"]["journalMode"]

        # jobs, read through the public API
        for expected in manifest["jobs"]:
            job = store.get_job(expected["id"])
            assert job is not None, expected["id"]
            assert _view(job, JOB_FIELDS) == _expected(expected, JOB_FIELDS)
            stored = dict(
                raw.execute(
                    "SELECT trigger_json, payload_json, authority_json FROM jobs WHERE job_id = ?",
                    (expected["id"],),
                ).fetchone()
            )
            assert stored == {
                "trigger_json": expected["stored"]["triggerJson"],
                "payload_json": expected["stored"]["payloadJson"],
                "authority_json": expected["stored"]["authorityJson"],
            }
        assert len(v1_rows["jobs"]) == len(manifest["jobs"]) == manifest["counts"]["jobs"]

        # occurrences
        for expected in manifest["occurrences"]:
            occurrence = store.get_occurrence(expected["id"])
            assert occurrence is not None, expected["id"]
            assert _view(occurrence, OCCURRENCE_FIELDS) == _expected(expected, OCCURRENCE_FIELDS)
            assert occurrence.kind == jobs_by_id[expected["jobId"]]["kind"]
            assert occurrence.deduplicated is False
        assert len(v1_rows["occurrences"]) == len(manifest["occurrences"])
        statuses = Counter(o["status"] for o in manifest["occurrences"])
        assert dict(statuses) == manifest["counts"]["occurrencesByStatus"]

        # events: count, every event including its data and stored text, newest-first view
        events = _all_events(store)
        assert len(events) == manifest["events"]["count"] == manifest["counts"]["events"]
        assert [_event_view(e) for e in events] == [
            _expected(e, EVENT_FIELDS) for e in manifest["events"]["all"]
        ]
        stored_json = _stored_event_json(store)
        for expected in manifest["events"]["all"]:
            assert stored_json[expected["eventId"]] == expected["stored"]["dataJson"]
        assert dict(Counter(e.type for e in events)) == manifest["events"]["countsByType"]
        newest = store.history(limit=len(manifest["events"]["newest"]) or 1)
        assert [_event_view(e) for e in newest][: len(manifest["events"]["newest"])] == [
            _expected(e, EVENT_FIELDS) for e in manifest["events"]["newest"]
        ]
    finally:
        store.close()

    # the backup is the untouched v1 database, private to the owner
    backup = path.with_name(f"{path.name}.v1.bak")
    assert store.backup_path == backup
    assert stat.S_IMODE(os.lstat(backup).st_mode) == 0o600
    assert stat.S_ISREG(os.lstat(backup).st_mode)
    with read_only(backup) as copy:
        assert pragma(copy, "user_version") == 1
        assert pragma(copy, "application_id") == APPLICATION_ID
        assert schema_fingerprint(copy) == V1_FINGERPRINT
        assert [r[0] for r in copy.execute("PRAGMA quick_check").fetchall()] == ["ok"]
        for table in V1_TABLES:
            assert table_rows(copy, table) == v1_rows[table], table
    copy.close()
    # ... and jobledger itself recognizes it as v1 (it would need a migration)
    backup_copy = tmp_path / "backup-check" / "copy.sqlite"
    backup_copy.parent.mkdir(mode=0o700)
    backup_copy.write_bytes(backup.read_bytes())
    with pytest.raises(SchedulerError) as refused:
        _open(backup_copy, FakeClock(end), migrate=False)
    assert refused.value.code == "SCHEDULER_MIGRATION_REQUIRED"
    assert refused.value.details == {"schemaVersion": 1, "requiredVersion": LATEST_VERSION}

    # reopening the upgraded file is a plain open: no second backup, still the latest
    again = _open(path, FakeClock(end))
    try:
        assert again.backup_path is None
        assert again.schema_info().migrations == info.migrations
    finally:
        again.close()
    assert not path.with_name(f"{path.name}.v1.1.bak").exists()


@pytest.mark.parametrize("name", GOOD)
def test_good_fixture_queries_match_the_reference(name: str, tmp_path: Path) -> None:
    manifest = load_manifest(name)
    path = copy_fixture(name, tmp_path / "db")
    store = _open(path, FakeClock(manifest["clock"]["end"]))
    try:
        history_cases = manifest["queries"]["history"]
        dead_letter_cases = manifest["queries"]["listDeadLetters"]
        assert history_cases, "manifest has history queries"
        assert dead_letter_cases, "manifest has listDeadLetters queries"
        for case in history_cases:
            events = store.history(**_snake_args(case["args"]))
            assert [e.event_id for e in events] == case["eventIds"], case["args"]
        for case in dead_letter_cases:
            dead = store.list_dead_letters(**_snake_args(case["args"]))
            assert [o.id for o in dead] == case["occurrenceIds"], case["args"]
    finally:
        store.close()


@pytest.mark.parametrize("name", GOOD)
def test_good_fixture_continues_like_the_reference(name: str, tmp_path: Path) -> None:
    manifest = load_manifest(name)
    expected = manifest["continuation"]
    assert expected["clock"] == manifest["clock"]["end"]
    path = copy_fixture(name, tmp_path / "db")
    store = _open(path, FakeClock(expected["clock"]))
    try:
        ids = [o["id"] for o in manifest["occurrences"]]
        last_event_id = max((e["eventId"] for e in manifest["events"]["all"]), default=0)

        def snapshot() -> dict[str, Any]:
            found = {key: store.get_occurrence(key) for key in ids}
            assert all(found.values())
            return found

        owner, lease = expected["ownerId"], expected["leaseMs"]
        claims: list[dict[str, Any]] = []
        dead_on_first_call: list[str] | None = None
        before = snapshot()
        while True:
            claimed = store.claim_next(owner_id=owner, lease_ms=lease)
            after = snapshot()
            if dead_on_first_call is None:
                dead_on_first_call = [
                    key
                    for key in ids
                    if after[key].status == "dead_letter" and before[key].status != "dead_letter"
                ]
            if claimed is None:
                break
            previous = before[claimed.id]
            claims.append(
                {
                    "occurrenceId": claimed.id,
                    "previousStatus": previous.status,
                    "previousOwner": previous.lease_owner,
                    "attempt": claimed.attempt,
                    "fence": claimed.fence,
                    "leaseOwner": claimed.lease_owner,
                    "leaseExpiresAt": claimed.lease_expires_at,
                    "updatedAt": claimed.updated_at,
                }
            )
            assert after[claimed.id] == claimed
            assert len(claims) <= len(ids), "claim_next keeps returning work"
            before = after
        assert dead_on_first_call == expected["deadLetteredOnFirstCall"]
        assert claims == expected["claims"]

        for lazily in expected["lazilyDeadLettered"]:
            occurrence = store.get_occurrence(lazily["occurrenceId"])
            assert occurrence is not None
            assert occurrence.status == "dead_letter"
            assert occurrence.attempt == lazily["attempt"]
            assert occurrence.fence == lazily["fence"]
            assert occurrence.last_error == lazily["lastError"]
            assert occurrence.settled_at == lazily["settledAt"]
            assert occurrence.lease_owner is None
            assert occurrence.lease_expires_at is None

        settled = []
        for claim in claims:
            done = store.settle(
                occurrence_id=claim["occurrenceId"],
                owner_id=owner,
                fence=claim["fence"],
                outcome="succeeded",
                result=expected["settleResult"],
            )
            settled.append(
                {
                    "occurrenceId": done.id,
                    "status": done.status,
                    "attempt": done.attempt,
                    "fence": done.fence,
                    "settledAt": done.settled_at,
                    "result": done.result,
                }
            )
        assert settled == expected["settled"]

        final = snapshot()
        still = [
            {"occurrenceId": key, "status": final[key].status}
            for key in ids
            if final[key].status not in TERMINAL
        ]
        assert sorted(still, key=lambda s: s["occurrenceId"]) == sorted(
            expected["stillNotTerminal"], key=lambda s: s["occurrenceId"]
        )
        assert dict(Counter(o.status for o in final.values())) == expected["finalStatusCounts"]

        new_events = [e for e in _all_events(store) if e.event_id > last_event_id]
        assert [_event_view(e) for e in new_events] == [
            _expected(e, EVENT_FIELDS) for e in expected["newEvents"]
        ]
        stored_json = _stored_event_json(store)
        for event in expected["newEvents"]:
            assert stored_json[event["eventId"]] == event["stored"]["dataJson"]
        # the continuation must have done something on a non-empty fixture
        assert bool(new_events) == bool(manifest["occurrences"])
    finally:
        store.close()


@pytest.mark.parametrize("name", GOOD)
def test_good_fixture_without_migrate_is_refused_unchanged(name: str, tmp_path: Path) -> None:
    manifest = load_manifest(name)
    path = copy_fixture(name, tmp_path / "db")
    with pytest.raises(SchedulerError) as refused:
        _open(path, FakeClock(manifest["clock"]["end"]), migrate=False)
    assert refused.value.code == "SCHEDULER_MIGRATION_REQUIRED"
    assert refused.value.details == {"schemaVersion": 1, "requiredVersion": LATEST_VERSION}
    assert sha256_file(path) == manifest["sha256"]
    assert path.stat().st_size == manifest["bytes"]
    assert sidecars(path) == []
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no backup either


# -- damaged fixtures --------------------------------------------------------------------------


@pytest.mark.parametrize("migrate", [True, False])
@pytest.mark.parametrize("name", DAMAGED)
def test_damaged_fixture_is_refused_unchanged(name: str, migrate: bool, tmp_path: Path) -> None:
    manifest = load_manifest(name)
    expected = manifest["expectedOpen"]
    assert expected["ok"] is False
    path = copy_fixture(name, tmp_path / "db")
    with pytest.raises(SchedulerError) as refused:
        _open(path, FakeClock(manifest["clock"]["end"]), migrate=migrate)
    assert refused.value.code == expected["code"]
    assert refused.value.message == expected["referenceMessage"]
    assert refused.value.details == expected["referenceDetails"]
    assert sha256_file(path) == manifest["sha256"]
    assert path.stat().st_size == manifest["bytes"]
    assert sidecars(path) == expected["sidecarsLeftByReference"] == []
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_newer_version_fixture_reports_an_unknown_schema(tmp_path: Path) -> None:
    """user_version 99 on a v1 history: the identity check of the claimed v1 catalog answers,
    as in the reference (not the history check, which would find v1 and plan an upgrade)."""
    path = copy_fixture("bad-newer-version", tmp_path / "db")
    with pytest.raises(SchedulerError) as refused:
        _open(path, FakeClock())
    assert refused.value.code == "SCHEDULER_SCHEMA_UNKNOWN"
    assert refused.value.details == {"applicationId": APPLICATION_ID, "userVersion": 99}
    with read_only(path) as conn:
        assert pragma(conn, "user_version") == 99
    conn.close()


# The case: the reference verifies the catalog fingerprint before the migration history
# (SPEC §4), so a v1 file with a dropped index *and* a tampered migration checksum is corrupt,
# not unknown. Before jobledger restored that order, it answered SCHEDULER_SCHEMA_UNKNOWN.
DOUBLE_DAMAGE = {
    # fixture, extra damage, the reference's answer (its order: tables, identity, shapes,
    # fingerprint, history, indexes)
    "dropped-index-and-tampered-checksum": (
        "bad-dropped-index",
        f"UPDATE migrations SET checksum = '{'0' * 64}';",
        "SCHEDULER_SCHEMA_CORRUPT",
        "Scheduler sqlite_master catalog does not match v1",
    ),
    "trigger-and-renamed-migration": (
        "bad-trigger",
        "UPDATE migrations SET name = 'renamed';",
        "SCHEDULER_SCHEMA_CORRUPT",
        "Scheduler sqlite_master catalog does not match v1",
    ),
    "extra-table-and-tampered-checksum": (
        "bad-extra-table",
        "UPDATE migrations SET checksum = 'x';",
        "SCHEDULER_SCHEMA_UNKNOWN",
        "Scheduler database has unknown or missing tables",
    ),
    # ... and the history before the foreign keys
    "broken-foreign-key-and-tampered-checksum": (
        "lifecycle",
        "PRAGMA foreign_keys = OFF; "
        "INSERT INTO events (job_id, event_type, occurred_at, data_json) "
        "VALUES ('no-such-job', 'job_created', 1, '{}'); "
        "UPDATE migrations SET checksum = 'x';",
        "SCHEDULER_SCHEMA_UNKNOWN",
        "Scheduler migration history is unknown",
    ),
    "broken-foreign-key": (
        "lifecycle",
        "PRAGMA foreign_keys = OFF; "
        "INSERT INTO events (job_id, event_type, occurred_at, data_json) "
        "VALUES ('no-such-job', 'job_created', 1, '{}');",
        "SCHEDULER_SCHEMA_CORRUPT",
        "Scheduler database contains broken foreign keys",
    ),
    "app-id-and-dropped-index": (
        "bad-app-id",
        "DROP INDEX scheduler_occurrences_job;",
        "SCHEDULER_SCHEMA_UNKNOWN",
        "Scheduler schema version or application identity is unknown",
    ),
}


@pytest.mark.parametrize("migrate", [True, False])
@pytest.mark.parametrize("case", sorted(DOUBLE_DAMAGE))
def test_the_catalog_is_checked_before_the_history_as_the_reference_does(
    case: str, migrate: bool, tmp_path: Path
) -> None:
    name, damage, code, message = DOUBLE_DAMAGE[case]
    path = copy_fixture(name, tmp_path / "db")
    tamper(damage)(path)
    digest = sha256_file(path)
    with pytest.raises(SchedulerError) as refused:
        _open(path, FakeClock(load_manifest(name)["clock"]["end"]), migrate=migrate)
    assert (refused.value.code, refused.value.message) == (code, message)
    assert sha256_file(path) == digest
    assert sidecars(path) == []
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
