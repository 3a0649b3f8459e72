"""The one migration mechanism every store uses: the ladder, the history rule and the flow.

Each dialect keeps only its DDL (``store/<dialect>/migrations/000N_<name>.sql``), the catalog
fingerprint each version must have, and a :class:`SchemaDialect` that knows how to read, verify,
back up and upgrade *its* database. Everything else is decided here, once:

* **The ladder** — :data:`LADDER` numbers and names every version; both stores use the same
  numbers and names, and a migration's checksum is the SHA-256 of its trimmed DDL.
* **One history rule** — the ``migrations`` table must be exactly the first *N* rungs of the
  ladder (names and checksums), and *N* is the database's version. A version above the newest
  rung means the database was written by a newer jobledger (``SCHEDULER_SCHEMA_UNKNOWN``, "newer");
  anything else unknown is refused as unknown history. Nothing is ever written to a database
  whose history is not known.
* **The flow** — read the history (read-only) → verify the catalog of the version it claims,
  then the history itself → if it is older than the code: refuse (``migrate=False``) or take a
  backup, then in one write transaction under an exclusive lock re-read the history (another
  process may have upgraded it meanwhile), apply the missing rungs, record them, verify the
  newest catalog, commit.
* **The reference's order of checks** (SPEC §4): page check (before an upgrade), tables,
  identity, table shapes, catalog fingerprint, *then* the migration history, then the O(size)
  checks. The catalog checked is the one of the version the history *claims* (its highest
  rung); so a file whose catalog is damaged is ``SCHEDULER_SCHEMA_CORRUPT`` even when its
  history was tampered with too, as the reference answers; a history that claims no rung of
  the ladder (none, or a newer one) has no catalog to compare and is refused as unknown at once.

Verification on open is O(1) in the database size (catalog, shapes, fingerprint, history);
the O(size) integrity checks run on demand (:meth:`jobledger.Store.verify`) and before every
upgrade, so a damaged file is never migrated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..errors import MigrationRequired, SchedulerError, SchemaError, SchemaUnknown
from ..models import VerifyCheck
from .rows import read_stored_authority
from .sql import migration_checksum

__all__ = [
    "LADDER",
    "LATEST_VERSION",
    "Migration",
    "SchemaDialect",
    "bad_authorities",
    "claimed_version",
    "ensure_schema",
    "known_version",
    "load_migrations",
    "schema_and_authority_checks",
]

# (version, name): the same rungs on every store.
LADDER: tuple[tuple[int, str], ...] = (
    (1, "scheduler-kernel-v1"),
    (2, "jobledger-requeue-v2"),
    (3, "jobledger-everyday-v3"),
    (4, "jobledger-queues-v4"),
    (5, "jobledger-operators-v5"),
)
LATEST_VERSION = LADDER[-1][0]


@dataclass(frozen=True, slots=True)
class Migration:
    """One rung of the ladder in one dialect."""

    version: int
    name: str
    ddl: str
    fingerprint: str  # of the dialect's catalog after applying every rung up to this one
    tables: tuple[str, ...]  # the user tables that exist at this version, sorted

    @property
    def checksum(self) -> str:
        return migration_checksum(self.ddl)


def load_migrations(
    directory: Path,
    fingerprints: Mapping[int, str],
    tables: Mapping[int, tuple[str, ...]],
) -> tuple[Migration, ...]:
    """The ladder in one dialect: DDL from ``directory/000N_<name>.sql``."""
    return tuple(
        Migration(
            version=version,
            name=name,
            ddl=(directory / f"{version:04d}_{name}.sql").read_text(encoding="utf-8"),
            fingerprint=fingerprints[version],
            tables=tuple(sorted(tables[version])),
        )
        for version, name in LADDER
    )


def _history_entry(migration: Migration) -> dict[str, Any]:
    return {"version": migration.version, "name": migration.name, "checksum": migration.checksum}


def known_version(history: Sequence[Mapping[str, Any]], migrations: Sequence[Migration]) -> int:
    """The version a migration history stands for, or refuse it (the one history rule)."""
    rows = [
        {"version": row.get("version"), "name": row.get("name"), "checksum": row.get("checksum")}
        for row in history
    ]
    expected = [_history_entry(migration) for migration in migrations]
    if rows and rows == expected[: len(rows)]:
        return len(rows)
    newer = any(
        isinstance(row["version"], int) and row["version"] > migrations[-1].version for row in rows
    )
    raise SchemaUnknown(
        "Scheduler schema is newer than this jobledger; upgrade jobledger"
        if newer
        else "Scheduler migration history is unknown",
        details={"migrations": [dict(row) for row in history]},
    )


def claimed_version(
    history: Sequence[Mapping[str, Any]], migrations: Sequence[Migration]
) -> int | None:
    """The rung a history claims to have reached — its highest version — when that is a rung
    of the ladder; ``None`` when it claims none (no rows, no integer versions, a newer one).
    Its catalog is what the checks before the history compare against."""
    versions = [
        version
        for row in history
        if type(version := row.get("version")) is int  # a bool is not a version
    ]
    if not versions:
        return None
    highest = max(versions)
    return highest if 1 <= highest <= migrations[-1].version else None


class SchemaDialect(Protocol):
    """What one store's schema code supplies to :func:`ensure_schema`."""

    migrations: tuple[Migration, ...]

    def read_history(self) -> list[dict[str, Any]] | None:
        """The ``migrations`` rows, oldest first, in a read-only snapshot; ``None`` when the
        database (or schema) is empty. A non-empty one without history raises
        ``SCHEDULER_SCHEMA_UNKNOWN``. May also check cheap identity markers."""
        ...

    def verify(
        self, version: int, *, full: bool, history: Sequence[Mapping[str, Any]] | None = None
    ) -> None:
        """Refuse anything that is not exactly ``version``'s catalog; ``full`` adds the
        O(size) integrity checks (page checks, foreign keys). ``history``, when given, is held
        to the ladder (:func:`known_version`) right after the catalog and before the
        foreign-key and authority checks, in the reference's order (a ``full`` page check
        comes first of all)."""
        ...

    def backup(self, version: int) -> Path | None:
        """Copy the database before an upgrade from ``version`` (``None``: no copy is kept)."""
        ...

    def upgrade(self, apply: Callable[[int | None], int | None]) -> int | None:
        """Run ``apply(current_version)`` in one write transaction under an exclusive lock, after
        re-reading the history inside it; ``apply`` returns the version it reached (or ``None``
        when it found nothing to do). The dialect applies DDL through :meth:`apply_migration`,
        verifies the newest catalog before committing, and returns what ``apply`` returned."""
        ...

    def apply_migration(self, migration: Migration) -> None:
        """Inside :meth:`upgrade`'s transaction: run the DDL and record the history row."""
        ...


