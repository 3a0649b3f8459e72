"""Operator reads and prune at a million occurrences (issue 25): every CLI read as a whole
process, every dashboard page and ``/metrics`` through the ASGI app, and ``db prune``'s rate.

    python3 bench/operator_reads.py --sqlite /var/tmp/ol/1m.sqlite3 --n 1000000
    python3 bench/operator_reads.py --postgres postgresql://postgres@127.0.0.1:5432/test --n 1000000
    python3 bench/operator_reads.py --sqlite /var/tmp/ol/1m.sqlite3 --reuse   # time an existing one

The store is built fast, by bulk SQL (one ``INSERT … SELECT`` per 50,000 rows, not the store's
enqueue): ``--jobs`` jobs (one kind each), 70 % of the occurrences queued (due, ready, of enabled
jobs) and 30 % settled (succeeded, with 1 % dead letters and 1 % cancelled among them), each row
shaped as the store writes it (authority by id, kind/workspace/runnable copied from the job,
'occ_' and 64 hex digits of id) with its ``occurrence_enqueued`` event, and two more events
(``occurrence_claimed``, the settling one) per settled row. Build time is printed.

Then, each timed ``--runs`` times (the median is printed):

* the CLI commands (``jobledger --db … <command>``, a new process each, startup included);
* the dashboard pages and ``/metrics`` through ``starlette.testclient`` on the app (read-only,
  public reads), one warm-up request first;
* ``--prune`` occurrences pruned by ``Store.prune`` (the oldest settled first; the rate over
  the whole call) — this changes the store, so it runs last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jobledger
from jobledger.testing import FakeClock

NOW = 1_790_000_000_000  # 2026-09-21: the clock of the built rows (the CLI reads the real one)
CHUNK = 50_000
JOB = "bench-job-{:03d}"

SQLITE_ROWS = """
INSERT INTO occurrences
  (seq, occurrence_id, job_id, job_revision, trigger_key, scheduled_for, available_at, status,
   attempt, max_attempts, fence, authority_id, payload_json, result_json, last_error_json,
   created_at, updated_at, settled_at, kind, workspace_id, runnable, queue, priority,
   partition_key, gate, adjudicate)
WITH RECURSIVE n(i) AS (SELECT :first UNION ALL SELECT i + 1 FROM n WHERE i < :last)
SELECT i, 'occ_' || printf('%064x', i), j.job_id, j.revision, 'key:' || i, :t0 + i, :t0 + i,
       CASE WHEN i % 100 < :settled_pct THEN
         CASE WHEN i % 97 = 0 THEN 'dead_letter' WHEN i % 89 = 0 THEN 'cancelled'
              ELSE 'succeeded' END
       ELSE 'queued' END,
       CASE WHEN i % 100 < :settled_pct THEN 1 ELSE 0 END, 3,
       CASE WHEN i % 100 < :settled_pct THEN 1 ELSE 0 END,
       j.authority_id, '{"n":' || i || '}',
       CASE WHEN i % 100 < :settled_pct AND i % 97 <> 0 AND i % 89 <> 0 THEN '{"ok":true}' END,
       CASE WHEN i % 100 < :settled_pct AND (i % 97 = 0 OR i % 89 = 0)
            THEN '{"code":"HANDLER_FAILED","message":"boom"}' END,
       :t0 + i, :t0 + i,
       CASE WHEN i % 100 < :settled_pct THEN :t0 + i + 1000 END,
       j.kind, NULL, 1, j.queue, 0, NULL, 0, 0
FROM n JOIN jobs AS j ON j.job_id = printf('bench-job-%03d', i % :jobs)
"""

SQLITE_EVENTS = """
INSERT INTO events (job_id, occurrence_id, event_type, occurred_at, owner_id, fence, data_json)
SELECT o.job_id, o.occurrence_id, e.event_type, o.created_at + e.offset_ms, e.owner, e.fence,
       '{}'
