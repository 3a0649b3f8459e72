"""What enqueuing inside the caller's own transaction costs (SPEC §8), on SQLite and PostgreSQL.

Each round is one "order": the application's own ``INSERT`` and an enqueue with the order's
idempotency key. Three ways, one transaction per order, in interleaved rounds so that drift on
a shared machine hits all three alike:

* ``in the caller's transaction`` — ``BEGIN``; ``INSERT``; ``app.enqueue(..., conn=conn)``;
  ``COMMIT``: one transaction, atomic;
* ``plain enqueue + own statement`` — ``BEGIN``; ``INSERT``; ``COMMIT``; then
  ``app.enqueue(...)`` in the store's own transaction: two transactions, not atomic;
* ``own statement only`` — ``BEGIN``; ``INSERT``; ``COMMIT``: the application's floor.

Per-order latency (median and p90, microseconds) and orders per second:

    python bench/caller_transaction.py                      # SQLite (shared file, FULL)
    python bench/caller_transaction.py --postgres postgresql://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jobledger

sys.path.insert(0, str(Path(__file__).resolve().parent))
from claim_scaling import machine

JOB = "confirm"


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_us": round(statistics.median(ordered) * 1e6, 1),
        "p90_us": round(ordered[int(len(ordered) * 0.9)] * 1e6, 1),
        "orders_per_s": round(len(ordered) / sum(ordered), 1),
    }


def run(
    app: jobledger.App,
    connect: Callable[[], Any],
    begin: Callable[[Any], None],
    commit: Callable[[Any], None],
    rounds: int,
) -> dict[str, dict[str, float]]:
    app.ensure_job(JOB, "send_confirmation")
    conn = connect()
    ways: dict[str, list[float]] = {"in_tx": [], "plain_plus_own": [], "own_only": []}
    number = 0

    def order(key: str | None, in_tx: bool) -> None:
        nonlocal number
        number += 1
        begin(conn)
        conn.execute(f"INSERT INTO bench_orders (id) VALUES ({number})")
        if in_tx:
            app.enqueue(JOB, payload={"order": number}, key=key, conn=conn)
        commit(conn)
        if key is not None and not in_tx:
            app.enqueue(JOB, payload={"order": number}, key=key)

    for _ in range(20):  # warm: caches, prepared statements, the store id
        order(f"warm-{uuid.uuid4().hex}", True)
        order(f"warm-{uuid.uuid4().hex}", False)
    for index in range(rounds):
        for way in ("in_tx", "plain_plus_own", "own_only"):
            key = None if way == "own_only" else f"order-{way}-{index}"
            t0 = time.perf_counter()
            order(key, way == "in_tx")
            ways[way].append(time.perf_counter() - t0)
    conn.close()
    return {way: _summary(samples) for way, samples in ways.items()}


def sqlite_bench(rounds: int) -> dict[str, Any]:
    directory = Path(tempfile.mkdtemp(prefix="jobledger-bench-"))
    try:
        path = directory / "db" / "shop.sqlite3"
        with jobledger.App(path, shared_file=True, authorize=jobledger.allow_all) as app:
            made = app.connect()
            made.execute("CREATE TABLE bench_orders (id integer PRIMARY KEY)")
            made.close()
            return run(
                app,
                app.connect,
                lambda conn: conn.execute("BEGIN IMMEDIATE"),
                lambda conn: conn.execute("COMMIT"),
                rounds,
            )
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def postgres_bench(admin_url: str, rounds: int) -> dict[str, Any]:
    import psycopg

    name = f"jobledger_bench_{uuid.uuid4().hex[:10]}"
    base = admin_url.rsplit("/", 1)[0]
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = f"{base}/{name}"
    try:
        with jobledger.App(url, authorize=jobledger.allow_all) as app:
            with psycopg.connect(url, autocommit=True) as made:
                made.execute("CREATE TABLE bench_orders (id integer PRIMARY KEY)")
            return run(
                app,
                lambda: psycopg.connect(url, autocommit=True),
                lambda conn: conn.execute("BEGIN"),
                lambda conn: conn.execute("COMMIT"),
                rounds,
            )
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--postgres", help="an admin URL: a database is made and dropped there")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    if args.postgres:
        store, figures = "postgres", postgres_bench(args.postgres, args.rounds or 2000)
    else:
        store, figures = "sqlite", sqlite_bench(args.rounds or 500)
    print(json.dumps({"store": store, "machine": machine(), "figures": figures}, indent=2))


if __name__ == "__main__":
    main()
