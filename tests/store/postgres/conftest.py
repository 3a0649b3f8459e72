"""Fixtures for PostgreSQL-specific tests: a fresh cloned database per test, admin access."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

import jobledger
from jobledger.store.postgres import PostgresStore

OpenStore = Callable[..., PostgresStore]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/store/postgres/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.postgres)


@pytest.fixture
def pg_url(postgres_database_url: str) -> str:
    """A fresh database whose ``jobledger`` schema is at the newest version."""
    return postgres_database_url


@pytest.fixture
def admin(pg_url: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to the test database, outside any store."""
    with psycopg.connect(pg_url, autocommit=True, row_factory=dict_row) as conn:
        yield conn


@pytest.fixture
def open_pg(pg_url: str, clock) -> Iterator[OpenStore]:
    """Open stores on the test database (injected fake clock unless ``clock=None``)."""
    opened: list[jobledger.Store] = []

    def factory(**options: Any) -> PostgresStore:
        options.setdefault("clock", clock)
        options.setdefault("listen", False)
        store = jobledger.open_store(pg_url, **options)
        opened.append(store)
        assert isinstance(store, PostgresStore)
        return store

    yield factory
    for store in opened:
        store.close()
