"""Huey 3.5.4 on SQLite (``SqliteHuey``, every default): enqueue and burn-down.

    python bench_huey.py enqueue --n 10000
    python bench_huey.py enqueue-batch --n 10000        # records "n/a": Huey has no batch enqueue
    python bench_huey.py burndown --n 10000 --concurrency 4   # huey_consumer -w 4 -k thread

Verification: after ``enqueue``, a separate sqlite3 connection counts N rows in ``task``. After a
burn-down, the consumer's own INFO log (Huey's default level) must show every enqueued task id
executed exactly once, and ``task`` must be empty.
"""

from __future__ import annotations

import os
import re
import sqlite3
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import peerscommon as common

STEPS = ("enqueue", "enqueue-batch", "burndown")
SYSTEM = {"system": "huey", "store": "sqlite"}

_EXECUTING = re.compile(r"^\[([^\]]+)\] INFO:[^:]*:[^:]*:Executing \S+: ([0-9a-f-]+)")
_EXECUTED = re.compile(r"^\[([^\]]+)\] INFO:[^:]*:[^:]*:\S+: ([0-9a-f-]+) executed in ")


def db_path(args: Any) -> Path:
    return args.scratch / "huey" / "huey.db"


def fresh_app(args: Any) -> Any:
    """A new, empty SqliteHuey database; returns the app module (tables created on import)."""
    path = db_path(args)
    path.parent.mkdir(parents=True, exist_ok=True)
    common.remove_sqlite_files(path)
    os.environ["PEERSBENCH_HUEY_DB"] = str(path)
    import peers_huey_app

    return peers_huey_app


def pragmas(conn: sqlite3.Connection) -> dict[str, Any]:
    return {
        name: conn.execute(f"PRAGMA {name}").fetchone()[0]
        for name in ("journal_mode", "synchronous", "cache_size", "busy_timeout")
    }


def queued(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT count(*) FROM task").fetchone()[0]


def step_enqueue(args: Any) -> dict[str, Any]:
    app = fresh_app(args)
    observed = pragmas(app.huey.storage.conn)  # opens Huey's connection (not timed)
    wait = common.quiet(args)
    with common.Timed() as timed:
        for _ in range(args.n):
            app.noop()
    app.huey.storage.close()
    count = queued(db_path(args))
    return common.record(
        args,
        **SYSTEM,
        call="noop()",
        ok=count == args.n,
        checks={"queued": count},
        pragmas=observed,
        quiet=wait,
        **timed.record(args.n),
    )


def step_enqueue_batch(args: Any) -> dict[str, Any]:
    return common.record(
        args, **SYSTEM, na=True, ok=True, reason="Huey has no batch enqueue API", rate=None
    )


def _log_time(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()  # local time, as logged


def read_log(path: Path) -> tuple[Counter[str], Counter[str], float | None, float | None]:
    started: Counter[str] = Counter()
    finished: Counter[str] = Counter()
    first = last = None
    for line in path.read_text(errors="replace").splitlines():
        match = _EXECUTING.match(line)
        if match:
            started[match.group(2)] += 1
            when = _log_time(match.group(1))
            first = when if first is None else min(first, when)
            continue
        match = _EXECUTED.match(line)
        if match:
            finished[match.group(2)] += 1
            when = _log_time(match.group(1))
            last = when if last is None else max(last, when)
    return started, finished, first, last


def step_burndown(args: Any) -> dict[str, Any]:
    app = fresh_app(args)
    observed = pragmas(app.huey.storage.conn)
    ids = [app.noop().id for _ in range(args.n)]
    app.huey.storage.close()
    path = db_path(args)
    log = common.log_path(args, "huey")
    log.unlink(missing_ok=True)
    wait = common.quiet(args)
    poller = sqlite3.connect(path, isolation_level=None)

    def remaining() -> int:
        return poller.execute("SELECT count(*) FROM task").fetchone()[0]

    cmd = [
        common.venv_bin("huey_consumer"),
        "peers_huey_app.huey",
        "-w", str(args.concurrency),
        "-k", "thread",
        "-l", str(log),
    ]  # fmt: skip
    result = common.burndown(
        cmd,
        common.worker_env({"PEERSBENCH_HUEY_DB": str(path)}),
        remaining,
        args.n,
        log,
        timeout_s=args.timeout,
        pyspy_out=args.pyspy,
    )
    left = remaining()
    poller.close()
    started, finished, first, last = read_log(log)
    expected = set(ids)
    spawn = result["spawn_wall"]
    common.add_timing(
        result,
        args.n,
        None if first is None else first - spawn,
        None if last is None else last - spawn,
    )
    checks = {
        "left_in_queue": left,
        "executed": sum(finished.values()),
        "distinct_executed": len(finished),
        "started_more_than_once": sum(1 for c in started.values() if c > 1),
        "executed_more_than_once": sum(1 for c in finished.values() if c > 1),
        "missing": len(expected - set(finished)),
        "unknown": len(set(finished) - expected),
    }
    ok = (
        result["ok_drained"]
        and left == 0
        and checks["missing"] == 0
        and checks["unknown"] == 0
        and checks["executed_more_than_once"] == 0
        and checks["started_more_than_once"] == 0
        and checks["executed"] == args.n
    )
    return common.record(
        args,
        **SYSTEM,
        concurrency=args.concurrency,
        worker=f"huey_consumer -w {args.concurrency} -k thread",
        ok=ok,
        checks=checks,
        pragmas=observed,
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
