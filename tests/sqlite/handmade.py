"""SQLite database files for the schema tests: hand-made older versions, a small current one,
and a way to damage a closed file.

A v1 file is built the way the reference writes it (migration 1's DDL, its history row,
``application_id`` and ``user_version = 1``); a v2 file is that plus migration 2, as jobledger
0.x wrote it. Neither goes through jobledger's own migration code, so the upgrade tests start
from files the current code did not make.
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
from tests.sqlite.support import APPLICATION_ID, V1_CHECKSUM, V1_FINGERPRINT, sidecars

NOW = 1_767_225_600_000
AUTHORITY = {"principal": {"type": "user", "id": "tester"}}
# The v1 occurrence columns, in order: a v3 row starts with exactly these.
V1_OCCURRENCE_COLUMNS = 20


def open_at(path: Path | str, clock: FakeClock | None = None, **options: Any) -> SQLiteStore:
    store = jobledger.open_store(path, clock=clock or FakeClock(NOW), **options)
    assert isinstance(store, SQLiteStore)
    return store


def fresh_v3(path: Path) -> Path:
    """A fresh v3 database, closed (WAL checkpointed), with one job and one occurrence."""
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
    return contract.canonical_json(contract.normalize_authority({**AUTHORITY, **extra}))


def make_v1(path: Path) -> dict[str, Any]:
    """A v1 database as the reference writes it: two jobs (one disabled, one in a workspace),
    three occurrences and their events. Returns the ids, and what v3 must derive for each
    occurrence: ``(kind, workspace_id, runnable)``."""
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
        events = [
            ("job-v1", None, "job_created", NOW, None, None, '{"revision":1}'),
            ("job-off", None, "job_created", NOW, None, None, '{"revision":1}'),
            ("job-v1", queued_id, "occurrence_enqueued", NOW, None, None, "{}"),
            ("job-v1", dead_id, "occurrence_enqueued", NOW, None, None, "{}"),
            ("job-off", paused_id, "occurrence_enqueued", NOW, None, None, "{}"),
            ("job-v1", dead_id, "occurrence_claimed", NOW + 1, "w", 1, "{}"),
            ("job-off", None, "job_updated", NOW + 2, None, None, '{"revision":2}'),
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
    return {
        "queued": queued_id,
        "dead": dead_id,
        "dead_fence": 1,
        "paused": paused_id,
        "events": len(events),
        "derived": {
            queued_id: ("email", "ws-1", 1),
            dead_id: ("email", "ws-1", 1),
            paused_id: ("sms", None, 0),
        },
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


MAKERS: dict[int, Callable[[Path], dict[str, Any]]] = {1: make_v1, 2: make_v2}
