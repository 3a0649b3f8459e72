"""Storage failures (disk full, I/O errors, a busy database) and sharing a store between threads.

Adapted from the reference's store suite §5.2 items 9–13 and its busy-retry test.
"""

from __future__ import annotations

import errno
import json
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import jobledger
from jobledger.errors import (
    DataCorrupt,
    NotFound,
    SchedulerError,
    StorageUnavailable,
)
from jobledger.store.migrations import LADDER, LATEST_VERSION
from jobledger.store.sqlite import SQLiteStore
from jobledger.store.sqlite import store as store_module
from jobledger.store.sqlite.connection import BEGIN_ATTEMPTS, storage_failure
from jobledger.testing import FakeClock

AUTHORITY = {"principal": {"type": "user", "id": "tester"}}
BIG = "x" * (512 * 1024)


def _open(path: Path | str, **options: Any) -> SQLiteStore:
    options.setdefault("clock", FakeClock())
    store = jobledger.open_store(path, **options)
    assert isinstance(store, SQLiteStore)
    return store


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "db" / "store.sqlite"


@pytest.fixture
def store(db_path: Path) -> Iterator[SQLiteStore]:
    opened = _open(db_path)
    try:
        yield opened
    finally:
        opened.close()


class CodedError(Exception):
    """A driver-style error carrying a string ``code`` (as better-sqlite3/Node errors do)."""

    def __init__(self, code: str) -> None:
        super().__init__(f"native failure at /secret/path ({code})")
        self.code = code


def _sqlite_error(name: str, message: str = "disk I/O error at /secret/path") -> sqlite3.Error:
    error = sqlite3.OperationalError(message)
    error.sqlite_errorname = name  # type: ignore[attr-defined]
    return error


def _assert_sanitized(error: SchedulerError, details: dict[str, Any]) -> None:
    assert isinstance(error, StorageUnavailable)
    assert error.code == "SCHEDULER_STORAGE_UNAVAILABLE"
    assert error.message == "Scheduler storage is unavailable"
    assert error.details == details
    assert error.__cause__ is None
    text = json.dumps(error.to_dict()) + str(error)
    assert "/secret" not in text
    assert "native" not in text


def _pin_size(store: SQLiteStore) -> None:
    """Pin the database at its current size: the next page it needs fails with SQLITE_FULL."""
    raw = store._connection.raw
    pages = raw.execute("PRAGMA page_count").fetchone()["page_count"]
    pinned = raw.execute(f"PRAGMA max_page_count = {pages}").fetchone()["max_page_count"]
    assert pinned == pages


def _quick_check(store: SQLiteStore) -> list[str]:
    return [row["quick_check"] for row in store._connection.raw.execute("PRAGMA quick_check")]


def _event_ids(store: SQLiteStore) -> list[int]:
    return [event.event_id for event in store.history(limit=200)]


# -- real SQLITE_FULL --------------------------------------------------------------------------

NOT_COMMITTED_FULL = {
    "phase": "write",
    "storageCode": "SQLITE_FULL",
    "commitState": "not_committed",
    "retryable": False,
}


def test_real_sqlite_full_in_a_multi_statement_write_rolls_back(
    store: SQLiteStore, db_path: Path
) -> None:
    store.create_job(id="job-a", kind="k", authority=AUTHORITY, payload={"small": True})
    occurrence = store.enqueue_occurrence(job_id="job-a", scheduled_for=1, trigger_key="t")
    history = _event_ids(store)
    _pin_size(store)

    with pytest.raises(SchedulerError) as failed:
        store.update_job("job-a", expected_revision=1, patch={"enabled": False, "payload": BIG})
    _assert_sanitized(failed.value, NOT_COMMITTED_FULL)

    job = store.get_job("job-a")
    assert job is not None
    assert job.enabled is True
    assert job.revision == 1
    assert job.payload == {"small": True}
    assert _event_ids(store) == history
    assert store._connection.raw.in_transaction is False
    assert _quick_check(store) == ["ok"]
    # the same store keeps working for writes that fit
    claimed = store.claim_next(owner_id="w", lease_ms=1000)
    assert claimed is not None
    assert claimed.id == occurrence.id
    store.close()

    reopened = _open(db_path)
    try:
        assert reopened.get_job("job-a") == job
        assert _quick_check(reopened) == ["ok"]
        # without the pinned size the same update now succeeds
        updated = reopened.update_job(
            "job-a", expected_revision=1, patch={"enabled": False, "payload": BIG}
        )
        assert updated.revision == 2
        assert updated.enabled is False
    finally:
        reopened.close()


