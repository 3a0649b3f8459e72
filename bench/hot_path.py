"""What one occurrence costs a worker: transactions, statements and CPU, on SQLite and PostgreSQL.

Enqueues ``--n`` no-op occurrences with ``enqueue_many``, then drains them with a real
:class:`jobledger.Worker` in this process (adaptive prefetch, group-committed settles, the
planner and housekeeping threads all running) at each ``--concurrency``. Every SQL statement
the worker's threads send is counted (SQLite: the connections' trace callbacks; PostgreSQL:
psycopg's cursor ``execute``), and so is every commit. A watcher thread, not counted, stops the
worker when nothing is left unsettled.

    python bench/hot_path.py                                  # SQLite, 5,000, c = 1 and 4
    python bench/hot_path.py --postgres postgresql://postgres@127.0.0.1:5432/test
    python bench/hot_path.py --n 10000 --concurrency 1,4,8 --json out.json

Reported per occurrence: write transactions (claim batches + settle batches + the rest),
statements, process CPU (user + system, all threads) and wall time; plus the mean claim and
settle batch sizes. The counting itself costs CPU, so CPU and wall figures here are a little
above an uninstrumented run (``bench/peers`` times that).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import jobledger

sys.path.insert(0, str(Path(__file__).resolve().parent))
from claim_scaling import machine

WATCHER = "hot-path-watcher"
JOB = "noop-job"


class Tally:
    """Statements and commits seen from any thread but the watcher's."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.statements: Counter[str] = Counter()
        self.enabled = False

    def see(self, sql: str) -> None:
        if not self.enabled or threading.current_thread().name == WATCHER:
            return
        head = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
        with self.lock:
            self.statements[head] += 1

    def mark(self, key: str) -> None:
        if self.enabled and threading.current_thread().name != WATCHER:
            with self.lock:
                self.statements[key] += 1

    def total(self) -> int:
        return sum(n for head, n in self.statements.items() if not head.startswith("COMMIT ("))


def trace_sqlite(store: Any, tally: Tally) -> None:
    connection = store._connection  # the store's writer and reader connections
    connection.raw.set_trace_callback(tally.see)
    if connection._reader is not None:
        connection._reader.set_trace_callback(tally.see)


def trace_postgres(tally: Tally) -> Any:
    import psycopg

    original = psycopg.Cursor.execute

    def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        text = query if isinstance(query, str) else str(getattr(query, "_obj", query))
        tally.see(text)
        # The store runs its connections in autocommit and sends BEGIN/COMMIT itself; a
        # statement sent outside BEGIN is a transaction of its own (the one-statement paths).
        head = text.lstrip().split(None, 1)[0].upper() if text.strip() else ""
        idle = self.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        if idle and head not in ("BEGIN", "START", "COMMIT", "ROLLBACK", "LISTEN", "SET", "SHOW"):
            tally.mark("COMMIT (own transaction)")
        return original(self, query, *args, **kwargs)

    psycopg.Cursor.execute = execute  # type: ignore[method-assign]

    def undo() -> None:
        psycopg.Cursor.execute = original  # type: ignore[method-assign]

    return undo


def unsettled(target: str, schema: str | None) -> int:
    if schema is None:
        with sqlite3.connect(target) as conn:
            return int(
                conn.execute(
                    "SELECT count(*) FROM occurrences "
                    "WHERE status IN ('queued', 'running', 'retry_wait')"
                ).fetchone()[0]
            )
    import psycopg

    with psycopg.connect(target, autocommit=True) as conn:
        row = conn.execute(
            f'SELECT count(*) FROM "{schema}".occurrences '
            "WHERE status IN ('queued', 'running', 'retry_wait')"
        ).fetchone()
        assert row is not None
        return int(row[0])