FROM occurrences AS o
JOIN (SELECT 'occurrence_enqueued' AS event_type, 0 AS offset_ms, NULL AS owner,
             NULL AS fence, 0 AS settled_only
      UNION ALL SELECT 'occurrence_claimed', 500, 'bench-worker', 1, 1
      UNION ALL SELECT 'occurrence_settled', 1000, 'bench-worker', 1, 1) AS e
  ON e.settled_only = 0 OR o.settled_at IS NOT NULL
WHERE o.seq BETWEEN :first AND :last
ORDER BY o.seq, e.offset_ms
"""

PG_ROWS = """
INSERT INTO occurrences
  (occurrence_id, job_id, job_revision, trigger_key, scheduled_for, available_at, status,
   attempt, max_attempts, fence, authority_id, payload_json, result_json, last_error_json,
   created_at, updated_at, settled_at, kind, workspace_id, runnable, queue, priority,
   partition_key, gate, adjudicate)
SELECT 'occ_' || lpad(to_hex(i), 64, '0'), j.job_id, j.revision, 'key:' || i,
       %(t0)s + i, %(t0)s + i,
       CASE WHEN i %% 100 < %(settled_pct)s THEN
         CASE WHEN i %% 97 = 0 THEN 'dead_letter' WHEN i %% 89 = 0 THEN 'cancelled'
              ELSE 'succeeded' END
       ELSE 'queued' END,
       CASE WHEN i %% 100 < %(settled_pct)s THEN 1 ELSE 0 END, 3,
       CASE WHEN i %% 100 < %(settled_pct)s THEN 1 ELSE 0 END,
       j.authority_id, '{"n":' || i || '}',
       CASE WHEN i %% 100 < %(settled_pct)s AND i %% 97 <> 0 AND i %% 89 <> 0
            THEN '{"ok":true}' END,
       CASE WHEN i %% 100 < %(settled_pct)s AND (i %% 97 = 0 OR i %% 89 = 0)
            THEN '{"code":"HANDLER_FAILED","message":"boom"}' END,
       %(t0)s + i, %(t0)s + i,
       CASE WHEN i %% 100 < %(settled_pct)s THEN %(t0)s + i + 1000 END,
       j.kind, NULL, 1, j.queue, 0, NULL, 0, 0
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS i
JOIN jobs AS j ON j.job_id = 'bench-job-' || lpad((i %% %(jobs)s)::text, 3, '0')
ORDER BY i
"""

PG_EVENTS = """
INSERT INTO events (job_id, occurrence_id, event_type, occurred_at, owner_id, fence, data_json)
SELECT o.job_id, o.occurrence_id, e.event_type, o.created_at + e.offset_ms, e.owner, e.fence,
       '{}'
FROM occurrences AS o
JOIN (VALUES ('occurrence_enqueued', 0, NULL, NULL, 0),
             ('occurrence_claimed', 500, 'bench-worker', 1, 1),
             ('occurrence_settled', 1000, 'bench-worker', 1, 1))
  AS e(event_type, offset_ms, owner, fence, settled_only)
  ON e.settled_only = 0 OR o.settled_at IS NOT NULL
