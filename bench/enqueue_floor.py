"""How close jobledger's enqueue is to what the database itself allows, on SQLite and PostgreSQL.

Three figures per store, each in occurrences per second:

* ``jobledger`` — ``App.enqueue`` one call at a time, and ``App.enqueue_many`` in batches;
* ``same rows, plain SQL`` — the very rows jobledger wrote (occurrence + its
  ``occurrence_enqueued`` event, read back from the first store), inserted into a fresh store of
  the same schema by plain ``INSERT`` statements: one transaction per occurrence, then one
  transaction per batch. No Python of jobledger's runs; this is the floor the schema and
  the durability setting impose;
* ``bare commit`` — one small row into a table with no secondary index, one transaction each:
  the floor of a durable commit on this machine.

    python bench/enqueue_floor.py                                     # SQLite, 3,000 / 20,000
    python bench/enqueue_floor.py --postgres postgresql://postgres@127.0.0.1:5432/test
    python bench/enqueue_floor.py --synchronous NORMAL                # SQLite at NORMAL
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import jobledger

sys.path.insert(0, str(Path(__file__).resolve().parent))
from claim_scaling import machine

JOB = "mail-job"


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def through_jobledger(target: str, options: dict[str, Any], one: int, many: int, batch: int):
    with jobledger.App(target, authorize=jobledger.allow_all, store_options=options) as app:
        app.ensure_job(JOB, "mail")
        app.enqueue(JOB, payload={"to": "warm@example.com"})  # warm caches, prepare statements
        t0 = time.perf_counter()
        for index in range(one):
            app.enqueue(JOB, payload={"to": f"user{index}@example.com"})
        single = rate(one, time.perf_counter() - t0)
        t0 = time.perf_counter()
        for start in range(0, many, batch):
            size = min(batch, many - start)
            app.enqueue_many(JOB, [{"to": f"bulk{start + i}@example.com"} for i in range(size)])
        batched = rate(many, time.perf_counter() - t0)
    return single, batched


def sqlite_rows(path: str) -> tuple[list[str], list[tuple], list[str], list[tuple]]:
    with sqlite3.connect(path) as conn:
        occ = conn.execute("SELECT * FROM occurrences ORDER BY rowid")
        occ_columns = [d[0] for d in occ.description]
        occurrences = occ.fetchall()
        ev = conn.execute(
            "SELECT * FROM events WHERE event_type = 'occurrence_enqueued' ORDER BY event_id"
        )
        names = [d[0] for d in ev.description]
        keep = [i for i, name in enumerate(names) if name != "event_id"]
        ev_columns = [names[i] for i in keep]
        events = [tuple(row[i] for i in keep) for row in ev.fetchall()]
    return occ_columns, occurrences, ev_columns, events


def plain_sql_sqlite(
    path: str, source: str, one: int, batch: int, synchronous: str
) -> tuple[float, float]:
    occ_columns, occurrences, ev_columns, events = sqlite_rows(source)
    insert_occ = (
        f"INSERT INTO occurrences ({', '.join(occ_columns)}) "
        f"VALUES ({', '.join('?' for _ in occ_columns)})"
    )
    insert_ev = (
        f"INSERT INTO events ({', '.join(ev_columns)}) "
        f"VALUES ({', '.join('?' for _ in ev_columns)})"
    )
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    pairs = list(zip(occurrences, events, strict=True))
    t0 = time.perf_counter()
    for occurrence, event in pairs[:one]:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(insert_occ, occurrence)
        conn.execute(insert_ev, event)
        conn.execute("COMMIT")
    single = rate(one, time.perf_counter() - t0)
    rest = pairs[one:]
    t0 = time.perf_counter()
    for start in range(0, len(rest), batch):
        chunk = rest[start : start + batch]
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(insert_occ, [o for o, _ in chunk])
        conn.executemany(insert_ev, [e for _, e in chunk])
        conn.execute("COMMIT")
    batched = rate(len(rest), time.perf_counter() - t0)
    conn.close()
    return single, batched


def bare_commit_sqlite(path: str, count: int, synchronous: str) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, payload TEXT)")
    t0 = time.perf_counter()
    for index in range(count):
        conn.execute("INSERT INTO t (payload) VALUES (?)", (f'{{"n":{index}}}',))
    seconds = time.perf_counter() - t0
    conn.close()
    return rate(count, seconds)


def plain_sql_postgres(url: str, source: str, target: str, one: int, batch: int) -> tuple:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        occ = conn.execute(f'SELECT * FROM "{source}".occurrences ORDER BY created_at')
        assert occ.description is not None
        occ_columns = [d.name for d in occ.description]
        occurrences = occ.fetchall()
        ev = conn.execute(
            f'SELECT * FROM "{source}".events '
            "WHERE event_type = 'occurrence_enqueued' ORDER BY event_id"
        )
        assert ev.description is not None
        names = [d.name for d in ev.description]
        keep = [i for i, name in enumerate(names) if name != "event_id"]
        ev_columns = [names[i] for i in keep]
        events = [tuple(row[i] for i in keep) for row in ev.fetchall()]
        insert_occ = (
            f'INSERT INTO "{target}".occurrences ({", ".join(occ_columns)}) '
            f"VALUES ({', '.join('%s' for _ in occ_columns)})"
        )
        insert_ev = (
            f'INSERT INTO "{target}".events ({", ".join(ev_columns)}) '
            f"VALUES ({', '.join('%s' for _ in ev_columns)})"
        )
        pairs = list(zip(occurrences, events, strict=True))
        # One round trip per occurrence, as the one-statement enqueue: both rows in one statement.
        event_select = insert_ev.replace("VALUES (", "SELECT ").rstrip(")")
        both = f"WITH o AS ({insert_occ} RETURNING 1) {event_select} FROM o"
        t0 = time.perf_counter()
        for occurrence, event in pairs[:one]:
            conn.execute(both, (*occurrence, *event), prepare=True)
        single = rate(one, time.perf_counter() - t0)
        rest = pairs[one:]
        t0 = time.perf_counter()
        for start in range(0, len(rest), batch):
            chunk = rest[start : start + batch]
            with conn.transaction(), conn.cursor() as cursor:
                with cursor.copy(
                    f'COPY "{target}".occurrences ({", ".join(occ_columns)}) FROM STDIN'
                ) as copy:
                    for occurrence, _ in chunk:
                        copy.write_row(occurrence)
                with cursor.copy(
                    f'COPY "{target}".events ({", ".join(ev_columns)}) FROM STDIN'
                ) as copy:
                    for _, event in chunk:
                        copy.write_row(event)
        batched = rate(len(rest), time.perf_counter() - t0)
    return single, batched


def bare_commit_postgres(url: str, schema: str, count: int) -> float:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE TABLE "{schema}".bare (id bigserial PRIMARY KEY, payload text)')
        t0 = time.perf_counter()
        for index in range(count):
            conn.execute(
                f'INSERT INTO "{schema}".bare (payload) VALUES (%s)',
                (f'{{"n":{index}}}',),
                prepare=True,
            )
        seconds = time.perf_counter() - t0
        conn.execute(f'DROP TABLE "{schema}".bare')
    return rate(count, seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--one", type=int, default=3000, help="single enqueues")
    parser.add_argument("--many", type=int, default=20000, help="batched enqueues")
    parser.add_argument("--batch", type=int, default=1000, help="occurrences per batch")
    parser.add_argument("--synchronous", default="FULL", choices=("FULL", "NORMAL"))
    parser.add_argument("--postgres", default=None, help="also measure on this PostgreSQL URL")
    parser.add_argument("--skip-sqlite", action="store_true")
    parser.add_argument("--dir", type=Path, default=None, help="where the SQLite files go")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="jobledger-enqueue-", dir=args.dir))
    rows: list[dict[str, Any]] = []
    print(f"# {machine()}")
    try:
        if not args.skip_sqlite:
            first = base / "a" / "ledger.sqlite3"
            options = {"synchronous": args.synchronous}
            single, batched = through_jobledger(
                str(first), options, args.one, args.many, args.batch
            )
            second = base / "b" / "ledger.sqlite3"
            jobledger.open_store(second, synchronous=args.synchronous).close()
            with sqlite3.connect(second) as conn:  # the job row the occurrences refer to
                conn.execute("ATTACH DATABASE ? AS source", (str(first),))
                conn.execute("INSERT INTO jobs SELECT * FROM source.jobs")
            raw_single, raw_batched = plain_sql_sqlite(
                str(second), str(first), args.one + 1, args.batch, args.synchronous
            )
            bare = bare_commit_sqlite(str(base / "bare.sqlite3"), args.one, args.synchronous)
            rows.append(
                {
                    "store": f"sqlite ({args.synchronous})",
                    "jobledger_one": single,
                    "plain_sql_one": raw_single,
                    "bare_commit": bare,
                    "jobledger_batched": batched,
                    "plain_sql_batched": raw_batched,
                }
            )
        if args.postgres:
            import psycopg

            source, target = "jl_enqueue_floor_a", "jl_enqueue_floor_b"
            with psycopg.connect(args.postgres, autocommit=True) as conn:
                for schema in (source, target):
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            single, batched = through_jobledger(
                args.postgres, {"schema": source}, args.one, args.many, args.batch
            )
            jobledger.open_store(args.postgres, schema=target, listen=False).close()
            with psycopg.connect(args.postgres, autocommit=True) as conn:
                conn.execute(f'INSERT INTO "{target}".jobs SELECT * FROM "{source}".jobs')
            raw_single, raw_batched = plain_sql_postgres(
                args.postgres, source, target, args.one + 1, args.batch
            )
            bare = bare_commit_postgres(args.postgres, target, args.one)
            with psycopg.connect(args.postgres, autocommit=True) as conn:
                for schema in (source, target):
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            rows.append(
                {
                    "store": "postgres",
                    "jobledger_one": single,
                    "plain_sql_one": raw_single,
                    "bare_commit": bare,
                    "jobledger_batched": batched,
                    "plain_sql_batched": raw_batched,
                }
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(
        f"{'store':<16}{'enqueue':>9}{'same rows, SQL':>16}{'bare commit':>13}"
        f"{'enqueue_many':>14}{'same rows, SQL':>16}"
    )
    for row in rows:
        print(
            f"{row['store']:<16}{row['jobledger_one']:>9,.0f}{row['plain_sql_one']:>16,.0f}"
            f"{row['bare_commit']:>13,.0f}{row['jobledger_batched']:>14,.0f}"
            f"{row['plain_sql_batched']:>16,.0f}"
        )
    if args.json is not None:
        args.json.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
