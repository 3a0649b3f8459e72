"""Enqueue inside the caller's own transaction (SPEC §8), on every accepted connection kind.

Every test runs once per driver (``drivers.py``) on a real database: sqlite3 on a shared file,
and psycopg (sync and async), SQLAlchemy (Connection, Session, AsyncSession) and Django on
PostgreSQL.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import jobledger
from tests.system.transactions.drivers import Driver, outside_transaction

ROOT = Path(__file__).resolve().parents[3]


def _events(app: jobledger.App, occurrence_id: str) -> list[str]:
    return [event.type for event in app.store.history(occurrence_id=occurrence_id)]


def _count(app: jobledger.App) -> int:
    return sum(count.count for count in app.store.count_occurrences(job_id="confirm"))


def test_a_commit_writes_the_row_the_occurrence_and_its_event_together(driver: Driver) -> None:
    app = driver.app
    caller = driver.begin()
    caller.order(1)
    occurrence = caller.enqueue(payload={"order": 1}, key="order-1")
    assert occurrence.status == "queued" and not occurrence.deduplicated
    # Another connection (the store's own) sees nothing before the commit.
    assert app.store.get_occurrence(occurrence.id) is None
    assert _events(app, occurrence.id) == []
    assert driver.orders() == []
    caller.commit()
    stored = app.store.get_occurrence(occurrence.id)
    assert stored is not None and stored.payload == {"order": 1}
    assert _events(app, occurrence.id) == ["occurrence_enqueued"]
    assert driver.orders() == [1]


def test_a_rollback_leaves_neither_and_the_key_unused(driver: Driver) -> None:
    app = driver.app
    caller = driver.begin()
    caller.order(1)
    occurrence = caller.enqueue(payload={"order": 1}, key="order-1")
    caller.rollback()
    assert app.store.get_occurrence(occurrence.id) is None
    assert _events(app, occurrence.id) == []
    assert driver.orders() == []
    again = app.enqueue("confirm", payload={"order": 1}, key="order-1")
    assert not again.deduplicated  # the key was never used


def test_a_used_key_answers_the_occurrence_and_the_callers_transaction_goes_on(
    driver: Driver,
) -> None:
    app = driver.app
    first = app.enqueue("confirm", payload={"order": 1}, key="order-1")
    caller = driver.begin()
    caller.order(2)
    again = caller.enqueue(payload={"order": 1}, key="order-1")
    assert again.deduplicated and again.id == first.id
    caller.order(3)
    with pytest.raises(jobledger.SchedulerError) as mismatch:
        caller.enqueue(payload={"order": 999}, key="order-1")
    assert mismatch.value.code == "SCHEDULER_IDEMPOTENCY_PAYLOAD_MISMATCH"
    caller.order(4)
    with pytest.raises(jobledger.NotFound):
        caller.enqueue("no-such-job")
    caller.order(5)
    fresh = caller.enqueue(payload={"order": 5}, key="order-5")
    caller.commit()
    assert driver.orders() == [2, 3, 4, 5]
    assert _count(app) == 2
    assert app.store.get_occurrence(fresh.id) is not None
    assert _events(app, first.id) == ["occurrence_enqueued"]


def test_enqueue_many_writes_all_or_none_in_the_callers_transaction(driver: Driver) -> None:
    app = driver.app
    caller = driver.begin()
    caller.order(1)
    made = caller.enqueue_many([{"n": 1}, {"n": 2}], keys=["a", "b"])
    with pytest.raises(jobledger.SchedulerError) as refused:
        caller.enqueue_many([{"n": 3}, {"n": 4}], keys=["c", "a"])  # "a" had another payload
    assert refused.value.details["index"] == 1
    caller.order(2)
    caller.commit()
    assert driver.orders() == [1, 2]
    assert _count(app) == 2  # "c" went with the failed call's savepoint
    assert all(app.store.get_occurrence(o.id) is not None for o in made)


def test_enqueue_many_async_without_conn_and_refusing_a_sync_one(sqlite_driver: Driver) -> None:
    app = sqlite_driver.app
    made = asyncio.run(app.enqueue_many_async("confirm", [{"n": 1}, {"n": 2}], keys=["a", "b"]))
    assert [o.payload for o in made] == [{"n": 1}, {"n": 2}]
    assert all(app.store.get_occurrence(o.id) is not None for o in made)
    with pytest.raises(jobledger.SchedulerError) as bad:
        asyncio.run(app.enqueue_many_async("confirm", [{"n": 3}], keys=["c", "d"]))
    assert bad.value.details["field"] == "keys"
    caller = sqlite_driver.begin()
    with pytest.raises(jobledger.SchedulerError) as misplaced:
        asyncio.run(app.enqueue_many_async("confirm", [{"n": 3}], conn=caller.native))
    assert misplaced.value.details["reason"] == "sync_connection"
    caller.commit()
    assert _count(app) == 2


def _wait_until_blocked(driver: Driver, done: threading.Event) -> None:
    """PostgreSQL: until a backend of this database waits on a lock (the second transaction
    waiting for the first one's key), or the racing thread already finished."""
    if driver.name == "sqlite3":
        return
    import psycopg

    with psycopg.connect(driver.target, autocommit=True) as admin:
        while not done.is_set():
            waiting = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'"
            ).fetchone()
            if waiting and waiting[0]:
                return
            done.wait(0.01)


