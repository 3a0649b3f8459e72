"""Fixtures for results, snooze and adjudication (SPEC §9): an App per backend on a FakeClock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import jobledger
from jobledger.testing import FakeClock
from tests.store.pg_support import postgres_database_url, postgres_template

__all__ = ["postgres_database_url", "postgres_template"]  # fixtures used by the postgres param


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def any_target(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return str(tmp_path / "db" / "jobledger.sqlite3")
    return str(request.getfixturevalue("postgres_database_url"))


@pytest.fixture
def app(any_target: str, clock: FakeClock) -> Iterator[jobledger.App]:
    with jobledger.App(any_target, clock=clock, authorize=jobledger.allow_all) as made:
        yield made
