"""PostgreSQL schema: the migration ladder, verification on every open, and forward upgrades.

The same rungs as the SQLite store (:mod:`jobledger.store.migrations` owns the ladder, the one
history rule and the flow), each a checksummed DDL file in ``migrations/``, recorded in the
``migrations`` table of the store's own schema (default ``jobledger``). Every open verifies,
before anything is written:

1. the schema holds exactly the tables of the version its migration history claims (its
   highest rung), with the expected columns;
2. a fingerprint of the catalog — every relation, column type/nullability/default/identity,
   constraint definition, index definition, trigger, rule, policy, function and type in the
   schema — equals the constant recorded for that version;
3. the migration history is a known prefix of the ladder (names and checksums).

That is the reference's order (SPEC §4, the catalog before the history), as on SQLite.

A mismatch refuses the schema (``SCHEDULER_SCHEMA_UNKNOWN`` for a history or table set jobledger
does not know, ``SCHEDULER_SCHEMA_CORRUPT`` for a damaged one) without modifying it. Creating or
upgrading takes a transaction-scoped advisory lock, re-inspects, applies the DDL and verifies the
result *before* committing: PostgreSQL DDL is transactional, so a failed upgrade leaves nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ...errors import SchemaCorrupt, SchemaUnknown
from ...models import MigrationRecord, SchemaInfo, VerifyReport
from .. import migrations as ladder
from ..migrations import Migration, SchemaOutcome
from .connection import PgConnection, begin_sql, execute_begin, rollback_quietly

__all__ = [
    "APPLICATION_ID",
    "LATEST_VERSION",
    "MIGRATIONS",
    "PostgresSchema",
    "catalog_fingerprint",
    "ensure_schema",
    "read_schema_info",
]

APPLICATION_ID = 0x4343534B  # "CCSK", the same identity the SQLite store records

# (column, information_schema data_type, nullable) per table, in column order.
_T, _B, _I, _S = "text", "bigint", "integer", "smallint"
_V1_COLUMNS: dict[str, tuple[tuple[str, str, bool], ...]] = {
    "migrations": (
        ("version", _I, False),
        ("name", _T, False),
        ("checksum", _T, False),
        ("applied_at", _B, False),
    ),
    "jobs": (
        ("job_id", _T, False),
        ("kind", _T, False),
        ("trigger_json", _T, False),
        ("payload_json", _T, False),
        ("authority_json", _T, False),
        ("enabled", _S, False),
        ("revision", _B, False),
        ("max_attempts", _I, False),
        ("created_at", _B, False),
        ("updated_at", _B, False),
    ),
    "occurrences": (
        ("occurrence_id", _T, False),
        ("job_id", _T, False),
        ("job_revision", _B, False),
        ("idempotency_key", _T, False),
        ("trigger_key", _T, False),
        ("scheduled_for", _B, False),
        ("available_at", _B, False),
        ("status", _T, False),
        ("attempt", _I, False),
        ("max_attempts", _I, False),
        ("fence", _B, False),
        ("lease_owner", _T, True),
        ("lease_expires_at", _B, True),
        ("authority_json", _T, False),
        ("payload_json", _T, False),
        ("last_error_json", _T, True),
        ("result_json", _T, True),
        ("created_at", _B, False),
        ("updated_at", _B, False),
        ("settled_at", _B, True),
    ),
    "events": (
        ("event_id", _B, False),
        ("job_id", _T, False),
        ("occurrence_id", _T, True),
        ("event_type", _T, False),
        ("occurred_at", _B, False),
        ("owner_id", _T, True),
        ("fence", _B, True),
        ("data_json", _T, False),
    ),
}
_V2_COLUMNS = {
    **_V1_COLUMNS,
    "jobledger_requeues": (
        ("requeue_id", _B, False),
        ("occurrence_id", _T, False),
        ("job_id", _T, False),
        ("expected_fence", _B, False),
        ("attempt", _I, False),
        ("previous_max_attempts", _I, False),
        ("max_attempts", _I, False),
        ("previous_error_json", _T, True),
        ("reason", _T, False),
        ("actor", _T, False),
        ("requested_at", _B, False),
    ),
}
_V3_COLUMNS = {
    **_V2_COLUMNS,
    "occurrences": (
        *_V1_COLUMNS["occurrences"],
        ("kind", _T, False),
        ("workspace_id", _T, True),
        ("runnable", _S, False),
    ),
    "jobledger_schedules": (
        ("job_id", _T, False),
        ("job_revision", _B, False),
        ("planned_through", _B, False),
        ("next_due_at", _B, True),
        ("last_slot", _B, True),
        ("skips_json", _T, False),
        ("updated_at", _B, False),
    ),
    "jobledger_workers": (
        ("worker_id", _T, False),
        ("hostname", _T, False),
        ("pid", _B, False),
        ("started_at", _B, False),
        ("last_seen_at", _B, False),
        ("stopped_at", _B, True),
        ("info_json", _T, False),
    ),
    "jobledger_audit": (
        ("audit_id", _B, False),
        ("occurred_at", _B, False),
        ("action", _T, False),
        ("actor", _T, False),
        ("subject", _T, True),
        ("data_json", _T, False),
    ),
    "jobledger_throughput": (
        ("minute", _B, False),
        ("kind", _T, False),
        ("owner_id", _T, False),
        ("succeeded", _B, False),
        ("retried", _B, False),
        ("dead_lettered", _B, False),
    ),
}
_V4_COLUMNS = {
    **_V3_COLUMNS,
    "jobs": (
        *_V1_COLUMNS["jobs"],
        ("queue", _T, False),
        ("priority", _S, False),
        ("on_lost_lease", _T, False),
        ("run_revision", _B, False),
        ("authority_id", _B, True),
    ),
    "occurrences": (
        *(
            column
            for column in _V3_COLUMNS["occurrences"]
            if column[0] not in ("idempotency_key", "authority_json")
        ),
        ("seq", _B, False),
        ("authority_id", _B, False),
        ("queue", _T, False),
        ("priority", _S, False),
        ("partition_key", _T, True),
        ("gate", _S, False),
        ("adjudicate", _S, False),
        ("snoozes", _I, False),
        ("pending_parents", _I, False),
        ("on_parent_failure", _T, True),
        ("result_read_at", _B, True),
        ("trace_json", _T, True),
    ),
    "jobledger_authorities": (
        ("authority_id", _B, False),
        ("digest", _T, False),
        ("authority_json", _T, False),
    ),
    "jobledger_keys": (
        ("job_id", _T, False),
        ("trigger_key", _T, False),
        ("occurrence_id", _T, False),
    ),
    "jobledger_queues": (
        ("name", _T, False),
        ("concurrency", _I, True),
        ("worker_concurrency", _I, True),
        ("partition_concurrency", _I, True),
        ("rate_limit", _I, True),
        ("rate_per_ms", _B, True),
        ("partition_rate_limit", _I, True),
        ("partition_rate_per_ms", _B, True),
        ("paused", _S, False),
        ("paused_reason", _T, True),
        ("paused_at", _B, True),
        ("paused_by", _T, True),
        ("revision", _B, False),
        ("created_at", _B, False),
        ("updated_at", _B, False),
    ),
    "jobledger_rate_windows": (
        ("queue", _T, False),
        ("partition_key", _T, False),
        ("window_start", _B, False),
        ("claims", _I, False),
        ("wake_at", _B, True),
    ),
    "jobledger_dependencies": (
        ("parent_seq", _B, False),
        ("child_seq", _B, False),
    ),
    "jobledger_adjudications": (
        ("occurrence_id", _T, False),
        ("job_id", _T, False),
        ("request_id", _T, False),
        ("decision", _T, False),
        ("evidence_digest", _T, False),
        ("expected_attempt", _I, False),
        ("expected_fence", _B, False),
        ("reason", _T, False),
        ("actor", _T, False),
        ("status", _T, False),
        ("created_at", _B, False),
        ("applied_at", _B, True),
        ("retry_outcome_json", _T, True),
        ("retry_settled_at", _B, True),
    ),
    "jobledger_store": (
        ("store_id", _T, False),
        ("created_at", _B, False),
    ),
    "jobledger_liveness": (
        ("owner_id", _T, False),
        ("generation", _B, False),
        ("taken_at", _B, False),
    ),
}
# v5: each column's reason is in the migration's sections (docs/schema.md, "Version 5").
_V5_ANNOTATIONS = (("tags_json", _T, True), ("meta_json", _T, True), ("progress_json", _T, True))
_V5_COLUMNS = {
    **_V4_COLUMNS,
    "occurrences": (*_V4_COLUMNS["occurrences"], ("started_at", _B, True), *_V5_ANNOTATIONS),
    "jobledger_tags": (("tag", _T, False), ("seq", _B, False)),
    "jobledger_requeues": (*_V4_COLUMNS["jobledger_requeues"], ("revived_children", _S, False)),
    "jobledger_queues": (
        *_V4_COLUMNS["jobledger_queues"],
        ("declared_json", _T, True),
        ("operator_set_json", _T, False),
    ),
    "jobs": (*_V4_COLUMNS["jobs"], ("declared_json", _T, True), ("operator_set_json", _T, False)),
    "jobledger_adjudications": (*_V4_COLUMNS["jobledger_adjudications"], ("started_at", _B, True)),
}
_COLUMNS = {1: _V1_COLUMNS, 2: _V2_COLUMNS, 3: _V3_COLUMNS, 4: _V4_COLUMNS, 5: _V5_COLUMNS}

MIGRATIONS: tuple[Migration, ...] = ladder.load_migrations(
    Path(__file__).with_name("migrations"),
    fingerprints={
        1: "294a2c5d7c18724374d3db0e17db819d5af733937e651f013a79d5b54165b20f",
        2: "fecd8b2a609b73a0a6f6f22cb28bc9456aa302334864afb7f80465e54ada2091",
        3: "aaf77f079bc136ec998713341cc70ee8fedefd4e1dede728bf867552becaedbf",
        4: "ad1da7c7476f5e8b54085e25def4fba9282e5b430d32a5c223d032e36d37c030",
        5: "1e8d96ca8a712ac8139de48a07780fdb2bf6a3261729b6a20fefb90ac7162c02",
    },
    tables={version: tuple(columns) for version, columns in _COLUMNS.items()},
)
LATEST_VERSION = MIGRATIONS[-1].version


# -- reading the catalog ----------------------------------------------------------------------

_RELATIONS = """
SELECT c.relname AS name, c.relkind::text AS kind, c.relrowsecurity AS rls,
       c.relpersistence::text AS persistence