def test_real_sqlite_full_on_create_leaves_no_job(store: SQLiteStore, db_path: Path) -> None:
    store.create_job(id="job-a", kind="k", authority=AUTHORITY)
    history = _event_ids(store)
    _pin_size(store)
    with pytest.raises(SchedulerError) as failed:
        store.create_job(id="job-big", kind="k", authority=AUTHORITY, payload=BIG)
    _assert_sanitized(failed.value, NOT_COMMITTED_FULL)
    assert store.get_job("job-big") is None
    assert _event_ids(store) == history
    assert _quick_check(store) == ["ok"]
    store.close()
    reopened = _open(db_path)
    try:
        assert reopened.get_job("job-big") is None
        assert reopened.schema_info().schema_version == LATEST_VERSION
    finally:
        reopened.close()


# -- storage_failure(): the mapping ------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "code"),
    [
        pytest.param(CodedError("SQLITE_FULL"), "SQLITE_FULL", id="full"),
        pytest.param(CodedError("SQLITE_IOERR"), "SQLITE_IOERR", id="ioerr"),
        pytest.param(CodedError("SQLITE_IOERR_WRITE"), "SQLITE_IOERR", id="ioerr-write"),
        pytest.param(CodedError(" sqlite_readonly_dbmoved "), "SQLITE_READONLY", id="ro-moved"),
        pytest.param(CodedError("ENOSPC"), "ENOSPC", id="enospc-code"),
        pytest.param(OSError(errno.ENOSPC, "No space left"), "ENOSPC", id="enospc"),
        pytest.param(OSError(errno.EROFS, "Read-only file system"), "EROFS", id="erofs"),
        pytest.param(OSError(errno.EIO, "Input/output error"), "EIO", id="eio"),
        pytest.param(_sqlite_error("SQLITE_IOERR_FSYNC"), "SQLITE_IOERR", id="sqlite-fsync"),
        pytest.param(_sqlite_error("SQLITE_READONLY"), "SQLITE_READONLY", id="sqlite-ro"),
    ],
)
@pytest.mark.parametrize("nesting", ["direct", "cause", "context", "deep"])
@pytest.mark.parametrize(
    ("phase", "commit_state"), [("write", "not_committed"), ("open", "unknown")]
)
def test_storage_failure_maps_nested_codes(
    error: BaseException, code: str, nesting: str, phase: str, commit_state: str
) -> None:
    outer: BaseException = error
    if nesting == "cause":
        outer = RuntimeError("wrapper")
        outer.__cause__ = error
    elif nesting == "context":
        outer = sqlite3.OperationalError("while handling")
        outer.__context__ = error
    elif nesting == "deep":
        middle = ValueError("middle")
        middle.__cause__ = error
        outer = RuntimeError("outer")
        outer.__cause__ = middle
    mapped = storage_failure(outer, phase=phase, commit_state=commit_state)
    assert mapped is not None
    _assert_sanitized(
        mapped,
        {"phase": phase, "storageCode": code, "commitState": commit_state, "retryable": False},
    )


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(ValueError("plain"), id="value-error"),
        pytest.param(CodedError("SQLITE_FULLISH"), id="prefix-without-underscore"),
        pytest.param(CodedError("SQLITE_CONSTRAINT"), id="constraint-code"),
        pytest.param(OSError(errno.EACCES, "Permission denied"), id="eacces"),
        pytest.param(OSError("no errno"), id="no-errno"),
    ],
)
def test_storage_failure_ignores_other_errors(error: BaseException) -> None:
    assert storage_failure(error, phase="write", commit_state="unknown") is None


