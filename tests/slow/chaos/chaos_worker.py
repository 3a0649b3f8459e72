"""One worker process of the kill harness: a real ``App.run_worker`` with the planner on.

Usage: python chaos_worker.py CONFIG_JSON

``CONFIG_JSON`` holds ``target`` (a SQLite path or a PostgreSQL URL), ``owner`` (this worker's
owner id), ``effects`` (the side-effect file), ``planner`` (plan schedules or not), the worker
settings, ``summary`` (where the worker's summary goes when it stops gracefully) and ``ready``
(written once the worker runs). Optional: ``schedules`` (declare the schedules, default true) and
``block_s`` (every ``work`` handler hangs this long: a worker stuck holding its claims) and
``clock_file`` (the worker's clock — for the app, its runtime and its store — is the system
clock plus the offset the harness writes there: :mod:`tests.slow.chaos.offset_clock`; the summary
then counts the clock steps the worker noticed and the leases it lost).

Every handler records its side effects *outside the store*, in an append-only file, one JSON
line per ``write(2)`` on an ``O_APPEND`` descriptor (so lines from concurrent processes never
interleave): ``start`` when the handler begins and ``end`` just before it returns, keyed by
(occurrence id, fence) with the owner, pid and ``time.monotonic()`` (system-wide on Linux, so
the harness can compare instants across processes), and the epoch ms (``w``) to compare with
the store's instants. A SIGKILL can land anywhere: before the
start line, between the lines, or after the end line while the settlement waits to commit.

Job kinds:

* ``work`` — sleeps ``payload["ms"]`` and succeeds;
* ``flaky`` — fails its first attempt (retryable), succeeds afterwards;
* ``doomed`` — always fails: with ``payload["fatal"]`` by raising :class:`jobledger.Fail`
  (dead-lettered at once), otherwise retryably (dead-lettered when its attempts run out);
* ``once`` / ``charge`` — sleep ``payload["ms"]`` and succeed: the recovery scenario's
  ``max_attempts=1`` and ``on_lost_lease="adjudicate"`` jobs (:mod:`tests.slow.chaos.recovery`);
* ``tick`` — the scheduled jobs' kind (declared here with ``app.schedule(every=…)``, as every
  real deployment does at start-up; the declaration is idempotent).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import jobledger
from jobledger.engine.observe import Observer

SCHEDULES = {"tick-1s": timedelta(seconds=1), "tick-3s": timedelta(seconds=3)}
SCHEDULE_MAX_ATTEMPTS = 32


class Effects:
    def __init__(self, path: str, owner: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._owner = owner
        self._pid = os.getpid()

    def record(self, event: str, ctx: jobledger.JobContext) -> None:
        line = json.dumps(
            {
                "e": event,
                "occ": ctx.occurrence_id,
                "fence": ctx.fence,
                "attempt": ctx.attempt,
                "owner": self._owner,
                "pid": self._pid,
                "t": time.monotonic(),
                "w": jobledger.system_clock(),  # epoch ms, to compare with store instants
            },
            separators=(",", ":"),
        )
        os.write(self._fd, (line + "\n").encode())


class StepCounter(Observer):
    """What the harness cannot see from outside: the steps the worker noticed, the leases it
    lost."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self.leases_lost: list[str] = []

    def clock_stepped(self, direction: str, seconds: float) -> None:
        self.steps.append({"direction": direction, "s": round(seconds, 1)})

    def lease_lost(self, occurrence: jobledger.Occurrence) -> None:
        self.leases_lost.append(occurrence.id)


def _offset_clock(path: str) -> jobledger.Clock:
    # The script runs as a file (its directory first on sys.path), not as a package module.
    from offset_clock import OffsetClock

    return OffsetClock(path)


