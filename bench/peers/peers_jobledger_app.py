"""The jobledger side of the bench: one App, every store default, for SQLite and PostgreSQL.

The store comes from the environment, so this one file serves both::

    PEERSBENCH_JL_TARGET=/tmp/…/ledger.sqlite3                      # SQLite file
    PEERSBENCH_JL_TARGET=postgresql://peersbench@127.0.0.1:5432/peersbench   # PostgreSQL,
    PEERSBENCH_JL_SCHEMA=jlbench                                   # in this schema (default)
    PEERSBENCH_JL_SYNCHRONOUS=NORMAL                               # SQLite: FULL (default)

    jobledger worker peers_jobledger_app:app --concurrency 4

Handlers: ``noop`` (returns at once, a plain ``def`` run on the slot's thread) and ``slow``
(the kill check's: sleeps ``payload["seconds"]`` and appends ``start``/``end`` lines with pid,
attempt, fence and the wall-clock time to ``payload["marker"]``).
"""

from __future__ import annotations

import os
import time
from typing import Any

import jobledger

TARGET = os.environ.get(
    "PEERSBENCH_JL_TARGET", "/tmp/jobledger-peersbench/jobledger/ledger.sqlite3"
)
IS_POSTGRES = TARGET.startswith(("postgresql://", "postgres://"))
SCHEMA = os.environ.get("PEERSBENCH_JL_SCHEMA", "jlbench")
SYNCHRONOUS = os.environ.get("PEERSBENCH_JL_SYNCHRONOUS", "FULL")

app = jobledger.App(
    TARGET,
    name="peersbench",
    authorize=jobledger.allow_all,
    store_options={"schema": SCHEMA} if IS_POSTGRES else {"synchronous": SYNCHRONOUS},
)


@app.handler("noop")
def noop(ctx: jobledger.JobContext) -> None:
    return None


def _mark(path: str, what: str, ctx: jobledger.JobContext) -> None:
    now = time.time()  # noqa: TID251 - compared with the driver's wall clock
    line = (
        f"{what} pid={os.getpid()} attempt={ctx.occurrence.attempt} fence={ctx.fence} t={now:.3f}\n"
    )
    with open(path, "a") as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())


@app.handler("slow")
def slow(ctx: jobledger.JobContext) -> Any:
    payload = ctx.payload
    _mark(payload["marker"], "start", ctx)
    time.sleep(float(payload["seconds"]))
    _mark(payload["marker"], "end", ctx)
    return None
