"""Fixtures for the planner, declare and explain tests: every store-backed test runs on SQLite
and on PostgreSQL, through the conformance fixtures of ``tests/store/conftest.py``.

``db_target`` is the target those fixtures open (the same file or database), so a test can open
more handles on it — in other threads or other processes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.store.conftest import backend, store, store_factory
from tests.store.pg_support import postgres_database_url, postgres_template

__all__ = [
    "backend",
    "postgres_database_url",
    "postgres_template",
    "store",
    "store_factory",
]


@pytest.fixture
def db_target(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """The target ``store_factory`` opens (same path / same database within a test)."""
    if backend == "sqlite":
        return str(tmp_path / "db" / "jobledger.sqlite3")
    return str(request.getfixturevalue("postgres_database_url"))
