"""Fixtures for runtime, worker and app tests: a temp-file SQLite store on a FakeClock.

``store`` is SQLite only (most runtime tests are about the runtime, not the backend).
``any_store`` (and ``any_target``, from ``tests/conftest.py``) run a test once per backend —
SQLite and PostgreSQL, a fresh database cloned from a migrated template — for App and worker
behaviour that goes through the store and could differ between backends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import jobledger
from jobledger.engine.heartbeat import ManualHeartbeat
from jobledger.testing import FakeClock

AUTHORITY = {"principal": {"type": "user", "id": "tester"}}
LEASE_MS = 10_000


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "db" / "jobledger.sqlite3"


@pytest.fixture
def store(store_path: Path, clock: FakeClock) -> Iterator[jobledger.Store]:
    with jobledger.open_store(store_path, clock=clock) as opened:
        yield opened


@pytest.fixture
def any_store(any_target: str, clock: FakeClock) -> Iterator[jobledger.Store]:
    with jobledger.open_store(any_target, clock=clock) as opened:
        yield opened


@pytest.fixture
def driver() -> ManualHeartbeat:
    return ManualHeartbeat()


RuntimeFactory = Callable[..., jobledger.Runtime]


@pytest.fixture
def make_runtime(
    store: jobledger.Store, clock: FakeClock, driver: ManualHeartbeat
) -> Iterator[RuntimeFactory]:
    made: list[jobledger.Runtime] = []

    def factory(handlers: Any = None, **options: Any) -> jobledger.Runtime:
        options.setdefault("authorize", jobledger.allow_all)
        options.setdefault("clock", clock)
        options.setdefault("heartbeat", driver)
        options.setdefault("lease_ms", LEASE_MS)
        options.setdefault("retry_policy", jobledger.FixedBackoff(timedelta(0)))
        runtime = jobledger.Runtime(options.pop("store", store), handlers=handlers, **options)
        made.append(runtime)
        return runtime

    yield factory
    for runtime in made:
        runtime.close()


def add_job(
    store: jobledger.Store,
    job_id: str = "job-1",
    kind: str = "echo",
    *,
    payload: Any = None,
    max_attempts: int = 3,
    scheduled_for: int | None = None,
    clock: FakeClock | None = None,
) -> jobledger.Occurrence:
    """Create a job and enqueue one occurrence due now."""
    store.create_job(
        id=job_id, kind=kind, authority=AUTHORITY, payload=payload, max_attempts=max_attempts
    )
    when = scheduled_for if scheduled_for is not None else (clock() if clock else 0)
    return store.enqueue_occurrence(job_id=job_id, scheduled_for=when, trigger_key="manual")


def event_types(store: jobledger.Store, occurrence_id: str) -> list[str]:
    """History oldest first."""
    return [event.type for event in reversed(store.history(occurrence_id=occurrence_id))]


def stop_worker(worker: jobledger.Worker, thread: threading.Thread, timeout_s: float = 10) -> None:
    """Stop a worker running in ``thread`` and wait (bounded) for it to return."""
    worker.stop()
    thread.join(timeout_s)
