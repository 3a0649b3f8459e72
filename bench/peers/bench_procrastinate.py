"""Procrastinate 3.10.0 on PostgreSQL: enqueue, batch enqueue and burn-down.

    python bench_procrastinate.py enqueue --n 10000          # noop.defer(), sync, one at a time
    python bench_procrastinate.py enqueue-batch --n 10000 --batch-size 1000   # noop.batch_defer()
    python bench_procrastinate.py burndown --n 10000 --concurrency 4
        # spawns: procrastinate --app peers_procrastinate_app.app worker --concurrency 4

Fresh storage is ``TRUNCATE`` of Procrastinate's tables (its schema is applied once by
setup.sh). Verification runs on a separate psycopg connection: N jobs ``todo`` after an enqueue;
after a burn-down N jobs ``succeeded`` and, per job, exactly one ``started`` and one
``succeeded`` event.
"""

from __future__ import annotations

import sys
from typing import Any

import peerscommon as common
import psycopg

STEPS = ("enqueue", "enqueue-batch", "burndown")
SYSTEM = {"system": "procrastinate", "store": "postgres"}
TABLES = (
    "procrastinate_jobs",
    "procrastinate_events",
    "procrastinate_periodic_defers",
    "procrastinate_workers",
)


def connect() -> psycopg.Connection:
    import peers_procrastinate_app

    return psycopg.connect(peers_procrastinate_app.conninfo(), autocommit=True)


def fresh() -> None:
    with connect() as conn:
        conn.execute(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE")


def maintenance() -> None:
    """VACUUM ANALYZE Procrastinate's tables, then CHECKPOINT (superuser connection)."""
    with psycopg.connect(common.PG_ADMIN_URL, autocommit=True) as conn:
        for table in TABLES:
            conn.execute(f"VACUUM ANALYZE {common.PROCRASTINATE_SCHEMA}.{table}")
        conn.execute("CHECKPOINT")


def status_counts(conn: psycopg.Connection) -> dict[str, int]:
    rows = conn.execute("SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY 1")
    return dict(rows.fetchall())


def opened_app() -> Any:
    import peers_procrastinate_app

    app = peers_procrastinate_app.app
    app.open()  # opens the sync pool and waits for it (not timed)
    return app, peers_procrastinate_app.noop


def step_enqueue(args: Any) -> dict[str, Any]:
    fresh()
    app, noop = opened_app()
    wait = common.quiet(args)
    with common.Timed() as timed:
        for _ in range(args.n):
            noop.defer()
    app.close()
    with connect() as conn:
        counts = status_counts(conn)
    return common.record(
        args,
        **SYSTEM,
        call="noop.defer()",
        ok=counts == {"todo": args.n},
        checks={"statuses": counts},
        quiet=wait,
        **timed.record(args.n),
    )


def step_enqueue_batch(args: Any) -> dict[str, Any]:
    fresh()
    app, noop = opened_app()
    sizes = common.chunks(args.n, args.batch_size)
    wait = common.quiet(args)
    with common.Timed() as timed:
        for size in sizes:
            noop.batch_defer(*({} for _ in range(size)))
    app.close()
    with connect() as conn:
        counts = status_counts(conn)
    return common.record(
        args,
        **SYSTEM,
        call=f"noop.batch_defer({{}} × {min(args.batch_size, args.n)})",
        batch_size=args.batch_size,
        batches=len(sizes),
        ok=counts == {"todo": args.n},
        checks={"statuses": counts},
        quiet=wait,
        **timed.record(args.n),
    )


def step_burndown(args: Any) -> dict[str, Any]:
    fresh()
    app, noop = opened_app()
    for _ in range(args.n):
        noop.defer()
    app.close()
    maintenance()
    log = common.log_path(args, "procrastinate")
    log.unlink(missing_ok=True)
    wait = common.quiet(args)
    poller = connect()

    def remaining() -> int:
        row = poller.execute(
            "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
        ).fetchone()
        return row[0]

    def db_clock() -> float:
        return poller.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()[0]

    cmd = [
        common.venv_bin("procrastinate"),
        "--app", "peers_procrastinate_app.app",
        "worker",
        "--concurrency", str(args.concurrency),
    ]  # fmt: skip
    result = common.burndown(
        cmd,
        common.worker_env({}),
        remaining,
        args.n,
        log,
        timeout_s=args.timeout,
        pyspy_out=args.pyspy,
        before_spawn=db_clock,
    )
    counts = status_counts(poller)
    events = dict(
        poller.execute(
            "SELECT type::text, count(*) FROM procrastinate_events GROUP BY 1"
        ).fetchall()
    )
    not_once = poller.execute(
        "SELECT count(*) FROM procrastinate_jobs j WHERE"
        " (SELECT count(*) FROM procrastinate_events e"
        "   WHERE e.job_id = j.id AND e.type = 'started') <> 1"
        " OR (SELECT count(*) FROM procrastinate_events e"
        "   WHERE e.job_id = j.id AND e.type = 'succeeded') <> 1"
    ).fetchone()[0]
    first, last = poller.execute(
        "SELECT extract(epoch FROM min(at) FILTER (WHERE type = 'started'))::float8,"
        " extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded'))::float8"
        " FROM procrastinate_events"
    ).fetchone()
    poller.close()
    spawn = result["spawn_mark"]  # the database clock just before the spawn
    common.add_timing(
        result,
        args.n,
        None if first is None else first - spawn,
        None if last is None else last - spawn,
    )
    checks = {
        "statuses": counts,
        "events": events,
        "jobs_not_started_and_succeeded_exactly_once": not_once,
    }
    ok = (
        result["ok_drained"]
        and counts == {"succeeded": args.n}
        and events.get("started") == args.n
        and events.get("succeeded") == args.n
        and not_once == 0
    )
    return common.record(
        args,
        **SYSTEM,
        concurrency=args.concurrency,
        worker=f"procrastinate worker --concurrency {args.concurrency}",
        task="async def noop()",
        ok=ok,
        checks=checks,
        quiet=wait,
        **result,
    )


def main(argv: list[str] | None = None) -> int:
    args = common.base_parser(__doc__.split("\n\n")[0], STEPS).parse_args(argv)
    step = {
        "enqueue": step_enqueue,
        "enqueue-batch": step_enqueue_batch,
        "burndown": step_burndown,
    }[args.step]
    return common.emit(args, step(args))


if __name__ == "__main__":
    sys.exit(main())
