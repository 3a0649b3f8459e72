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
