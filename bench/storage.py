"""What jobledger's embedded store costs on disk per occurrence, queued and settled.

Enqueues N occurrences (one ``App.enqueue`` each, a small JSON payload) into a fresh SQLite
file, checkpoints the write-ahead log into the file, and reports the file's growth per
occurrence; then runs them all (a no-op handler), checkpoints again and reports the size per
settled occurrence with its history; then ``prune`` (retention 0) and ``VACUUM`` and reports
what is left. With Huey installed (``bench/peers/.venv``), the same N ``SqliteHuey`` enqueues
are measured the same way, for the ratio.

    python bench/storage.py                 # N = 10,000
    python bench/storage.py --count 50000
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

import jobledger
from jobledger.testing import run_until_idle

PAYLOAD = {"to": "user@example.com"}


def file_bytes(path: Path) -> int:
    """The database file's size once its write-ahead log is checkpointed into it."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size


def tables(path: Path) -> dict[str, int]:
    """Bytes per table and index (dbstat), when this SQLite was built with it."""
    with sqlite3.connect(path) as conn:
        try:
            rows = conn.execute(
                "SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC"
            ).fetchall()
        except sqlite3.OperationalError:
            return {}
    return {name: int(size) for name, size in rows}


def jobledger_figures(directory: Path, count: int) -> dict[str, Any]:
    path = directory / "ledger.sqlite3"
    app = jobledger.App(str(path), authorize=jobledger.allow_all)

    @app.handler("mail")
    def mail(ctx: jobledger.JobContext) -> None:
        return None

    with app:
        app.ensure_job("mail-job", "mail")
        empty = file_bytes(path)
        for index in range(count):
            app.enqueue("mail-job", payload={**PAYLOAD, "n": index})
        queued = file_bytes(path)
        queued_tables = tables(path)
        ran = 0
        while ran < count:
            summary = run_until_idle(app, limit=1000)
            ran += len(summary)
            if summary.status != "limit_reached":
                break
        settled = file_bytes(path)
        app.store.prune(before=app.store.now() + 1, actor="bench")
    with sqlite3.connect(path) as conn:
        conn.execute("VACUUM")
    pruned = file_bytes(path)
    return {
        "emptyBytes": empty,
        "queuedBytesPerOccurrence": round((queued - empty) / count, 1),
        "settledBytesPerOccurrence": round((settled - empty) / count, 1),
        "afterPruneAndVacuumBytes": pruned,
        "queuedTables": queued_tables,
    }


def huey_figures(directory: Path, count: int) -> dict[str, Any] | None:
    try:
        from huey import SqliteHuey
    except ImportError:
        return None
    path = directory / "huey.sqlite3"
    huey = SqliteHuey(filename=str(path))

    @huey.task()
    def mail(payload: dict[str, Any]) -> None:
        return None

    huey.storage.conn  # noqa: B018 - creates the file and its tables
    empty = file_bytes(path)
    for index in range(count):
        mail({**PAYLOAD, "n": index})
    queued = file_bytes(path)
    return {"emptyBytes": empty, "queuedBytesPerOccurrence": round((queued - empty) / count, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="jobledger-storage-") as tmp:
        report: dict[str, Any] = {
            "count": args.count,
            "sqlite": sqlite3.sqlite_version,
            "jobledger": jobledger_figures(Path(tmp), args.count),
        }
        huey = huey_figures(Path(tmp), args.count)
        if huey is not None:
            report["huey"] = huey
            report["ratio"] = round(
                report["jobledger"]["queuedBytesPerOccurrence"] / huey["queuedBytesPerOccurrence"],
                2,
            )
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
