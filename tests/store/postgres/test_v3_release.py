"""A v3 PostgreSQL schema written by jobledger 0.2.0 (``tests/fixtures/v3-release``, a
``pg_dump`` of its ``jobledger`` schema) opens with the current code: it is upgraded to the
latest rung in place, keeps every row (read back as 0.2.0 read it), resolves its duplicated
idempotency key to the oldest occurrence, keeps working, and verifies."""

from __future__ import annotations

from typing import Any

import pytest

import jobledger
from jobledger.store.migrations import LATEST_VERSION
from jobledger.store.postgres import schema as pg_schema
from jobledger.testing import FakeClock
from tests.fixtures.release_support import load_postgres_dump, raw_postgres
from tests.fixtures.v3_release import (
    V3_RELEASE,
    assert_reads_back,
    assert_the_duplicated_key_answers_with_its_oldest,
    assert_work_continues,
    load_manifest,
)
from tests.store.helpers import raises_code

DUMP = V3_RELEASE / "v3.postgres.sql"


@pytest.fixture
def manifest() -> dict[str, Any]:
    return load_manifest("postgres")


@pytest.fixture
def v3_schema(admin) -> None:
    """The test database's ``jobledger`` schema replaced by the release's dump."""
    load_postgres_dump(admin, DUMP, 3)


def _open(pg_url: str, manifest: dict[str, Any], **options: Any) -> Any:
    return jobledger.open_store(
        pg_url, clock=FakeClock(manifest["clock"]["end"]), listen=False, **options
    )


def test_the_dump_is_small_and_of_the_release(manifest: dict[str, Any]) -> None:
    assert DUMP.stat().st_size < 300_000
    assert "CREATE SCHEMA jobledger;" in DUMP.read_text("utf-8")
    assert [m[:3] for m in manifest["migrations"]] == [
        [m.version, m.name, m.checksum] for m in pg_schema.MIGRATIONS[:3]
    ]


def test_a_v3_schema_of_the_release_upgrades_keeping_every_row(
    pg_url, admin, v3_schema, manifest
) -> None:
    end = manifest["clock"]["end"]
    with _open(pg_url, manifest) as store:
        outcome = store.schema_outcome
        assert (outcome.found, outcome.upgraded_from, outcome.version) == (3, 3, LATEST_VERSION)
        info = store.schema_info()
        assert [[m.version, m.name, m.checksum, m.applied_at] for m in info.migrations] == [
            *manifest["migrations"],
            *([m.version, m.name, m.checksum, end] for m in pg_schema.MIGRATIONS[3:]),
        ]
        admin.execute("SET search_path TO jobledger")
        assert (
            pg_schema.catalog_fingerprint(admin, "jobledger")
            == pg_schema.MIGRATIONS[-1].fingerprint
        )
        admin.execute("RESET search_path")
        assert_reads_back(store, manifest, raw_postgres(admin))
        assert store.verify().ok


def test_the_duplicated_key_of_the_release_answers_with_its_oldest_occurrence(
    pg_url, admin, v3_schema, manifest
) -> None:
    with _open(pg_url, manifest) as store:
        assert_the_duplicated_key_answers_with_its_oldest(store, manifest, raw_postgres(admin))
        assert store.verify().ok


def test_work_continues_on_the_upgraded_schema(pg_url, admin, v3_schema, manifest) -> None:
    with _open(pg_url, manifest) as store:
        assert_work_continues(store, manifest)


def test_the_release_schema_without_migrate_is_refused_unchanged(
    pg_url, admin, v3_schema, manifest
) -> None:
    admin.execute("SET search_path TO jobledger")
    before = pg_schema.catalog_fingerprint(admin, "jobledger")
    rows = admin.execute("SELECT count(*) AS n FROM occurrences").fetchone()
    admin.execute("RESET search_path")
    with raises_code("SCHEDULER_MIGRATION_REQUIRED") as refused:
        _open(pg_url, manifest, migrate=False)
    assert refused.value.details == {"schemaVersion": 3, "requiredVersion": LATEST_VERSION}
    admin.execute("SET search_path TO jobledger")
    assert pg_schema.catalog_fingerprint(admin, "jobledger") == before
    assert admin.execute("SELECT count(*) AS n FROM occurrences").fetchone() == rows
    admin.execute("RESET search_path")
