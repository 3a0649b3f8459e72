"""SQLite schema: the migration ladder, verification on every open, and forward upgrades.

Version 1 is the reference implementation's schema, byte for byte (its DDL, checksum and the
``sqlite_master`` fingerprint), so files written by the reference open here unchanged. Later
versions are jobledger's own forward migrations: checksummed, fingerprinted, applied in one
transaction after a backup of the file, never dropping data.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import MigrationRequired, SchemaCorrupt, SchemaUnknown
from ...models import MigrationRecord, SchemaInfo
from ..common import migration_checksum
from .connection import SQLiteConnection

__all__ = [
    "APPLICATION_ID",
    "LATEST_VERSION",
    "MIGRATIONS",
    "Migration",
    "ensure_schema",
    "read_schema_info",
    "schema_fingerprint",
]

APPLICATION_ID = 0x4343534B  # "CCSK", shared with the reference so files stay interchangeable
_MIGRATIONS_DIR = Path(__file__).with_name("migrations")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    ddl: str
    fingerprint: str  # of sqlite_master after applying every migration up to this one
    tables: tuple[str, ...]
    indexes: tuple[str, ...]
    columns: dict[str, tuple[tuple[str, str, int, int], ...]]

    @property
    def checksum(self) -> str:
        return migration_checksum(self.ddl)


def _ddl(file_name: str) -> str:
    return (_MIGRATIONS_DIR / file_name).read_text(encoding="utf-8")


_V1_COLUMNS: dict[str, tuple[tuple[str, str, int, int], ...]] = {
    "migrations": (
        ("version", "INTEGER", 1, 1),
        ("name", "TEXT", 1, 0),
        ("checksum", "TEXT", 1, 0),
        ("applied_at", "INTEGER", 1, 0),
    ),
    "jobs": (
        ("job_id", "TEXT", 1, 1),
        ("kind", "TEXT", 1, 0),
        ("trigger_json", "TEXT", 1, 0),
        ("payload_json", "TEXT", 1, 0),
        ("authority_json", "TEXT", 1, 0),
        ("enabled", "INTEGER", 1, 0),
        ("revision", "INTEGER", 1, 0),
        ("max_attempts", "INTEGER", 1, 0),
        ("created_at", "INTEGER", 1, 0),
        ("updated_at", "INTEGER", 1, 0),
    ),
    "occurrences": (
        ("occurrence_id", "TEXT", 1, 1),
        ("job_id", "TEXT", 1, 0),
        ("job_revision", "INTEGER", 1, 0),
        ("idempotency_key", "TEXT", 1, 0),
        ("trigger_key", "TEXT", 1, 0),
        ("scheduled_for", "INTEGER", 1, 0),
        ("available_at", "INTEGER", 1, 0),
        ("status", "TEXT", 1, 0),
        ("attempt", "INTEGER", 1, 0),
        ("max_attempts", "INTEGER", 1, 0),
        ("fence", "INTEGER", 1, 0),
        ("lease_owner", "TEXT", 0, 0),
        ("lease_expires_at", "INTEGER", 0, 0),
        ("authority_json", "TEXT", 1, 0),
        ("payload_json", "TEXT", 1, 0),
        ("last_error_json", "TEXT", 0, 0),
        ("result_json", "TEXT", 0, 0),
        ("created_at", "INTEGER", 1, 0),
        ("updated_at", "INTEGER", 1, 0),
        ("settled_at", "INTEGER", 0, 0),
    ),
    "events": (
        ("event_id", "INTEGER", 0, 1),
        ("job_id", "TEXT", 1, 0),
        ("occurrence_id", "TEXT", 0, 0),
        ("event_type", "TEXT", 1, 0),
        ("occurred_at", "INTEGER", 1, 0),
        ("owner_id", "TEXT", 0, 0),
        ("fence", "INTEGER", 0, 0),
        ("data_json", "TEXT", 1, 0),
    ),
}

_V2_COLUMNS = {
    **_V1_COLUMNS,
    "jobledger_requeues": (
        ("requeue_id", "INTEGER", 0, 1),
        ("occurrence_id", "TEXT", 1, 0),
        ("job_id", "TEXT", 1, 0),
        ("expected_fence", "INTEGER", 1, 0),
        ("attempt", "INTEGER", 1, 0),
        ("previous_max_attempts", "INTEGER", 1, 0),
        ("max_attempts", "INTEGER", 1, 0),
        ("previous_error_json", "TEXT", 0, 0),
        ("reason", "TEXT", 1, 0),
        ("actor", "TEXT", 1, 0),
        ("requested_at", "INTEGER", 1, 0),
    ),
}

_V1_INDEXES = (
    "scheduler_events_job",
    "scheduler_events_occurrence",
    "scheduler_occurrences_claim",
    "scheduler_occurrences_idempotency",
    "scheduler_occurrences_job",
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        version=1,
        name="scheduler-kernel-v1",
        ddl=_ddl("0001_scheduler-kernel-v1.sql"),
        fingerprint="cf244f675ac7430683f67046b57524eb6c14baa45d6463ed3f704be898fec887",
        tables=("events", "jobs", "migrations", "occurrences"),
        indexes=_V1_INDEXES,
        columns=_V1_COLUMNS,
    ),
    Migration(
        version=2,
        name="jobledger-requeue-v2",
        ddl=_ddl("0002_jobledger-requeue-v2.sql"),
        fingerprint="6d6e4b07ca8d764336af520e466464900855f58eb4967cbce52e004d346e7864",
        tables=("events", "jobledger_requeues", "jobs", "migrations", "occurrences"),
        indexes=("jobledger_requeues_occurrence", *_V1_INDEXES),
        columns=_V2_COLUMNS,
    ),
)
LATEST_VERSION = MIGRATIONS[-1].version
_BY_VERSION = {migration.version: migration for migration in MIGRATIONS}


def _plain(conn: sqlite3.Connection) -> sqlite3.Cursor:
    """A cursor returning tuples (the store's connection returns dict rows)."""
    cursor = conn.cursor()
    cursor.row_factory = None
    return cursor


def _statements(ddl: str) -> list[str]:
    """Split DDL into statements (executescript would COMMIT the surrounding transaction)."""
    statements: list[str] = []
    buffer = ""
    for line in ddl.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        raise ValueError("incomplete SQL statement in migration")
    return statements


def schema_fingerprint(conn: sqlite3.Connection) -> str:
    """SHA-256 of the normalized ``sqlite_master`` catalog, computed as the reference does."""
    rows = (
        _plain(conn)
        .execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master "
            "WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
        )
        .fetchall()
    )
    catalog = [
        {
            "type": row[0],
            "name": row[1],
            "tbl_name": row[2],
            "sql": re.sub(r"\s+", " ", row[3] or "").strip(),
        }
        for row in rows
    ]
    text = json.dumps(catalog, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _user_tables(conn: sqlite3.Connection) -> list[str]:
    rows = (
        _plain(conn)
        .execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "ORDER BY name"
        )
        .fetchall()
    )
    return [row[0] for row in rows]