FROM pg_class c WHERE c.relnamespace = %(nsp)s::regnamespace ORDER BY c.relname
"""
# A column's position among the table's live columns, not its attnum: a rung that drops a
# column (v4) leaves a gap in attnum that pg_dump/pg_restore closes, and a restored schema is
# the same schema.
_COLUMNS_SQL = """
SELECT c.relname AS rel,
       row_number() OVER (PARTITION BY c.relname ORDER BY a.attnum) AS num, a.attname AS name,
       format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS notnull,
       a.attidentity::text AS identity, a.attgenerated::text AS generated,
       pg_get_expr(d.adbin, d.adrelid) AS default_expr,
       (SELECT collname FROM pg_collation WHERE oid = a.attcollation) AS collation
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE c.relnamespace = %(nsp)s::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY c.relname, a.attnum
"""
_CONSTRAINTS = """
SELECT c.relname AS rel, k.conname AS name, k.contype::text AS type,
       pg_get_constraintdef(k.oid) AS definition, k.condeferrable AS deferrable,
       k.convalidated AS validated
FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
WHERE c.relnamespace = %(nsp)s::regnamespace ORDER BY c.relname, k.conname
"""
_INDEXES = """
SELECT indexname AS name, tablename AS rel, indexdef AS definition
FROM pg_indexes WHERE schemaname = %(nsp)s ORDER BY indexname
"""
_TRIGGERS = """
SELECT c.relname AS rel, t.tgname AS name, pg_get_triggerdef(t.oid) AS definition,
       t.tgenabled::text AS enabled
FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
WHERE c.relnamespace = %(nsp)s::regnamespace AND NOT t.tgisinternal
ORDER BY c.relname, t.tgname
"""
_RULES = """
SELECT tablename AS rel, rulename AS name, definition FROM pg_rules
WHERE schemaname = %(nsp)s ORDER BY tablename, rulename
"""
_POLICIES = """
SELECT tablename AS rel, policyname AS name, cmd, qual, with_check FROM pg_policies
WHERE schemaname = %(nsp)s ORDER BY tablename, policyname
"""
_FUNCTIONS = """
SELECT p.proname AS name, pg_get_function_identity_arguments(p.oid) AS args
FROM pg_proc p WHERE p.pronamespace = %(nsp)s::regnamespace ORDER BY 1, 2
"""
_TYPES = """
SELECT t.typname AS name, t.typtype::text AS type FROM pg_type t
WHERE t.typnamespace = %(nsp)s::regnamespace ORDER BY t.typname
"""


def _unqualify(text: Any, schema: str) -> Any:
    """Drop this schema's qualifier from catalog text, so a fingerprint is schema-independent."""
    if not isinstance(text, str):
        return text
    for prefix in (f'"{schema}".', f"{schema}."):
        for context in (" ON ", "REFERENCES ", " FROM ", "'"):
            text = text.replace(context + prefix, context)
    return text


