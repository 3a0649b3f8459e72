"""Schema creation, verification on every open, refusals that change nothing, and upgrades."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

import jobledger
from jobledger.errors import InvalidArgument, MigrationRequired
from jobledger.store import migrations as ladder
from jobledger.store.migrations import Migration
from jobledger.store.postgres import schema as pg_schema
from jobledger.store.postgres.connection import redact_url, validate_schema_name
from tests.store.helpers import raises_code

AUTHORITY = {"principal": {"type": "user", "id": "tester"}}
LADDER = [
    (1, "scheduler-kernel-v1"),
    (2, "jobledger-requeue-v2"),
    (3, "jobledger-everyday-v3"),
    (4, "jobledger-queues-v4"),
    (5, "jobledger-operators-v5"),
]
LATEST = ladder.LATEST_VERSION
OLD_APPLIED_AT = 1_600_000_000_000
# 2100-01-01: due after any wall clock a test runs under (the v4 migration sorts live rows into
# waiting, gate 1, and ready, gate 0, by the database's clock at the upgrade).
FUTURE = 4_102_444_800_000
V1_OCCURRENCE_COLUMNS = (
    "occurrence_id, job_id, job_revision, idempotency_key, trigger_key, scheduled_for, "
    "available_at, status, attempt, max_attempts, fence, lease_owner, lease_expires_at, "
    "authority_json, payload_json, last_error_json, result_json, created_at, updated_at, "
    "settled_at"
)
# A v4 schema's occurrences in their old shape: the idempotency key derived from the id again,
# the authority read from the table that stores each envelope once.
OLD_SHAPE = """
SELECT o.occurrence_id, o.job_id, o.job_revision,
       'scheduler:v1:' || substr(o.occurrence_id, 5) AS idempotency_key, o.trigger_key,
       o.scheduled_for, o.available_at, o.status, o.attempt, o.max_attempts, o.fence,
       o.lease_owner, o.lease_expires_at, a.authority_json, o.payload_json, o.last_error_json,
       o.result_json, o.created_at, o.updated_at, o.settled_at{extra}
FROM {schema}.occurrences AS o
JOIN {schema}.jobledger_authorities AS a ON a.authority_id = o.authority_id
ORDER BY o.occurrence_id
"""
V3_DERIVED = ("kind", "workspace_id", "runnable")
# One row in each table v3 added, as the v3 code writes them.
V3_ROWS: dict[str, str] = {
    "jobledger_schedules": "('off', 2, 6, 60000, NULL, '[]', 6)",
    "jobledger_workers": "('worker-1', 'host-a', 4242, 30, 40, 50, '{}')",
    "jobledger_audit": "(DEFAULT, 60, 'job_removed', 'ops', 'job-gone', '{\"reason\":\"r\"}')",
    "jobledger_throughput": "(0, 'k', 'w', 0, 0, 1)",
}
# Advisory-lock waits in this test's database (pg_locks is the whole cluster's: other tests
# running at the same time wait for advisory locks of their own).
WAITING_HERE = (
    "SELECT COUNT(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)


def _snapshot(admin, schema: str = "jobledger") -> tuple[str, list[Any]]:
    """The catalog fingerprint and migration rows: what "left unchanged" means."""
    admin.execute(f"SET search_path TO {schema}")
    fingerprint = pg_schema.catalog_fingerprint(admin, schema)
    try:
        rows = admin.execute("SELECT * FROM migrations ORDER BY version").fetchall()
    except psycopg.Error:
        rows = []
    admin.execute("RESET search_path")
    return fingerprint, rows


def _apply(admin, schema: str, version: int, applied_at: int = OLD_APPLIED_AT) -> None:
    """A schema at ``version`` made by hand from the DDL files, not by jobledger's migrator."""
    admin.execute(f"CREATE SCHEMA {schema}")
    with admin.transaction():
        admin.execute(f"SET LOCAL search_path TO {schema}")
        for migration in pg_schema.MIGRATIONS[:version]:
            admin.execute(migration.ddl)
            admin.execute(
                "INSERT INTO migrations VALUES (%s, %s, %s, %s)",
                (migration.version, migration.name, migration.checksum, applied_at),
            )


def _apply_v1(admin, schema: str, applied_at: int = OLD_APPLIED_AT) -> None:
    _apply(admin, schema, 1, applied_at)