def test_storage_failure_survives_a_cause_cycle() -> None:
    first, second = RuntimeError("a"), RuntimeError("b")
    first.__cause__ = second
    second.__cause__ = first
    assert storage_failure(first, phase="write", commit_state="unknown") is None
    second.__context__ = CodedError("EIO")
    second.__cause__ = None
    first.__cause__ = second
    mapped = storage_failure(first, phase="write", commit_state="unknown")
    assert mapped is not None
    assert mapped.details is not None
    assert mapped.details["storageCode"] == "EIO"


def test_storage_failure_maps_busy_and_other_driver_errors() -> None:
    busy = _sqlite_error("SQLITE_BUSY", "database is locked")
    mapped = storage_failure(busy, phase="write", commit_state="not_committed")
    assert isinstance(mapped, StorageUnavailable)
    assert mapped.details == {
        "phase": "write",
        "storageCode": "SQLITE_BUSY",
        "commitState": "not_committed",
        "retryable": True,
    }
    constraint = sqlite3.IntegrityError("CHECK constraint failed")
    corrupt = storage_failure(constraint, phase="write", commit_state="not_committed")
    assert isinstance(corrupt, DataCorrupt)
    assert corrupt.__cause__ is constraint


# -- open-phase failures -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make_error", "code"),
    [
        pytest.param(lambda: OSError(errno.ENOSPC, "/secret/path"), "ENOSPC", id="enospc"),
        pytest.param(lambda: OSError(errno.EROFS, "/secret/path"), "EROFS", id="erofs"),
        pytest.param(lambda: OSError(errno.EIO, "/secret/path"), "EIO", id="eio"),
        pytest.param(lambda: _sqlite_error("SQLITE_FULL"), "SQLITE_FULL", id="full"),
        pytest.param(
            lambda: _nested(_sqlite_error("SQLITE_CANTOPEN"), CodedError("SQLITE_IOERR_WRITE")),
            "SQLITE_IOERR",
            id="ioerr-write-nested",
        ),
        pytest.param(
            lambda: _nested(
                _sqlite_error("SQLITE_CANTOPEN"), CodedError("SQLITE_READONLY_DBMOVED")
            ),
            "SQLITE_READONLY",
            id="readonly-dbmoved-nested",
        ),
    ],
)
def test_open_phase_storage_failures_are_sanitized(
    make_error: Callable[[], BaseException],
    code: str,
    db_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def failing_driver(*args: object, **kwargs: object) -> None:
        raise make_error()

    monkeypatch.setattr(store_module, "SQLiteConnection", failing_driver)
    with pytest.raises(SchedulerError) as failed:
        _open(db_path)
    _assert_sanitized(
        failed.value,
        {"phase": "open", "storageCode": code, "commitState": "unknown", "retryable": False},
    )


def _nested(outer: BaseException, inner: BaseException) -> BaseException:
    outer.__cause__ = inner
    return outer


# -- failures around COMMIT and ROLLBACK ------------------------------------------------------


class _Proxy:
    """Wraps the store's sqlite3 connection to inject failures into chosen statements."""

    def __init__(
        self, real: sqlite3.Connection, fail: Callable[[str, int], BaseException | None]
    ) -> None:
        self.real = real
        self.fail = fail
        self.calls: Counter[str] = Counter()

    def execute(self, sql: str, *args: Any) -> Any:
        self.calls[sql] += 1
        error = self.fail(sql, self.calls[sql])
        if error is not None:
            raise error
        return self.real.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.fixture
def inject(store: SQLiteStore) -> Iterator[Callable[..., _Proxy]]:
    connection = store._connection
    real = connection._conn

    def install(fail: Callable[[str, int], BaseException | None]) -> _Proxy:
        proxy = _Proxy(real, fail)
        connection._conn = proxy  # type: ignore[assignment]
        return proxy

    yield install
    connection._conn = real
    if real.in_transaction:
        real.execute("ROLLBACK")


def test_failure_during_commit_reports_unknown(
    store: SQLiteStore, inject: Callable[..., _Proxy]
) -> None:
    store.create_job(id="job-a", kind="k", authority=AUTHORITY)
    history = _event_ids(store)
    wrapped = _nested(
        _sqlite_error("SQLITE_ERROR", "commit failed"), CodedError("SQLITE_READONLY_CANTLOCK")
    )
    inject(lambda sql, n: wrapped if sql == "COMMIT" else None)
    with pytest.raises(SchedulerError) as failed:
        store.update_job("job-a", expected_revision=1, patch={"enabled": False})
    _assert_sanitized(
        failed.value,
        {
            "phase": "write",
            "storageCode": "SQLITE_READONLY",
            "commitState": "unknown",
            "retryable": False,
        },
    )
    # here the commit really did not happen (it was never sent), and it was rolled back
    job = store.get_job("job-a")
    assert job is not None
    assert job.enabled is True
    assert _event_ids(store) == history


def test_scheduler_errors_from_the_body_propagate_unchanged(store: SQLiteStore) -> None:
    raised = NotFound("no such thing")

    def body(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO migrations VALUES (99, 'x', 'y', 0)")
        raise raised

    with pytest.raises(NotFound) as failed:
        store._connection.write(body)
    assert failed.value is raised
    assert store._connection.raw.in_transaction is False
    assert [m.version for m in store.schema_info().migrations] == [v for v, _ in LADDER]


def test_failing_rollback_makes_the_commit_state_unknown(
    store: SQLiteStore, inject: Callable[..., _Proxy]
) -> None:
    proxy = inject(
        lambda sql, n: _sqlite_error("SQLITE_IOERR_ROLLBACK") if sql == "ROLLBACK" else None
    )
    body_calls = 0

    def body(conn: sqlite3.Connection) -> None:
        nonlocal body_calls
        body_calls += 1
        raise _sqlite_error("SQLITE_FULL", "database or disk is full")

    with pytest.raises(SchedulerError) as failed:
        store._connection.write(body)
    assert body_calls == 1
    assert proxy.calls["ROLLBACK"] == 1
    assert isinstance(failed.value, StorageUnavailable)
    assert failed.value.details is not None
    assert failed.value.details["commitState"] == "unknown"
    assert failed.value.details["phase"] == "write"
    # jobledger reports the failure that stopped the body (the reference reports the
    # rollback's code); either way the outcome is flagged as unknown.
    assert failed.value.details["storageCode"] == "SQLITE_FULL"


# -- busy ------------------------------------------------------------------------------------


def _lock_holder(path: Path) -> sqlite3.Connection:
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    other.execute("BEGIN IMMEDIATE")
    return other


def test_lock_held_longer_than_the_timeout_is_busy_and_retryable(db_path: Path) -> None:
    store = _open(db_path, busy_timeout_ms=0)
    try:
        store.create_job(id="job-a", kind="k", authority=AUTHORITY)
        history = _event_ids(store)
        other = _lock_holder(db_path)
        try:
            with pytest.raises(SchedulerError) as failed:
                store.update_job("job-a", expected_revision=1, patch={"enabled": False})
        finally:
            other.rollback()
            other.close()
        assert isinstance(failed.value, StorageUnavailable)
        assert failed.value.details == {
            "phase": "write",
            "storageCode": "SQLITE_BUSY",
            "commitState": "not_committed",
            "retryable": True,
        }
        # nothing changed, and once the lock is released the same call succeeds
        job = store.get_job("job-a")
        assert job is not None
        assert job.enabled is True
        assert _event_ids(store) == history
        updated = store.update_job("job-a", expected_revision=1, patch={"enabled": False})
        assert updated.revision == 2
    finally:
        store.close()


def test_busy_begin_is_retried_before_the_body_runs(
    db_path: Path, store: SQLiteStore, inject: Callable[..., _Proxy]
) -> None:
    """BEGIN is busy twice (a real lock held by another connection), then the lock is released."""
    other = _lock_holder(db_path)
    store._connection.raw.execute("PRAGMA busy_timeout = 0")

    def fail(sql: str, attempt: int) -> BaseException | None:
        if sql == "BEGIN IMMEDIATE" and attempt == BEGIN_ATTEMPTS and other.in_transaction:
            other.rollback()  # released just before the last attempt
        return None

    proxy = inject(fail)
    body_calls = 0

    def body(conn: sqlite3.Connection) -> str:
        nonlocal body_calls
        body_calls += 1
        conn.execute("INSERT INTO migrations VALUES (99, 'x', 'y', 0)")
        return "done"

    try:
        assert store._connection.write(body) == "done"
    finally:
        other.close()
    assert proxy.calls["BEGIN IMMEDIATE"] == BEGIN_ATTEMPTS == 3
    assert body_calls == 1
    raw = store._connection.raw
    assert raw.execute("SELECT COUNT(*) FROM migrations WHERE version = 99").fetchone()[0] == 1


def test_busy_after_the_body_started_is_not_retried(
    store: SQLiteStore, inject: Callable[..., _Proxy]
) -> None:
    proxy = inject(lambda sql, n: None)
    body_calls = 0

    def body(conn: sqlite3.Connection) -> None:
        nonlocal body_calls
        body_calls += 1
        conn.execute("INSERT INTO migrations VALUES (99, 'x', 'y', 0)")
        raise _sqlite_error("SQLITE_BUSY", "database is locked")

    with pytest.raises(SchedulerError) as failed:
        store._connection.write(body)
    assert body_calls == 1
    assert proxy.calls["BEGIN IMMEDIATE"] == 1
    assert failed.value.code == "SCHEDULER_STORAGE_UNAVAILABLE"
    assert failed.value.details is not None
    assert failed.value.details["storageCode"] == "SQLITE_BUSY"
    assert failed.value.details["commitState"] == "not_committed"
    assert [m.version for m in store.schema_info().migrations] == [v for v, _ in LADDER]


# -- one store shared by threads ---------------------------------------------------------------


def test_eight_threads_share_one_store_and_settle_each_occurrence_once(
    store: SQLiteStore,
) -> None:
    total, workers = 400, 8
    store.create_job(id="job-a", kind="k", authority=AUTHORITY)
    expected = {
        store.enqueue_occurrence(job_id="job-a", scheduled_for=i, trigger_key=f"t{i}").id
        for i in range(total)
    }
    assert len(expected) == total
    barrier = threading.Barrier(workers)
    settled: list[list[str]] = [[] for _ in range(workers)]
    errors: list[BaseException] = []

    def work(index: int) -> None:
        owner = f"worker-{index}"
        try:
            barrier.wait(timeout=30)
            while True:
                claimed = store.claim_next(owner_id=owner, lease_ms=60_000)
                if claimed is None:
                    return
                done = store.settle(
                    occurrence_id=claimed.id,
                    owner_id=owner,
                    fence=claimed.fence,
                    outcome="succeeded",
                    result={"by": index},
                )
                settled[index].append(done.id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
        assert not thread.is_alive()
    assert errors == []

    flat = [occurrence_id for ids in settled for occurrence_id in ids]
    assert len(flat) == total
    assert set(flat) == expected
    for index, ids in enumerate(settled):
        for occurrence_id in ids:
            occurrence = store.get_occurrence(occurrence_id)
            assert occurrence is not None
            assert occurrence.status == "succeeded"
            assert (occurrence.attempt, occurrence.fence) == (1, 1)
            assert occurrence.result == {"by": index}
    raw = store._connection.raw
    counts = {
        row["event_type"]: row["n"]
        for row in raw.execute("SELECT event_type, COUNT(*) AS n FROM events GROUP BY event_type")
    }
    assert counts == {
        "job_created": 1,
        "occurrence_enqueued": total,
        "occurrence_claimed": total,
        "occurrence_succeeded": total,
    }
    per_occurrence = raw.execute(
        "SELECT occurrence_id, COUNT(*) AS n FROM events "
        "WHERE event_type = 'occurrence_succeeded' GROUP BY occurrence_id HAVING n <> 1"
    ).fetchall()
    assert per_occurrence == []