def _quick_check(conn: sqlite3.Connection) -> None:
    try:
        rows = [row[0] for row in _plain(conn).execute("PRAGMA quick_check(1)").fetchall()]
    except sqlite3.Error as exc:
        raise SchemaCorrupt("Scheduler database integrity check could not run") from exc
    if rows != ["ok"]:
        raise SchemaCorrupt(
            "Scheduler database failed SQLite quick_check", details={"result": rows}
        )


def _verify(conn: sqlite3.Connection, migration: Migration) -> None:
    """Refuse anything that is not exactly ``migration``'s schema (reference rules, in order)."""
    _quick_check(conn)
    tables = _user_tables(conn)
    if tables != list(migration.tables):
        raise SchemaUnknown(
            "Scheduler database has unknown or missing tables",
            details={"expected": list(migration.tables), "actual": tables},
        )
    try:
        application_id = _plain(conn).execute("PRAGMA application_id").fetchone()[0]
        user_version = _plain(conn).execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.Error as exc:
        raise SchemaCorrupt("Scheduler schema metadata could not be read") from exc
    if application_id != APPLICATION_ID or user_version != migration.version:
        raise SchemaUnknown(
            "Scheduler schema version or application identity is unknown",
            details={"applicationId": application_id, "userVersion": user_version},
        )
    for table in migration.tables:
        actual = [
            [row[1], str(row[2] or "").upper(), row[3], row[5]]
            for row in _plain(conn).execute(f"PRAGMA table_info({json.dumps(table)})").fetchall()
        ]
        expected = [list(column) for column in migration.columns[table]]
        if actual != expected:
            raise SchemaCorrupt(
                f"Scheduler table shape is invalid: {table}",
                details={"expected": expected, "actual": actual},
            )
    fingerprint = schema_fingerprint(conn)
    if fingerprint != migration.fingerprint:
        raise SchemaCorrupt(
            f"Scheduler sqlite_master catalog does not match v{migration.version}",
            details={"expected": migration.fingerprint, "actual": fingerprint},
        )
    try:
        rows = (
            _plain(conn)
            .execute("SELECT version, name, checksum FROM migrations ORDER BY version")
            .fetchall()
        )
    except sqlite3.Error as exc:
        raise SchemaCorrupt("Scheduler migration history could not be read") from exc
    history = [{"version": r[0], "name": r[1], "checksum": r[2]} for r in rows]
    expected_history = [
        {"version": m.version, "name": m.name, "checksum": m.checksum}
        for m in MIGRATIONS
        if m.version <= migration.version
    ]
    if history != expected_history:
        raise SchemaUnknown(
            "Scheduler migration history is unknown", details={"migrations": history}
        )
    indexes = [
        row[0]
        for row in _plain(conn)
        .execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' "
            "AND (name LIKE 'scheduler_%' OR name LIKE 'jobledger_%') ORDER BY name"
        )
        .fetchall()
    ]
    if indexes != sorted(migration.indexes):
        raise SchemaCorrupt(
            f"Scheduler indexes do not match v{migration.version}",
            details={"expected": sorted(migration.indexes), "actual": indexes},
        )
    broken = _plain(conn).execute("PRAGMA foreign_key_check").fetchall()
    if broken:
        raise SchemaCorrupt(
            "Scheduler database contains broken foreign keys", details={"count": len(broken)}
        )