def _old_rows(admin, schema: str, version: int) -> dict[str, Any]:
    """Two jobs (one disabled, one in a workspace), their occurrences (two of them with one
    idempotency key, the older due in the far future), events, on v2 and v3 a requeue record,
    on v3 a row in each table v3 added — written with plain SQL in the old schema."""
    in_workspace = jobledger.canonical_json(
        jobledger.normalize_authority({**AUTHORITY, "workspaceId": "ws-1"})
    )
    plain = jobledger.canonical_json(jobledger.normalize_authority(AUTHORITY))
    ids = {}
    columns = V1_OCCURRENCE_COLUMNS + (", kind, workspace_id, runnable" if version >= 3 else "")
    with admin.transaction():
        admin.execute(f"SET LOCAL search_path TO {schema}")
        admin.execute(
            "INSERT INTO jobs VALUES ('j', 'k', '{}', 'null', %s, 1, 1, 3, 5, 5)", (in_workspace,)
        )
        admin.execute(
            "INSERT INTO jobs VALUES ('off', 'sms', '{}', 'null', %s, 0, 2, 3, 5, 6)", (plain,)
        )
        for job_id, status, trigger, slot, available, attempt, settled, created in (
            ("j", "queued", "queued", 0, 0, 0, None, 5),
            ("j", "dead_letter", "dead_letter", 1, 1, 1, 7, 5),
            ("off", "queued", "queued", 0, 0, 0, None, 5),
            ("j", "queued", "key:k1", 2, FUTURE, 0, None, 6),
            ("j", "queued", "key:k1", 3, 3, 0, None, 7),
        ):
            occurrence_id, key = jobledger.derive_occurrence_identity(
                job_id=job_id, job_revision=1, scheduled_for=slot, trigger_key=trigger
            )
            ids[(job_id, trigger, slot)] = occurrence_id
            values = [
                occurrence_id,
                job_id,
                1,
                key,
                trigger,
                slot,
                available,
                status,
                attempt,
                3,
                attempt,
                None,
                None,
                in_workspace if job_id == "j" else plain,
                "null",
                None,
                None,
                created,
                created,
                settled,
            ]
            if version >= 3:
                values += ["k", "ws-1", 1] if job_id == "j" else ["sms", None, 0]
            marks = ", ".join(["%s"] * len(values))
            admin.execute(f"INSERT INTO occurrences ({columns}) VALUES ({marks})", values)
            admin.execute(
                "INSERT INTO events (job_id, occurrence_id, event_type, occurred_at, data_json) "
                "VALUES (%s, %s, 'occurrence_enqueued', %s, '{}')",
                (job_id, occurrence_id, created),
            )
        dead = ids[("j", "dead_letter", 1)]
        if version >= 2:
            admin.execute(
                "INSERT INTO jobledger_requeues (occurrence_id, job_id, expected_fence, attempt, "
                "previous_max_attempts, max_attempts, reason, actor, requested_at) "
                "VALUES (%s, 'j', 1, 1, 1, 3, 'fixed', 'ops', 6)",
                (dead,),
            )
        if version >= 3:
            for table, row in V3_ROWS.items():
                admin.execute(f"INSERT INTO {table} VALUES {row}")
    keyed, twin = ids[("j", "key:k1", 2)], ids[("j", "key:k1", 3)]
    lane = ("default", 0, None)
    return {
        "ids": ids,
        "queued": ids[("j", "queued", 0)],
        "paused": ids[("off", "queued", 0)],
        "dead": dead,
        "keyed": keyed,
        "twin": twin,
        # (kind, workspace, runnable, queue, priority, partition, gate): only the row due in
        # 2100 waits
        "lanes": {
            ids[("j", "queued", 0)]: ("k", "ws-1", 1, *lane, 0),
            dead: ("k", "ws-1", 1, *lane, 0),
            ids[("off", "queued", 0)]: ("sms", None, 0, *lane, 0),
            keyed: ("k", "ws-1", 1, *lane, 1),
            twin: ("k", "ws-1", 1, *lane, 0),
        },
        "authorities": {
            occurrence_id: in_workspace if job_id == "j" else plain
            for (job_id, _, _), occurrence_id in ids.items()
        },
        # the oldest occurrence of a key answers it from v4 on
        "keys": {("j", "key:k1"): keyed},
    }


def _table(admin, schema: str, table: str, order: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = admin.execute(
        f"SELECT * FROM {schema}.{table} ORDER BY {order}"
    ).fetchall()
    return rows


def _old_shape(admin, schema: str, version: int) -> list[dict[str, Any]]:
    extra = "".join(f", o.{column}" for column in V3_DERIVED) if version >= 3 else ""
    rows: list[dict[str, Any]] = admin.execute(
        OLD_SHAPE.format(schema=schema, extra=extra)
    ).fetchall()
    return rows


def _keys(admin, schema: str) -> dict[tuple[str, str], str]:
    rows = admin.execute(f"SELECT * FROM {schema}.jobledger_keys").fetchall()
    return {(row["job_id"], row["trigger_key"]): row["occurrence_id"] for row in rows}


def test_a_fresh_schema_gets_every_migration(open_pg, admin, clock):
    store = open_pg(schema="fresh_one")
    info = store.schema_info()
    assert info.application_id == 0x4343534B
    assert info.schema_version == pg_schema.LATEST_VERSION == ladder.LATEST_VERSION == LATEST
    assert [(m.version, m.name) for m in info.migrations] == LADDER == list(ladder.LADDER)
    assert [m.checksum for m in info.migrations] == [m.checksum for m in pg_schema.MIGRATIONS]
    assert {m.applied_at for m in info.migrations} == {clock()}
    tables = admin.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'fresh_one' "
        "ORDER BY 1"
    ).fetchall()
    assert [t["table_name"] for t in tables] == list(pg_schema.MIGRATIONS[-1].tables)
    assert [t["table_name"] for t in tables] == [
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
    indexes = admin.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = 'fresh_one' ORDER BY 1"
    ).fetchall()
    names = {row["indexname"] for row in indexes}
    assert {
        "jobledger_occurrences_ready",
        "jobledger_occurrences_ready_workspace",
        "jobledger_occurrences_waiting",
        "jobledger_occurrences_held",
        "jobledger_occurrences_leases",
        "jobledger_occurrences_running",
        "jobledger_occurrences_lanes",
        "jobledger_occurrences_status",
        "jobledger_occurrences_job",
        "jobledger_occurrences_dead_letters",
        "jobledger_keys_occurrence",
        "jobledger_keys_key",
        "jobledger_occurrences_queue",
        "jobledger_occurrences_partition",
        "jobledger_tags_pkey",
        "jobledger_schedules_due",
        "jobledger_rate_windows_wake",
        "jobledger_dependencies_child",
    } <= names
    # replaced by v3's per-kind ready index, then by v4's claim lane (and the derived key)
    assert (
        not {
            "scheduler_occurrences_claim",
            "scheduler_occurrences_idempotency",
            "scheduler_occurrences_job",
            "jobledger_occurrences_final_leases",
        }
        & names
    )
    (store_row,) = admin.execute("SELECT * FROM fresh_one.jobledger_store").fetchall()
    assert len(store_row["store_id"]) == 32
    assert _snapshot(admin, "fresh_one")[0] == pg_schema.MIGRATIONS[-1].fingerprint
    assert store.verify().ok
    assert [c.name for c in store.verify().checks] == [
        "schema",
        "stored_authority",
        "enqueue_events",
    ]