def build_app(config: dict[str, Any]) -> jobledger.App:
    effects = Effects(config["effects"], config["owner"])
    block_s = config.get("block_s")  # every ``work`` handler hangs this long (a stuck worker)
    clock_file = config.get("clock_file")
    app = jobledger.App(
        config["target"],
        name="chaos",
        authorize=jobledger.allow_all,
        store_options=config.get("store_options") or None,
        clock=None if clock_file is None else _offset_clock(clock_file),
    )
    fast_retry = jobledger.FixedBackoff(timedelta(milliseconds=50))

    @app.handler("work", retry=fast_retry)
    def work(ctx: jobledger.JobContext) -> dict[str, int]:
        effects.record("start", ctx)
        time.sleep(block_s if block_s is not None else ctx.payload["ms"] / 1000)
        effects.record("end", ctx)
        return {"fence": ctx.fence}

    @app.handler("flaky", retry=fast_retry)
    def flaky(ctx: jobledger.JobContext) -> dict[str, int]:
        effects.record("start", ctx)
        if ctx.payload["fail_first"] and ctx.attempt == 1:
            raise RuntimeError("the first attempt of a flaky job fails")
        effects.record("end", ctx)
        return {"fence": ctx.fence}

    @app.handler("doomed", retry=fast_retry)
    def doomed(ctx: jobledger.JobContext) -> None:
        effects.record("start", ctx)
        if ctx.payload["fatal"]:
            raise jobledger.Fail("this job always fails", code="doomed")
        raise RuntimeError("this job fails every attempt")

    # The recovery scenario (tests/slow/chaos/recovery.py): jobs with max_attempts=1, and jobs whose
    # lost attempts become outcome-unknown cases.
    @app.handler("once", retry=fast_retry)
    def once(ctx: jobledger.JobContext) -> dict[str, int]:
        effects.record("start", ctx)
        time.sleep(ctx.payload["ms"] / 1000)
        effects.record("end", ctx)
        return {"fence": ctx.fence}

    @app.handler("charge", retry=fast_retry, on_lost_lease="adjudicate")
    def charge(ctx: jobledger.JobContext) -> dict[str, int]:
        effects.record("start", ctx)
        time.sleep(ctx.payload["ms"] / 1000)
        effects.record("end", ctx)
        return {"fence": ctx.fence}

    @app.handler("tick", retry=fast_retry)
    def tick(ctx: jobledger.JobContext) -> dict[str, int]:
        effects.record("start", ctx)
        time.sleep(0.002)
        effects.record("end", ctx)
        return {"fence": ctx.fence}

    return app


def declare_schedules(app: jobledger.App) -> None:
    for job_id, every in SCHEDULES.items():
        for attempt in range(20):  # the store may be restarting as this worker starts
            try:
                app.schedule(job_id, "tick", every=every, max_attempts=SCHEDULE_MAX_ATTEMPTS)
                break
            except jobledger.SchedulerError as exc:
                if exc.code != "SCHEDULER_STORAGE_UNAVAILABLE" or attempt == 19:
                    raise
                time.sleep(0.25)


def main(config_text: str) -> int:
    config = json.loads(config_text)
    logging.basicConfig(
        level=logging.WARNING,
        format=f"%(asctime)s {config['owner']} %(name)s %(levelname)s %(message)s",
    )
    # A SIGTERM that arrives before Worker.run installs its own handlers must still stop us
    # gracefully (the harness may stop a worker it has just started).
    stop_requested = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop_requested.set())
    app = build_app(config)
    counter = StepCounter()
    with app:
        if config.get("schedules", True):
            declare_schedules(app)
        worker = app.worker(
            owner_id=config["owner"],
            planner=config["planner"],
            concurrency=config["concurrency"],
            prefetch=config["prefetch"],
            lease=timedelta(seconds=config["lease_s"]),
            reap_interval=timedelta(seconds=config["reap_s"]),
            poll_interval=timedelta(seconds=config["poll_s"]),
            plan_interval=timedelta(seconds=1),
            grace_period=timedelta(seconds=10),
            observer=counter if config.get("clock_file") else None,
        )

        def announce() -> None:
            if worker.wait_until_running(60):
                Path(config["ready"]).write_text("ready")
                if stop_requested.is_set():
                    worker.stop()

        threading.Thread(target=announce, daemon=True).start()
        if stop_requested.is_set():
            worker.stop()  # a stop requested before run() makes it return at once
        summary = worker.run()
    with open(config["summary"], "w") as out:
        json.dump(
            {
                "statuses": dict(summary.statuses),
                "released": len(summary.released),
                "forced": summary.forced,
                "reaped": summary.reaped,
                "plans": summary.plans,
                "clock_steps_noticed": counter.steps,
                "leases_lost": counter.leases_lost,
            },
            out,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