@dataclass(frozen=True, slots=True)
class SchemaOutcome:
    """What :func:`ensure_schema` found, and what *this* process did about it.

    ``version`` is the schema version now; ``found`` the version this process saw on its first
    look (0: an empty database). ``created``, ``upgraded_from`` and ``backup`` are this
    process's own work: when several processes open an old or empty database at once, exactly
    one of them creates or upgrades it (and keeps its backup); the others report nothing done
    and :attr:`by_another_process` true.
    """

    version: int
    found: int
    created: bool = False
    upgraded_from: int | None = None
    backup: Path | None = None

    @property
    def by_another_process(self) -> bool:
        """This process found the schema older (or empty) and another process brought it up to
        date before this one could."""
        return self.found < self.version and not self.created and self.upgraded_from is None


def ensure_schema(dialect: SchemaDialect, *, migrate: bool) -> SchemaOutcome:
    """Create, verify or upgrade a database to the newest rung (see the module docstring)."""
    first_seen: list[int] = []  # the version the first attempt found, kept across retries
    for _ in range(3):
        try:
            return _ensure(dialect, migrate=migrate, first_seen=first_seen)
        except SchemaError:
            # Another process may have upgraded (or created) the database between our read of
            # its history and our check of that version's catalog: look again before refusing.
            if not _history_moved(dialect):
                raise
    return _ensure(dialect, migrate=migrate, first_seen=first_seen)


