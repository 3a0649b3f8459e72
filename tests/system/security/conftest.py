"""Both stores for the security tests: a SQLite file, or a fresh PostgreSQL database."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import jobledger
from jobledger.testing import FakeClock


@pytest.fixture
def target(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return str(tmp_path / "db" / "security.sqlite3")
    return str(request.getfixturevalue("postgres_database_url"))


@pytest.fixture
def store(target: str) -> Iterator[jobledger.Store]:
    with jobledger.open_store(target, clock=FakeClock(1_700_000_000_000)) as opened:
        yield opened
