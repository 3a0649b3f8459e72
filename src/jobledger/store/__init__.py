"""Storage: the :class:`Store` protocol and :func:`open_store`, which picks a backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..clock import Clock
from ..errors import InvalidArgument
from .base import UNSET, Store
from .common import unknown_job
from .forks import abandon as abandon_after_fork
from .forks import register as reset_after_fork
from .migrations import LATEST_VERSION, SchemaOutcome
from .sqlite import DEFAULT_BUSY_TIMEOUT_MS, SQLiteStore

__all__ = [
    "LATEST_VERSION",
    "UNSET",
    "SQLiteStore",
    "SchemaOutcome",
    "Store",
    "abandon_after_fork",
    "open_store",
    "reset_after_fork",
    "unknown_job",
]

_SQLITE_PREFIXES = ("sqlite:///", "sqlite://")
_POSTGRES_PREFIXES = ("postgresql://", "postgres://")


def _sqlite_location(target: str) -> str:
    """``sqlite:///abs/path`` → ``/abs/path``; ``sqlite:///:memory:`` → ``:memory:``."""
    for prefix in _SQLITE_PREFIXES:
        if target.startswith(prefix):
            rest = target[len(prefix) :]
            return ":memory:" if rest.lstrip("/") == ":memory:" else "/" + rest.lstrip("/")
    return target


def open_store(
    target: str | Path,
    *,
    clock: Clock | None = None,
    busy_timeout_ms: int | None = None,
    synchronous: str | None = None,
    migrate: bool = True,
    shared_file: bool | None = None,
    **postgres_options: Any,
) -> Store:
    """Open the store at ``target`` and return it (use it as a context manager to close it).

    ``target`` is a filesystem path, ``sqlite:///abs/path``, ``:memory:``, or a
    ``postgresql://`` URL. ``clock`` returns epoch ms (default: the system clock; on PostgreSQL,
    the database clock). ``migrate=False`` neither creates nor upgrades: a missing SQLite file
    raises ``SCHEDULER_STORE_NOT_FOUND`` and an older or empty schema
    ``SCHEDULER_MIGRATION_REQUIRED``. SQLite-only options: ``busy_timeout_ms`` (default 5000)
    and ``synchronous`` (``"FULL"``, the default, or ``"NORMAL"``), ``shared_file`` (the
    application's own tables may share the file, SPEC §8). Keyword options a PostgreSQL
    store accepts (``schema``, ``pool_min_size``, ``pool_max_size``, ``pool_timeout``, ``listen``,
    ``connect_timeout``, ``prepare_threshold``) are passed through. An option the chosen store
    would ignore is refused (``SCHEDULER_INVALID_ARGUMENT``), never dropped.
    """
    if isinstance(target, str) and target.startswith(_POSTGRES_PREFIXES):
        from .postgres import PostgresStore

        sqlite_only = [
            name
            for name, value in (
                ("busy_timeout_ms", busy_timeout_ms),
                ("synchronous", synchronous),
                ("shared_file", shared_file),
            )
            if value is not None
        ]
        if sqlite_only:
            raise InvalidArgument(
                "these options apply only to a SQLite store", details={"fields": sqlite_only}
            )
        return PostgresStore.open(target, clock=clock, migrate=migrate, **postgres_options)
    if postgres_options:
        raise InvalidArgument(
            "these options apply only to a PostgreSQL store",
            details={"fields": sorted(postgres_options)},
        )
    if isinstance(target, str):
        if target == "":
            raise InvalidArgument("store target must not be empty")
        target = _sqlite_location(target)
    elif not isinstance(target, Path):
        raise InvalidArgument("store target must be a path or a URL string")
    return SQLiteStore.open(
        target,
        clock=clock,
        busy_timeout_ms=DEFAULT_BUSY_TIMEOUT_MS if busy_timeout_ms is None else busy_timeout_ms,
        migrate=migrate,
        synchronous="FULL" if synchronous is None else synchronous,
        shared_file=False if shared_file is None else shared_file,
    )