def test_the_ladder_is_the_shared_one():
    assert [(m.version, m.name) for m in pg_schema.MIGRATIONS] == LADDER
    assert len({m.fingerprint for m in pg_schema.MIGRATIONS}) == LATEST == len(LADDER)
    assert pg_schema.PostgresSchema.migrations == pg_schema.MIGRATIONS


def test_schemas_are_independent(open_pg):
    one = open_pg(schema="tenant_one")
    two = open_pg(schema="tenant_two")
    one.create_job(id="j", kind="k", authority=AUTHORITY)
    assert two.get_job("j") is None
    assert one.get_job("j") is not None


def test_fingerprint_does_not_depend_on_the_schema_name(open_pg, admin):
    open_pg(schema="other_name")
    assert _snapshot(admin, "other_name")[0] == pg_schema.MIGRATIONS[-1].fingerprint
    assert _snapshot(admin)[0] == pg_schema.MIGRATIONS[-1].fingerprint


@pytest.mark.parametrize(
    "schema",
    [
        "",
        "Bad",
        "has-dash",
        'x"; DROP SCHEMA public; --',
        "public",
        "information_schema",
        "pg_catalog",
        "pg_mine",
        "select",
        # reserved words that are not in the SQL:92 list: each used to pass validation and fail
        # later with a syntax error reported as SCHEDULER_DATA_CORRUPT
        "returning",
        "current_user",
        "window",
        "binary",
        "x" * 49,
        3,
    ],
)
def test_invalid_schema_names_are_refused(pg_url, schema):
    with raises_code("SCHEDULER_INVALID_ARGUMENT"):
        jobledger.open_store(pg_url, schema=schema, listen=False)


@pytest.mark.parametrize(
    ("damage", "code"),
    [
        ("CREATE TABLE jobledger.extra (x int)", "SCHEDULER_SCHEMA_UNKNOWN"),
        ("DROP INDEX jobledger.jobledger_occurrences_ready", "SCHEDULER_SCHEMA_CORRUPT"),
        ("DROP INDEX jobledger.jobledger_occurrences_waiting", "SCHEDULER_SCHEMA_CORRUPT"),
        (
            "DROP INDEX jobledger.jobledger_occurrences_held; CREATE INDEX "
            "jobledger_occurrences_held ON jobledger.occurrences (queue, partition_key)",
            "SCHEDULER_SCHEMA_CORRUPT",
        ),
        (
            "CREATE INDEX jobledger_occurrences_final_leases ON jobledger.occurrences "
            "(lease_expires_at) WHERE status = 'running'",
            "SCHEDULER_SCHEMA_CORRUPT",
        ),
        ("DROP TABLE jobledger.jobledger_liveness", "SCHEDULER_SCHEMA_UNKNOWN"),
        (
            "ALTER TABLE jobledger.occurrences DROP CONSTRAINT occurrences_gate_check",
            "SCHEDULER_SCHEMA_CORRUPT",
        ),
        (
            "ALTER TABLE jobledger.jobledger_keys ALTER CONSTRAINT "
            "jobledger_keys_occurrence_id_fkey NOT DEFERRABLE",
            "SCHEDULER_SCHEMA_CORRUPT",
        ),
        ("ALTER TABLE jobledger.occurrences DROP COLUMN trace_json", "SCHEDULER_SCHEMA_CORRUPT"),
        (
            "CREATE INDEX scheduler_occurrences_claim ON jobledger.occurrences (available_at)",
            "SCHEDULER_SCHEMA_CORRUPT",
        ),
        ("DROP TABLE jobledger.jobledger_workers", "SCHEDULER_SCHEMA_UNKNOWN"),
        (
            "ALTER TABLE jobledger.occurrences DROP CONSTRAINT occurrences_runnable_check",
            "SCHEDULER_SCHEMA_CORRUPT",
        ),
        (
            "ALTER TABLE jobledger.occurrences ALTER COLUMN kind DROP NOT NULL",
            "SCHEDULER_SCHEMA_CORRUPT",
        ),
        ("CREATE INDEX extra_idx ON jobledger.jobs (kind)", "SCHEDULER_SCHEMA_CORRUPT"),
        (
            "ALTER TABLE jobledger.occurrences DROP CONSTRAINT occurrences_check",
            "SCHEDULER_SCHEMA_CORRUPT",
        ),
        ("ALTER TABLE jobledger.jobs ALTER COLUMN kind DROP NOT NULL", "SCHEDULER_SCHEMA_CORRUPT"),
        (
            "ALTER TABLE jobledger.jobs ALTER COLUMN revision TYPE integer",
            "SCHEDULER_SCHEMA_CORRUPT",
        ),
        ("ALTER TABLE jobledger.jobs ADD COLUMN extra text", "SCHEDULER_SCHEMA_CORRUPT"),
        (
            "CREATE FUNCTION jobledger.f() RETURNS trigger LANGUAGE plpgsql AS "
            "'BEGIN RETURN NEW; END'; CREATE TRIGGER t BEFORE INSERT ON jobledger.jobs "
            "FOR EACH ROW EXECUTE FUNCTION jobledger.f()",
            "SCHEDULER_SCHEMA_CORRUPT",
        ),
        ("CREATE VIEW jobledger.v AS SELECT 1 AS one", "SCHEDULER_SCHEMA_UNKNOWN"),
        (
            "UPDATE jobledger.migrations SET checksum = 'x' WHERE version = 1",
            "SCHEDULER_SCHEMA_UNKNOWN",
        ),
        (
            f"UPDATE jobledger.migrations SET checksum = 'x' WHERE version = {LATEST}",
            "SCHEDULER_SCHEMA_UNKNOWN",
        ),
        # the reference's order: the catalog (its fingerprint) before the history
        (
            f"UPDATE jobledger.migrations SET checksum = 'x' WHERE version = {LATEST}; "
            "DROP INDEX jobledger.jobledger_occurrences_ready",
            "SCHEDULER_SCHEMA_CORRUPT",
        ),
        (
            "UPDATE jobledger.migrations SET name = 'x' WHERE version = 1; "
            "CREATE INDEX extra_idx ON jobledger.jobs (kind)",
            "SCHEDULER_SCHEMA_CORRUPT",
        ),
        # ... and the table set before either
        (
            f"UPDATE jobledger.migrations SET checksum = 'x' WHERE version = {LATEST}; "
            "CREATE TABLE jobledger.extra (x int)",
            "SCHEDULER_SCHEMA_UNKNOWN",
        ),
        # the history then claims the rung before, but the catalog is the latest one's: an
        # unknown table set when the latest rung added tables, else a catalog that does not
        # match the claimed rung's fingerprint (v5 added only columns and indexes)
        (
            f"DELETE FROM jobledger.migrations WHERE version = {LATEST}",
            "SCHEDULER_SCHEMA_UNKNOWN"
            if pg_schema.MIGRATIONS[-1].tables != pg_schema.MIGRATIONS[-2].tables
            else "SCHEDULER_SCHEMA_CORRUPT",
        ),
        (
            f"INSERT INTO jobledger.migrations VALUES ({LATEST + 1}, 'from-the-future', 'x', 0)",
            "SCHEDULER_SCHEMA_UNKNOWN",
        ),
        ("DELETE FROM jobledger.migrations", "SCHEDULER_SCHEMA_UNKNOWN"),
        ("DROP TABLE jobledger.migrations", "SCHEDULER_SCHEMA_UNKNOWN"),
    ],
)
def test_a_damaged_or_unknown_schema_is_refused_unchanged(pg_url, admin, damage, code):
    admin.execute(damage)
    before = _snapshot(admin)
    with raises_code(code):
        jobledger.open_store(pg_url, listen=False)
    with raises_code(code):
        jobledger.open_store(pg_url, listen=False, migrate=False)
    assert _snapshot(admin) == before


