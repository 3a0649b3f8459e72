"""Fixtures for results, snooze and adjudication (SPEC §9): an App per backend on a FakeClock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import jobledger
from jobledger.testing import FakeClock


@pytest.fixture
def app(any_target: str, clock: FakeClock) -> Iterator[jobledger.App]:
    with jobledger.App(any_target, clock=clock, authorize=jobledger.allow_all) as made:
        yield made
