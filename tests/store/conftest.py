"""The conformance fixture: every test in tests/store/ runs once per store backend.

``store_factory()`` opens a new handle on the *same* database (so tests can race two handles);
``store`` is the first handle. SQLite gets a fresh file per test; PostgreSQL gets a fresh
database cloned from a migrated template (see ``pg_support.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import jobledger
from jobledger.testing import FakeClock
from tests.store.pg_support import postgres_database_url, postgres_template

__all__ = ["postgres_database_url", "postgres_template"]  # fixtures used by the postgres param

StoreFactory = Callable[..., jobledger.Store]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_factory(
    backend: str, tmp_path: Path, clock: FakeClock, request: pytest.FixtureRequest
) -> Iterator[StoreFactory]:
    opened: list[jobledger.Store] = []
    if backend == "sqlite":
        target: str = str(tmp_path / "db" / "jobledger.sqlite3")
    else:
        target = request.getfixturevalue("postgres_database_url")

    def factory(**options: object) -> jobledger.Store:
        options.setdefault("clock", clock)
        store = jobledger.open_store(target, **options)  # type: ignore[arg-type]
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


@pytest.fixture
def store(store_factory: StoreFactory) -> jobledger.Store:
    return store_factory()
