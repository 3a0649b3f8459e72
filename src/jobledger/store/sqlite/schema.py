"""SQLite schema: what each version's catalog must be, and the SQLite side of migrating.

Version 1 is the reference implementation's schema, byte for byte (its DDL, checksum and the
``sqlite_master`` fingerprint), so files written by the reference open here unchanged (and are
upgraded). Later versions are jobledger's own rungs of the shared ladder
(:mod:`jobledger.store.migrations`, which owns the flow and the history rule); this module owns
only the SQLite facts: table shapes, fingerprints, the verification queries, the backup copy,
and how a write transaction for DDL is opened (``BEGIN IMMEDIATE`` with foreign keys off, since
a rebuild drops a table that others point at, and ``foreign_key_check`` before the commit).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ...errors import SchemaCorrupt, SchemaUnknown, StorageUnavailable
from ...models import MigrationRecord, SchemaInfo, VerifyCheck, VerifyReport
from .. import migrations as ladder
from ..migrations import Migration, SchemaOutcome
from .connection import SQLiteConnection, storage_failure
from .shapes import COLUMNS, INDEXES
from .shared_file import OWN_NAMES, OWN_TABLES, is_own

__all__ = [
    "APPLICATION_ID",
    "LATEST_VERSION",
    "MIGRATIONS",
    "SQLiteSchema",
    "ensure_schema",
    "expected_columns",
    "read_schema_info",
    "schema_fingerprint",
]

APPLICATION_ID = 0x4343534B  # "CCSK", shared with the reference so files stay interchangeable

MIGRATIONS: tuple[Migration, ...] = ladder.load_migrations(
    Path(__file__).with_name("migrations"),
    fingerprints={
        1: "cf244f675ac7430683f67046b57524eb6c14baa45d6463ed3f704be898fec887",
        2: "6d6e4b07ca8d764336af520e466464900855f58eb4967cbce52e004d346e7864",
        3: "748d3eb8a9fc57b204fd29342f3c6037e4ea9619aa7c2b664ed4526959856148",
        4: "1e895b44dc93ec723cace9c031358a427fa817a6632f9f0c17b57aa1284fc510",
        5: "3c9dd9ce693010b110b8560563c58b8c7071592be1b594ead48a380fa85e2827",
    },
    tables={version: tuple(columns) for version, columns in COLUMNS.items()},
)
LATEST_VERSION = MIGRATIONS[-1].version


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


def schema_fingerprint(conn: sqlite3.Connection, *, shared: bool = False) -> str:
    """SHA-256 of the normalized ``sqlite_master`` catalog, computed as the reference does;
    ``shared``: of jobledger's part of it only (``shared_file.py``)."""
    rows = (
        _plain(conn)
        .execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master "
            "WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
        )
        .fetchall()
    )
    if any(not isinstance(value, str | None) for row in rows for value in row):
        # Only a damaged catalog holds anything but text here (a flipped type bit).
        raise SchemaCorrupt("Scheduler database could not be opened or verified")
    if shared:
        rows = [row for row in rows if is_own(row[1], row[2])]
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


def _user_tables(conn: sqlite3.Connection, *, shared: bool = False) -> list[str]:
    """The tables in the file (``shared``: jobledger's tables among them)."""
    rows = (
        _plain(conn)
        .execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "ORDER BY name"
        )
        .fetchall()
    )
    return [row[0] for row in rows if not shared or row[0] in OWN_TABLES]


def quick_check(conn: sqlite3.Connection, *, full: bool = False) -> list[str]:
    """SQLite's page-level check (``integrity_check`` when ``full``): ``["ok"]`` when sound."""
    pragma = "integrity_check(100)" if full else "quick_check(100)"
    try:
        return [str(row[0]) for row in _plain(conn).execute(f"PRAGMA {pragma}").fetchall()]
    except sqlite3.Error as exc:
        raise SchemaCorrupt("Scheduler database integrity check could not run") from exc


def broken_foreign_keys(conn: sqlite3.Connection) -> int:
    return len(_plain(conn).execute("PRAGMA foreign_key_check").fetchall())


def _require_sound(conn: sqlite3.Connection) -> None:
    result = quick_check(conn)
    if result != ["ok"]:
        raise SchemaCorrupt(
            "Scheduler database failed SQLite quick_check", details={"result": result[:10]}
        )