V1_DOUBLE_DAMAGE = {
    # the case, as the reference answers it on SQLite: the catalog before the history
    "dropped-index-and-tampered-checksum": (
        "DROP INDEX old.scheduler_occurrences_job; "
        "UPDATE old.migrations SET checksum = repeat('0', 64)",
        "SCHEDULER_SCHEMA_CORRUPT",
        "Scheduler schema catalog does not match v1",
    ),
    "added-trigger-and-renamed-migration": (
        "CREATE FUNCTION old.f() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END'; "
        "CREATE TRIGGER t BEFORE INSERT ON old.jobs FOR EACH ROW EXECUTE FUNCTION old.f(); "
        "UPDATE old.migrations SET name = 'renamed'",
        "SCHEDULER_SCHEMA_CORRUPT",
        "Scheduler schema catalog does not match v1",
    ),
    # ... and the table set before the catalog
    "extra-table-and-tampered-checksum": (
        "CREATE TABLE old.extra (x int); UPDATE old.migrations SET checksum = 'x'",
        "SCHEDULER_SCHEMA_UNKNOWN",
        "Scheduler schema has unknown or missing tables",
    ),
    # the history alone
    "tampered-checksum": (
        "UPDATE old.migrations SET checksum = 'x'",
        "SCHEDULER_SCHEMA_UNKNOWN",
        "Scheduler migration history is unknown",
    ),
}


@pytest.mark.parametrize("case", sorted(V1_DOUBLE_DAMAGE))
def test_a_v1_schema_is_checked_catalog_first_as_the_reference_does(pg_url, admin, case):
    _apply_v1(admin, "old")
    _old_rows(admin, "old", 1)
    damage, code, message = V1_DOUBLE_DAMAGE[case]
    admin.execute(damage)
    before = _snapshot(admin, "old")
    for migrate in (True, False):
        with raises_code(code) as refused:
            jobledger.open_store(pg_url, schema="old", listen=False, migrate=migrate)
        assert refused.value.message.startswith(message), refused.value.message
    assert _snapshot(admin, "old") == before


def test_a_foreign_schema_is_never_touched(pg_url, admin):
    admin.execute("CREATE SCHEMA theirs")
    admin.execute("CREATE TABLE theirs.jobs (id int)")
    before = _snapshot(admin, "theirs")
    with raises_code("SCHEDULER_SCHEMA_UNKNOWN"):
        jobledger.open_store(pg_url, schema="theirs", listen=False)
    assert _snapshot(admin, "theirs") == before


