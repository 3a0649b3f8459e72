"""Helpers shared by the SQLite-specific tests."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sqlite3
from pathlib import Path
from typing import Any

FIXTURES = Path("/work/shared/fixtures/reference-v1")
V1_FINGERPRINT = "cf244f675ac7430683f67046b57524eb6c14baa45d6463ed3f704be898fec887"
V1_CHECKSUM = "70a46506b3c6f4abebb73ddf02e0072f2e7d245b002bc88bcb32db78748a8dc1"
APPLICATION_ID = 0x4343534B
V1_TABLES = ("events", "jobs", "migrations", "occurrences")
SIDECARS = ("-wal", "-shm", "-journal")


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_manifest(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.manifest.json").read_text("utf-8"))
    return data


def copy_fixture(name: str, directory: Path, *, as_name: str | None = None) -> Path:
    """Copy ``<name>.sqlite`` into a private directory (never open the shipped file)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = directory / (as_name or f"{name}.sqlite")
    shutil.copyfile(FIXTURES / f"{name}.sqlite", target)
    target.chmod(0o600)
    return target


def sidecars(path: Path) -> list[str]:
    return [suffix for suffix in SIDECARS if Path(f"{path}{suffix}").exists()]


def camel_to_snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def read_only(path: Path) -> sqlite3.Connection:
    """A plain read-only connection that never writes to ``path`` or creates sidecars."""
    return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)


def table_rows(conn: sqlite3.Connection, table: str) -> list[tuple[Any, ...]]:
    order = {
        "jobs": "job_id",
        "occurrences": "occurrence_id",
        "events": "event_id",
        "migrations": "version",
    }[table]
    cursor = conn.cursor()
    cursor.row_factory = None
    return cursor.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()


def pragma(conn: sqlite3.Connection, name: str) -> Any:
    cursor = conn.cursor()
    cursor.row_factory = None
    return cursor.execute(f"PRAGMA {name}").fetchone()[0]
