"""Fixtures shared by every test directory."""

from __future__ import annotations

import pytest

from jobledger.testing import FakeClock

AUTHORITY = {"principal": {"type": "user", "id": "tester"}}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_700_000_000_000)


@pytest.fixture
def authority() -> dict:
    return {"principal": {"type": "user", "id": "tester"}}