@pytest.mark.parametrize("exists", [True, False], ids=["empty-schema", "absent-schema"])
def test_an_empty_or_absent_schema_is_created_only_with_migrate(pg_url, open_pg, admin, exists):
    if exists:
        admin.execute("CREATE SCHEMA prepared_by_dba")
    with pytest.raises(MigrationRequired) as refused:
        jobledger.open_store(pg_url, schema="prepared_by_dba", listen=False, migrate=False)
    assert refused.value.code == "SCHEDULER_MIGRATION_REQUIRED"
    assert refused.value.details == {"schemaVersion": 0, "requiredVersion": LATEST}
    present = admin.execute(
        "SELECT COUNT(*) AS n FROM pg_namespace WHERE nspname = 'prepared_by_dba'"
    ).fetchone()
    assert present == {"n": int(exists)}  # not created by the refused open
    if exists:
        assert _snapshot(admin, "prepared_by_dba")[1] == []

    store = open_pg(schema="prepared_by_dba")
    assert store.schema_info().schema_version == LATEST
    assert _snapshot(admin, "prepared_by_dba")[0] == pg_schema.MIGRATIONS[-1].fingerprint


@pytest.mark.parametrize("version", [1, 2, 3])
def test_an_old_schema_is_upgraded_to_the_latest_in_place(pg_url, admin, open_pg, clock, version):
    _apply(admin, "old", version)
    made = _old_rows(admin, "old", version)
    assert _snapshot(admin, "old")[0] == pg_schema.MIGRATIONS[version - 1].fingerprint
    jobs = _table(admin, "old", "jobs", "job_id")
    events = _table(admin, "old", "events", "event_id")
    occurrences = _table(admin, "old", "occurrences", "occurrence_id")
    kept = ["jobledger_requeues"] if version >= 2 else []
    kept += list(V3_ROWS) if version >= 3 else []
    before_kept = {table: _table(admin, "old", table, "1") for table in kept}

    before = _snapshot(admin, "old")
    with pytest.raises(MigrationRequired) as refused:
        jobledger.open_store(pg_url, schema="old", listen=False, migrate=False)
    assert refused.value.details == {"schemaVersion": version, "requiredVersion": LATEST}
    assert _snapshot(admin, "old") == before

    store = open_pg(schema="old")
    info = store.schema_info()
    assert info.schema_version == LATEST
    assert [(m.version, m.name) for m in info.migrations] == LADDER
    assert [m.checksum for m in info.migrations] == [m.checksum for m in pg_schema.MIGRATIONS]
    assert [m.applied_at for m in info.migrations] == [OLD_APPLIED_AT] * version + [clock()] * (
        LATEST - version
    )
    assert _snapshot(admin, "old")[0] == pg_schema.MIGRATIONS[-1].fingerprint

    # every row kept: jobs gained v4's columns, occurrences read back in their old shape
    new_job_columns = (
        "queue",
        "priority",
        "on_lost_lease",
        "run_revision",
        "authority_id",
        "declared_json",
        "operator_set_json",
    )
    upgraded_jobs = _table(admin, "old", "jobs", "job_id")
    assert [
        {k: v for k, v in row.items() if k not in new_job_columns} for row in upgraded_jobs
    ] == jobs
    authorities = {
        row["authority_id"]: row["authority_json"]
        for row in _table(admin, "old", "jobledger_authorities", "authority_id")
    }
    assert sorted(authorities.values()) == sorted(set(made["authorities"].values()))
    for row in upgraded_jobs:
        assert (row["queue"], row["priority"], row["on_lost_lease"]) == ("default", 0, "retry")
        assert row["run_revision"] == row["revision"]
        assert authorities[row["authority_id"]] == row["authority_json"]
    assert _table(admin, "old", "events", "event_id") == events
    for table in kept:
        # later rungs may add columns (v5: jobledger_requeues.revived_children)
        old_rows = before_kept[table]
        after = _table(admin, "old", table, "1")
        assert [
            {k: v for k, v in row.items() if not old_rows or k in old_rows[0]} for row in after
        ] == old_rows, table
    old_shape = _old_shape(admin, "old", version)
    if version < 3:
        old_shape = [{k: v for k, v in row.items() if k not in V3_DERIVED} for row in old_shape]
    assert old_shape == occurrences
    lanes = admin.execute(
        "SELECT occurrence_id, kind, workspace_id, runnable, queue, priority, partition_key, "
        "gate FROM old.occurrences"
    ).fetchall()
    assert {row["occurrence_id"]: tuple(row.values())[1:] for row in lanes} == made["lanes"]
    # one key row per idempotency key, naming one of its occurrences (which one:
    # test_a_duplicated_key_resolves_to_its_oldest_occurrence)
    (keyed,) = _keys(admin, "old").values()
    assert list(_keys(admin, "old")) == list(made["keys"])
    assert keyed in (made["keyed"], made["twin"])
    assert store.verify().ok

    # the key of two occurrences answers with its key row's (v3 refused it as corrupt)
    again = store.enqueue_occurrence_once_per_trigger(
        job_id="j", scheduled_for=9, trigger_key="key:k1"
    )
    assert (again.id, again.deduplicated) == (keyed, True)

    # and it works: the disabled job's row is not claimable, a workspace claim finds the due
    # rows in due order (not the one waiting for 2100)
    assert store.claim_next(owner_id="w", lease_ms=1000, job_kind="sms") is None
    claimed = store.claim_next(owner_id="w", lease_ms=1000, workspace_id="ws-1")
    assert claimed is not None
    assert (claimed.id, claimed.kind, claimed.queue) == (made["queued"], "k", "default")
    twin = store.claim_next(owner_id="w", lease_ms=1000, workspace_id="ws-1")
    assert twin is not None and twin.id == made["twin"]
    assert store.claim_next(owner_id="w", lease_ms=1000) is None  # the other waits for 2100
    cancelled = store.cancel_occurrence(occurrence_id=made["paused"], actor="ops", reason="gone")
    assert cancelled.status == "cancelled"
    assert store.verify().ok


