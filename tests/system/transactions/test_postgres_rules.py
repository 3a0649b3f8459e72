"""SPEC §8 on PostgreSQL: the NOTIFY is delivered at commit, a worker polling every 30 s takes
the job at once, and connections the rules refuse change nothing."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest

import jobledger
from tests.store.pg_support import (
    _admin_execute,
    _drop,
    database_url,
    fresh_database_url,
    new_database_name,
)
from tests.system.transactions.drivers import Driver

pytestmark = pytest.mark.postgres


def _channel(app: jobledger.App) -> str:
    return f"jobledger_work_{app.store.schema}"  # type: ignore[attr-defined]


def test_the_work_notification_is_sent_in_the_transaction_and_delivered_at_commit(
    pg_driver: Driver,
) -> None:
    with psycopg.connect(pg_driver.target, autocommit=True) as listener:
        listener.execute(f"LISTEN {_channel(pg_driver.app)}")
        caller = pg_driver.begin()
        caller.enqueue(payload={"order": 1})
        listener.execute("SELECT 1")  # a round trip: anything already sent has arrived
        assert list(listener.notifies(timeout=0)) == []
        caller.commit()
        [delivered] = list(listener.notifies(timeout=30, stop_after=1))
        assert delivered.channel == _channel(pg_driver.app)


def test_a_rolled_back_enqueue_wakes_nobody(pg_driver: Driver) -> None:
    with psycopg.connect(pg_driver.target, autocommit=True) as listener:
        listener.execute(f"LISTEN {_channel(pg_driver.app)}")
        caller = pg_driver.begin()
        caller.enqueue(payload={"order": 1})
        caller.rollback()
        # A marker sent after the rollback arrives after anything the rollback delivered.
        listener.execute(f"NOTIFY {_channel(pg_driver.app)}, 'marker'")
        [first] = list(listener.notifies(timeout=30, stop_after=1))
        assert first.payload == "marker"


def test_a_worker_polling_every_30_seconds_takes_the_job_when_the_caller_commits(
    pg_driver: Driver, postgres_database_url: str
) -> None:
    # The worker is another app on the same database, with the system clock: it only learns
    # of the job from the NOTIFY (its next poll is 30 s away).
    worker_app = jobledger.App(pg_driver.target, authorize=jobledger.allow_all)
    ran: list[str] = []
    took = threading.Event()

    @worker_app.handler("send_confirmation")
    def confirm(ctx: jobledger.JobContext) -> None:
        ran.append(ctx.occurrence_id)
        took.set()

    worker = worker_app.worker(poll_interval=timedelta(seconds=30), planner=False)
    runner = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    runner.start()
    try:
        listener = worker_app.store.listener  # type: ignore[attr-defined]
        assert listener.connected.wait(30)
        # First job through the store's own enqueue: the worker has then done its wake-up poll
        # (the listener's connect notifies once) and is waiting out its 30 s poll interval.
        worker_app.enqueue("confirm", payload={"warm": True})
        assert took.wait(30)
        took.clear()
        caller = pg_driver.begin()
        occurrence = caller.enqueue(payload={"order": 1})
        caller.commit()
        # Far less than the 30 s poll interval: only the NOTIFY delivered at commit wakes it.
        assert took.wait(10)
        assert ran[-1] == occurrence.id
    finally:
        worker.stop()
        runner.join(30)
        worker_app.close()


@pytest.mark.parametrize("level", ["REPEATABLE READ", "SERIALIZABLE"])
def test_isolation_above_read_committed_is_refused(psycopg_driver: Driver, level: str) -> None:
    with psycopg.connect(psycopg_driver.target) as conn:
        conn.execute(f"SET TRANSACTION ISOLATION LEVEL {level}")
        conn.execute("INSERT INTO orders (id) VALUES (1)")
        with pytest.raises(jobledger.InvalidArgument) as refused:
            psycopg_driver.app.enqueue("confirm", conn=conn)
        assert refused.value.details["reason"] == "isolation"
        conn.execute("INSERT INTO orders (id) VALUES (2)")  # the caller's transaction goes on
        conn.commit()
    assert psycopg_driver.orders() == [1, 2]
    assert psycopg_driver.app.store.count_occurrences() == []


@pytest.fixture
def other_database(postgres_template: str) -> Iterator[str]:
    """Another database: a clone of the same template, so even its store id is the same."""
    yield from fresh_database_url(postgres_template)


def test_a_connection_on_another_database_is_refused_and_its_transaction_goes_on(
    psycopg_driver: Driver, other_database: str
) -> None:
    with psycopg.connect(other_database) as conn:
        conn.execute("CREATE TABLE orders (id integer PRIMARY KEY)")
        conn.execute("INSERT INTO orders (id) VALUES (1)")
        with pytest.raises(jobledger.InvalidArgument) as refused:
            psycopg_driver.app.enqueue("confirm", conn=conn, key="k")
        assert refused.value.details["reason"] == "another_store"
        conn.execute("INSERT INTO orders (id) VALUES (2)")
        conn.commit()
        assert conn.execute("SELECT count(*) FROM orders").fetchone() == (2,)
        assert conn.execute("SELECT count(*) FROM jobledger.occurrences").fetchone() == (0,)
    assert psycopg_driver.app.store.count_occurrences() == []


@pytest.fixture
def empty_database() -> Iterator[str]:
    name = new_database_name()
    _admin_execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    try:
        yield database_url(name)
    finally:
        _drop(name)


def test_a_database_without_the_schema_is_refused(
    psycopg_driver: Driver, empty_database: str
) -> None:
    with psycopg.connect(empty_database) as conn:
        conn.execute("SET search_path TO public")
        conn.execute("CREATE TABLE orders (id integer PRIMARY KEY)")
        with pytest.raises(jobledger.InvalidArgument) as refused:
            psycopg_driver.app.enqueue("confirm", conn=conn)
        assert refused.value.details["reason"] == "another_store"
        assert conn.execute("SHOW search_path").fetchone() == ("public",)
        conn.execute("INSERT INTO orders (id) VALUES (1)")  # still usable
        conn.commit()


def test_the_callers_search_path_and_row_factory_are_left_as_they_were(
    psycopg_driver: Driver,
) -> None:
    with psycopg.connect(psycopg_driver.target) as conn:
        conn.execute("SET search_path TO public")
        psycopg_driver.app.enqueue("confirm", conn=conn, key="k")
        assert conn.execute("SHOW search_path").fetchone() == ("public",)
        with pytest.raises(jobledger.SchedulerError):
            psycopg_driver.app.enqueue("missing", conn=conn)
        assert conn.execute("SHOW search_path").fetchone() == ("public",)
        conn.commit()
    assert psycopg_driver.app.enqueue("confirm", key="k").deduplicated


def test_a_failed_transaction_is_refused(psycopg_driver: Driver) -> None:
    with psycopg.connect(psycopg_driver.target) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1/0")
        with pytest.raises(jobledger.InvalidArgument) as refused:
            psycopg_driver.app.enqueue("confirm", conn=conn)
        assert refused.value.details["reason"] == "transaction_failed"
        conn.rollback()


def test_app_connect_is_for_sqlite_only(psycopg_driver: Driver) -> None:
    with pytest.raises(jobledger.InvalidArgument):
        psycopg_driver.app.connect()


def test_a_sqlite_connection_on_a_postgres_store_is_refused(
    psycopg_driver: Driver, tmp_path
) -> None:
    import sqlite3

    conn = sqlite3.connect(tmp_path / "other.sqlite3", isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    with pytest.raises(jobledger.InvalidArgument) as refused:
        psycopg_driver.app.enqueue("confirm", conn=conn)
    assert refused.value.details["reason"] == "another_store"
    conn.close()


def test_the_async_bridge_reads_every_result_of_batched_statements(
    psycopg_driver: Driver,
) -> None:
    import asyncio

    from jobledger.store.postgres.caller import BlockingAsyncConnection

    async def main() -> tuple[list[object], list[list[object]]]:
        aconn = await psycopg.AsyncConnection.connect(psycopg_driver.target)
        bridge = BlockingAsyncConnection(aconn, asyncio.get_running_loop())

        def work() -> tuple[list[object], list[list[object]]]:
            cursor = bridge.cursor()
            cursor.executemany(
                "INSERT INTO orders (id) VALUES (%(id)s) RETURNING id",
                [{"id": 1}, {"id": 2}],
                returning=True,
            )
            returned = []
            while True:
                returned.append(cursor.fetchone())
                if not cursor.nextset():
                    break
            return returned, bridge.batch("SELECT 1 AS a; SELECT 2 AS b WHERE false")

        try:
            return await asyncio.to_thread(work)
        finally:
            await aconn.rollback()
            await aconn.close()

    returned, sets = asyncio.run(main())
    assert returned == [{"id": 1}, {"id": 2}]
    assert sets == [[{"a": 1}], []]
    assert psycopg_driver.orders() == []  # rolled back
