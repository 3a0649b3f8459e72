"""Enqueue from an application's threads and tasks: jobledger beside Huey on SQLite (issue 29).

    bench/peers/.venv/bin/python bench/enqueue_threads.py                  # interleaved run
    bench/peers/.venv/bin/python bench/enqueue_threads.py --rounds 3 --n 4000 --json out.json
    bench/peers/.venv/bin/python bench/enqueue_threads.py --postgres postgresql://postgres@127.0.0.1:5432/bench

Every measurement runs in a fresh process on a fresh database in ``--dir`` (pick a real disk:
each commit is an fsync), and every call returns only once its row is durable: Huey's
``SqliteHuey`` with every default (WAL, ``synchronous`` left at SQLite's FULL), jobledger's
SQLite store with every default (WAL, ``synchronous=FULL``). ``--n`` enqueues are split evenly
among ``T`` threads (``noop()`` for Huey, ``App.enqueue("noop")`` for jobledger), or among
``T`` asyncio tasks of ``App.enqueue_async`` (``jobledger-async``). Reported per run: calls
per second (wall) and CPU milliseconds per enqueue (the process's CPU time, all threads).

The measurements are interleaved — for each round, each configuration, Huey and jobledger
alternate who goes first — and the figures to read are the **ratios** within a round; absolute
numbers move with the machine and the hour. Needs the peers' venv (``bench/peers/setup.sh``)
for Huey; without Huey only jobledger runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()


def _split(n: int, parts: int) -> list[int]:
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


def _threads(call: Any, n: int, threads: int) -> None:
    def work(count: int) -> None:
        for _ in range(count):
            call()

    pool = [threading.Thread(target=work, args=(c,)) for c in _split(n, threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()


def measure(system: str, threads: int, n: int, target: str) -> dict[str, Any]:
    """One measurement, in this (fresh) process."""
    if system == "huey":
        from huey import SqliteHuey

        huey = SqliteHuey("bench", filename=target)

        @huey.task()
        def noop() -> None:
            return None

        huey.storage.conn  # noqa: B018 - opens the file and creates its tables (not timed)
        call: Any = noop
    else:
        import jobledger

        app = jobledger.App(target, name="bench", authorize=jobledger.allow_all)

        @app.handler("noop")
        def noop_handler(ctx: jobledger.JobContext) -> None:
            return None

        app.create_job("noop", "noop")  # opens the store, declares the job (not timed)
        app.enqueue("noop")  # the first write (not timed)
        n -= 1
        call = lambda: app.enqueue("noop")  # noqa: E731

    cpu, wall = time.process_time(), time.perf_counter()
    if system == "jobledger-async":

        async def main() -> None:
            async def task(count: int) -> None:
                for _ in range(count):
                    await app.enqueue_async("noop")

            await asyncio.gather(*(task(c) for c in _split(n, threads)))

        asyncio.run(main())
    else:
        _threads(call, n, threads)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "system": system,
        "threads": threads,
        "n": n,
        "per_s": round(n / wall, 1),
        "cpu_ms_per_enqueue": round(cpu * 1000 / n, 4),
    }


def _run_child(system: str, threads: int, n: int, target: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, str(HERE), "--child", system, str(threads), str(n), target],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _has_huey() -> bool:
    try:
        import huey  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", default="1,8")
    parser.add_argument("--tasks", default="1,64", help="enqueue_async task counts")
    parser.add_argument("--postgres", help="also measure jobledger on this PostgreSQL database")
    parser.add_argument("--dir", type=Path, help="where the databases go (a real disk)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.child:
        system, threads, n, target = args.child
        print(json.dumps(measure(system, int(threads), int(n), target)))
        return 0

    huey = _has_huey()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="jobledger-enqueue-", dir=args.dir) as tmp:
        serial = 0

        def fresh(name: str) -> str:
            nonlocal serial
            serial += 1
            return str(Path(tmp) / f"{serial}-{name}.sqlite3")

        for round_ in range(args.rounds):
            for threads in [int(t) for t in args.threads.split(",")]:
                order = ["huey", "jobledger"] if huey else ["jobledger"]
                if round_ % 2:
                    order.reverse()
                for system in order:
                    run = _run_child(system, threads, args.n, fresh(system))
                    runs.append({"round": round_, "store": "sqlite", **run})
                    print(json.dumps(runs[-1]), flush=True)
            for tasks in [int(t) for t in args.tasks.split(",")]:
                run = _run_child("jobledger-async", tasks, args.n, fresh("async"))
                runs.append({"round": round_, "store": "sqlite", **run})
                print(json.dumps(runs[-1]), flush=True)
            if args.postgres:
                for threads in [int(t) for t in args.threads.split(",")]:
                    _reset_postgres(args.postgres)
                    run = _run_child("jobledger", threads, args.n, args.postgres)
                    runs.append({"round": round_, "store": "postgres", **run})
                    print(json.dumps(runs[-1]), flush=True)
                for tasks in [int(t) for t in args.tasks.split(",")]:
                    _reset_postgres(args.postgres)
                    run = _run_child("jobledger-async", tasks, args.n, args.postgres)
                    runs.append({"round": round_, "store": "postgres", **run})
                    print(json.dumps(runs[-1]), flush=True)
    summary = _summary(runs)
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "summary": summary}, indent=2) + "\n")
    return 0


def _reset_postgres(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS jobledger CASCADE")


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per round, jobledger ÷ Huey at each thread count; the async task ratios."""
    out: dict[str, Any] = {"ratios_vs_huey": {}, "async": {}}
    by: dict[tuple[int, str, str, int], dict[str, Any]] = {
        (r["round"], r["store"], r["system"], r["threads"]): r for r in runs
    }
    for (round_, store, system, threads), run in by.items():
        if store == "sqlite" and system == "jobledger":
            peer = by.get((round_, "sqlite", "huey", threads))
            if peer is not None:
                out["ratios_vs_huey"].setdefault(f"{threads} threads", []).append(
                    round(run["per_s"] / peer["per_s"], 2)
                )
        if system == "jobledger-async":
            one = by.get((round_, store, system, 1))
            if one is not None and threads != 1:
                out["async"].setdefault(f"{store} {threads} tasks / 1", []).append(
                    round(run["per_s"] / one["per_s"], 2)
                )
    for key in ("per_s", "cpu_ms_per_enqueue"):
        out[f"median_{key}"] = {
            f"{store} {system} {threads}": statistics.median(
                r[key]
                for r in runs
                if (r["store"], r["system"], r["threads"]) == (store, system, threads)
            )
            for store, system, threads in sorted(
                {(r["store"], r["system"], r["threads"]) for r in runs}
            )
        }
    return out


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
