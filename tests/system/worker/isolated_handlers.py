"""Module-level handlers for the process-isolation tests: a child process imports them by name.

Each writes what it saw to ``<payload["dir"]>/<occurrence id>.json`` (the test reads it), so the
test learns what crossed into the child without sharing memory with it."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import jobledger
from jobledger.engine.isolation import IsolatedContext


def _note(ctx: IsolatedContext, **extra: Any) -> None:
    seen = {
        "pid": os.getpid(),
        "payload": ctx.payload,
        "attempt": ctx.attempt,
        "fence": ctx.fence,
        "occurrenceId": ctx.occurrence_id,
        "jobKind": ctx.job.kind,
        "parents": ctx.parents,
        "cancelled": ctx.is_cancelled(),
        "isolated": ctx.isolated,
        **extra,
    }
    path = Path(ctx.payload["dir"]) / f"{ctx.occurrence_id}.json"
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(seen))
    partial.replace(path)  # seen whole or not at all


def echo(ctx: IsolatedContext) -> dict[str, Any]:
    _note(ctx)
    return {"pid": os.getpid(), "payload": ctx.payload}


def hang(ctx: IsolatedContext) -> str:
    """Announces itself, then blocks forever, deaf to cancellation (as a stuck C call would)."""
    _note(ctx)
    threading.Event().wait()
    return "never"


def retry_later(ctx: IsolatedContext) -> None:
    raise jobledger.Retry("not yet", delay_ms=5_000, code="try_later", details={"n": 1})


def fail(ctx: IsolatedContext) -> None:
    raise jobledger.Fail("no", code="bad_input")


def snooze(ctx: IsolatedContext) -> None:
    from datetime import timedelta

    raise jobledger.Snooze(timedelta(seconds=30))


class Unpicklable(Exception):
    """An exception that cannot cross as itself (a lock inside)."""

    retryable = False
    code = "custom_code"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


def raise_unpicklable(ctx: IsolatedContext) -> None:
    raise Unpicklable("locked up")


def not_json(ctx: IsolatedContext) -> object:
    return {1, 2}


def crash(ctx: IsolatedContext) -> None:
    os._exit(3)


def system_exit(ctx: IsolatedContext) -> None:
    raise SystemExit(4)


async def async_echo(ctx: IsolatedContext) -> str:
    return f"async {ctx.payload['n']}"
