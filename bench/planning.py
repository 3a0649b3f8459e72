"""What a planner tick costs with 10,000 scheduled jobs: nothing due, and every job due.

Setup: ``--jobs`` scheduled jobs (default 10,000), half ``Cron`` (``* * * * *`` in four zones)
and half ``Every(1 minute)`` with anchors spread over the minute, so that after one minute every
job has exactly one new slot. A fake clock drives the store (and so the planner), so the two
cases are exact:

* **idle** — a tick right after a full pass: nothing is due; the tick is one probe of the due
  index (``schedule_next_due``);
* **all due** — the clock moves one minute; the tick reads the due schedules in batches of 500
  and records every job's decision (one compare-and-swap, one occurrence, its event), one write
  transaction per batch.

Each case runs ``--runs`` times (default 5); the median is printed (and min / max). SQLite runs
on a temporary file with the default settings (WAL, ``synchronous=FULL``); with ``--postgres
URL`` the same runs on a fresh schema of that database (dropped afterwards).

    python3 bench/planning.py
    python3 bench/planning.py --jobs 2000 --runs 3 --postgres postgresql://postgres@127.0.0.1/test
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jobledger
from jobledger.planning.planner import Planner
from jobledger.schedules import Cron, Every, schedule_json
from jobledger.store.sqlite import SQLiteStore
from jobledger.testing import FakeClock

AUTHORITY = {"principal": {"type": "user", "id": "bench"}}
START = datetime(2026, 1, 1, tzinfo=UTC)
ZONES = ("UTC", "America/New_York", "Europe/Berlin", "Asia/Kolkata")


def _trigger(index: int) -> dict[str, Any]:
    if index % 2:
        anchor = START + timedelta(milliseconds=(index * 7_919) % 60_000)
        return schedule_json(Every(timedelta(minutes=1), anchor=anchor))
    return schedule_json(Cron("* * * * *", timezone=ZONES[(index // 2) % len(ZONES)]))


def _create_jobs(store: jobledger.Store, count: int) -> None:
    for index in range(count):
        store.create_job(
            id=f"bench-{index:05d}", kind="bench", authority=AUTHORITY, trigger=_trigger(index)
        )


def _measure(
    open_store: Callable[[], jobledger.Store], clock: FakeClock, jobs: int, runs: int
) -> dict[str, Any]:
    store = open_store()
    try:
        began = time.perf_counter()
        _create_jobs(store, jobs)
        setup_s = time.perf_counter() - began
        planner = Planner(store)
        first = planner.tick()  # at the creation instant: every job planned, nothing fired
        assert first.planned_jobs == jobs, first.planned_jobs
        idle: list[float] = []
        busy: list[float] = []
        for _ in range(runs):
            clock.advance(60_000)
            began = time.perf_counter()
            report = planner.tick()
            busy.append(time.perf_counter() - began)
            assert len(report.enqueued) == jobs, len(report.enqueued)
            assert report.skipped == [], report.skipped[:3]
            del report  # free the busy report (10,000 occurrences) outside the timed idle tick
            began = time.perf_counter()
            quiet = planner.tick()
            idle.append(time.perf_counter() - began)
            assert quiet.planned_jobs == 0
            assert quiet.next_due_at is not None
        return {"setup_s": setup_s, "idle": idle, "busy": busy}
    finally:
        store.close()


def _line(label: str, samples: list[float], jobs: int | None = None) -> str:
    median = statistics.median(samples)
    text = (
        f"  {label:<10} median {median * 1000:9.2f} ms   "
        f"(min {min(samples) * 1000:.2f}, max {max(samples) * 1000:.2f})"
    )
    if jobs:
        text += f"   {median / jobs * 1e6:7.1f} µs/job   {jobs / median:,.0f} jobs/s"
    return text


def _report(name: str, result: dict[str, Any], jobs: int) -> None:
    print(f"{name}: {jobs:,} scheduled jobs (setup {result['setup_s']:.1f} s)")
    print(_line("idle", result["idle"]))
    print(_line("all due", result["busy"], jobs))


def run_sqlite(jobs: int, runs: int, directory: str | None) -> None:
    root = Path(tempfile.mkdtemp(prefix="jobledger-plan-", dir=directory))
    clock = FakeClock(int(START.timestamp() * 1000))
    try:
        path = root / "db" / "planning.sqlite3"
        result = _measure(lambda: SQLiteStore.open(path, clock=clock), clock, jobs, runs)
        _report("SQLite (WAL, synchronous=FULL)", result, jobs)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_postgres(url: str, jobs: int, runs: int) -> None:
    import psycopg

    schema = f"bench_planning_{uuid.uuid4().hex[:8]}"
    clock = FakeClock(int(START.timestamp() * 1000))
    try:
        result = _measure(
            lambda: jobledger.open_store(url, clock=clock, schema=schema, listen=False),
            clock,
            jobs,
            runs,
        )
        _report(f"PostgreSQL (schema {schema})", result, jobs)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--postgres", metavar="URL", help="also run on this PostgreSQL database")
    parser.add_argument("--skip-sqlite", action="store_true")
    parser.add_argument("--dir", help="where the SQLite file goes (a real disk, not tmpfs)")
    args = parser.parse_args()
    if not args.skip_sqlite:
        run_sqlite(args.jobs, args.runs, args.dir)
    if args.postgres:
        run_postgres(args.postgres, args.jobs, args.runs)


if __name__ == "__main__":
    main()