def _verify_catalog(conn: sqlite3.Connection, migration: Migration, *, shared: bool) -> None:
    """Refuse anything that is not exactly ``migration``'s schema (reference rules, in order);
    ``shared``: in jobledger's part of the catalog (``shared_file.py``)."""
    tables = _user_tables(conn, shared=shared)
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
    columns = COLUMNS[migration.version]
    for table in migration.tables:
        actual = [
            [row[1], str(row[2] or "").upper(), row[3], row[5]]
            for row in _plain(conn).execute(f"PRAGMA table_info({json.dumps(table)})").fetchall()
        ]
        expected = [list(column) for column in columns[table]]
        if actual != expected:
            raise SchemaCorrupt(
                f"Scheduler table shape is invalid: {table}",
                details={"expected": expected, "actual": actual},
            )
    fingerprint = schema_fingerprint(conn, shared=shared)
    if fingerprint != migration.fingerprint:
        raise SchemaCorrupt(
            f"Scheduler sqlite_master catalog does not match v{migration.version}",
            details={"expected": migration.fingerprint, "actual": fingerprint},
        )
    indexes = [
        row[0]
        for row in _plain(conn)
        .execute(
            "SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' "
            "AND (name LIKE 'scheduler_%' OR name LIKE 'jobledger_%') ORDER BY name"
        )
        .fetchall()
        if not shared or is_own(row[0], row[1])
    ]
    expected_indexes = sorted(INDEXES[migration.version])
    if indexes != expected_indexes:
        raise SchemaCorrupt(
            f"Scheduler indexes do not match v{migration.version}",
            details={"expected": expected_indexes, "actual": indexes},
        )


