"""jobledger on SQLite or PostgreSQL: enqueue, batch enqueue, burn-down and the kill check.

    python bench_jobledger.py enqueue       --store sqlite   --n 10000
    python bench_jobledger.py enqueue-batch --store postgres --n 10000 --batch-size 1000
    python bench_jobledger.py burndown      --store sqlite   --n 10000 --concurrency 4
        # spawns: jobledger worker peers_jobledger_app:app --concurrency 4 [extra args]
    python bench_jobledger.py killtest      --store postgres --concurrency 4

The app is ``peers_jobledger_app.app`` (every store default; the store comes from
``PEERSBENCH_JL_TARGET``, set here). Fresh storage: the SQLite file and its -wal/-shm/-journal/
-writelock are deleted; on PostgreSQL ``DROP SCHEMA jlbench CASCADE`` (jobledger creates it
again on open). Every check reads through a separate plain connection (``sqlite3`` or psycopg
autocommit), never through jobledger.

This driver is written against the everyday API as it is being changed: ``app.enqueue(job)``
makes a new occurrence on every call, and ``app.enqueue_many(job, payloads)`` makes
``len(payloads)`` in one transaction.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import sqlite3
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import peerscommon as common

STEPS = ("enqueue", "enqueue-batch", "burndown", "killtest")
JOB = "noop-job"
SLOW_JOB = "slow-job"
UNFINISHED = "('queued', 'running', 'retry_wait')"


# -- stores -----------------------------------------------------------------------------------


def sqlite_path(args: Any) -> Path:
    folder = "jobledger-kill" if args.step == "killtest" else "jobledger"
    if args.store == "sqlite-normal":
        folder += "-normal"
    return args.scratch / folder / "ledger.sqlite3"


def synchronous(args: Any) -> str:
    """SQLite's synchronous setting for this store choice (``sqlite-normal``: NORMAL)."""
    return "NORMAL" if args.store == "sqlite-normal" else "FULL"


def target(args: Any) -> str:
    return common.PG_URL if args.store == "postgres" else str(sqlite_path(args))


