"""SPEC §8 on SQLite: the store's own file only, the caller's writer transaction, and the
shared-file mode that lets the application's tables live beside jobledger's."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import jobledger
from jobledger.testing import FakeClock
from tests.system.transactions.drivers import Driver


def test_app_connect_gives_a_connection_configured_as_the_stores(sqlite_driver: Driver) -> None:
    conn = sqlite_driver.app.connect()
    try:
        assert conn.isolation_level is None
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
        assert conn.execute("PRAGMA foreign_keys").fetchone() == (1,)
        assert conn.execute("PRAGMA busy_timeout").fetchone() == (5000,)
    finally:
        conn.close()


def test_a_connection_outside_a_transaction_or_on_another_file_is_refused(
    sqlite_driver: Driver, tmp_path: Path, clock: FakeClock
) -> None:
    app = sqlite_driver.app
    other = jobledger.App(tmp_path / "other" / "jobs.sqlite3", clock=clock)
    try:
        conn = other.connect()
        conn.execute("BEGIN IMMEDIATE")
        with pytest.raises(jobledger.InvalidArgument) as refused:
            app.enqueue("confirm", conn=conn)
        assert refused.value.details["reason"] == "another_store"
        conn.execute("ROLLBACK")
        conn.close()
    finally:
        other.close()
    plain = sqlite3.connect(":memory:")
    plain.execute("CREATE TABLE t (x)")
    plain.execute("BEGIN")
    with pytest.raises(jobledger.InvalidArgument) as refused:
        app.enqueue("confirm", conn=plain)
    assert refused.value.details["reason"] == "another_store"
    assert app.store.count_occurrences() == []


def test_a_copy_of_the_file_is_another_store(sqlite_driver: Driver, tmp_path: Path) -> None:
    copy_path = tmp_path / "copy.sqlite3"
    source = sqlite3.connect(sqlite_driver.target)
    destination = sqlite3.connect(copy_path)
    source.backup(destination)
    source.close()
    destination.execute("UPDATE jobledger_store SET store_id = 'someone-else'")
    destination.commit()
    destination.close()
    conn = sqlite3.connect(copy_path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    with pytest.raises(jobledger.InvalidArgument) as refused:
        sqlite_driver.app.enqueue("confirm", conn=conn)
    assert refused.value.details["reason"] == "another_store"  # another inode, first
    conn.close()


def test_a_deferred_transaction_that_cannot_become_the_writer_is_storage_unavailable(
    sqlite_driver: Driver,
) -> None:
    app = sqlite_driver.app
    reader = app.connect()
    reader.execute("BEGIN")  # deferred: a read snapshot, not the writer
    reader.execute("SELECT count(*) FROM orders").fetchone()
    app.enqueue("confirm", payload={"elsewhere": True})  # another writer commits meanwhile
    with pytest.raises(jobledger.StorageUnavailable) as busy:
        app.enqueue("confirm", conn=reader, key="k")
    assert busy.value.details["commitState"] == "not_committed"
    assert reader.in_transaction  # still the caller's to end
    reader.execute("ROLLBACK")
    reader.close()
    assert not app.enqueue("confirm", key="k").deduplicated


def test_the_callers_row_factory_is_left_as_it_was(sqlite_driver: Driver) -> None:
    conn = sqlite_driver.app.connect()
    conn.row_factory = None
    conn.execute("BEGIN IMMEDIATE")
    sqlite_driver.app.enqueue("confirm", conn=conn)
    assert conn.row_factory is None
    assert conn.execute("SELECT 1").fetchone() == (1,)
    conn.execute("COMMIT")
    conn.close()


def test_a_memory_store_hands_out_no_connection(clock: FakeClock) -> None:
    with jobledger.App(":memory:", clock=clock) as app, pytest.raises(jobledger.InvalidArgument):
        app.connect()


def test_what_is_not_a_connection_of_an_accepted_kind_is_refused(sqlite_driver: Driver) -> None:
    from sqlalchemy import create_engine

    app = sqlite_driver.app
    with pytest.raises(jobledger.InvalidArgument) as refused:
        app.enqueue("confirm", conn=object())
    assert refused.value.details["reason"] == "unsupported_connection"
    engine = create_engine(f"sqlite:///{sqlite_driver.target}")
    with engine.begin() as sa_conn, pytest.raises(jobledger.InvalidArgument) as other_dialect:
        app.enqueue("confirm", conn=sa_conn)  # SQLAlchemy: psycopg only
    assert other_dialect.value.details["reason"] == "unsupported_connection"
    engine.dispose()
    assert app.store.count_occurrences() == []


def test_enqueue_async_without_a_connection_uses_the_stores_transaction(
    sqlite_driver: Driver,
) -> None:
    import asyncio

    made = asyncio.run(sqlite_driver.app.enqueue_async("confirm", key="k", payload={"n": 1}))
    again = asyncio.run(sqlite_driver.app.enqueue_async("confirm", key="k", payload={"n": 1}))
    assert again.deduplicated and again.id == made.id


def _events(app: jobledger.App, occurrence_id: str) -> list[str]:
    return [event.type for event in app.store.history(occurrence_id=occurrence_id)]


def test_a_temp_events_table_does_not_take_the_enqueue_event(sqlite_driver: Driver) -> None:
    """Issue 30, item 3: unqualified, the ``occurrence_enqueued`` event went into the caller's
    temp table (gone at close) — an occurrence without its event, and verify() passed."""
    app = sqlite_driver.app
    conn = app.connect()
    try:
        conn.execute("CREATE TEMP TABLE events AS SELECT * FROM main.events WHERE 0")
        conn.execute("BEGIN IMMEDIATE")
        occurrence = app.enqueue("confirm", conn=conn)
        assert conn.execute("SELECT count(*) FROM temp.events").fetchone() == (0,)
        conn.execute("COMMIT")
    finally:
        conn.close()
    assert _events(app, occurrence.id) == ["occurrence_enqueued"]
    assert app.store.verify().ok


@pytest.mark.parametrize("table", ["occurrences", "OCCURRENCES", "events", "jobledger_keys"])
def test_a_temp_trigger_on_a_jobledger_table_is_refused_by_name_and_nothing_is_written(
    sqlite_driver: Driver, table: str
) -> None:
    """A temp trigger fires on jobledger's own writes (``max_attempts`` 3 → 32): refused."""
    app = sqlite_driver.app
    conn = app.connect()
    try:
        conn.execute(
            f"CREATE TEMP TRIGGER rewrite AFTER INSERT ON main.{table} BEGIN "
            "UPDATE occurrences SET max_attempts = 32; END"
        )
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO orders (id) VALUES (1)")
        with pytest.raises(jobledger.InvalidArgument) as refused:
            app.enqueue("confirm", conn=conn, key="k")
        assert refused.value.code == "SCHEDULER_INVALID_ARGUMENT"
        assert "rewrite" in refused.value.message and table in refused.value.message
        assert refused.value.details["reason"] == "temp_trigger"
        assert refused.value.details["triggers"] == [{"name": "rewrite", "table": table}]
        assert conn.in_transaction  # the caller's, still usable
        conn.execute("COMMIT")
        conn.execute("DROP TRIGGER temp.rewrite")
        conn.execute("BEGIN IMMEDIATE")
        occurrence = app.enqueue("confirm", conn=conn, key="k")
        conn.execute("COMMIT")
    finally:
        conn.close()
    assert sqlite_driver.orders() == [1]
    stored = app.store.get_occurrence(occurrence.id)
    assert stored is not None and stored.max_attempts == occurrence.max_attempts != 32
    assert not occurrence.deduplicated  # the refused call used no key


def test_temp_triggers_on_the_callers_own_tables_are_its_business(sqlite_driver: Driver) -> None:
    app = sqlite_driver.app
    conn = app.connect()
    try:
        conn.execute("CREATE TEMP TABLE audit (id)")
        conn.execute(
            "CREATE TEMP TRIGGER mine AFTER INSERT ON main.orders BEGIN "
            "INSERT INTO audit VALUES (new.id); END"
        )
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO orders (id) VALUES (7)")
        occurrence = app.enqueue("confirm", conn=conn)
        assert conn.execute("SELECT id FROM audit").fetchall() == [(7,)]
        conn.execute("COMMIT")
    finally:
        conn.close()
    assert app.store.get_occurrence(occurrence.id) is not None