@pytest.mark.parametrize(
    ("version", "touched"),
    [
        pytest.param(1, False),
        pytest.param(2, False),
        (3, False),
        pytest.param(3, True),
    ],
    ids=["v1", "v2", "v3", "v3-older-updated-later"],
)
def test_a_duplicated_key_resolves_to_its_oldest_occurrence(
    pg_url, admin, open_pg, version, touched
):
    """Two occurrences of one idempotency key (the race v4 closes): from v4 on the key answers
    with the oldest, as on SQLite, whatever happened to either row since."""
    _apply(admin, "old", version)
    made = _old_rows(admin, "old", version)
    if touched:  # the older one changed after its twin was written (a claim, a settle)
        admin.execute(
            "UPDATE old.occurrences SET updated_at = 8 WHERE occurrence_id = %s", (made["keyed"],)
        )
    store = open_pg(schema="old")
    assert _keys(admin, "old") == made["keys"]
    again = store.enqueue_occurrence_once_per_trigger(
        job_id="j", scheduled_for=9, trigger_key="key:k1"
    )
    assert (again.id, again.deduplicated) == (made["keyed"], True)


TAMPER_AUTHORITY = """UPDATE {schema}.jobs SET authority_json = '{{"schemaVersion":2}}'
WHERE job_id = 'j'"""


def test_a_tampered_stored_authority_opens_and_verify_reports_it(open_pg, admin):
    """Rows are not re-validated on open or read; verify() finds the damage."""
    store = open_pg()
    store.create_job(id="j", kind="k", authority=AUTHORITY)
    admin.execute(TAMPER_AUTHORITY.format(schema="jobledger"))
    reopened = open_pg()
    job = reopened.get_job("j")
    assert job is not None
    assert job.authority == {"schemaVersion": 2}
    report = reopened.verify()
    assert not report.ok
    assert [(c.name, c.ok, c.details) for c in report.checks] == [
        ("schema", True, None),
        ("stored_authority", False, {"count": 1, "ids": ["j"]}),
        ("enqueue_events", True, None),
    ]


def test_verify_finds_an_occurrence_without_its_enqueue_event(open_pg, admin):
    """What a write taken elsewhere leaves (issue 30: a caller's temp ``events`` table)."""
    store = open_pg()
    store.create_job(id="j", kind="k", authority=AUTHORITY)
    kept = store.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="a")
    lost = store.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="b")
    assert store.verify().ok
    admin.execute("DELETE FROM jobledger.events WHERE occurrence_id = %s", (lost.id,))
    report = store.verify()
    assert [(c.name, c.ok, c.details) for c in report.checks if not c.ok] == [
        ("enqueue_events", False, {"count": 1, "ids": [lost.id]})
    ]
    assert kept.id != lost.id


def test_verify_reports_a_damaged_catalog(open_pg, admin):
    store = open_pg()
    admin.execute("CREATE INDEX extra_idx ON jobledger.jobs (kind)")
    (schema_check, authority_check) = store.verify().checks
    assert (schema_check.name, schema_check.ok) == ("schema", False)
    assert schema_check.details is not None
    assert schema_check.details["code"] == "SCHEDULER_SCHEMA_CORRUPT"
    assert authority_check.ok


def test_a_tampered_stored_authority_in_a_v2_schema_refuses_the_upgrade(pg_url, admin):
    _apply(admin, "old", 2)
    _old_rows(admin, "old", 2)
    admin.execute(TAMPER_AUTHORITY.format(schema="old"))
    before = _snapshot(admin, "old")
    with raises_code("SCHEDULER_SCHEMA_CORRUPT"):
        jobledger.open_store(pg_url, schema="old", listen=False)
    assert _snapshot(admin, "old") == before


@pytest.mark.parametrize("failing", [2, 3, 4])
def test_a_failed_upgrade_leaves_v1(pg_url, admin, monkeypatch, failing):
    """A rung that fails rolls back the whole upgrade, the rungs before it included."""
    _apply_v1(admin, "old")
    before = _snapshot(admin, "old")
    good = pg_schema.MIGRATIONS[failing - 1]
    broken = Migration(
        version=good.version,
        name=good.name,
        ddl=good.ddl + "\nCREATE TABLE jobs (x int);",  # fails: exists
        fingerprint=good.fingerprint,
        tables=good.tables,
    )
    ladder_with_a_broken_rung = tuple(
        broken if m.version == failing else m for m in pg_schema.MIGRATIONS
    )
    # the flow applies the dialect's rungs; the history rule still sees the real ladder
    monkeypatch.setattr(pg_schema.PostgresSchema, "migrations", ladder_with_a_broken_rung)
    with pytest.raises(jobledger.SchedulerError) as failed:
        jobledger.open_store(pg_url, schema="old", listen=False)
    assert isinstance(failed.value.__cause__, psycopg.errors.DuplicateTable)
    assert _snapshot(admin, "old") == before