def fresh(args: Any) -> None:
    if args.store == "postgres":
        import psycopg

        with psycopg.connect(common.PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{common.JOBLEDGER_SCHEMA}" CASCADE')
    else:
        path = sqlite_path(args)
        path.parent.mkdir(parents=True, exist_ok=True)
        common.remove_sqlite_files(path)


def load_app(args: Any) -> Any:
    """The bench app on this step's store (the same module the worker imports)."""
    os.environ["PEERSBENCH_JL_TARGET"] = target(args)
    os.environ["PEERSBENCH_JL_SCHEMA"] = common.JOBLEDGER_SCHEMA
    os.environ["PEERSBENCH_JL_SYNCHRONOUS"] = synchronous(args)
    import peers_jobledger_app

    return peers_jobledger_app.app


def create_job(app: Any, job_id: str, kind: str, payload: Any = None) -> None:
    import jobledger

    with contextlib.suppress(jobledger.Conflict):  # already there
        app.create_job(job_id, kind, payload=payload)


def store_pragmas(app: Any) -> dict[str, Any] | None:
    """journal_mode and synchronous as set on jobledger's own SQLite connection."""
    raw = getattr(getattr(app.store, "_connection", None), "raw", None)  # store internals
    if not isinstance(raw, sqlite3.Connection):
        return None
    observed = {}
    for name in ("journal_mode", "synchronous", "busy_timeout", "foreign_keys"):
        row = raw.execute(f"PRAGMA {name}").fetchone()
        observed[name] = next(iter(row.values())) if isinstance(row, dict) else row[0]
    return observed


def worker_extra(args: Any) -> list[str]:
    return [part for item in args.jobledger_worker_arg for part in shlex.split(item)]


def worker_cmd(args: Any) -> list[str]:
    return [
        common.venv_bin("jobledger"),
        "--json",  # the exit summary as JSON on stdout (checked after every run)
        "worker",
        "peers_jobledger_app:app",
        "--concurrency",
        str(args.concurrency),
        *worker_extra(args),
    ]


def worker_env(args: Any) -> dict[str, str]:
    return common.worker_env(
        {
            "PEERSBENCH_JL_TARGET": target(args),
            "PEERSBENCH_JL_SCHEMA": common.JOBLEDGER_SCHEMA,
            "PEERSBENCH_JL_SYNCHRONOUS": synchronous(args),
        }
    )


class Probe:
    """A plain connection to jobledger's tables, for polling and checks."""

    def __init__(self, args: Any) -> None:
        self.postgres = args.store == "postgres"
        if self.postgres:
            import psycopg

            self.conn: Any = psycopg.connect(common.PG_URL, autocommit=True)
            self.prefix = f'"{common.JOBLEDGER_SCHEMA}".'
        else:
            self.conn = sqlite3.connect(sqlite_path(args), isolation_level=None)
            self.prefix = ""

    def rows(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        query = query.replace("{t}", self.prefix)
        if self.postgres:
            query = query.replace("?", "%s")
        return [tuple(row) for row in self.conn.execute(query, params).fetchall()]

    def value(self, query: str, params: tuple[Any, ...] = ()) -> Any:
        return self.rows(query, params)[0][0]

    def clock_ms(self) -> float:
        """The clock jobledger stamps rows with: the database's on PostgreSQL, else the system's."""
        if self.postgres:
            return float(self.value("SELECT extract(epoch FROM clock_timestamp()) * 1000"))
        return common.wall() * 1000

    def statuses(self) -> dict[str, int]:
        return dict(self.rows("SELECT status, count(*) FROM {t}occurrences GROUP BY status"))

    def events(self) -> dict[str, int]:
        return dict(self.rows("SELECT event_type, count(*) FROM {t}events GROUP BY event_type"))

    def close(self) -> None:
        self.conn.close()


def system(args: Any) -> dict[str, Any]:
    return {"system": "jobledger", "store": args.store}


# -- steps ------------------------------------------------------------------------------------


def step_enqueue(args: Any) -> dict[str, Any]:
    fresh(args)
    app = load_app(args)
    create_job(app, JOB, "noop")  # opens the store: pool, schema, migrations (not timed)
    pragmas = store_pragmas(app)
    wait = common.quiet(args)
    deduplicated = 0
    with common.Timed() as timed:
        for _ in range(args.n):
            # New API: every call is a new occurrence (no trigger_key needed).
            occurrence = app.enqueue(JOB)
            deduplicated += bool(getattr(occurrence, "deduplicated", False))
    app.close()
    probe = Probe(args)
    counts = probe.statuses()
    probe.close()
    return common.record(
        args,
        **system(args),
        call=f'app.enqueue("{JOB}")',
        ok=counts == {"queued": args.n},
        checks={"statuses": counts, "deduplicated": deduplicated},
        pragmas=pragmas,
        quiet=wait,
        **timed.record(args.n),
    )


def step_enqueue_batch(args: Any) -> dict[str, Any]:
    fresh(args)
    app = load_app(args)
    create_job(app, JOB, "noop")
    if not hasattr(app, "enqueue_many"):
        app.close()
        return common.record(
            args,
            **system(args),
            ok=False,
            error="this jobledger has no App.enqueue_many (the batch enqueue API)",
        )
    pragmas = store_pragmas(app)
    sizes = common.chunks(args.n, args.batch_size)
    wait = common.quiet(args)
    with common.Timed() as timed:
        for size in sizes:
            # New API: len(payloads) new occurrences in one transaction.
            app.enqueue_many(JOB, [None] * size)
    app.close()
    probe = Probe(args)
    counts = probe.statuses()
    probe.close()
    return common.record(
        args,
        **system(args),
        call=f'app.enqueue_many("{JOB}", [None] * {min(args.batch_size, args.n)})',
        batch_size=args.batch_size,
        batches=len(sizes),
        ok=counts == {"queued": args.n},
        checks={"statuses": counts},
        pragmas=pragmas,
        quiet=wait,
        **timed.record(args.n),
    )


def maintenance() -> None:
    """VACUUM ANALYZE jobledger's tables, then CHECKPOINT (superuser connection)."""
    import psycopg

    with psycopg.connect(common.PG_ADMIN_URL, autocommit=True) as conn:
        for table in ("occurrences", "events", "jobs"):
            conn.execute(f'VACUUM ANALYZE "{common.JOBLEDGER_SCHEMA}".{table}')
        conn.execute("CHECKPOINT")


def worker_summary(path: Path) -> dict[str, Any] | None:
    """The JSON summary ``jobledger worker`` prints when it stops."""
    text = path.read_text(errors="replace") if path.exists() else ""
    start = text.find("{")
    if start < 0:
        return None
    try:
        summary = json.loads(text[start:])
    except json.JSONDecodeError:
        return None
    return summary if isinstance(summary, dict) else None


def step_burndown(args: Any) -> dict[str, Any]:
    fresh(args)
    app = load_app(args)
    create_job(app, JOB, "noop")
    pragmas = store_pragmas(app)
    for _ in range(args.n):
        app.enqueue(JOB)  # new API: one new occurrence per call
    app.close()
    if args.store == "postgres":
        maintenance()
    log = common.log_path(args, f"jobledger-{args.store}")
    out = log.with_suffix(".out")
    log.unlink(missing_ok=True)
    wait = common.quiet(args)
    probe = Probe(args)
    queued = probe.statuses()

    def remaining() -> int:
        return probe.value(f"SELECT count(*) FROM {{t}}occurrences WHERE status IN {UNFINISHED}")

    result = common.burndown(
        worker_cmd(args),
        worker_env(args),
        remaining,
        args.n,
        log,
        timeout_s=args.timeout,
        stdout_path=out,
        pyspy_out=args.pyspy,
        before_spawn=probe.clock_ms,
    )
    counts = probe.statuses()
    events = probe.events()
    not_once = probe.value(
        "SELECT count(*) FROM {t}occurrences o WHERE"
        " (SELECT count(*) FROM {t}events e WHERE e.occurrence_id = o.occurrence_id"
        "   AND e.event_type = 'occurrence_claimed') <> 1"
        " OR (SELECT count(*) FROM {t}events e WHERE e.occurrence_id = o.occurrence_id"
        "   AND e.event_type = 'occurrence_succeeded') <> 1"
    )
    max_attempt = probe.value("SELECT max(attempt) FROM {t}occurrences")
    first_claim = probe.value(
        "SELECT min(occurred_at) FROM {t}events WHERE event_type = 'occurrence_claimed'"
    )
    last_settle = probe.value("SELECT max(settled_at) FROM {t}occurrences")
    probe.close()
    spawn_ms = result["spawn_mark"]
    common.add_timing(
        result,
        args.n,
        None if first_claim is None else (first_claim - spawn_ms) / 1000,
        None if last_settle is None else (last_settle - spawn_ms) / 1000,
    )
    summary = worker_summary(out)
    checks = {
        "queued_before": queued,
        "statuses": counts,
        "events": events,
        "occurrences_not_claimed_and_succeeded_exactly_once": not_once,
        "max_attempt": max_attempt,
        "worker_summary": summary,
    }
    ok = (
        result["ok_drained"]
        and queued == {"queued": args.n}
        and counts == {"succeeded": args.n}
        and events.get("occurrence_claimed") == args.n
        and events.get("occurrence_succeeded") == args.n
        and not events.get("occurrence_reclaimed")
        and not_once == 0
        and max_attempt == 1
        and summary is not None
        and summary.get("statuses") == {"succeeded": args.n}
        and summary.get("forced") is False
    )
    return common.record(
        args,
        **system(args),
        concurrency=args.concurrency,
        worker=shlex.join(["jobledger", *worker_cmd(args)[1:]]),
        ok=ok,
        checks=checks,
        pragmas=pragmas,
        quiet=wait,
        **result,
    )


# -- the kill check ---------------------------------------------------------------------------

_MARK = re.compile(r"^(start|end) pid=(\d+) attempt=(\d+) fence=(\d+) t=([0-9.]+)$")


def read_marker(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = []
    for line in path.read_text().splitlines():
        match = _MARK.match(line.strip())
        if match:
            what, pid, attempt, fence, when = match.groups()
            lines.append(
                {"what": what, "pid": int(pid), "attempt": int(attempt), "fence": int(fence),
                 "t": float(when)}
            )  # fmt: skip
    return lines


def step_killtest(args: Any) -> dict[str, Any]:
    fresh(args)
    marker = args.scratch / "kill" / f"marker-{args.store}-r{args.run}.txt"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.unlink(missing_ok=True)
    app = load_app(args)
    payload = {"seconds": args.task_seconds, "marker": str(marker)}
    create_job(app, SLOW_JOB, "slow", payload=payload)
    logs = [common.log_path(args, f"jobledger-{args.store}-w{i}") for i in (1, 2)]
    for path in logs:
        path.unlink(missing_ok=True)
    first = common.spawn(worker_cmd(args), worker_env(args), logs[0], logs[0].with_suffix(".out"))
    time.sleep(1.0)
    occurrence = app.enqueue(SLOW_JOB)  # new API: a new occurrence
    app.close()
    occurrence_id = occurrence.id

    deadline = time.monotonic() + 30
    while not read_marker(marker) and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.01)
    marks = read_marker(marker)
    if not marks:
        common.stop_process(first)
        return common.record(
            args, **system(args), ok=False, error="the slow task never started", n=1
        )
    pause = marks[0]["t"] + args.kill_after - common.wall()
    if pause > 0:
        time.sleep(pause)
    os.kill(first.pid, signal.SIGKILL)
    killed_at = common.wall()
    first.wait()
    second = common.spawn(worker_cmd(args), worker_env(args), logs[1], logs[1].with_suffix(".out"))
    second_spawned = common.wall() - killed_at

    probe = Probe(args)
    columns = "status, attempt, fence, lease_owner, lease_expires_at, settled_at"
    query = f"SELECT {columns} FROM {{t}}occurrences WHERE occurrence_id = ?"
    samples: list[tuple[float, tuple[Any, ...]]] = []
    settled_seen = None
    while True:
        now = common.wall() - killed_at
        row = probe.rows(query, (occurrence_id,))[0]
        samples.append((now, row))
        if row[0] in ("succeeded", "dead_letter") and settled_seen is None:
            settled_seen = now
        if settled_seen is not None and now - settled_seen >= 3.0:
            break
        if now > args.kill_timeout:
            break
        time.sleep(0.1)
    stop = common.stop_process(second)
    after_kill = samples[0][1]
    final = samples[-1][1]
    history = probe.rows(
        "SELECT event_type, fence, owner_id, occurred_at FROM {t}events"
        " WHERE occurrence_id = ? ORDER BY event_id",
        (occurrence_id,),
    )
    occurrences = probe.value("SELECT count(*) FROM {t}occurrences")
    probe.close()
    marks = read_marker(marker)
    starts = [m for m in marks if m["what"] == "start"]
    ends = [m for m in marks if m["what"] == "end"]
    types = Counter(event[0] for event in history)

    def since_kill(epoch_ms: Any) -> float | None:
        return None if epoch_ms is None else round(epoch_ms / 1000 - killed_at, 2)

    rerun = [m for m in starts if m["pid"] != first.pid]
    result = {
        "concurrency": args.concurrency,
        "task_seconds": args.task_seconds,
        "kill_after_s": args.kill_after,
        "occurrence_id": occurrence_id,
        "second_worker_spawned_s": round(second_spawned, 3),
        "after_kill": dict(zip(columns.split(", "), after_kill, strict=True)),
        "lease_expired_after_kill_s": since_kill(after_kill[4]),
        "rerun_started_after_kill_s": round(rerun[0]["t"] - killed_at, 2) if rerun else None,
        "rerun_ended_after_kill_s": round(ends[-1]["t"] - killed_at, 2) if ends else None,
        "succeeded_after_kill_s": since_kill(final[5]),
        "final": dict(zip(columns.split(", "), final, strict=True)),
        "handler_starts": len(starts),
        "handler_ends": len(ends),
        "marker": marks,
        "events": [list(event) for event in history],
        "event_counts": dict(types),
        "occurrences": occurrences,
        "second_worker_stop": stop,
    }
    ok = (
        final[0] == "succeeded"
        and types.get("occurrence_succeeded") == 1
        and occurrences == 1
        and len(ends) == 1
        and ends[0]["pid"] != first.pid
    )
    return common.record(args, **system(args), ok=ok, **result, n=1)


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.split("\n\n")[0], STEPS)
    parser.add_argument(
        "--store",
        choices=("sqlite", "sqlite-normal", "postgres"),
        required=True,
        help="sqlite-normal: SQLite with synchronous=NORMAL (durable against process crashes, "
        "not power loss)",
    )
    parser.add_argument(
        "--jobledger-worker-arg",
        action="append",
        default=[],
        metavar="ARGS",
        help="extra arguments for `jobledger worker` (shell-split; repeatable), "
        "e.g. --jobledger-worker-arg='--prefetch 8'",
    )
    parser.add_argument("--task-seconds", type=float, default=5.0, help="killtest: task length")
    parser.add_argument(
        "--kill-after", type=float, default=0.5, help="killtest: SIGKILL this long into the task"
    )
    parser.add_argument(
        "--kill-timeout", type=float, default=120.0, help="killtest: give up this long after"
    )
    args = parser.parse_args(argv)
    step = {
        "enqueue": step_enqueue,
        "enqueue-batch": step_enqueue_batch,
        "burndown": step_burndown,
        "killtest": step_killtest,
    }[args.step]
    return common.emit(args, step(args))


if __name__ == "__main__":
    sys.exit(main())