def _apply(conn: sqlite3.Connection, migrations: list[Migration], now: int) -> None:
    for migration in migrations:
        for statement in _statements(migration.ddl):
            _plain(conn).execute(statement)
        _plain(conn).execute(
            "INSERT INTO migrations (version, name, checksum, applied_at) VALUES (?, ?, ?, ?)",
            (migration.version, migration.name, migration.checksum, now),
        )
    _plain(conn).execute(f"PRAGMA user_version = {migrations[-1].version}")


def _backup(connection: SQLiteConnection, from_version: int) -> Path | None:
    """Copy a file database before upgrading it; the copy is private like the original."""
    if connection.is_memory:
        return None
    source = Path(connection.target)
    candidate = source.with_name(f"{source.name}.v{from_version}.bak")
    counter = 1
    while True:
        try:
            flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW
            descriptor = os.open(candidate, flags, 0o600)
        except FileExistsError:  # taken, possibly by a process upgrading the same file now
            candidate = source.with_name(f"{source.name}.v{from_version}.{counter}.bak")
            counter += 1
            continue
        break
    os.close(descriptor)
    destination = sqlite3.connect(candidate)
    try:
        connection.raw.backup(destination)
    finally:
        destination.close()
    return candidate


def ensure_schema(connection: SQLiteConnection, *, now: int, migrate: bool) -> Path | None:
    """Create, verify or upgrade the schema. Returns the backup path when an upgrade ran.

    Refusals (``SCHEDULER_SCHEMA_*``, ``SCHEDULER_MIGRATION_REQUIRED``) happen before any write,
    so a refused database is left exactly as it was.
    """
    conn = connection.raw
    _quick_check(conn)
    tables = _user_tables(conn)
    latest = MIGRATIONS[-1]
    if not tables:

        def create(c: sqlite3.Connection) -> None:
            if _user_tables(c):  # another process created it while we waited for the lock
                return
            _apply(c, list(MIGRATIONS), now)
            _plain(c).execute(f"PRAGMA application_id = {APPLICATION_ID}")

        connection.write(create)
        _verify(conn, latest)
        return None
    if "migrations" not in tables:
        raise SchemaUnknown(
            "Refusing a non-empty database without scheduler migration history",
            details={"tables": tables},
        )
    # Read the version, verify it and take the backup in one read transaction (one snapshot),
    # so another process upgrading the same file meanwhile cannot make it look damaged.
    conn.execute("BEGIN")
    try:
        version = _plain(conn).execute("PRAGMA user_version").fetchone()[0]
        upgrading = version in _BY_VERSION and version < latest.version
        backup = None
        if upgrading:
            _verify(conn, _BY_VERSION[version])
            if not migrate:
                raise MigrationRequired(
                    f"Scheduler database is at schema v{version}; this jobledger needs "
                    f"v{latest.version}. Open it with migrate=True (the default) to upgrade, "
                    "after a backup is taken automatically.",
                    details={"schemaVersion": version, "requiredVersion": latest.version},
                )
            backup = _backup(connection, version)
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")  # ends the read transaction; nothing was written
    if upgrading:

        def upgrade(c: sqlite3.Connection) -> bool:
            current = _plain(c).execute("PRAGMA user_version").fetchone()[0]
            if current != version:  # another process upgraded it while we waited
                return False
            _apply(c, [m for m in MIGRATIONS if m.version > version], now)
            return True

        upgraded = connection.write(upgrade)
        _verify(conn, latest)
        if not upgraded and backup is not None:
            backup.unlink(missing_ok=True)  # the process that upgraded kept its own backup
            backup = None
        return backup
    _verify(conn, latest)
    return None


def read_schema_info(conn: sqlite3.Connection) -> SchemaInfo:
    rows = (
        _plain(conn)
        .execute("SELECT version, name, checksum, applied_at FROM migrations ORDER BY version")
        .fetchall()
    )
    records = tuple(MigrationRecord(int(r[0]), r[1], r[2], int(r[3])) for r in rows)
    return SchemaInfo(
        application_id=int(_plain(conn).execute("PRAGMA application_id").fetchone()[0]),
        schema_version=int(_plain(conn).execute("PRAGMA user_version").fetchone()[0]),
        migration=records[-1],
        migrations=records,
    )


def expected_columns(version: int) -> dict[str, Any]:
    """The table shapes of a schema version (for tests and diagnostics)."""
    return {t: [list(c) for c in cols] for t, cols in _BY_VERSION[version].columns.items()}