def _history(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    try:
        rows = (
            _plain(conn)
            .execute("SELECT version, name, checksum FROM migrations ORDER BY version")
            .fetchall()
        )
    except sqlite3.Error as exc:
        raise SchemaCorrupt("Scheduler migration history could not be read") from exc
    return [{"version": r[0], "name": r[1], "checksum": r[2]} for r in rows]


class SQLiteSchema:
    """The :class:`~jobledger.store.migrations.SchemaDialect` of one SQLite connection."""

    migrations = MIGRATIONS

    def __init__(self, connection: SQLiteConnection, *, now: int, shared: bool = False) -> None:
        self._connection = connection
        self._conn = connection.raw
        self._now = now
        self._shared = shared

    def read_history(self) -> list[dict[str, Any]] | None:
        # Reading the catalog is cheap; a file that is not a database fails here (as corrupt).
        try:
            tables = _user_tables(self._conn, shared=self._shared)
            clashes = _name_clashes(self._conn) if self._shared and not tables else []
        except sqlite3.DatabaseError as exc:
            # A file system that refuses the file (read-only, full, failing) is not corruption.
            failure = storage_failure(exc, phase="open", commit_state="not_committed")
            if isinstance(failure, StorageUnavailable):
                raise failure from None
            raise SchemaCorrupt("Scheduler database could not be opened or verified") from exc
        except UnicodeDecodeError as exc:  # a damaged catalog: names that are not UTF-8
            raise SchemaCorrupt("Scheduler database could not be opened or verified") from exc
        if clashes:
            raise SchemaCorrupt(
                "The application's own objects use names jobledger needs in a shared file",
                details={"names": clashes[:10]},
            )
        if not tables:
            return None
        if "migrations" not in tables:
            if self._shared:
                raise SchemaCorrupt(
                    "The application's own tables use names jobledger needs in a shared file",
                    details={"names": tables[:10]},
                )
            raise SchemaUnknown(
                "Refusing a non-empty database without scheduler migration history",
                details={"tables": tables},
            )
        return _history(self._conn)

    def verify(
        self, version: int, *, full: bool, history: Sequence[Mapping[str, Any]] | None = None
    ) -> None:
        # One read snapshot for every check, so a concurrent upgrade cannot make the file look
        # half-changed. The reference's order: quick_check, the catalog (tables, identity,
        # shapes, fingerprint, indexes), the history, foreign keys.
        conn = self._conn
        conn.execute("BEGIN")
        try:
            if full:
                _require_sound(conn)
            _verify_catalog(conn, MIGRATIONS[version - 1], shared=self._shared)
            if history is not None:
                ladder.known_version(history, MIGRATIONS)
            if full:
                broken = broken_foreign_keys(conn)
                if broken:
                    raise SchemaCorrupt(
                        "Scheduler database contains broken foreign keys",
                        details={"count": broken},
                    )
                bad = ladder.bad_authorities(_stored_authorities(conn))
                if bad:
                    raise SchemaCorrupt(
                        "Scheduler database holds authorities that are not valid envelopes",
                        details={"count": len(bad), "ids": bad[:10]},
                    )
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")

    def backup(self, version: int) -> Path | None:
        """Copy a file database before upgrading it; the copy is private like the original."""
        if self._connection.is_memory:
            return None
        source = Path(self._connection.target)
        candidate = source.with_name(f"{source.name}.v{version}.bak")
        counter = 1
        while True:
            try:
                flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW
                descriptor = os.open(candidate, flags, 0o600)
            except FileExistsError:  # taken, possibly by a process upgrading the same file now
                candidate = source.with_name(f"{source.name}.v{version}.{counter}.bak")
                counter += 1
                continue
            break
        os.close(descriptor)
        destination = sqlite3.connect(candidate)
        try:
            self._conn.backup(destination)
        finally:
            destination.close()
        return candidate

    def upgrade(self, apply: Callable[[int | None], int | None]) -> int | None:
        conn = self._conn
        # A rebuild drops a table other tables point at: foreign keys must be off for the
        # transaction (the pragma is a no-op inside one), and are checked before the commit.
        conn.execute("PRAGMA foreign_keys = OFF")
        try:

            def body(c: sqlite3.Connection) -> int | None:
                history = self.read_history()
                current = None if history is None else ladder.known_version(history, MIGRATIONS)
                reached = apply(current)
                if reached is None:
                    return None
                if current is None:
                    _plain(c).execute(f"PRAGMA application_id = {APPLICATION_ID}")
                _plain(c).execute(f"PRAGMA user_version = {reached}")
                if broken_foreign_keys(c):
                    raise SchemaCorrupt("A migration left broken foreign keys; nothing was changed")
                _verify_catalog(c, MIGRATIONS[reached - 1], shared=self._shared)
                return reached

            return self._connection.write(body)
        finally:
            conn.execute("PRAGMA foreign_keys = ON")

    def apply_migration(self, migration: Migration) -> None:
        for statement in _statements(migration.ddl):
            _plain(self._conn).execute(statement)
        _plain(self._conn).execute(
            "INSERT INTO migrations (version, name, checksum, applied_at) VALUES (?, ?, ?, ?)",
            (migration.version, migration.name, migration.checksum, self._now),
        )


def ensure_schema(
    connection: SQLiteConnection, *, now: int, migrate: bool, shared: bool = False
) -> SchemaOutcome:
    """Create, verify or upgrade the schema (see :func:`jobledger.store.migrations.ensure_schema`).

    Refusals (``SCHEDULER_SCHEMA_*``, ``SCHEDULER_MIGRATION_REQUIRED``) happen before any write,
    so a refused database is left exactly as it was. ``shared``: the file may hold the
    application's own objects too (``shared_file.py``).
    """
    return ladder.ensure_schema(SQLiteSchema(connection, now=now, shared=shared), migrate=migrate)


def _name_clashes(conn: sqlite3.Connection) -> list[str]:
    """Objects of a file jobledger has not initialised yet that have jobledger's names."""
    rows = _plain(conn).execute("SELECT name FROM sqlite_master ORDER BY name").fetchall()
    return [row[0] for row in rows if row[0] in OWN_NAMES]


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


def _stored_authorities(conn: sqlite3.Connection) -> Iterator[tuple[str, object, object]]:
    # From v4 on, occurrences point at jobledger_authorities (each envelope stored once).
    tables: tuple[tuple[str, str], ...] = (("jobs", "job_id"), ("occurrences", "occurrence_id"))
    if "jobledger_authorities" in _user_tables(conn):
        tables = (("jobs", "job_id"), ("jobledger_authorities", "authority_id"))
    for table, key in tables:
        for row in _plain(conn).execute(f"SELECT {key}, authority_json FROM {table}"):
            yield table, row[0], row[1]


def verify_database(conn: sqlite3.Connection, *, shared: bool = False) -> VerifyReport:
    """Every O(size) check, for :meth:`~jobledger.Store.verify` (the open runs only the O(1)
    catalog checks): SQLite's ``integrity_check``, foreign keys, the catalog of the newest
    version, and that every stored authority is a valid envelope."""
    checks: list[VerifyCheck] = []
    result = quick_check(conn, full=True)
    checks.append(
        VerifyCheck(
            "integrity_check",
            result == ["ok"],
            None if result == ["ok"] else {"result": result[:10]},
        )
    )
    broken = broken_foreign_keys(conn)
    checks.append(
        VerifyCheck("foreign_keys", broken == 0, None if not broken else {"count": broken})
    )
    checks += ladder.schema_and_authority_checks(
        lambda: _verify_catalog(conn, MIGRATIONS[-1], shared=shared), _stored_authorities(conn)
    )
    return VerifyReport(tuple(checks))


def expected_columns(version: int) -> dict[str, Any]:
    """The table shapes of a schema version (for tests and diagnostics)."""
    return {t: [list(c) for c in cols] for t, cols in COLUMNS[version].items()}
