"""Helpers for testing code that uses jobledger (and for jobledger's own tests).

* :class:`FakeClock` — a clock you move by hand; pass it as ``clock=`` anywhere.
* :func:`temp_store` — a store on a fresh SQLite file in a private temporary directory.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

from .contract import normalize_epoch_ms
from .errors import InvalidArgument
from .store import open_store
from .store.sqlite import SQLiteStore

__all__ = ["DEFAULT_START_MS", "FakeClock", "temp_store"]

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
        step = int(delta.total_seconds() * 1000) if isinstance(delta, timedelta) else delta
        if type(step) is not int or step < 0:
            raise InvalidArgument("a fake clock only moves forward by a non-negative amount")
        with self._lock:
            self._now += step
            return self._now

    def set(self, instant: int | datetime) -> int:
        """Jump to ``instant`` (epoch ms or an aware datetime); it may not go backwards."""
        if isinstance(instant, datetime):
            if instant.tzinfo is None:
                raise InvalidArgument("a datetime must be timezone-aware")
            target = int(instant.timestamp() * 1000)
        else:
            target = normalize_epoch_ms(instant, "instant")
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
