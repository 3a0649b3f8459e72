"""Fixtures: an app on a real store, its ``orders`` table, and one driver per connection kind.

SQLite runs in shared-file mode (``App(path, shared_file=True)``), so the application's table
and jobledger's share one file and one transaction; PostgreSQL gets a fresh database per test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import jobledger
from jobledger.testing import FakeClock
from tests.system.transactions.drivers import ASYNC, POSTGRES, SQLITE, Driver


def _target(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if name in SQLITE:
        return str(tmp_path / "db" / "app.sqlite3")
    return str(request.getfixturevalue("postgres_database_url"))


def _driver(
    name: str, tmp_path: Path, clock: FakeClock, request: pytest.FixtureRequest
) -> Iterator[Driver]:
    target = _target(name, tmp_path, request)
    options = {"shared_file": True} if name in SQLITE else {}
    app = jobledger.App(target, clock=clock, authorize=jobledger.allow_all, **options)
    app.create_job("confirm", "send_confirmation")
    made = Driver(name, app, target)
    made.create_orders()
    yield made
    made.close()
    app.close()


@pytest.fixture(
    params=[*SQLITE, *(pytest.param(name, marks=pytest.mark.postgres) for name in POSTGRES)]
)
def driver(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Driver]:
    """Every accepted connection kind."""
    yield from _driver(str(request.param), tmp_path, clock, request)


@pytest.fixture(params=[pytest.param(name, marks=pytest.mark.postgres) for name in POSTGRES])
def pg_driver(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Driver]:
    """Every accepted connection kind on PostgreSQL."""
    yield from _driver(str(request.param), tmp_path, clock, request)


@pytest.fixture
def sqlite_driver(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> Iterator[Driver]:
    yield from _driver("sqlite3", tmp_path, clock, request)


@pytest.fixture
def psycopg_driver(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> Iterator[Driver]:
    yield from _driver("psycopg", tmp_path, clock, request)


@pytest.fixture(
    params=[
        *SQLITE,
        *(pytest.param(name, marks=pytest.mark.postgres) for name in POSTGRES if name not in ASYNC),
    ]
)
def sync_driver(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> Iterator[Driver]:
    """Every synchronous connection kind (what ``app.flow(conn=...)`` takes)."""
    yield from _driver(str(request.param), tmp_path, clock, request)
