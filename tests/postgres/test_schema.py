"""Schema creation, verification on every open, refusals that change nothing, and upgrades."""

from __future__ import annotations

import threading
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
]
OLD_APPLIED_AT = 1_600_000_000_000


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
    """Two jobs (one disabled, one in a workspace), their occurrences, events and, on v2, a
    requeue record, written with plain SQL in the old schema."""
    in_workspace = jobledger.canonical_json(
        jobledger.normalize_authority({**AUTHORITY, "workspaceId": "ws-1"})
    )
    plain = jobledger.canonical_json(jobledger.normalize_authority(AUTHORITY))
    ids = {}
    with admin.transaction():
        admin.execute(f"SET LOCAL search_path TO {schema}")
        admin.execute(
            "INSERT INTO jobs VALUES ('j', 'k', '{}', 'null', %s, 1, 1, 3, 5, 5)", (in_workspace,)
        )
        admin.execute(
            "INSERT INTO jobs VALUES ('off', 'sms', '{}', 'null', %s, 0, 2, 3, 5, 6)", (plain,)
        )
        for job_id, status, attempt, settled in (
            ("j", "queued", 0, None),
            ("j", "dead_letter", 1, 7),
            ("off", "queued", 0, None),
        ):
            occurrence_id, key = jobledger.derive_occurrence_identity(
                job_id=job_id, job_revision=1, scheduled_for=attempt, trigger_key=status
            )
            ids[(job_id, status)] = occurrence_id
            admin.execute(
                "INSERT INTO occurrences VALUES (%s, %s, 1, %s, %s, 0, 0, %s, %s, 3, %s, NULL, "
                "NULL, %s, 'null', NULL, NULL, 5, 5, %s)",
                (
                    occurrence_id,
                    job_id,
                    key,
                    status,
                    status,
                    attempt,
                    attempt,
                    in_workspace if job_id == "j" else plain,
                    settled,
                ),
            )
            admin.execute(
                "INSERT INTO events (job_id, occurrence_id, event_type, occurred_at, data_json) "
                "VALUES (%s, %s, 'occurrence_enqueued', 5, '{}')",
                (job_id, occurrence_id),
            )
        if version >= 2:
            admin.execute(
                "INSERT INTO jobledger_requeues (occurrence_id, job_id, expected_fence, attempt, "
                "previous_max_attempts, max_attempts, reason, actor, requested_at) "
                "VALUES (%s, 'j', 1, 1, 1, 3, 'fixed', 'ops', 6)",
                (ids[("j", "dead_letter")],),
            )
    return {
        "ids": ids,
        "derived": {
            ids[("j", "queued")]: ("k", "ws-1", 1),
            ids[("j", "dead_letter")]: ("k", "ws-1", 1),
            ids[("off", "queued")]: ("sms", None, 0),
        },
    }


def _table(admin, schema: str, table: str, order: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = admin.execute(
        f"SELECT * FROM {schema}.{table} ORDER BY {order}"
    ).fetchall()
    return rows


def test_a_fresh_schema_gets_every_migration(open_pg, admin, clock):
    store = open_pg(schema="fresh_one")
    info = store.schema_info()
    assert info.application_id == 0x4343534B
    assert info.schema_version == pg_schema.LATEST_VERSION == ladder.LATEST_VERSION == 3
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
        "jobledger_audit",
        "jobledger_requeues",
        "jobledger_schedules",
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
        "jobledger_occurrences_status",
        "jobledger_occurrences_kind",
        "jobledger_schedules_due",
    } <= names
    assert "scheduler_occurrences_claim" not in names  # replaced by the per-kind ready index
    assert _snapshot(admin, "fresh_one")[0] == pg_schema.MIGRATIONS[-1].fingerprint
    assert store.verify().ok
    assert [c.name for c in store.verify().checks] == ["schema", "stored_authority"]


