"""A v3 SQLite file written by jobledger 0.2.0 (``tests/fixtures/v3-release``) opens with the
current code: it is backed up, upgraded to the latest rung, keeps every row (read back as 0.2.0
read it), resolves its duplicated idempotency key to the oldest occurrence, keeps working, and
verifies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jobledger.errors import SchedulerError
from jobledger.store.migrations import LATEST_VERSION
from jobledger.store.sqlite.schema import MIGRATIONS, schema_fingerprint
from jobledger.testing import FakeClock
from tests.fixtures.release_support import private_copy, raw_sqlite
from tests.fixtures.v3_release import (
    V3_RELEASE,
    assert_reads_back,
    assert_the_duplicated_key_answers_with_its_oldest,
    assert_work_continues,
    load_manifest,
)
from tests.store.sqlite.handmade import listing, open_at
from tests.store.sqlite.support import pragma, read_only, sha256_file

FIXTURE = V3_RELEASE / "v3.sqlite"


@pytest.fixture
def manifest() -> dict[str, Any]:
    return load_manifest("sqlite")


@pytest.fixture
def v3_file(tmp_path: Path) -> Path:
    return private_copy(FIXTURE, tmp_path)


def _contents(path: Path) -> dict[str, Any]:
    """A database's catalog, identity pragmas and every row of every table."""
    conn = read_only(path)
    try:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        return {
            "fingerprint": schema_fingerprint(conn),
            "user_version": pragma(conn, "user_version"),
            "application_id": pragma(conn, "application_id"),
            **{
                table: conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
                for table in tables
            },
        }
    finally:
        conn.close()


def test_the_fixture_is_a_v3_file_written_by_the_release(manifest: dict[str, Any]) -> None:
    with read_only(FIXTURE) as conn:
        assert pragma(conn, "user_version") == 3
        assert schema_fingerprint(conn) == MIGRATIONS[2].fingerprint
        history = conn.execute("SELECT version, name, checksum, applied_at FROM migrations")
        assert [list(row) for row in history] == manifest["migrations"]
    conn.close()
    assert FIXTURE.stat().st_size < 300_000


def test_a_v3_file_of_the_release_upgrades_keeping_every_row(
    v3_file: Path, manifest: dict[str, Any]
) -> None:
    original = sha256_file(v3_file)
    end = manifest["clock"]["end"]
    store = open_at(v3_file, FakeClock(end))
    try:
        outcome = store.schema_outcome
        assert (outcome.found, outcome.upgraded_from, outcome.version) == (3, 3, LATEST_VERSION)
        info = store.schema_info()
        assert [[m.version, m.name, m.checksum, m.applied_at] for m in info.migrations] == [
            *manifest["migrations"],
            *([m.version, m.name, m.checksum, end] for m in MIGRATIONS[3:]),
        ]
        assert schema_fingerprint(store._connection.raw) == MIGRATIONS[-1].fingerprint
        assert_reads_back(store, manifest, raw_sqlite(store))
        assert store.verify().ok
    finally:
        store.close()
    # the backup holds the file as the release left it (the copy of a v3 database, page by
    # page: the same catalog and rows)
    assert original == sha256_file(FIXTURE)
    assert store.backup_path == v3_file.with_name("v3.sqlite.v3.bak")
    assert _contents(store.backup_path) == _contents(FIXTURE)
    assert sorted(p.name for p in v3_file.parent.glob("*.bak")) == ["v3.sqlite.v3.bak"]


def test_the_duplicated_key_of_the_release_answers_with_its_oldest_occurrence(
    v3_file: Path, manifest: dict[str, Any]
) -> None:
    with open_at(v3_file, FakeClock(manifest["clock"]["end"])) as store:
        assert_the_duplicated_key_answers_with_its_oldest(store, manifest, raw_sqlite(store))
        assert store.verify().ok


def test_work_continues_on_the_upgraded_file(v3_file: Path, manifest: dict[str, Any]) -> None:
    with open_at(v3_file, FakeClock(manifest["clock"]["end"])) as store:
        assert_work_continues(store, manifest)


def test_the_release_file_without_migrate_is_refused_unchanged(v3_file: Path) -> None:
    digest = sha256_file(v3_file)
    with pytest.raises(SchedulerError) as refused:
        open_at(v3_file, migrate=False)
    assert refused.value.code == "SCHEDULER_MIGRATION_REQUIRED"
    assert refused.value.details == {"schemaVersion": 3, "requiredVersion": LATEST_VERSION}
    assert sha256_file(v3_file) == digest
    assert listing(v3_file.parent) == ["v3.sqlite"]


def test_the_manifest_names_every_occurrence_of_the_file(manifest: dict[str, Any]) -> None:
    """Every occurrence row of the release's file is in the manifest, and each stored
    idempotency key is the one v4 derives from the id (v4 drops the column)."""
    conn = read_only(FIXTURE)
    try:
        keys = dict(conn.execute("SELECT occurrence_id, idempotency_key FROM occurrences"))
    finally:
        conn.close()
    assert set(keys) == {o["id"] for o in manifest["occurrences"]}
    for occurrence_id, key in keys.items():
        assert key == "scheduler:v1:" + occurrence_id.removeprefix("occ_")