def test_concurrent_opens_of_a_fresh_schema_migrate_once(pg_url, admin):
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def open_one() -> None:
        try:
            barrier.wait()
            jobledger.open_store(pg_url, schema="racy", listen=False).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    rows = admin.execute("SELECT version FROM racy.migrations ORDER BY version").fetchall()
    assert [r["version"] for r in rows] == [version for version, _ in LADDER]


@pytest.mark.parametrize("version", [1, 3])
def test_concurrent_opens_of_an_old_schema_upgrade_once(pg_url, admin, version):
    _apply(admin, "racy_old", version)
    _old_rows(admin, "racy_old", version)
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def open_one() -> None:
        try:
            barrier.wait()
            jobledger.open_store(
                pg_url, schema="racy_old", listen=False, clock=lambda: 1_700_000_000_000
            ).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # one upgrade, one history, every row
    rows = admin.execute("SELECT * FROM racy_old.migrations ORDER BY version").fetchall()
    assert [(r["version"], r["name"]) for r in rows] == LADDER
    assert [r["applied_at"] for r in rows] == [OLD_APPLIED_AT] * version + [1_700_000_000_000] * (
        LATEST - version
    )
    assert _snapshot(admin, "racy_old")[0] == pg_schema.MIGRATIONS[-1].fingerprint
    count = admin.execute("SELECT COUNT(*) AS n FROM racy_old.occurrences").fetchone()
    assert count == {"n": 5}
    assert len(_keys(admin, "racy_old")) == 1
    assert errors == []


@pytest.mark.parametrize("version", [1, 2, 3])
def test_an_open_that_loses_the_upgrade_race_sees_the_upgraded_schema(
    pg_url, admin, monkeypatch, version
):
    """What concurrent opens interleave into, made deterministic: this open reads the old
    history, then another opener upgrades the schema before this one verifies it."""
    _apply(admin, "old", version)
    read_history = pg_schema.PostgresSchema.read_history
    raced: list[bool] = []

    def read_then_lose_the_race(schema):
        history = read_history(schema)
        if not raced:
            raced.append(True)
            jobledger.open_store(pg_url, schema="old", listen=False).close()
        return history

    monkeypatch.setattr(pg_schema.PostgresSchema, "read_history", read_then_lose_the_race)
    with jobledger.open_store(pg_url, schema="old", listen=False) as store:
        assert store.schema_info().schema_version == LATEST
        # This open reports what it found (the old version) and that another did the work.
        outcome = store.schema_outcome
        assert (outcome.found, outcome.version, outcome.upgraded_from) == (version, LATEST, None)
        assert outcome.by_another_process and not outcome.created


def test_an_upgrade_never_runs_between_the_checks_that_precede_another(pg_url, admin, monkeypatch):
    """The O(size) checks before an upgrade read the rows of the version they verified; an
    upgrade committed by another opener in between (v4 drops occurrences.authority_json) would
    make them fail with a driver error instead of a retry. So they hold the schema's lock
    (shared) and another opener's upgrade waits for them."""
    _apply(admin, "old", 3)
    _old_rows(admin, "old", 3)
    verify_catalog = pg_schema._verify
    other: list[threading.Thread] = []
    outcome: list[Any] = []

    def open_other() -> None:
        try:
            with jobledger.open_store(pg_url, schema="old", listen=False) as store:
                outcome.append(store.schema_outcome.upgraded_from)
        except BaseException as exc:  # reported to the test
            outcome.append(exc)

    def verify_then_let_another_upgrade(conn, schema, version):
        verify_catalog(conn, schema, version)
        if version == 3 and not other:
            other.append(threading.Thread(target=open_other))
            other[0].start()
            # Wait until the other opener has upgraded, or waits for this one's lock.
            for _ in range(500):
                waiting = admin.execute(WAITING_HERE).fetchone()
                if outcome or waiting["n"]:
                    break
                time.sleep(0.01)

    monkeypatch.setattr(pg_schema, "_verify", verify_then_let_another_upgrade)
    with jobledger.open_store(pg_url, schema="old", listen=False) as store:
        assert store.schema_info().schema_version == LATEST
    other[0].join(timeout=30)
    # one of the two opens upgraded, the other found it done; neither failed
    assert len(outcome) == 1 and not isinstance(outcome[0], BaseException), outcome
    assert (outcome[0] == 3) != (store.schema_outcome.upgraded_from == 3)


def test_the_checks_before_an_upgrade_wait_for_one_in_progress(pg_url, admin):
    """The other order: an upgrade holds the schema's lock while another open begins its
    checks of the old version; they wait for it, then see the upgraded schema (not rows of one
    version read through the catalog of the other)."""
    _apply(admin, "old", 3)
    _old_rows(admin, "old", 3)
    later = pg_schema.MIGRATIONS[3:]  # every rung after v3
    outcome: list[Any] = []

    def open_it() -> None:
        try:
            with jobledger.open_store(pg_url, schema="old", listen=False) as store:
                outcome.append(store.schema_outcome)
        except BaseException as exc:  # reported to the test
            outcome.append(exc)

    with psycopg.connect(pg_url) as upgrader:
        upgrader.execute("SET search_path TO old")
        upgrader.execute("SELECT pg_advisory_xact_lock(%s)", (pg_schema._lock_key("old"),))
        for migration in later:
            upgrader.execute(migration.ddl)
            upgrader.execute(
                "INSERT INTO migrations VALUES (%s, %s, %s, 1)",
                (migration.version, migration.name, migration.checksum),
            )
        opener = threading.Thread(target=open_it)
        opener.start()
        # Until the open waits for the lock (a condition, not a time: under load the opener
        # may take long to get there; committing before it read the old history would test
        # nothing).
        deadline = time.monotonic() + 120
        while not outcome and time.monotonic() < deadline:
            waiting = admin.execute(WAITING_HERE).fetchone()
            if waiting["n"]:
                break
            time.sleep(0.01)
        assert not outcome, outcome
        assert waiting["n"], "the open never waited for the upgrade's lock"
        upgrader.commit()
    opener.join(timeout=30)
    (found,) = outcome
    assert not isinstance(found, BaseException), found
    assert (found.found, found.version, found.by_another_process) == (3, LATEST, True)