def measure(target: str, schema: str | None, n: int, concurrency: int) -> dict[str, Any]:
    options = {"schema": schema} if schema else None
    app = jobledger.App(target, authorize=jobledger.allow_all, store_options=options)

    @app.handler("noop")
    def noop(ctx: jobledger.JobContext) -> None:
        return None

    app.ensure_job(JOB, "noop")
    for start in range(0, n, 10_000):
        app.enqueue_many(JOB, [None] * min(10_000, n - start))
    tally = Tally()
    undo = None
    if schema is None:
        trace_sqlite(app.store, tally)
    else:
        undo = trace_postgres(tally)
    worker = app.worker(concurrency=concurrency, poll_interval=timedelta(milliseconds=50))

    def stop_when_drained() -> None:
        while unsettled(target, schema):
            time.sleep(0.02)
        worker.stop()

    watcher = threading.Thread(target=stop_when_drained, name=WATCHER, daemon=True)
    tally.enabled = True
    cpu0, wall0 = time.process_time(), time.perf_counter()
    watcher.start()
    summary = worker.run(install_signal_handlers=False)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    tally.enabled = False
    watcher.join()
    if undo is not None:
        undo()
    app.close()
    settled = summary.statuses.get("succeeded", 0)
    statements = tally.statements
    commits = statements["COMMIT"] + statements["COMMIT (own transaction)"]
    return {
        "store": "sqlite" if schema is None else "postgres",
        "concurrency": concurrency,
        "occurrences": n,
        "succeeded": settled,
        "commits_per_occurrence": commits / n,
        "claim_transactions": summary.claim_transactions,
        "settle_transactions": summary.settle_transactions,
        "claim_batch_mean": n / max(1, summary.claim_transactions),
        "settle_batch_mean": n / max(1, summary.settle_transactions),
        "statements_per_occurrence": tally.total() / n,
        "statements": dict(statements.most_common()),
        "cpu_ms_per_occurrence": cpu * 1000 / n,
        "wall_ms_per_occurrence": wall * 1000 / n,
        "per_s": n / wall,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=5000, help="occurrences per measurement")
    parser.add_argument("--concurrency", default="1,4", help="worker slots, comma-separated")
    parser.add_argument("--postgres", default=None, help="also measure on this PostgreSQL URL")
    parser.add_argument("--skip-sqlite", action="store_true")
    parser.add_argument("--dir", type=Path, default=None, help="where the SQLite file goes")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    base = Path(tempfile.mkdtemp(prefix="jobledger-hotpath-", dir=args.dir))
    print(f"# {machine()}")
    print(
        f"{'store':<9}{'slots':>5} {'commits/occ':>11} {'claim batch':>11} "
        f"{'settle batch':>12} {'stmts/occ':>9} {'CPU ms/occ':>10} {'per s':>7}"
    )
    try:
        for concurrency in [int(c) for c in args.concurrency.split(",") if c]:
            targets: list[tuple[str, str | None]] = []
            if not args.skip_sqlite:
                path = base / f"c{concurrency}" / "hot.sqlite3"
                targets.append((str(path), None))
            if args.postgres:
                targets.append((args.postgres, f"jl_hot_path_c{concurrency}"))
            for target, schema in targets:
                if schema is not None:
                    import psycopg

                    with psycopg.connect(target, autocommit=True) as conn:
                        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
                row = measure(target, schema, args.n, concurrency)
                rows.append(row)
                print(
                    f"{row['store']:<9}{concurrency:>5} {row['commits_per_occurrence']:>11.3f} "
                    f"{row['claim_batch_mean']:>11.1f} {row['settle_batch_mean']:>12.1f} "
                    f"{row['statements_per_occurrence']:>9.2f} "
                    f"{row['cpu_ms_per_occurrence']:>10.3f} {row['per_s']:>7.0f}",
                    flush=True,
                )
                if schema is not None:
                    import psycopg

                    with psycopg.connect(target, autocommit=True) as conn:
                        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        shutil.rmtree(base, ignore_errors=True)
    for row in rows:
        top = ", ".join(f"{k} {v / row['occurrences']:.2f}" for k, v in row["statements"].items())
        print(f"  {row['store']} c={row['concurrency']} statements per occurrence: {top}")
    if args.json is not None:
        args.json.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
