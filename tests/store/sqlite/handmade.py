"""SQLite database files for the schema tests: hand-made older versions, a small current one,
and a way to damage a closed file.

A v1 file is built the way the reference writes it (migration 1's DDL, its history row,
``application_id`` and ``user_version = 1``); a v2 file is that plus migration 2, as jobledger
0.x wrote it; a v3 file is that plus migration 3 and a row in each table v3 added. None goes
through jobledger's own migration code, so the upgrade tests start from files the current code
did not make. (``tests/fixtures/v3-release/`` holds a v3 file written by the v3 release itself.)
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jobledger
from jobledger import contract
from jobledger.store.sqlite import SQLiteStore
from jobledger.store.sqlite.schema import MIGRATIONS, _statements, schema_fingerprint
from jobledger.testing import FakeClock
from tests.store.sqlite.support import APPLICATION_ID, V1_CHECKSUM, V1_FINGERPRINT, sidecars

NOW = 1_767_225_600_000
# 2100-01-01: due after any wall clock a test runs under. The v4 migration sorts live rows into
# waiting (gate 1) or ready (gate 0) by the wall clock at the upgrade, not by a store's clock.
FUTURE = 4_102_444_800_000
AUTHORITY = {"principal": {"type": "user", "id": "tester"}}

# A v4 database's occurrences as the v1 (and v3) rows they were: the idempotency key is derived
# from the id again and the authority read from the table that stores each envelope once.
_V1_OCCURRENCE_SELECT = """
SELECT o.occurrence_id, o.job_id, o.job_revision,
       'scheduler:v1:' || substr(o.occurrence_id, 5) AS idempotency_key, o.trigger_key,
       o.scheduled_for, o.available_at, o.status, o.attempt, o.max_attempts, o.fence,
       o.lease_owner, o.lease_expires_at, a.authority_json, o.payload_json, o.last_error_json,
       o.result_json, o.created_at, o.updated_at, o.settled_at{extra}
FROM occurrences AS o JOIN jobledger_authorities AS a ON a.authority_id = o.authority_id
ORDER BY o.occurrence_id
"""
V1_JOB_COLUMNS = 10


def _plain(conn: sqlite3.Connection) -> sqlite3.Cursor:
    cursor = conn.cursor()
    cursor.row_factory = None
    return cursor


def v1_occurrences(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
    """A v4 file's occurrences in the v1 shape, ordered by id (as ``support.table_rows``)."""
    return _plain(conn).execute(_V1_OCCURRENCE_SELECT.format(extra="")).fetchall()