WHERE o.created_at BETWEEN %(t0)s + %(first)s AND %(t0)s + %(last)s
ORDER BY o.seq, e.offset_ms
"""


def build(target: str, n: int, jobs: int, settled_pct: int) -> float:
    started = time.perf_counter()
    clock = FakeClock(NOW)
    with jobledger.open_store(target, clock=clock) as store:
        for index in range(jobs):
            store.create_job(
                id=JOB.format(index),
                kind=f"bench-kind-{index:03d}",
                authority={"principal": {"type": "service", "id": "bench"}},
            )
    t0 = NOW - n - 10_000_000
    if target.startswith("postgresql"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute("SET search_path TO jobledger")
            for first in range(1, n + 1, CHUNK):
                last = min(n, first + CHUNK - 1)
                params = {
                    "first": first,
                    "last": last,
                    "t0": t0,
                    "jobs": jobs,
                    "settled_pct": settled_pct,
                }
                conn.execute(PG_ROWS, params)
                conn.execute(PG_EVENTS, params)
                print(f"  {last:,} rows, {time.perf_counter() - started:.0f} s", flush=True)
            conn.execute("VACUUM ANALYZE")
    else:
        import sqlite3

        conn = sqlite3.connect(target, isolation_level=None)
        conn.execute("PRAGMA synchronous=OFF")
        for first in range(1, n + 1, CHUNK):
            last = min(n, first + CHUNK - 1)
            params = {
                "first": first,
                "last": last,
                "t0": t0,
                "jobs": jobs,
                "settled_pct": settled_pct,
            }
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(SQLITE_ROWS, params)
            conn.execute(SQLITE_EVENTS, params)
            conn.execute("COMMIT")
            print(f"  {last:,} rows, {time.perf_counter() - started:.0f} s", flush=True)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
    return time.perf_counter() - started


def cli_commands() -> list[tuple[str, list[str]]]:
    job = JOB.format(7)
    return [
        ("stats", ["stats"]),
        ("occurrence list", ["occurrence", "list"]),
        ("occurrence list --status queued", ["occurrence", "list", "--status", "queued"]),
        ("occurrence list --status dead_letter", ["occurrence", "list", "--status", "dead_letter"]),
        ("occurrence list --kind", ["occurrence", "list", "--kind", "bench-kind-007"]),
        (
            "occurrence list --kind --status succeeded",
            ["occurrence", "list", "--kind", "bench-kind-007", "--status", "succeeded"],
        ),
        ("occurrence list --job", ["occurrence", "list", "--job", job]),
        (
            "occurrence list --job --status dead_letter",
            ["occurrence", "list", "--job", job, "--status", "dead_letter"],
        ),
        ("occurrence list page 2", ["occurrence", "list", "--cursor", "{cursor}"]),
        ("dead-letter list", ["dead-letter", "list"]),
        ("dead-letter list --job", ["dead-letter", "list", "--job", job]),
        ("job list", ["job", "list"]),
        ("job show", ["job", "show", job]),
        ("explain", ["explain", job]),
        ("queue list", ["queue", "list"]),
        ("queue show", ["queue", "show", "default"]),
        ("history --job", ["history", "--job", job]),
        ("history --type (rare)", ["history", "--type", "job_updated"]),
        ("history --type", ["history", "--type", "occurrence_enqueued"]),
        ("history --job --type", ["history", "--job", job, "--type", "job_created"]),
    ]


def pages() -> list[tuple[str, str]]:
    job = JOB.format(7)
    return [
        ("/", "/"),
        ("/occurrences", "/occurrences"),
        ("/occurrences?status=dead_letter", "/occurrences?status=dead_letter"),
        ("/occurrences?kind=…", "/occurrences?kind=bench-kind-007"),
        (
            "/occurrences?status=succeeded&kind=…",
            "/occurrences?status=succeeded&kind=bench-kind-007",
        ),
        ("/jobs", "/jobs"),
        ("/jobs/<id>", f"/jobs/{job}"),
        ("/occurrences/<id> (oldest)", f"/occurrences/occ_{7:064x}"),
        ("/dead-letters", "/dead-letters"),
        ("/queues", "/queues"),
        ("/metrics", "/metrics"),
    ]


def time_cli(target: str, runs: int) -> dict[str, float]:
    exe = str(Path(sys.executable).with_name("jobledger"))
    env = {**os.environ, "JOBLEDGER_DB": target}
    first = subprocess.run(
        [exe, "--json", "occurrence", "list"], env=env, capture_output=True, text=True, check=True
    )
    cursor = json.loads(first.stdout)["nextCursor"]
    results: dict[str, float] = {}
    for name, command in cli_commands():
        argv = [cursor if part == "{cursor}" else part for part in command]
        samples = []
        for _ in range(runs):
            started = time.perf_counter()
            done = subprocess.run(
                [exe, *argv], env=env, capture_output=True, text=True, check=False
            )
            samples.append(time.perf_counter() - started)
            if done.returncode != 0:
                raise SystemExit(f"{name}: exit {done.returncode}\n{done.stderr}")
        results[name] = statistics.median(samples)
        print(f"  cli  {name:<45} {results[name] * 1000:8.0f} ms", flush=True)
    return results


def time_pages(target: str, runs: int) -> dict[str, float]:
    from starlette.testclient import TestClient

    from jobledger.web import WebSettings, create_app

    results: dict[str, float] = {}
    with jobledger.open_store(target, migrate=False) as store:
        settings = WebSettings(read_only=True, public_reads=True, secret_key="b" * 32)
        client = TestClient(create_app(store, settings), headers={"accept": "text/html"})
        for name, path in pages():
            response = client.get(path)
            if response.status_code != 200:
                raise SystemExit(f"{path}: HTTP {response.status_code}\n{response.text[:2000]}")
            samples = []
            for _ in range(runs):
                started = time.perf_counter()
                client.get(path)
                samples.append(time.perf_counter() - started)
            results[name] = statistics.median(samples)
            print(f"  web  {name:<45} {results[name] * 1000:8.0f} ms", flush=True)
    return results


def time_prune(target: str, n: int, prune: int, batch: int) -> dict[str, float]:
    # Rows are settled 1 s after creation, t0 + i; settled rows are i % 100 < 30, so the first
    # `prune / 0.3` seqs hold about `prune` settled rows.
    t0 = NOW - n - 10_000_000
    before = t0 + int(prune / 0.30) + 1000
    with jobledger.open_store(target, migrate=False) as store:
        started = time.perf_counter()
        report = store.prune(before=before, actor="bench", batch_size=batch)
        seconds = time.perf_counter() - started
    rate = report.occurrences / seconds if seconds else 0.0
    print(
        f"  prune {report.occurrences:,} occurrences, {report.events:,} events in "
        f"{seconds:.1f} s: {rate:,.0f} occurrences/s ({report.batches} batches)",
        flush=True,
    )
    return {"pruned": report.occurrences, "seconds": seconds, "per_second": rate}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--sqlite", metavar="PATH")
    where.add_argument("--postgres", metavar="URL")
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--settled-pct", type=int, default=30)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--reuse", action="store_true", help="time the store already there")
    parser.add_argument("--prune", type=int, default=100_000, help="0: do not prune")
    parser.add_argument("--batch", type=int, default=5_000, help="prune batch size")
    parser.add_argument("--skip", default="", help="comma list of: cli,web")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    if args.postgres:
        target = args.postgres
        if not args.reuse:
            import psycopg

            with psycopg.connect(target, autocommit=True) as conn:
                conn.execute("DROP SCHEMA IF EXISTS jobledger CASCADE")
    else:
        target = args.sqlite
        path = Path(target)
        if not args.reuse:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            for suffix in ("", "-wal", "-shm"):
                Path(target + suffix).unlink(missing_ok=True)
    out: dict[str, Any] = {
        "target": "postgres" if args.postgres else "sqlite",
        "n": args.n,
        "load": os.getloadavg(),
    }
    if not args.reuse:
        seconds = build(target, args.n, args.jobs, args.settled_pct)
        out["build_seconds"] = seconds
        print(f"built {args.n:,} occurrences in {seconds:.0f} s", flush=True)
    skip = set(filter(None, args.skip.split(",")))
    if "cli" not in skip:
        out["cli"] = time_cli(target, args.runs)
    if "web" not in skip:
        out["web"] = time_pages(target, args.runs)
    if args.prune:
        out["prune"] = time_prune(target, args.n, args.prune, args.batch)
    out["load_after"] = os.getloadavg()
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
