"""PostgreSQL databases for tests: one migrated template per test session, one clone per test.

Cloning a template (``CREATE DATABASE … TEMPLATE …``) is much faster than migrating a fresh
database for every test, and each test still gets a database nobody else touches.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

ADMIN_URL = os.environ.get("JOBLEDGER_TEST_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/test")


def database_url(name: str) -> str:
    base, _, _ = ADMIN_URL.rpartition("/")
    return f"{base}/{name}"


def _admin_execute(statement: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(statement)


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    """A database with the jobledger schema applied, used as a template for clones."""
    import jobledger

    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    name = f"jobledger_tpl_{worker}_{os.getpid()}"
    _admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    _admin_execute(f'CREATE DATABASE "{name}"')
    store = jobledger.open_store(database_url(name), clock=lambda: 1_700_000_000_000, listen=False)
    store.close()
    yield name
    _admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def fresh_database_url(template: str) -> Iterator[str]:
    name = f"jobledger_t_{uuid.uuid4().hex[:16]}"
    _admin_execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    try:
        yield database_url(name)
    finally:
        _admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def postgres_database_url(postgres_template: str) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for one test."""
    yield from fresh_database_url(postgres_template)
