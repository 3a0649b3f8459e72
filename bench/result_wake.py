"""From settle to wake-up: how long ``App.result`` waiters take to see a settle (PostgreSQL).

``N`` occurrences are enqueued and ``N`` waiters (default 100) wait for their results at once —
coroutines on one event loop (``result_async``), or one thread each (``result``). A settler on
a *second* store handle (its own connections, so the waiters' process learns of each settle
only through LISTEN/NOTIFY, as another machine would) claims and settles them one at a time,
``--gap-ms`` apart, noting the instant each settle committed. A waiter notes the instant its
call returned. Reported per mode: p50 / p99 / max of (wake − commit) in ms, and how many wake-ups
came later than the waiters' longest poll interval (0.5 s: a missed NOTIFY would show there).

    python bench/result_wake.py                                   # 100 waiters, both modes
    python bench/result_wake.py --postgres postgresql://postgres@127.0.0.1:5432/test --n 100
    python bench/result_wake.py --burst                           # settle all in one batch

A fresh schema is created for the run and dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

import jobledger
from jobledger.models import Settlement

sys.path.insert(0, str(Path(__file__).resolve().parent))
from claim_scaling import machine

WAIT = timedelta(seconds=120)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def settle_all(
    url: str, schema: str, ids: list[str], gap_s: float, burst: bool
) -> dict[str, float]:
    """Claim and settle every occurrence from a store handle of its own; commit instants."""
    committed: dict[str, float] = {}
    with jobledger.open_store(url, schema=schema, listen=False) as store:
        claimed = []
        while len(claimed) < len(ids):
            claimed += store.claim_batch(owner_id="bench-settler", lease_ms=600_000, limit=100)
        by_id = {occurrence.id: occurrence for occurrence in claimed}
        if burst:
            store.settle_batch(
                [
                    Settlement(key, "bench-settler", by_id[key].fence, "succeeded", result=key)
                    for key in ids
                ]
            )
            now = time.perf_counter()
            return dict.fromkeys(ids, now)
        for key in ids:
            time.sleep(gap_s)
            store.settle(
                occurrence_id=key,
                owner_id="bench-settler",
                fence=by_id[key].fence,
                outcome="succeeded",
                result=key,
            )
            committed[key] = time.perf_counter()
    return committed


def run(url: str, n: int, mode: str, gap_s: float, burst: bool) -> dict[str, Any]:
    schema = f"bench_wake_{uuid.uuid4().hex[:10]}"
    woke: dict[str, float] = {}
    try:
        with jobledger.App(url, store_options={"schema": schema}) as app:
            app.ensure_job("work", "work")
            ids = [app.enqueue("work").id for _ in range(n)]
            app.store.settle_signal.watch()  # the LISTEN connection, before anyone waits
            listener = app.store.done_listener  # type: ignore[attr-defined]
            listener.connected.wait(10)
            ready = threading.Event()
            if mode == "async":

                async def wait_all() -> None:
                    async def one(key: str) -> None:
                        assert await app.result_async(key, timeout=WAIT) == key
                        woke[key] = time.perf_counter()

                    tasks = [asyncio.create_task(one(key)) for key in ids]
                    await asyncio.sleep(0.5)  # every waiter has read once and waits
                    ready.set()
                    await asyncio.gather(*tasks)

                waiter = threading.Thread(target=lambda: asyncio.run(wait_all()))
                waiter.start()
                ready.wait()
                threads = [waiter]
            else:

                def one(key: str) -> None:
                    assert app.result(key, timeout=WAIT) == key
                    woke[key] = time.perf_counter()

                threads = [threading.Thread(target=one, args=(key,)) for key in ids]
                for thread in threads:
                    thread.start()
                time.sleep(0.5)
            committed = settle_all(url, schema, ids, gap_s, burst)
            for thread in threads:
                thread.join()
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    delays = [(woke[key] - committed[key]) * 1000 for key in ids]
    return {
        "mode": mode,
        "n": n,
        "burst": burst,
        "gapMs": gap_s * 1000,
        "p50Ms": round(percentile(delays, 0.50), 2),
        "p99Ms": round(percentile(delays, 0.99), 2),
        "maxMs": round(max(delays), 2),
        "meanMs": round(statistics.fmean(delays), 2),
        "slowerThanPoll": sum(1 for delay in delays if delay > 500),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--gap-ms", type=float, default=5.0)
    parser.add_argument("--burst", action="store_true", help="settle all in one settle_batch")
    parser.add_argument("--modes", default="async,threads")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    print(machine())
    results = []
    for mode in args.modes.split(","):
        result = run(args.postgres, args.n, mode, args.gap_ms / 1000, args.burst)
        results.append(result)
        print(
            f"{mode:8} n={result['n']} {'burst' if args.burst else f'gap {args.gap_ms} ms'}: "
            f"p50 {result['p50Ms']} ms  p99 {result['p99Ms']} ms  max {result['maxMs']} ms  "
            f"(> 500 ms: {result['slowerThanPoll']})"
        )
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "results": results}, indent=2))


if __name__ == "__main__":
    main()
