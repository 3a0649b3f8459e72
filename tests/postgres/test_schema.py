"""Schema creation, verification on every open, refusals that change nothing, and upgrades."""

from __future__ import annotations

import threading

import psycopg
import pytest

import jobledger
from jobledger.errors import InvalidArgument, MigrationRequired
from jobledger.store.postgres import schema as pg_schema
from jobledger.store.postgres.connection import redact_url, validate_schema_name
from tests.store.helpers import raises_code

AUTHORITY = {"principal": {"type": "user", "id": "tester"}}


def _snapshot(admin, schema: str = "jobledger") -> tuple[str, list]:
    """The catalog fingerprint and migration rows: what "left unchanged" means."""
    admin.execute(f"SET search_path TO {schema}")
    fingerprint = pg_schema.catalog_fingerprint(admin, schema)
    try:
        rows = admin.execute("SELECT * FROM migrations ORDER BY version").fetchall()
    except psycopg.Error:
        rows = []
    admin.execute("RESET search_path")
    return fingerprint, rows


def _apply_v1(admin, schema: str, applied_at: int = 1_600_000_000_000) -> None:
    admin.execute(f"CREATE SCHEMA {schema}")
    with admin.transaction():
        admin.execute(f"SET LOCAL search_path TO {schema}")
        migration = pg_schema.MIGRATIONS[0]
        admin.execute(migration.ddl)
        admin.execute(
            "INSERT INTO migrations VALUES (%s, %s, %s, %s)",
            (migration.version, migration.name, migration.checksum, applied_at),
        )


def test_a_fresh_schema_gets_every_migration(open_pg, admin, clock):
    store = open_pg(schema="fresh_one")
    info = store.schema_info()
    assert info.application_id == 0x4343534B
    assert info.schema_version == pg_schema.LATEST_VERSION == 2
    assert [(m.version, m.name) for m in info.migrations] == [
        (1, "scheduler-kernel-v1"),
        (2, "jobledger-requeue-v2"),
    ]
    assert [m.checksum for m in info.migrations] == [m.checksum for m in pg_schema.MIGRATIONS]
    assert {m.applied_at for m in info.migrations} == {clock()}
    tables = admin.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'fresh_one' "
        "ORDER BY 1"
    ).fetchall()
    assert [t["table_name"] for t in tables] == list(pg_schema.MIGRATIONS[-1].tables)


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
        ("DROP INDEX jobledger.scheduler_occurrences_claim", "SCHEDULER_SCHEMA_CORRUPT"),
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
            "INSERT INTO jobledger.migrations VALUES (3, 'from-the-future', 'x', 0)",
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


def test_a_foreign_schema_is_never_touched(pg_url, admin):
    admin.execute("CREATE SCHEMA theirs")
    admin.execute("CREATE TABLE theirs.jobs (id int)")
    before = _snapshot(admin, "theirs")
    with raises_code("SCHEDULER_SCHEMA_UNKNOWN"):
        jobledger.open_store(pg_url, schema="theirs", listen=False)
    assert _snapshot(admin, "theirs") == before


def test_an_empty_existing_schema_is_adopted(open_pg, admin):
    admin.execute("CREATE SCHEMA prepared_by_dba")
    store = open_pg(schema="prepared_by_dba")
    assert store.schema_info().schema_version == 2


def test_v1_is_upgraded_to_v2_in_place(pg_url, admin, open_pg, clock):
    _apply_v1(admin, "old")
    admin.execute(
        "INSERT INTO old.jobs VALUES ('j', 'k', '{}', 'null', %s, 1, 1, 3, 5, 5)",
        (jobledger.canonical_json(jobledger.normalize_authority(AUTHORITY)),),
    )
    admin.execute("SET search_path TO old")
    assert pg_schema.catalog_fingerprint(admin, "old") == pg_schema.MIGRATIONS[0].fingerprint
    admin.execute("RESET search_path")

    with pytest.raises(MigrationRequired) as refused:
        jobledger.open_store(pg_url, schema="old", listen=False, migrate=False)
    assert refused.value.details == {"schemaVersion": 1, "requiredVersion": 2}

    store = open_pg(schema="old")
    info = store.schema_info()
    assert info.schema_version == 2
    assert [m.applied_at for m in info.migrations] == [1_600_000_000_000, clock()]
    assert store.get_job("j") is not None
    store.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="t")
    claimed = store.claim_next(owner_id="w", lease_ms=1000)
    assert claimed is not None
    assert _snapshot(admin, "old")[0] == pg_schema.MIGRATIONS[-1].fingerprint


def test_a_failed_upgrade_leaves_v1(pg_url, admin, monkeypatch):
    _apply_v1(admin, "old")
    before = _snapshot(admin, "old")
    broken = pg_schema.Migration(
        version=2,
        name=pg_schema.MIGRATIONS[1].name,
        ddl=pg_schema.MIGRATIONS[1].ddl + "\nCREATE TABLE jobs (x int);",  # fails: exists
        fingerprint=pg_schema.MIGRATIONS[1].fingerprint,
        tables=pg_schema.MIGRATIONS[1].tables,
    )
    monkeypatch.setattr(pg_schema, "MIGRATIONS", (pg_schema.MIGRATIONS[0], broken))
    with pytest.raises(jobledger.SchedulerError):
        jobledger.open_store(pg_url, schema="old", listen=False)
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
    assert [r["version"] for r in rows] == [1, 2]


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
    admin.execute("DROP ROLE IF EXISTS jl_worker_role")
    admin.execute("CREATE ROLE jl_worker_role LOGIN")
    try:
        admin.execute("GRANT USAGE ON SCHEMA jobledger TO jl_worker_role")
        admin.execute(
            "GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA jobledger TO jl_worker_role"
        )
        url = pg_url.replace("postgresql://postgres@", "postgresql://jl_worker_role@")
        with jobledger.open_store(url, listen=True) as store:
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
            assert store.schema_info().schema_version == 2
    finally:
        admin.execute("DROP OWNED BY jl_worker_role CASCADE")
        admin.execute("DROP ROLE IF EXISTS jl_worker_role")