@pytest.mark.parametrize("first_commits", [True, False], ids=["commit", "rollback"])
def test_two_open_transactions_racing_on_one_key_end_with_one_occurrence(
    driver: Driver, first_commits: bool
) -> None:
    app = driver.app
    first = driver.begin()
    mine = first.enqueue(payload={"order": 1}, key="order-1")
    results: list[Any] = []
    done = threading.Event()

    def second() -> None:
        try:
            caller = driver.begin()
            results.append(caller.enqueue(payload={"order": 1}, key="order-1"))
            caller.commit()
        except BaseException as exc:
            results.append(exc)
        finally:
            done.set()

    racer = threading.Thread(target=second)
    racer.start()
    _wait_until_blocked(driver, done)
    if first_commits:
        first.commit()
    else:
        first.rollback()
    racer.join(60)
    assert not racer.is_alive()
    [theirs] = results
    assert isinstance(theirs, jobledger.Occurrence), theirs
    assert theirs.id == mine.id
    assert theirs.deduplicated is first_commits
    assert _count(app) == 1
    assert _events(app, mine.id) == ["occurrence_enqueued"]


def test_connections_outside_a_transaction_are_refused_and_nothing_is_written(
    driver: Driver,
) -> None:
    import asyncio

    app = driver.app
    native, close, is_async = outside_transaction(driver)
    try:

        def right() -> object:
            if is_async:
                return asyncio.run(app.enqueue_async("confirm", conn=native, key="k"))
            return app.enqueue("confirm", conn=native, key="k")

        def wrong() -> object:  # a connection of the other flavour goes to the other method
            if is_async:
                return app.enqueue("confirm", conn=native)
            return asyncio.run(app.enqueue_async("confirm", conn=native))

        with pytest.raises(jobledger.InvalidArgument) as refused:
            right()
        assert refused.value.details["reason"] == "not_in_transaction"
        with pytest.raises(jobledger.InvalidArgument) as misplaced:
            wrong()
        assert misplaced.value.details["reason"] in ("async_connection", "sync_connection")
    finally:
        close()
    assert _count(app) == 0
    assert not app.enqueue("confirm", key="k").deduplicated


def test_a_process_killed_before_its_commit_leaves_nothing(driver: Driver) -> None:
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.system.transactions.kill_child", driver.name, driver.target],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])},
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline().split()
        assert line[:1] == ["ready"], line
        occurrence_id = line[1]
        assert driver.app.store.get_occurrence(occurrence_id) is None
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    assert driver.app.store.get_occurrence(occurrence_id) is None
    assert driver.orders() == []
    assert not driver.app.enqueue("confirm", payload={"order": 1}, key="order-1").deduplicated


def _shadow_every_table(driver: Driver, caller: Any) -> list[str]:
    """Temp tables on the caller's connection named like each of jobledger's, of the same
    columns (so a write that reached one would succeed there, silently)."""
    tables = [name for name in driver.store_tables() if name != "orders"]
    drop = "" if driver.name == "sqlite3" else " ON COMMIT DROP"
    for table in tables:
        caller.statement(
            f'CREATE TEMP TABLE "{table}"{drop} AS SELECT * FROM "{driver.schema}"."{table}" '
            "WHERE 1 = 0"
        )
    return tables


def test_temp_tables_named_like_jobledgers_take_none_of_its_reads_or_writes(
    driver: Driver,
) -> None:
    """Issue 30, items 3 and 4: SQLite and PostgreSQL both look in the session's temp schema
    first for an unqualified table; the caller's temp ``events`` must not take the audit event,
    nor a temp ``occurrences`` or ``jobledger_keys`` read as a corrupt store."""
    app = driver.app
    app.enqueue("confirm", payload={"order": 0}, key="order-0")  # a key already in the store
    caller = driver.begin()
    tables = _shadow_every_table(driver, caller)
    assert {"events", "occurrences", "jobs", "jobledger_keys"} <= set(tables)
    caller.order(1)
    occurrence = caller.enqueue(payload={"order": 1}, key="order-1")
    known = caller.enqueue(payload={"order": 0}, key="order-0")
    batch = caller.enqueue_many([{"order": 2}, {"order": 3}])
    caller.commit()
    assert known.deduplicated
    assert driver.orders() == [1]
    for made in (occurrence, *batch):
        stored = app.store.get_occurrence(made.id)
        assert stored is not None and stored.max_attempts == made.max_attempts
        assert _events(app, made.id) == ["occurrence_enqueued"]
    assert app.enqueue("confirm", payload={"order": 1}, key="order-1").deduplicated
    assert app.store.verify().ok
