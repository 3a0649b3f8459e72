"""Helpers for testing code that uses jobledger (and for jobledger's own tests).

* :class:`FakeClock` — a clock you move by hand; pass it as ``clock=`` anywhere.
* :func:`temp_store` — a store on a fresh SQLite file in a private temporary directory.
* :func:`run_until_idle` — run an app's, worker's or runtime's work in this thread until nothing
  is claimable, and get the results.
* :class:`~jobledger.engine.heartbeat.ManualHeartbeat` — lease renewals only when you ``tick()``.

A typical test::

    def test_welcome_email(tmp_path):
        clock = FakeClock()
        with App(tmp_path / "jobs.sqlite3", clock=clock, authorize=allow_all) as app:
            app.handler("send_email")(send_email)
            app.create_job("welcome", "send_email", payload={"to": "ada@example.com"})
            app.enqueue("welcome")
            [result] = run_until_idle(app)
            assert result.status == "succeeded"
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from .contract import normalize_epoch_ms
from .durations import epoch_ms_from
from .engine.heartbeat import ManualHeartbeat
from .errors import InvalidArgument
from .store import SQLiteStore, open_store

if TYPE_CHECKING:
    from .app import App
    from .engine.runtime import Runtime, RuntimeRunSummary
    from .engine.worker import Worker

__all__ = ["DEFAULT_START_MS", "FakeClock", "ManualHeartbeat", "run_until_idle", "temp_store"]

DEFAULT_START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


class FakeClock:
    """A thread-safe clock that only moves when told to.

    >>> clock = FakeClock(1_000)
    >>> clock.advance(250)
    1250
    >>> clock()
    1250
    """

    def __init__(self, start_ms: int = DEFAULT_START_MS) -> None:
        self._now = normalize_epoch_ms(start_ms, "start_ms")
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            return self._now

    @property
    def now(self) -> int:
        return self()

    def advance(self, delta: int | timedelta) -> int:
        """Move forward by ``delta`` (ms or a timedelta); return the new reading."""
        # Integer division: total_seconds() is a float and would turn 1001 ms into 1000.
        step = delta // timedelta(milliseconds=1) if isinstance(delta, timedelta) else delta
        if type(step) is not int or step < 0:
            raise InvalidArgument("a fake clock only moves forward by a non-negative amount")
        with self._lock:
            self._now += step
            return self._now

    def set(self, instant: int | datetime) -> int:
        """Jump to ``instant`` (epoch ms or an aware datetime); it may not go backwards."""
        target = epoch_ms_from(instant, "instant")  # exact, and refuses naive datetimes
        with self._lock:
            if target < self._now:
                raise InvalidArgument("a fake clock does not move backwards")
            self._now = target
            return self._now


@contextmanager
def temp_store(clock: FakeClock | None = None, **options: object) -> Iterator[SQLiteStore]:
    """A :class:`SQLiteStore` on a new file in a private temporary directory, removed after.

    >>> with temp_store(FakeClock()) as store:
    ...     store.schema_info().schema_version >= 1
    True
    """
    directory = Path(tempfile.mkdtemp(prefix="jobledger-"))
    try:
        store = open_store(directory / "jobledger.sqlite3", clock=clock or FakeClock(), **options)  # type: ignore[arg-type]
        assert isinstance(store, SQLiteStore)
        try:
            yield store
        finally:
            store.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def run_until_idle(
    target: App | Worker | Runtime, *, limit: int = 100, job_kind: str | None = None
) -> RuntimeRunSummary:
    """Run claimable occurrences one at a time, in this thread, until none is left.

    ``target`` is an :class:`~jobledger.App` (a runtime with a :class:`ManualHeartbeat` is made
    for the call, so nothing renews in the background), a :class:`~jobledger.Worker` (its
    kinds) or a :class:`~jobledger.Runtime`. Only what is due by the store's clock runs: advance
    a :class:`FakeClock` to reach retries and delayed work. Returns the same
    :class:`~jobledger.RuntimeRunSummary` as :meth:`Runtime.run_until_idle` (iterable over the
    results, ``idle`` not included). Stops after ``limit`` runs.
    """
    from .app import App
    from .engine.runtime import Runtime
    from .engine.worker import Worker

    if isinstance(target, App):
        runtime = target.runtime(heartbeat=ManualHeartbeat())
        try:
            return runtime.run_until_idle(limit=limit, job_kind=job_kind)
        finally:
            target._discard_runtime(runtime)
    if isinstance(target, Worker):
        return target.runtime.run_until_idle(
            limit=limit,
            job_kind=job_kind,
            kinds=None if job_kind is not None else target.kinds,
            workspace_id=target.options.workspace_id,
        )
    if isinstance(target, Runtime):
        return target.run_until_idle(limit=limit, job_kind=job_kind)
    raise InvalidArgument("run_until_idle needs an App, a Worker or a Runtime")
