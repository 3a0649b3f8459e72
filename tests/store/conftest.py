"""The conformance fixture: every test in tests/store/ that uses it runs once per store backend
(``backend`` and ``any_target`` come from ``tests/conftest.py``).

``store_factory()`` opens a new handle on the *same* database (so tests can race two handles);
``store`` is the first handle. SQLite gets a fresh file per test; PostgreSQL gets a fresh
database cloned from a migrated template (see ``pg_support.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

import jobledger
from jobledger.testing import FakeClock

StoreFactory = Callable[..., jobledger.Store]


@pytest.fixture
def store_factory(any_target: str, clock: FakeClock) -> Iterator[StoreFactory]:
    opened: list[jobledger.Store] = []

    def factory(**options: object) -> jobledger.Store:
        options.setdefault("clock", clock)
        store = jobledger.open_store(any_target, **options)  # type: ignore[arg-type]
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


@pytest.fixture
def store(store_factory: StoreFactory) -> jobledger.Store:
    return store_factory()
