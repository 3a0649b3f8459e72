"""Fixtures for the planner, declare and explain tests: every store-backed test runs on SQLite
and on PostgreSQL (``backend``, from ``tests/conftest.py``), through the store fixtures of the
conformance suite (``tests/store/conftest.py``).

``db_target`` is the target those fixtures open (the same file or database), so a test can open
more handles on it — in other threads or other processes.
"""

from __future__ import annotations

import pytest

from tests.store.conftest import store, store_factory

__all__ = ["store", "store_factory"]


@pytest.fixture
def db_target(any_target: str) -> str:
    """The target ``store_factory`` opens (same path / same database within a test)."""
    return any_target