def _rows(conn: PgConnection, sql: str, schema: str) -> list[dict[str, Any]]:
    return [
        {key: _unqualify(value, schema) for key, value in row.items()}
        for row in conn.execute(sql, {"nsp": schema}).fetchall()
    ]


def catalog(conn: PgConnection, schema: str) -> dict[str, list[dict[str, Any]]]:
    """Every catalog fact about ``schema`` that the fingerprint covers."""
    return {
        "relations": _rows(conn, _RELATIONS, schema),
        "columns": _rows(conn, _COLUMNS_SQL, schema),
        "constraints": _rows(conn, _CONSTRAINTS, schema),
        "indexes": _rows(conn, _INDEXES, schema),
        "triggers": _rows(conn, _TRIGGERS, schema),
        "rules": _rows(conn, _RULES, schema),
        "policies": _rows(conn, _POLICIES, schema),
        "functions": _rows(conn, _FUNCTIONS, schema),
        "types": _rows(conn, _TYPES, schema),
    }


def catalog_fingerprint(conn: PgConnection, schema: str) -> str:
    """SHA-256 of the schema's normalized catalog (see :func:`catalog`)."""
    text = json.dumps(catalog(conn, schema), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _schema_exists(conn: PgConnection, schema: str) -> bool:
    row = conn.execute(
        "SELECT 1 AS present FROM pg_namespace WHERE nspname = %(nsp)s", {"nsp": schema}
    ).fetchone()
    return row is not None


def _tables(conn: PgConnection, schema: str) -> list[str]:
    rows = conn.execute(
        "SELECT relname FROM pg_class WHERE relnamespace = %(nsp)s::regnamespace "
        "AND relkind IN ('r', 'p', 'v', 'm', 'f') ORDER BY relname",
        {"nsp": schema},
    ).fetchall()
    return [str(row["relname"]) for row in rows]


def _history(conn: PgConnection) -> list[dict[str, Any]]:
    try:
        rows = conn.execute(
            "SELECT version, name, checksum FROM migrations ORDER BY version"
        ).fetchall()
    except Exception as exc:
        raise SchemaCorrupt("Scheduler migration history could not be read") from exc
    return [dict(row) for row in rows]


def _read_history(conn: PgConnection, schema: str) -> list[dict[str, Any]] | None:
    """``None`` for an absent or empty schema; else its migration history."""
    if not _schema_exists(conn, schema):
        return None
    tables = _tables(conn, schema)
    if not tables and not _rows(conn, _RELATIONS, schema) and not _rows(conn, _TYPES, schema):
        return None
    if "migrations" not in tables:
        raise SchemaUnknown(
            "Refusing a non-empty schema without jobledger migration history",
            details={"schema": schema, "tables": tables},
        )
    return _history(conn)


def _verify(conn: PgConnection, schema: str, version: int) -> None:
    migration = MIGRATIONS[version - 1]
    tables = _tables(conn, schema)
    if tables != list(migration.tables):
        raise SchemaUnknown(
            "Scheduler schema has unknown or missing tables",
            details={"expected": list(migration.tables), "actual": tables},
        )
    rows = conn.execute(
        "SELECT table_name, column_name, data_type, is_nullable FROM information_schema.columns "
        "WHERE table_schema = %(nsp)s ORDER BY table_name, ordinal_position",
        {"nsp": schema},
    ).fetchall()
    for table, columns in _COLUMNS[version].items():
        actual = [
            [r["column_name"], r["data_type"], r["is_nullable"] == "YES"]
            for r in rows
            if r["table_name"] == table
        ]
        expected = [list(column) for column in columns]
        if actual != expected:
            raise SchemaCorrupt(
                f"Scheduler table shape is invalid: {table}",
                details={"expected": expected, "actual": actual},
            )
    fingerprint = catalog_fingerprint(conn, schema)
    if fingerprint != migration.fingerprint:
        raise SchemaCorrupt(
            f"Scheduler schema catalog does not match v{version} (an index, constraint, "
            "trigger or other object was changed, added or dropped)",
            details={"expected": migration.fingerprint, "actual": fingerprint},
        )


def _lock_key(schema: str) -> int:
    digest = hashlib.sha256(f"jobledger.schema:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresSchema:
    """The :class:`~jobledger.store.migrations.SchemaDialect` of one schema, on one autocommit
    connection. PostgreSQL DDL is transactional, so an upgrade that fails leaves nothing behind
    and no file copy is needed (``backup`` keeps none; use ``pg_dump`` for your own)."""

    migrations = MIGRATIONS

    def __init__(self, conn: PgConnection, *, schema: str, clock: Any) -> None:
        self._conn = conn
        self._schema = schema
        self._clock = clock
        self._db_now = 0

    def read_history(self) -> list[dict[str, Any]] | None:
        try:
            execute_begin(self._conn, begin_sql(self._schema, read_only=True))
            return _read_history(self._conn, self._schema)
        finally:
            rollback_quietly(self._conn)

    def verify(
        self, version: int, *, full: bool, history: Sequence[Mapping[str, Any]] | None = None
    ) -> None:
        lock = {"key": _lock_key(self._schema)}
        if full:
            # The O(size) checks read the rows of the version verified here: no upgrade may
            # commit in between (v4 drops a column they read). An upgrade holds this lock
            # exclusively. Taken before the snapshot (a session lock, outside the transaction):
            # an upgrade that committed while this waited is then seen by the catalog check,
            # and the flow looks again.
            self._conn.execute("SELECT pg_advisory_lock_shared(%(key)s)", lock)
        try:
            execute_begin(self._conn, begin_sql(self._schema, read_only=True))
            _verify(self._conn, self._schema, version)
            if history is not None:  # after the catalog: the reference's order (SPEC §4)
                ladder.known_version(history, MIGRATIONS)
            if full:
                bad = ladder.bad_authorities(_stored_authorities(self._conn))
                if bad:
                    raise SchemaCorrupt(
                        "Scheduler schema holds authorities that are not valid envelopes",
                        details={"count": len(bad), "ids": bad[:10]},
                    )
        finally:
            # A connection that is not idle after this is closed, and its session's lock with it.
            if rollback_quietly(self._conn) and full:
                self._conn.execute("SELECT pg_advisory_unlock_shared(%(key)s)", lock)

    def backup(self, version: int) -> Path | None:
        return None

    def upgrade(self, apply: Callable[[int | None], int | None]) -> int | None:
        conn = self._conn
        try:
            self._db_now = execute_begin(conn, begin_sql(self._schema, read_only=False))
            # Two processes opening a fresh or old schema at once: the second waits here, then
            # finds the work done.
            conn.execute("SELECT pg_advisory_xact_lock(%(key)s)", {"key": _lock_key(self._schema)})
            history = _read_history(conn, self._schema)
            current = None
            if history is not None:
                claimed = ladder.claimed_version(history, MIGRATIONS)
                if claimed is not None:  # the catalog before the history, as on open
                    _verify(conn, self._schema, claimed)
                current = ladder.known_version(history, MIGRATIONS)
            reached = apply(current)
            if reached is not None:
                _verify(conn, self._schema, reached)
            conn.execute("COMMIT")
            return reached
        finally:
            rollback_quietly(conn)

    def apply_migration(self, migration: Migration) -> None:
        conn = self._conn
        if migration.version == 1 and not _schema_exists(conn, self._schema):
            conn.execute(f'CREATE SCHEMA "{self._schema}"')
        conn.execute(migration.ddl)
        conn.execute(
            "INSERT INTO migrations (version, name, checksum, applied_at) "
            "VALUES (%(version)s, %(name)s, %(checksum)s, %(now)s)",
            {
                "version": migration.version,
                "name": migration.name,
                "checksum": migration.checksum,
                "now": self._db_now if self._clock is None else self._clock(),
            },
        )


def ensure_schema(conn: PgConnection, *, schema: str, clock: Any, migrate: bool) -> SchemaOutcome:
    """Create, verify or upgrade ``schema`` on ``conn`` (autocommit).

    ``clock`` is the injected clock or ``None`` (then ``applied_at`` is the database's time).
    """
    return ladder.ensure_schema(PostgresSchema(conn, schema=schema, clock=clock), migrate=migrate)


def _stored_authorities(conn: PgConnection) -> Iterator[tuple[str, object, object]]:
    # From v4 on, occurrences point at jobledger_authorities (each envelope stored once).
    tables: tuple[tuple[str, str], ...] = (("jobs", "job_id"), ("occurrences", "occurrence_id"))
    found = conn.execute(
        "SELECT to_regclass('jobledger_authorities') IS NOT NULL AS present"
    ).fetchone()
    if found is not None and found["present"]:
        tables = (("jobs", "job_id"), ("jobledger_authorities", "authority_id"))
    for table, key in tables:
        for row in conn.execute(f"SELECT {key} AS id, authority_json FROM {table}"):
            yield table, row["id"], row["authority_json"]


def verify_database(conn: PgConnection, schema: str) -> VerifyReport:
    """Every check for :meth:`~jobledger.Store.verify`: the newest catalog, and that every
    stored authority is a valid envelope (PostgreSQL itself enforces keys and constraints)."""
    checks = ladder.schema_and_authority_checks(
        lambda: _verify(conn, schema, LATEST_VERSION), _stored_authorities(conn)
    )
    return VerifyReport(tuple(checks))


def read_schema_info(conn: PgConnection) -> SchemaInfo:
    rows = conn.execute(
        "SELECT version, name, checksum, applied_at FROM migrations ORDER BY version"
    ).fetchall()
    records = tuple(
        MigrationRecord(int(r["version"]), r["name"], r["checksum"], int(r["applied_at"]))
        for r in rows
    )
    return SchemaInfo(
        application_id=APPLICATION_ID,
        schema_version=records[-1].version,
        migration=records[-1],
        migrations=records,
    )
