"""Damage in the rows, found on demand; and opening that does not scale with the database.

Opening verifies only the catalog. The O(size) checks — SQLite's ``quick_check`` /
``integrity_check``, ``foreign_key_check``, the stored authority envelopes — run on demand
(:meth:`~jobledger.Store.verify`) and before every upgrade. So a v4 file with a broken foreign
key, a row violating a CHECK constraint or a tampered stored authority opens, and ``verify()``
names the failing check; the same damage in a v2 file refuses the upgrade, before any backup.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import jobledger
from jobledger.errors import MigrationRequired, SchedulerError
from jobledger.store.sqlite import connection as sqlite_connection
from jobledger.store.sqlite import schema as sqlite_schema
from jobledger.testing import FakeClock
from tests.store.sqlite.handmade import MAKERS, NOW, fresh_latest, listing, open_at, tamper
from tests.store.sqlite.support import sha256_file, sidecars

CHECKS = ["integrity_check", "foreign_keys", "schema", "stored_authority", "enqueue_events"]


# -- damage in the rows: a v4 file opens and verify() reports it; an older file is refused -----

ROW_DAMAGE: dict[str, tuple[str, str]] = {
    # case: (damage, the verify() check that fails)
    "broken-foreign-key": (
        "PRAGMA foreign_keys = OFF; "
        "INSERT INTO events (job_id, event_type, occurred_at, data_json) "
        "VALUES ('no-such-job', 'job_created', 1, '{}');",
        "foreign_keys",
    ),
    "check-constraint-violation": (
        "PRAGMA ignore_check_constraints = ON; "
        "UPDATE jobs SET payload_json = '{not json' WHERE job_id = 'job-a';",
        "integrity_check",
    ),
    "tampered-stored-authority": (
        """UPDATE jobs SET authority_json = '{"schemaVersion":2}' WHERE job_id = 'job-a';""",
        "stored_authority",
    ),
}


@pytest.mark.parametrize("case", sorted(ROW_DAMAGE))
def test_row_damage_in_a_v4_file_opens_and_verify_reports_it(case: str, tmp_path: Path) -> None:
    damage, failing = ROW_DAMAGE[case]
    path = fresh_latest(tmp_path / "db" / "x.sqlite")
    tamper(damage)(path)
    digest = sha256_file(path)
    before = listing(path.parent)
    for migrate in (False, True):
        store = open_at(path, migrate=migrate)
        try:
            report = store.verify()
        finally:
            store.close()
        assert not report.ok
        assert [c.name for c in report.checks if not c.ok] == [failing]
        assert [c.name for c in report.checks] == CHECKS
        found = next(c for c in report.checks if c.name == failing)
        if failing == "foreign_keys":
            assert found.details == {"count": 1}
        elif failing == "integrity_check":
            assert found.details is not None
            assert any("CHECK constraint" in line for line in found.details["result"])
        else:
            assert found.details == {"count": 1, "ids": ["job-a"]}
    # the opens and verify() wrote nothing
    assert sha256_file(path) == digest
    assert listing(path.parent) == before


def test_a_tampered_stored_authority_reads_back_as_stored(tmp_path: Path) -> None:
    """Rows are decoded, not re-validated, on read: an object that is not an authority envelope
    reads back as it is stored (verify() finds it); only a non-object is corrupt on read."""
    path = fresh_latest(tmp_path / "db" / "x.sqlite")
    tamper("""UPDATE jobs SET authority_json = '{"schemaVersion":2}' WHERE job_id = 'job-a';""")(
        path
    )
    store = open_at(path)
    try:
        job = store.get_job("job-a")
        assert job is not None
        assert job.authority == {"schemaVersion": 2}
        # the occurrence kept its own (valid) copy of the authority
        (occurrence,) = store.list_occurrences_by_trigger(job_id="job-a", trigger_key="t")
        assert occurrence.authority["principal"] == {"type": "user", "id": "tester"}
    finally:
        store.close()

    tamper("UPDATE jobs SET authority_json = '[]' WHERE job_id = 'job-a';")(path)
    store = open_at(path)
    try:
        with pytest.raises(SchedulerError) as corrupt:
            store.get_job("job-a")
        assert corrupt.value.code == "SCHEDULER_DATA_CORRUPT"
        (check,) = [c for c in store.verify().checks if not c.ok]
        assert (check.name, check.details) == ("stored_authority", {"count": 1, "ids": ["job-a"]})
    finally:
        store.close()


# The same damage in a v2 or v3 file: an upgrade first runs every O(size) check, so the file is
# refused as it is — whether or not the open may migrate, and before any backup is taken.
V2_ROW_DAMAGE: dict[str, str] = {
    "broken-foreign-key": (
        "PRAGMA foreign_keys = OFF; "
        "INSERT INTO jobledger_requeues (occurrence_id, job_id, expected_fence, attempt, "
        "previous_max_attempts, max_attempts, reason, actor, requested_at) "
        "VALUES ('no-such-occurrence', 'job-v1', 1, 1, 1, 2, 'r', 'a', 1);"
    ),
    "check-constraint-violation": (
        "PRAGMA ignore_check_constraints = ON; "
        "UPDATE jobs SET payload_json = '{not json' WHERE job_id = 'job-v1';"
    ),
    "tampered-stored-authority": (
        """UPDATE jobs SET authority_json = '{"schemaVersion":2}' WHERE job_id = 'job-v1';"""
    ),
}
V2_CASES = sorted(V2_ROW_DAMAGE)


@pytest.mark.parametrize("migrate", [True, False])
@pytest.mark.parametrize("case", V2_CASES)
@pytest.mark.parametrize("version", [2, 3])
def test_row_damage_in_an_old_file_is_refused_before_any_backup(
    version: int, case: str, migrate: bool, tmp_path: Path
) -> None:
    path = tmp_path / "db" / f"v{version}.sqlite"
    MAKERS[version](path)
    tamper(V2_ROW_DAMAGE[case])(path)
    digest = sha256_file(path)
    with pytest.raises(SchedulerError) as refused:
        open_at(path, migrate=migrate)
    assert refused.value.code == "SCHEDULER_SCHEMA_CORRUPT"
    assert sha256_file(path) == digest
    assert sidecars(path) == []
    assert listing(path.parent) == [f"v{version}.sqlite"]


# -- opening does not scale with the database ---------------------------------------------------


class _OpenProbe:
    """Records the O(size) checks and counts SQLite VM steps on every connection a store opens."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        self.steps = 0
        quick_check = sqlite_schema.quick_check
        broken_foreign_keys = sqlite_schema.broken_foreign_keys

        def recording_quick_check(conn: sqlite3.Connection, *, full: bool = False) -> list[str]:
            self.calls.append("integrity_check" if full else "quick_check")
            return quick_check(conn, full=full)

        def recording_foreign_keys(conn: sqlite3.Connection) -> int:
            self.calls.append("foreign_key_check")
            return broken_foreign_keys(conn)

        connect = sqlite_connection.SQLiteConnection._connect

        def counting_connect(connection: Any) -> sqlite3.Connection:
            conn = connect(connection)
            conn.set_progress_handler(self._step, 1)
            return conn

        monkeypatch.setattr(sqlite_schema, "quick_check", recording_quick_check)
        monkeypatch.setattr(sqlite_schema, "broken_foreign_keys", recording_foreign_keys)
        monkeypatch.setattr(sqlite_connection.SQLiteConnection, "_connect", counting_connect)

    def _step(self) -> int:
        self.steps += 1
        return 0

    def open(self, path: Path, **options: Any) -> tuple[list[str], int]:
        self.calls, self.steps = [], 0
        store = open_at(path, **options)
        measured = (self.calls, self.steps)
        store.close()
        return measured


