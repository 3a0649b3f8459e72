"""SQLite shared-file mode (``App(path, shared_file=True)``, SPEC §8): verification covers
exactly jobledger's objects; a clash with them is ``SCHEDULER_SCHEMA_CORRUPT``; without the
flag a file with the application's tables is refused as before."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import jobledger
from jobledger.store.migrations import LATEST_VERSION
from jobledger.testing import FakeClock


def _file(tmp_path: Path, *statements: str) -> Path:
    path = tmp_path / "db" / "app.sqlite3"
    path.parent.mkdir(mode=0o700)
    conn = sqlite3.connect(path)
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()
    return path


def _open(path: Path, clock: FakeClock, **options: object) -> jobledger.Store:
    return jobledger.open_store(path, clock=clock, **options)  # type: ignore[arg-type]


def test_a_file_with_the_apps_tables_is_initialised_and_verified(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = _file(
        tmp_path,
        "CREATE TABLE orders (id integer PRIMARY KEY, total integer)",
        "CREATE INDEX orders_total ON orders (total)",
        "CREATE VIEW big_orders AS SELECT * FROM orders WHERE total > 100",
        "INSERT INTO orders VALUES (1, 500)",
    )
    with _open(path, clock, shared_file=True) as store:
        assert store.schema_outcome.created  # type: ignore[attr-defined]
        assert all(check.ok for check in store.verify().checks)
    with _open(path, clock, shared_file=True) as store:  # and opens again, verified
        assert not store.schema_outcome.created  # type: ignore[attr-defined]
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT total FROM big_orders").fetchall() == [(500,)]
    conn.close()


def test_without_the_flag_the_apps_tables_are_refused_as_before(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = _file(tmp_path, "CREATE TABLE orders (id integer PRIMARY KEY)")
    with pytest.raises(jobledger.SchedulerError) as refused:
        _open(path, clock)
    assert refused.value.code == "SCHEDULER_SCHEMA_UNKNOWN"
    _open(path, clock, shared_file=True).close()
    with pytest.raises(jobledger.SchedulerError) as again:
        _open(path, clock)  # a shared file stays one: opening it alone still refuses
    assert again.value.code == "SCHEDULER_SCHEMA_UNKNOWN"


@pytest.mark.parametrize(
    "clash",
    [
        "CREATE TABLE jobs (id integer PRIMARY KEY)",  # a jobledger table's name
        "CREATE VIEW migrations AS SELECT 1 AS version",
        "CREATE TABLE t (x); CREATE INDEX scheduler_events_job ON t (x)",  # an index's name
    ],
    ids=["table", "view", "index-name"],
)
def test_an_app_object_with_a_jobledger_name_is_schema_corrupt(
    tmp_path: Path, clock: FakeClock, clash: str
) -> None:
    path = _file(tmp_path, *clash.split("; "))
    with pytest.raises(jobledger.SchedulerError) as refused:
        _open(path, clock, shared_file=True)
    assert refused.value.code == "SCHEDULER_SCHEMA_CORRUPT"


@pytest.mark.parametrize(
    "addition",
    [
        "CREATE INDEX app_jobs_kind ON jobs (kind)",
        "CREATE TRIGGER app_touch AFTER INSERT ON occurrences BEGIN SELECT 1; END",
    ],
    ids=["index", "trigger"],
)
def test_an_app_index_or_trigger_on_a_jobledger_table_is_schema_corrupt(
    tmp_path: Path, clock: FakeClock, addition: str
) -> None:
    path = _file(tmp_path, "CREATE TABLE orders (id integer PRIMARY KEY)")
    _open(path, clock, shared_file=True).close()
    conn = sqlite3.connect(path)
    conn.execute(addition)
    conn.commit()
    conn.close()
    with pytest.raises(jobledger.SchedulerError) as refused:
        _open(path, clock, shared_file=True)
    assert refused.value.code == "SCHEDULER_SCHEMA_CORRUPT"


def test_the_app_keeps_jobledgers_identity_pragmas(tmp_path: Path, clock: FakeClock) -> None:
    path = _file(tmp_path, "CREATE TABLE orders (id integer PRIMARY KEY)")
    _open(path, clock, shared_file=True).close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA application_id").fetchone() == (0x4343534B,)
    assert conn.execute("PRAGMA user_version").fetchone() == (LATEST_VERSION,)
    conn.close()


def test_shared_file_is_refused_where_it_cannot_apply(tmp_path: Path, clock: FakeClock) -> None:
    with pytest.raises(jobledger.InvalidArgument):
        jobledger.open_store("postgresql://nobody@127.0.0.1:1/none", shared_file=True)
    with jobledger.open_store(tmp_path / "own" / "j.sqlite3", clock=clock) as store:
        with pytest.raises(jobledger.InvalidArgument):
            jobledger.App(store, shared_file=True)
    with pytest.raises(jobledger.InvalidArgument):
        jobledger.open_store(tmp_path / "x" / "j.sqlite3", shared_file="yes")  # type: ignore[arg-type]
