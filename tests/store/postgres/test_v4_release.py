"""A v4 PostgreSQL schema written by the last v4 code (``tests/fixtures/v4-release``, a
``pg_dump`` of its ``jobledger`` schema, commit 8746642) opens with the current code: it is
upgraded to the latest rung in place, keeps every row of every table (read back as v4 read it:
queues, priorities, partitions, snoozes, results, adjudications, flows, keys), keeps working,
and verifies."""

from __future__ import annotations

from typing import Any

import pytest

import jobledger
from jobledger.store.migrations import LATEST_VERSION
from jobledger.store.postgres import schema as pg_schema
from jobledger.testing import FakeClock
from tests.fixtures.release_support import load_postgres_dump, raw_postgres
from tests.fixtures.v4_release import (
    V4_RELEASE,
    assert_reads_back,
    assert_work_continues,
    load_manifest,
)
from tests.store.helpers import raises_code

DUMP = V4_RELEASE / "v4.postgres.sql"


@pytest.fixture
def manifest() -> dict[str, Any]:
    return load_manifest("postgres")


@pytest.fixture
def v4_schema(admin) -> None:
    """The test database's ``jobledger`` schema replaced by the release's dump."""
    load_postgres_dump(admin, DUMP, 4)


def _contents(admin, columns: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """Every row of every table of the schema (of the given columns, if given)."""
    if columns is None:
        found = admin.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'jobledger' ORDER BY table_name, ordinal_position"
        ).fetchall()
        columns = {}
        for row in found:
            columns.setdefault(row["table_name"], []).append(row["column_name"])
    return {
        table: (
            names,
            [
                list(row.values())
                for row in admin.execute(
                    f"SELECT {', '.join(names)} FROM jobledger.{table} ORDER BY 1"
                ).fetchall()
            ],
        )
        for table, names in columns.items()
    }


def _open(pg_url: str, manifest: dict[str, Any], **options: Any) -> Any:
    return jobledger.open_store(
        pg_url, clock=FakeClock(manifest["clock"]["end"]), listen=False, **options
    )


def test_the_dump_is_small_and_of_the_release(manifest: dict[str, Any]) -> None:
    assert DUMP.stat().st_size < 300_000
    assert "CREATE SCHEMA jobledger;" in DUMP.read_text("utf-8")
    assert [m[:3] for m in manifest["migrations"]] == [
        [m.version, m.name, m.checksum] for m in pg_schema.MIGRATIONS[:4]
    ]


def test_a_v4_schema_of_the_release_upgrades_keeping_every_row(
    pg_url, admin, v4_schema, manifest
) -> None:
    before = _contents(admin)
    end = manifest["clock"]["end"]
    with _open(pg_url, manifest) as store:
        outcome = store.schema_outcome
        assert (outcome.found, outcome.upgraded_from, outcome.version) == (4, 4, LATEST_VERSION)
        info = store.schema_info()
        assert [[m.version, m.name, m.checksum, m.applied_at] for m in info.migrations] == [
            *manifest["migrations"],
            *([m.version, m.name, m.checksum, end] for m in pg_schema.MIGRATIONS[4:]),
        ]
        admin.execute("SET search_path TO jobledger")
        assert (
            pg_schema.catalog_fingerprint(admin, "jobledger")
            == pg_schema.MIGRATIONS[-1].fingerprint
        )
        admin.execute("RESET search_path")
        # every column of every v4 table holds exactly what it held (a later rung only adds),
        # migrations aside (a row per new rung)
        after = _contents(admin, {table: names for table, (names, _) in before.items()})
        migrations = after.pop("migrations")
        assert migrations[1][: len(before["migrations"][1])] == before.pop("migrations")[1]
        assert after == before
        assert_reads_back(store, manifest, raw_postgres(admin))
        assert store.verify().ok


def test_work_continues_on_the_upgraded_schema(pg_url, admin, v4_schema, manifest) -> None:
    with _open(pg_url, manifest) as store:
        assert_work_continues(store, manifest)


def test_the_release_schema_without_migrate_is_refused_unchanged(
    pg_url, admin, v4_schema, manifest
) -> None:
    admin.execute("SET search_path TO jobledger")
    before = pg_schema.catalog_fingerprint(admin, "jobledger")
    admin.execute("RESET search_path")
    rows = _contents(admin)
    with raises_code("SCHEDULER_MIGRATION_REQUIRED") as refused:
        _open(pg_url, manifest, migrate=False)
    assert refused.value.details == {"schemaVersion": 4, "requiredVersion": LATEST_VERSION}
    admin.execute("SET search_path TO jobledger")
    assert pg_schema.catalog_fingerprint(admin, "jobledger") == before
    admin.execute("RESET search_path")
    assert _contents(admin) == rows