def _grow(path: Path, occurrences: int) -> None:
    """Add ``occurrences`` rows (and one event each) to a closed v4 file, directly, in one
    INSERT … SELECT each."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("BEGIN")
        conn.execute(
            "INSERT INTO occurrences (occurrence_id, job_id, job_revision, trigger_key, "
            "scheduled_for, available_at, status, attempt, max_attempts, fence, authority_id, "
            "payload_json, created_at, updated_at, kind, runnable, queue, priority, gate, "
            "adjudicate) "
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?) "
            "SELECT 'occ-' || i, 'job-a', 1, 't-' || i, ? + i, ? + i, 'queued', 0, 3, 0, "
            "j.authority_id, 'null', ?, ?, 'email', 1, 'default', 0, 0, 0 "
            "FROM n, jobs AS j WHERE j.job_id = 'job-a'",
            (occurrences, NOW, NOW, NOW, NOW),
        )
        conn.execute(
            "INSERT INTO events (job_id, occurrence_id, event_type, occurred_at, data_json) "
            "SELECT 'job-a', occurrence_id, 'occurrence_enqueued', ?, '{}' FROM occurrences "
            "WHERE occurrence_id LIKE 'occ-%'",
            (NOW,),
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


def test_opening_a_v4_file_runs_no_size_dependent_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = fresh_latest(tmp_path / "small" / "x.sqlite")
    large = fresh_latest(tmp_path / "large" / "x.sqlite")
    _grow(large, 20_000)
    assert large.stat().st_size > 20 * small.stat().st_size

    probe = _OpenProbe(monkeypatch)
    small_calls, small_steps = probe.open(small)
    large_calls, large_steps = probe.open(large)
    assert small_calls == large_calls == []
    # The catalog checks execute the same VM program whatever the row count.
    assert small_steps == large_steps > 0
    assert probe.open(large, migrate=False) == (large_calls, large_steps)


def test_an_upgrade_runs_the_full_checks_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "db" / "v2.sqlite"
    MAKERS[2](path)
    probe = _OpenProbe(monkeypatch)
    calls, _ = probe.open(path)
    # the v2 file is checked before anything is written; the upgrade checks keys again before
    # its commit; the reopen of the now-v4 file checks nothing of the kind
    assert calls[:2] == ["quick_check", "foreign_key_check"]
    assert set(calls) == {"quick_check", "foreign_key_check"}
    assert probe.open(path)[0] == []

    refused = tmp_path / "refused" / "v2.sqlite"
    MAKERS[2](refused)
    probe.calls = []
    with pytest.raises(MigrationRequired):
        open_at(refused, migrate=False)
    assert probe.calls == ["quick_check", "foreign_key_check"]


def test_verify_on_demand_runs_the_full_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = fresh_latest(tmp_path / "db" / "x.sqlite")
    probe = _OpenProbe(monkeypatch)
    store = open_at(path)
    try:
        probe.calls = []
        assert store.verify().ok
        assert probe.calls == ["integrity_check", "foreign_key_check"]
    finally:
        store.close()


def test_verify_finds_an_occurrence_without_its_enqueue_event(tmp_path: Path) -> None:
    """What a write taken elsewhere leaves (issue 30: a caller's temp ``events`` table)."""
    path = tmp_path / "events.sqlite3"
    app = jobledger.App(path, clock=FakeClock())
    try:
        app.create_job("confirm", "send_confirmation")
        kept = app.enqueue("confirm", payload={"n": 1})
        lost = app.enqueue("confirm", payload={"n": 2})
        assert app.store.verify().ok
        raw = sqlite3.connect(path)
        raw.execute("DELETE FROM events WHERE occurrence_id = ?", (lost.id,))
        raw.commit()
        raw.close()
        report = app.store.verify()
        assert not report.ok
        [check] = [check for check in report.checks if not check.ok]
        assert (check.name, check.details) == ("enqueue_events", {"count": 1, "ids": [lost.id]})
        assert kept.id != lost.id
    finally:
        app.close()


def test_an_unreadable_enqueue_events_check_fails_instead_of_escaping(tmp_path: Path) -> None:
    class Damaged:
        def all(self, query: str, params: Any = None) -> Any:
            raise sqlite3.DatabaseError("database disk image is malformed")

    app = jobledger.App(tmp_path / "damaged.sqlite3", clock=FakeClock())
    try:
        app.create_job("confirm", "send_confirmation")
        report = app.store.verify()
        store: Any = app.store
        damaged = store._with_enqueue_events(
            jobledger.VerifyReport(report.checks[:-1]), Damaged(), (sqlite3.DatabaseError,)
        )
    finally:
        app.close()
    assert damaged.checks[-1] == jobledger.VerifyCheck(
        "enqueue_events", False, {"error": "DatabaseError"}
    )
