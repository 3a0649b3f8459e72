"""What a planner tick costs: one indexed read when nothing is due (counted, not timed)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from jobledger import SQLiteStore
from jobledger.planning.planner import Planner
from jobledger.schedules import Cron, Every

from .helpers import move_to, occurrence_rows, schedule_job, utc


class _CountingTx:
    """A Tx that logs the name of every statement it runs (a pipelined batch — ``many`` /
    ``rows_many``, one round trip on PostgreSQL — is logged once, its size in ``sizes``)."""

    sizes: dict[str, int] = {}

    def __init__(self, tx, log, kind):
        self._tx, self._log, self._kind = tx, log, kind

    def _note(self, name):
        self._log.append((self._kind, name))

    def one(self, query, params=None):
        self._note(query)
        return self._tx.one(query, params)

    def all(self, query, params=None):
        self._note(query)
        self._count_rows(query)
        return self._tx.all(query, params)

    def run(self, query, params=None):
        self._note(query)
        self._count_rows(query)
        return self._tx.run(query, params)

    def _count_rows(self, query):
        # A many-rows statement carries the rows given to the table() that built its parameters.
        rows = getattr(self, "_rows", None)
        if rows is not None:
            self.sizes[query] = self.sizes.get(query, 0) + rows
            self._rows = None

    def many(self, query, params):
        self._note(query)
        self.sizes[query] = self.sizes.get(query, 0) + len(params)
        return self._tx.many(query, params)

    def rows_many(self, query, params):
        self._note(query)
        self.sizes[query] = self.sizes.get(query, 0) + len(params)
        return self._tx.rows_many(query, params)

    def table(self, rows):
        self._rows = len(rows)
        return self._tx.table(rows)

    def now(self):
        return self._tx.now()


@pytest.fixture
def statements(store, monkeypatch):
    """Every named statement the store runs from now on, as (read|write, name)."""
    log: list[tuple[str, str]] = []
    _CountingTx.sizes = {}
    read, write = store._read, store._write

    def counted(run, kind):
        def transaction(body):
            log.append((kind, "BEGIN"))
            return run(lambda tx: body(_CountingTx(tx, log, kind)))

        return transaction

    monkeypatch.setattr(store, "_read", counted(read, "read"))
    monkeypatch.setattr(store, "_write", counted(write, "write"))
    return log


def _many_jobs(store, count=200):
    for index in range(count):
        trigger = Every(timedelta(minutes=5)) if index % 2 else Cron(f"{index % 60} * * * *")
        schedule_job(store, f"job-{index:04d}", trigger)


def test_a_tick_with_nothing_due_is_one_indexed_read(store, clock, statements):
    move_to(clock, utc(2026, 1, 1, 0, 0, 30))
    _many_jobs(store)
    first = Planner(store).tick()
    assert first.planned_jobs == 200
    statements.clear()
    report = Planner(store).tick()
    assert statements == [("read", "BEGIN"), ("read", "schedule_next_due")]
    assert (report.enqueued, report.skipped, report.planned_jobs) == ([], [], 0)
    assert report.next_due_at == min(
        state.next_due_at for state in (store.schedule_state(f"job-{i:04d}") for i in range(200))
    )


def test_a_tick_with_work_reads_in_batches_and_writes_once_per_batch(store, clock, statements):
    move_to(clock, utc(2026, 1, 1, 0, 0, 30))
    for index in range(30):
        schedule_job(store, f"job-{index:04d}", Every(timedelta(minutes=1)))
    Planner(store).tick()
    clock.advance(10 * 60_000)  # each job: nine missed slots coalesced, the tenth fires
    statements.clear()
    _CountingTx.sizes = {}
    report = Planner(store, batch_size=20).tick()
    assert report.planned_jobs == 30
    transactions = [kind for kind, name in statements if name == "BEGIN"]
    assert transactions == ["read", "write", "read", "write", "read"]  # two batches, then idle
    reads = [name for kind, name in statements if kind == "read" and name != "BEGIN"]
    assert reads == ["schedule_next_due", "schedules_due"] * 2 + ["schedule_next_due"]
    writes = Counter(name for kind, name in statements if kind == "write" and name != "BEGIN")
    # Per batch, five pipelined statements (one round trip each on PostgreSQL): the
    # compare-and-swaps, the jobs whose slots fire, the occurrences, the skip lists, the events.
    assert writes == Counter(
        {
            "record_schedule_plan": 2,
            "get_job": 2,
            "insert_occurrences_from_jobs": 2,
            "set_schedule_skips": 2,
            "insert_events": 2,
        }
    )
    assert _CountingTx.sizes == {
        "record_schedule_plan": 30,
        "get_job": 30,
        "insert_occurrences_from_jobs": 30,
        "set_schedule_skips": 30,
        "insert_events": 60,  # one enqueue and one skipped-run event per job
    }
    assert len(report.enqueued) == 30 and len(report.skipped) == 30


def _plan_text(store, query):
    if isinstance(store, SQLiteStore):
        from jobledger.store.sqlite.store import QUERIES

        sql = "EXPLAIN QUERY PLAN " + QUERIES[query]
        params = {"now": 0, "limit": 10}
        with store._connection.reading() as conn:
            return " | ".join(str(row["detail"]) for row in conn.execute(sql, params).fetchall())
    from jobledger.store.postgres.tx import QUERIES

    sql = "EXPLAIN " + QUERIES[query]

    def body(conn, _now):
        rows = conn.execute(sql, {"now": 0, "limit": 10}).fetchall()
        return " | ".join(str(next(iter(row.values()))) for row in rows), False

    return store._pool.transaction(body, read_only=True)


def test_the_due_queries_read_the_due_index(store, clock, backend):
    move_to(clock, utc(2026, 1, 1))
    _many_jobs(store, 300)
    Planner(store).tick()
    if backend == "postgres":
        occurrence_rows(store, "SELECT 1")  # a read; then refresh the planner statistics
        store._pool.transaction(lambda conn, _now: (conn.execute("ANALYZE"), False))
    for query in ("schedule_next_due", "schedules_due"):
        plan = _plan_text(store, query)
        assert "jobledger_schedules_due" in plan, plan
        assert "SCAN jobs" not in plan and "Seq Scan on jobs" not in plan, plan