def test_password_never_appears_in_target_repr_or_errors(pg_url, admin):
    admin.execute("DROP ROLE IF EXISTS jl_secret_user")
    admin.execute("CREATE ROLE jl_secret_user LOGIN PASSWORD 'hunter2-secret'")
    try:
        base = pg_url.replace(
            "postgresql://postgres@", "postgresql://jl_secret_user:hunter2-secret@"
        )
        with raises_code("SCHEDULER_STORAGE_UNAVAILABLE") as refused:
            # trust auth lets the role in; it may not create the schema
            jobledger.open_store(
                base + "?password=hunter2-secret", schema="no_rights", listen=False
            )
        assert "hunter2" not in str(refused.value) and "hunter2" not in repr(refused.value.details)
        admin.execute("GRANT CREATE ON DATABASE " + pg_url.rsplit("/", 1)[1] + " TO jl_secret_user")
        store = jobledger.open_store(base, schema="mine", listen=False)
        try:
            assert "hunter2" not in store.target and "hunter2" not in repr(store)
            assert "jl_secret_user:***@" in store.target
        finally:
            store.close()
    finally:
        admin.execute("DROP OWNED BY jl_secret_user CASCADE")
        admin.execute("DROP ROLE IF EXISTS jl_secret_user")


def test_every_reserved_key_word_is_refused_as_a_schema_name(admin):
    words = admin.execute(
        "SELECT word FROM pg_get_keywords() WHERE catcode IN ('R', 'T')"
    ).fetchall()
    accepted = []
    for row in words:
        try:
            validate_schema_name(row["word"])
        except InvalidArgument:
            continue
        accepted.append(row["word"])
    assert accepted == []


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:hunter2@h/db", "postgresql://u:***@h/db"),
        ("postgresql://h?password=hunter2", "postgresql://h?password=***"),
        ("postgresql://h/db?sslmode=require&PASSWORD=hunter2", None),
        ("postgresql://h/db?pass%77ord=hunter2", "postgresql://h/db?pass%77ord=***"),
        ("postgresql://u:hun/ter2@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u:hun?ter2@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u:hun@ter2@h1:1,h2:2/db", "postgresql://u:***@h1:1,h2:2/db"),
        ("postgresql:///db?host=/tmp&password=hunter2", "postgresql:///db?host=/tmp&password=***"),
        ("postgresql://u@h/db?user=a@b", "postgresql://u@h/db?user=a@b"),
    ],
)
def test_redact_url_hides_every_password(url, shown):
    redacted = redact_url(url)
    assert "hunter2" not in redacted and "ter2" not in redacted
    if shown is not None:
        assert redacted == shown


def test_bad_urls_are_invalid_arguments():
    with raises_code("SCHEDULER_INVALID_ARGUMENT") as refused:
        jobledger.open_store("postgresql://u:pw-secret@host/db?sslmode=nonsense-but-ok&bad key=1")
    assert "pw-secret" not in str(refused.value)


def test_a_role_with_only_table_privileges_can_work(pg_url, admin):
    """No CREATE on the schema, no ownership: table privileges on every table suffice.
    DELETE is among them: create_job clears a job's planner row (jobledger_schedules) whenever
    its trigger is not a schedule."""
    admin.execute("DROP ROLE IF EXISTS jl_worker_role")
    admin.execute("CREATE ROLE jl_worker_role LOGIN")
    try:
        admin.execute("GRANT USAGE ON SCHEMA jobledger TO jl_worker_role")
        admin.execute(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA jobledger "
            "TO jl_worker_role"
        )
        url = pg_url.replace("postgresql://postgres@", "postgresql://jl_worker_role@")
        with jobledger.open_store(url, listen=True) as store:
            store.work_signal.watch()  # LISTEN as this role, as a worker would
            assert store.listener is not None and store.listener.connected.wait(10)
            store.create_job(id="j", kind="k", authority=AUTHORITY, max_attempts=1)
            store.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="t")
            claimed = store.claim_next(owner_id="w", lease_ms=60_000)
            assert claimed is not None
            dead = store.settle(occurrence_id=claimed.id, owner_id="w", fence=1, outcome="failed")
            assert dead.status == "dead_letter"
            requeued = store.requeue_dead_letter(
                occurrence_id=claimed.id, expected_fence=1, reason="r", actor="op"
            )
            assert requeued.status == "retry_wait"
            cancelled = store.cancel_occurrence(occurrence_id=claimed.id, actor="op", reason="r")
            assert cancelled.status == "cancelled"
            store.register_worker(worker_id="worker-1", hostname="h", pid=1, info={})
            assert [w.worker_id for w in store.list_workers()] == ["worker-1"]
            assert store.throughput(since=0)
            assert store.verify().ok
            assert store.schema_info().schema_version == LATEST
    finally:
        admin.execute("DROP OWNED BY jl_worker_role CASCADE")
        admin.execute("DROP ROLE IF EXISTS jl_worker_role")