def _history_moved(dialect: SchemaDialect) -> bool:
    try:
        history = dialect.read_history()
    except SchemaError:
        return False
    return history is not None and len(history) == dialect.migrations[-1].version


def _ensure(dialect: SchemaDialect, *, migrate: bool, first_seen: list[int]) -> SchemaOutcome:
    migrations = dialect.migrations
    latest = migrations[-1]
    history = dialect.read_history()
    claimed = None if history is None else claimed_version(history, migrations)
    if not first_seen:  # what this process saw first, whatever a retry sees later
        first_seen.append(claimed or 0)
    found = first_seen[0]
    if history is None:
        version = 0
    else:
        if claimed is not None:
            # The catalog before the history (the reference's order); a file older than the
            # code gets the O(size) checks too, so a damaged file is never migrated.
            dialect.verify(claimed, full=claimed < latest.version, history=history)
        # A history that claims no rung is refused here (unknown, or newer than the code).
        version = known_version(history, migrations)
    if history is None:
        if not migrate:
            raise MigrationRequired(
                "The scheduler database is empty; open it with migrate=True (or run "
                "`jobledger db migrate`) to create the schema",
                details={"schemaVersion": 0, "requiredVersion": latest.version},
            )
        reached = dialect.upgrade(lambda current: _apply_from(dialect, current))
        if reached is None:  # another process created it while we waited for the lock
            dialect.verify(latest.version, full=False)
        return SchemaOutcome(version=latest.version, found=found, created=reached is not None)
    if version == latest.version:
        return SchemaOutcome(version=version, found=found)
    # Older than the code: the file was proven sound above, before anything is written to it.
    if not migrate:
        raise MigrationRequired(
            f"Scheduler database is at schema v{version}; this jobledger needs "
            f"v{latest.version}. Open it with migrate=True (the default) or run "
            "`jobledger db migrate`; a backup is taken first.",
            details={"schemaVersion": version, "requiredVersion": latest.version},
        )
    backup = dialect.backup(version)
    reached = dialect.upgrade(lambda current: _apply_from(dialect, current))
    if reached is None:
        # Another process upgraded it while we waited for the lock; it kept its own backup.
        dialect.verify(latest.version, full=False)
        if backup is not None:
            backup.unlink(missing_ok=True)
            backup = None
    return SchemaOutcome(
        version=latest.version,
        found=found,
        upgraded_from=version if reached is not None else None,
        backup=backup,
    )


def _apply_from(dialect: SchemaDialect, current: int | None) -> int | None:
    """Apply every rung above ``current`` (``None``: an empty database)."""
    migrations = dialect.migrations
    start = current or 0
    if start >= migrations[-1].version:
        return None
    for migration in migrations[start:]:
        dialect.apply_migration(migration)
    return migrations[-1].version


def bad_authorities(authorities: Iterable[tuple[str, object, object]]) -> list[str]:
    """The ids whose stored authority is not a valid envelope, of ``(table, id,
    authority_json)`` rows."""
    bad: list[str] = []
    for table, key, authority_json in authorities:
        try:
            read_stored_authority(authority_json, f"{table} authority")
        except SchedulerError:
            bad.append(str(key))
    return bad


def schema_and_authority_checks(
    verify_catalog: Callable[[], None], authorities: Iterable[tuple[str, object, object]]
) -> list[VerifyCheck]:
    """The checks of ``Store.verify()`` both stores make alike: the catalog is the newest
    version's (``verify_catalog`` raises a coded error if not), and every stored authority —
    ``authorities`` yields ``(table, id, authority_json)`` — is a valid envelope."""
    checks: list[VerifyCheck] = []
    try:
        verify_catalog()
    except SchedulerError as exc:
        checks.append(VerifyCheck("schema", False, {"code": exc.code, "message": exc.message}))
    else:
        checks.append(VerifyCheck("schema", True))
    bad = bad_authorities(authorities)
    checks.append(
        VerifyCheck(
            "stored_authority", not bad, None if not bad else {"count": len(bad), "ids": bad[:10]}
        )
    )
    return checks