def v3_occurrences(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
    """A v4 file's occurrences in the v3 shape (v1's columns, then kind, workspace, runnable)."""
    extra = ", o.kind, o.workspace_id, o.runnable"
    return _plain(conn).execute(_V1_OCCURRENCE_SELECT.format(extra=extra)).fetchall()


def v4_lanes(conn: sqlite3.Connection) -> dict[str, tuple[Any, ...]]:
    """What v4 gives each occurrence: (kind, workspace, runnable, queue, priority, partition,
    gate, adjudicate, snoozes, pending_parents)."""
    rows = _plain(conn).execute(
        "SELECT occurrence_id, kind, workspace_id, runnable, queue, priority, partition_key, "
        "gate, adjudicate, snoozes, pending_parents FROM occurrences"
    )
    return {row[0]: tuple(row[1:]) for row in rows}


def key_rows(conn: sqlite3.Connection) -> dict[tuple[str, str], str]:
    rows = _plain(conn).execute("SELECT job_id, trigger_key, occurrence_id FROM jobledger_keys")
    return {(row[0], row[1]): row[2] for row in rows}


def open_at(path: Path | str, clock: FakeClock | None = None, **options: Any) -> SQLiteStore:
    store = jobledger.open_store(path, clock=clock or FakeClock(NOW), **options)
    assert isinstance(store, SQLiteStore)
    return store


def fresh_latest(path: Path) -> Path:
    """A fresh database at the latest rung, closed (WAL checkpointed), with one job and one
    occurrence."""
    store = open_at(path)
    try:
        store.create_job(id="job-a", kind="email", authority=AUTHORITY, payload={"n": 1})
        store.enqueue_occurrence(job_id="job-a", scheduled_for=NOW, trigger_key="t")
    finally:
        store.close()
    assert sidecars(path) == []
    return path


def listing(directory: Path) -> list[str]:
    """What a directory holds: a refusal must leave it as it was (no backup, no new file)."""
    return sorted(p.name for p in directory.iterdir())


def tamper(sql: str) -> Callable[[Path], None]:
    """Damage a closed database file with a plain connection (not through jobledger)."""

    def apply(path: Path) -> None:
        conn = sqlite3.connect(path)
        try:
            conn.executescript(sql)
        finally:
            conn.close()

    return apply


def _authority(**extra: Any) -> str:
    return contract.canonical_json(jobledger.normalize_authority({**AUTHORITY, **extra}))


def make_v1(path: Path) -> dict[str, Any]:
    """A v1 database as the reference writes it: two jobs (one disabled, one in a workspace),
    five occurrences and their events. Two of them share the idempotency key ``key:order-1``
    (the reference, like jobledger before v4, could race into that): the older one is due in
    the far future. Returns the ids and what v4 must derive for each occurrence
    (:func:`v4_lanes`) and for each key (:func:`key_rows`)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    in_workspace = _authority(workspaceId="ws-1")
    plain = _authority()
    queued_id, queued_key = contract.derive_occurrence_identity(
        job_id="job-v1", job_revision=1, scheduled_for=NOW, trigger_key="slot-1"
    )
    dead_id, dead_key = contract.derive_occurrence_identity(
        job_id="job-v1", job_revision=1, scheduled_for=NOW + 1000, trigger_key="slot-2"
    )
    paused_id, paused_key = contract.derive_occurrence_identity(
        job_id="job-off", job_revision=1, scheduled_for=NOW, trigger_key="slot-1"
    )
    keyed_id, keyed_key = contract.derive_occurrence_identity(
        job_id="job-v1", job_revision=1, scheduled_for=NOW + 2000, trigger_key="key:order-1"
    )
    twin_id, twin_key = contract.derive_occurrence_identity(
        job_id="job-v1", job_revision=1, scheduled_for=NOW + 3000, trigger_key="key:order-1"
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
            (in_workspace, NOW, NOW),
        )
        conn.execute(
            "INSERT INTO jobs VALUES ('job-off', 'sms', '{}', 'null', ?, 0, 2, 3, ?, ?)",
            (plain, NOW, NOW + 2),
        )
        conn.execute(
            "INSERT INTO occurrences VALUES "
            "(?, 'job-v1', 1, ?, 'slot-1', ?, ?, 'queued', 0, 1, 0, NULL, NULL, ?, "
            '\'{"to":"a"}\', NULL, NULL, ?, ?, NULL)',
            (queued_id, queued_key, NOW, NOW, in_workspace, NOW, NOW),
        )
        conn.execute(
            "INSERT INTO occurrences VALUES "
            "(?, 'job-v1', 1, ?, 'slot-2', ?, ?, 'dead_letter', 1, 1, 1, NULL, NULL, ?, "
            '\'{"to":"a"}\', ?, NULL, ?, ?, ?)',
            (dead_id, dead_key, NOW + 1000, NOW + 1000, in_workspace, error, NOW, NOW + 5, NOW + 5),
        )
        conn.execute(
            "INSERT INTO occurrences VALUES "
            "(?, 'job-off', 1, ?, 'slot-1', ?, ?, 'queued', 0, 3, 0, NULL, NULL, ?, "
            "'null', NULL, NULL, ?, ?, NULL)",
            (paused_id, paused_key, NOW, NOW, plain, NOW, NOW),
        )
        for occurrence_id, key, slot, available, created in (
            (keyed_id, keyed_key, NOW + 2000, FUTURE, NOW + 3),
            (twin_id, twin_key, NOW + 3000, NOW + 3000, NOW + 4),
        ):
            conn.execute(
                "INSERT INTO occurrences VALUES "
                "(?, 'job-v1', 1, ?, 'key:order-1', ?, ?, 'queued', 0, 1, 0, NULL, NULL, ?, "
                '\'{"to":"b"}\', NULL, NULL, ?, ?, NULL)',
                (occurrence_id, key, slot, available, in_workspace, created, created),
            )
        events = [
            ("job-v1", None, "job_created", NOW, None, None, '{"revision":1}'),
            ("job-off", None, "job_created", NOW, None, None, '{"revision":1}'),
            ("job-v1", queued_id, "occurrence_enqueued", NOW, None, None, "{}"),
            ("job-v1", dead_id, "occurrence_enqueued", NOW, None, None, "{}"),
            ("job-off", paused_id, "occurrence_enqueued", NOW, None, None, "{}"),
            ("job-v1", dead_id, "occurrence_claimed", NOW + 1, "w", 1, "{}"),
            ("job-off", None, "job_updated", NOW + 2, None, None, '{"revision":2}'),
            ("job-v1", keyed_id, "occurrence_enqueued", NOW + 3, None, None, "{}"),
            ("job-v1", twin_id, "occurrence_enqueued", NOW + 4, None, None, "{}"),
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
    ready, waiting = 0, 1
    return {
        "queued": queued_id,
        "dead": dead_id,
        "dead_fence": 1,
        "paused": paused_id,
        "keyed": keyed_id,
        "twin": twin_id,
        "events": len(events),
        "authorities": {
            queued_id: in_workspace,
            dead_id: in_workspace,
            paused_id: plain,
            keyed_id: in_workspace,
            twin_id: in_workspace,
        },
        # (kind, workspace, runnable, queue, priority, partition, gate, adjudicate, snoozes,
        # pending parents): kind, workspace and runnable come from the job (v3), the rest is
        # v4's default lane; only the row due in the far future waits.
        "lanes": {
            queued_id: ("email", "ws-1", 1, "default", 0, None, ready, 0, 0, 0),
            dead_id: ("email", "ws-1", 1, "default", 0, None, ready, 0, 0, 0),
            paused_id: ("sms", None, 0, "default", 0, None, ready, 0, 0, 0),
            keyed_id: ("email", "ws-1", 1, "default", 0, None, waiting, 0, 0, 0),
            twin_id: ("email", "ws-1", 1, "default", 0, None, ready, 0, 0, 0),
        },
        # the oldest occurrence of a key answers it from v4 on
        "keys": {("job-v1", "key:order-1"): keyed_id},
    }


def make_v2(path: Path) -> dict[str, Any]:
    """:func:`make_v1` upgraded to v2 by hand (migration 2's DDL and history row), as jobledger's
    v2 code would have left it after an operator requeued the dead letter, which then ran out
    of attempts again (``attempt = max_attempts = fence = 2``, one requeue record)."""
    made = make_v1(path)
    conn = sqlite3.connect(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        migration = MIGRATIONS[1]
        for statement in _statements(migration.ddl):
            conn.execute(statement)
        conn.execute(
            "INSERT INTO migrations VALUES (?, ?, ?, ?)",
            (migration.version, migration.name, migration.checksum, NOW + 10),
        )
        conn.execute("PRAGMA user_version = 2")
        conn.execute(
            "INSERT INTO jobledger_requeues (occurrence_id, job_id, expected_fence, attempt, "
            "previous_max_attempts, max_attempts, previous_error_json, reason, actor, "
            "requested_at) VALUES (?, 'job-v1', 1, 1, 1, 2, ?, 'fixed', 'ops', ?)",
            (made["dead"], '{"code":"boom","message":"failed"}', NOW + 11),
        )
        conn.execute(
            "UPDATE occurrences SET attempt = 2, max_attempts = 2, fence = 2, updated_at = ?, "
            "settled_at = ? WHERE occurrence_id = ?",
            (NOW + 20, NOW + 20, made["dead"]),
        )
        events = [
            ("job-v1", made["dead"], "occurrence_requeued", NOW + 11, None, 1, "{}"),
            ("job-v1", made["dead"], "occurrence_claimed", NOW + 12, "w", 2, "{}"),
            ("job-v1", made["dead"], "occurrence_dead_lettered", NOW + 20, "w", 2, "{}"),
        ]
        conn.executemany(
            "INSERT INTO events (job_id, occurrence_id, event_type, occurred_at, owner_id, "
            "fence, data_json) VALUES (?, ?, ?, ?, ?, ?, ?)",
            events,
        )
        conn.execute("COMMIT")
        assert schema_fingerprint(conn) == MIGRATIONS[1].fingerprint
    finally:
        conn.close()
    return {**made, "events": made["events"] + len(events), "dead_fence": 2, "requeues": 1}


# One row in each table v3 added (as the v3 code writes them).
V3_ROWS: dict[str, tuple[Any, ...]] = {
    "jobledger_schedules": ("job-off", 2, NOW + 2, NOW + 60_000, None, "[]", NOW + 2),
    "jobledger_workers": ("worker-1", "host-a", 4242, NOW + 30, NOW + 40, NOW + 50, "{}"),
    "jobledger_audit": (1, NOW + 60, "job_removed", "ops", "job-gone", '{"reason":"r"}'),
    "jobledger_throughput": (NOW - NOW % 60_000, "email", "w", 0, 0, 1),
}


def make_v3(path: Path) -> dict[str, Any]:
    """:func:`make_v2` upgraded to v3 by hand (migration 3's DDL and history row), with a row in
    each table v3 added: a schedule, a worker, an audit record and a throughput counter."""
    made = make_v2(path)
    conn = sqlite3.connect(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        migration = MIGRATIONS[2]
        for statement in _statements(migration.ddl):
            conn.execute(statement)
        conn.execute(
            "INSERT INTO migrations VALUES (?, ?, ?, ?)",
            (migration.version, migration.name, migration.checksum, NOW + 30),
        )
        conn.execute("PRAGMA user_version = 3")
        for table, row in V3_ROWS.items():
            marks = ", ".join("?" * len(row))
            conn.execute(f"INSERT INTO {table} VALUES ({marks})", row)
        conn.execute("COMMIT")
        assert schema_fingerprint(conn) == MIGRATIONS[2].fingerprint
    finally:
        conn.close()
    return made


MAKERS: dict[int, Callable[[Path], dict[str, Any]]] = {1: make_v1, 2: make_v2, 3: make_v3}
# When each old rung was applied in the files MAKERS write.
APPLIED_AT: dict[int, int] = {1: NOW, 2: NOW + 10, 3: NOW + 30}