def test_the_ladder_is_the_shared_one():
    assert [(m.version, m.name) for m in pg_schema.MIGRATIONS] == LADDER
    assert len({m.fingerprint for m in pg_schema.MIGRATIONS}) == 3
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
            "UPDATE jobledger.migrations SET checksum = 'x' WHERE version = 3",
            "SCHEDULER_SCHEMA_UNKNOWN",
        ),
        # the history then says v2, but the catalog is v3's
        ("DELETE FROM jobledger.migrations WHERE version = 3", "SCHEDULER_SCHEMA_UNKNOWN"),
        (
            "INSERT INTO jobledger.migrations VALUES (4, 'from-the-future', 'x', 0)",
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


@pytest.mark.parametrize("exists", [True, False], ids=["empty-schema", "absent-schema"])
def test_an_empty_or_absent_schema_is_created_only_with_migrate(pg_url, open_pg, admin, exists):
    if exists:
        admin.execute("CREATE SCHEMA prepared_by_dba")
    with pytest.raises(MigrationRequired) as refused:
        jobledger.open_store(pg_url, schema="prepared_by_dba", listen=False, migrate=False)
    assert refused.value.code == "SCHEDULER_MIGRATION_REQUIRED"
    assert refused.value.details == {"schemaVersion": 0, "requiredVersion": 3}
    present = admin.execute(
        "SELECT COUNT(*) AS n FROM pg_namespace WHERE nspname = 'prepared_by_dba'"
    ).fetchone()
    assert present == {"n": int(exists)}  # not created by the refused open
    if exists:
        assert _snapshot(admin, "prepared_by_dba")[1] == []

    store = open_pg(schema="prepared_by_dba")
    assert store.schema_info().schema_version == 3
    assert _snapshot(admin, "prepared_by_dba")[0] == pg_schema.MIGRATIONS[-1].fingerprint


@pytest.mark.parametrize("version", [1, 2])
def test_an_old_schema_is_upgraded_to_v3_in_place(pg_url, admin, open_pg, clock, version):
    _apply(admin, "old", version)
    made = _old_rows(admin, "old", version)
    assert _snapshot(admin, "old")[0] == pg_schema.MIGRATIONS[version - 1].fingerprint
    jobs = _table(admin, "old", "jobs", "job_id")
    events = _table(admin, "old", "events", "event_id")
    occurrences = _table(admin, "old", "occurrences", "occurrence_id")
    requeues = _table(admin, "old", "jobledger_requeues", "requeue_id") if version == 2 else []

    before = _snapshot(admin, "old")
    with pytest.raises(MigrationRequired) as refused:
        jobledger.open_store(pg_url, schema="old", listen=False, migrate=False)
    assert refused.value.details == {"schemaVersion": version, "requiredVersion": 3}
    assert _snapshot(admin, "old") == before

    store = open_pg(schema="old")
    info = store.schema_info()
    assert info.schema_version == 3
    assert [(m.version, m.name) for m in info.migrations] == LADDER
    assert [m.checksum for m in info.migrations] == [m.checksum for m in pg_schema.MIGRATIONS]
    assert [m.applied_at for m in info.migrations] == [OLD_APPLIED_AT] * version + [clock()] * (
        3 - version
    )
    assert _snapshot(admin, "old")[0] == pg_schema.MIGRATIONS[-1].fingerprint

    # every row kept; occurrences gained what v3 copies from their job
    assert _table(admin, "old", "jobs", "job_id") == jobs
    assert _table(admin, "old", "events", "event_id") == events
    if version == 2:
        assert _table(admin, "old", "jobledger_requeues", "requeue_id") == requeues
    upgraded = _table(admin, "old", "occurrences", "occurrence_id")
    derived = ("kind", "workspace_id", "runnable")
    assert [{k: v for k, v in row.items() if k not in derived} for row in upgraded] == occurrences
    assert {row["occurrence_id"]: tuple(row[k] for k in derived) for row in upgraded} == made[
        "derived"
    ]
    assert store.verify().ok

    # and it works: the disabled job's row is not claimable, a workspace claim finds the other
    assert store.claim_next(owner_id="w", lease_ms=1000, job_kind="sms") is None
    claimed = store.claim_next(owner_id="w", lease_ms=1000, workspace_id="ws-1")
    assert claimed is not None
    assert (claimed.id, claimed.kind) == (made["ids"][("j", "queued")], "k")
    cancelled = store.cancel_occurrence(
        occurrence_id=made["ids"][("off", "queued")], actor="ops", reason="gone"
    )
    assert cancelled.status == "cancelled"


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
    ]


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


@pytest.mark.parametrize("failing", [2, 3])
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
    assert [r["version"] for r in rows] == [1, 2, 3]


@pytest.mark.parametrize("version", [1, 2])
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
        3 - version
    )
    assert _snapshot(admin, "racy_old")[0] == pg_schema.MIGRATIONS[-1].fingerprint
    count = admin.execute("SELECT COUNT(*) AS n FROM racy_old.occurrences").fetchone()
    assert count == {"n": 3}
    assert errors == []


@pytest.mark.parametrize("version", [1, 2])
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
        assert store.schema_info().schema_version == 3
        # This open reports what it found (the old version) and that another did the work.
        outcome = store.schema_outcome
        assert (outcome.found, outcome.version, outcome.upgraded_from) == (version, 3, None)
        assert outcome.by_another_process and not outcome.created


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
    """No CREATE on the schema, no ownership: table privileges on every v3 table suffice.
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
            assert store.schema_info().schema_version == 3
    finally:
        admin.execute("DROP OWNED BY jl_worker_role CASCADE")
        admin.execute("DROP ROLE IF EXISTS jl_worker_role")
