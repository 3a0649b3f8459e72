"""Uncoded exceptions the fuzz found in ``src/``, each pinned by a test of its own.

Every one found so far is fixed and stays here as a regression test. A new one gets a strict
``xfail`` whose ``reason`` names the file, the function and the exception, and an entry in
``support.KNOWN`` so the fuzz counts it and keeps looking for others; when its fix lands the
test XPASSes, which fails the suite: remove the mark and the entry together.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import jobledger
from jobledger.engine.heartbeat import ManualHeartbeat
from jobledger.testing import FakeClock

AUTHORITY = {"principal": {"type": "user", "id": "fuzz"}}


@pytest.fixture
def store(tmp_path: Path):
    with jobledger.open_store(tmp_path / "db" / "s.sqlite3", clock=FakeClock()) as opened:
        yield opened


def test_prune_with_statuses_none_is_invalid_argument(store):
    with pytest.raises(jobledger.InvalidArgument):
        store.prune(before=0, actor="fuzz", statuses=None)


def test_enqueue_many_with_keys_not_a_sequence_is_invalid_argument(tmp_path):
    with jobledger.App(tmp_path / "db" / "a.sqlite3", authorize=jobledger.allow_all) as app:
        app.ensure_job("job", "work")
        with pytest.raises(jobledger.InvalidArgument):
            app.enqueue_many("job", [{}], keys=5)  # type: ignore[arg-type]


@pytest.mark.parametrize("handlers", [jobledger.UNSET, ["abc"]], ids=["unset", "list-of-str"])
def test_runtime_with_handlers_not_a_mapping_is_invalid_argument(store, handlers):
    with pytest.raises(jobledger.SchedulerError):
        jobledger.Runtime(
            store, authorize=jobledger.allow_all, handlers=handlers, heartbeat=ManualHeartbeat()
        )


def test_invalid_utf8_in_the_catalog_is_refused_coded(tmp_path):
    path = tmp_path / "db" / "s.sqlite3"
    with jobledger.open_store(path, clock=FakeClock()):
        pass
    damaged = tmp_path / "damaged" / "s.sqlite3"
    damaged.parent.mkdir(mode=0o700)
    shutil.copyfile(path, damaged)
    data = bytearray(damaged.read_bytes())
    # A catalog record is (type, name, tbl_name, rootpage, sql): damage the first letter of a
    # table's *name* with a UTF-8 lead byte followed by ASCII (invalid UTF-8).
    offset = data.index(b"tablejobsjobs") + len(b"table")
    data[offset] = 0xE5
    damaged.write_bytes(bytes(data))
    before = damaged.read_bytes()
    with pytest.raises(jobledger.SchemaCorrupt):
        jobledger.open_store(damaged, clock=FakeClock())
    assert damaged.read_bytes() == before


@pytest.mark.parametrize("zone", ["America", "x" * 300], ids=["zone-directory", "too-long"])
def test_cli_tz_that_is_not_a_zone_is_a_usage_error(tmp_path, zone):
    import io

    from jobledger.cli import main

    err = io.StringIO()
    code = main(
        ["--db", str(tmp_path / "db" / "c.sqlite3"), "--tz", zone, "db", "info"],
        env={},
        stdin=io.StringIO(""),
        stdout=io.StringIO(),
        stderr=err,
    )
    assert "SCHEDULER_INTERNAL_ERROR" not in err.getvalue()
    assert code == 2 and "SCHEDULER_INVALID_ARGUMENT" in err.getvalue()


def test_a_catalog_value_that_is_not_text_is_refused_coded(tmp_path):
    import sqlite3

    path = tmp_path / "db" / "s.sqlite3"
    with jobledger.open_store(path, clock=FakeClock()):
        pass
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA writable_schema = ON")
        with conn:
            conn.execute(
                "UPDATE sqlite_master SET sql = CAST(sql AS BLOB) "
                "WHERE name = (SELECT name FROM sqlite_master WHERE type = 'index' "
                "AND sql IS NOT NULL ORDER BY name LIMIT 1)"
            )
    finally:
        conn.close()
    before = path.read_bytes()
    with pytest.raises(jobledger.SchemaCorrupt):
        jobledger.open_store(path, clock=FakeClock())
    assert path.read_bytes() == before


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("key", ["version", "type"])
def test_a_deeply_nested_schedule_field_is_refused_coded(store, key):
    # The message quoted the value with repr(), which recursed through all of it.
    trigger = {"jobledger": "schedule", "version": 1, "type": "cron", key: _nested(5_000)}
    with pytest.raises(jobledger.InvalidArgument) as refused:
        jobledger.parse_trigger(trigger)
    assert len(refused.value.message) < 300
    with pytest.raises(jobledger.InvalidArgument):
        store.create_job(id="j", kind="work", authority=AUTHORITY, trigger=trigger)
    assert store.get_job("j") is None


@pytest.mark.parametrize("depth", [65, 5_000, 100_000])
def test_a_deeply_nested_payload_is_refused_coded_at_every_door(store, depth):
    value = _nested(depth)
    store.create_job(id="j", kind="work", authority=AUTHORITY)
    for call in (
        lambda: store.create_job(id="k", kind="work", authority=AUTHORITY, payload=value),
        lambda: store.update_job("j", expected_revision=1, patch={"payload": value}),
        lambda: store.enqueue_occurrence(
            job_id="j", scheduled_for=0, trigger_key="t", payload=value
        ),
        lambda: jobledger.canonical_json(value),
    ):
        with pytest.raises(jobledger.InvalidArgument, match="depth"):
            call()
    assert store.count_occurrences() == []


def test_stored_json_nested_too_deeply_to_read_is_data_corrupt(tmp_path):
    import sqlite3

    from jobledger.planning.planner import Planner

    path = tmp_path / "db" / "s.sqlite3"
    with jobledger.open_store(path, clock=FakeClock()) as store:
        store.create_job(id="j", kind="work", authority=AUTHORITY)
        # SQLite's json_valid() accepts 1,000 levels; Python's recursive parser gives out first.
        deep = "[" * 1_000 + "1" + "]" * 1_000
        conn = sqlite3.connect(path)
        with conn:
            conn.execute("UPDATE jobs SET trigger_json = ?, payload_json = ?", (deep, deep))
        conn.close()
        for call in (
            lambda: store.get_job("j"),
            lambda: store.list_jobs(),
            lambda: store.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="t"),
        ):
            with pytest.raises(jobledger.DataCorrupt):
                call()
        Planner(store).tick()  # not a schedule: nothing to plan, nothing raised
        assert store.count_occurrences() == []
