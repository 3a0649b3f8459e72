"""A realistic store for the dashboard tests: an hour of work on a fake clock.

``seed(app, clock)`` declares five jobs (an on-demand email job, a nightly cron report in New
York time, an every-5-minutes sync, a billing export that dead-letters, a disabled legacy job),
runs about a hundred occurrences spread over the hour before "now" — successes, retries, dead
letters, a reclaim after an expired lease, a cancellation — and leaves a worker holding a live
lease plus a small queued backlog. Everything is deterministic: the same store every run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import timedelta

import jobledger
from jobledger import Fail, Retry
from jobledger.testing import FakeClock, run_until_idle

MINUTE = 60_000
WORKER_ID = "worker-7f3a:host-a"


@dataclass
class Seeded:
    """What the seed made, for assertions."""

    dead_letters: list[str] = field(default_factory=list)
    running: str | None = None
    cancelled: str | None = None
    reclaimed: str | None = None
    flaky: dict[str, bool] = field(default_factory=dict)


def make_app(target: str, clock: FakeClock) -> tuple[jobledger.App, Seeded]:
    """An App whose handlers follow the payload: ``{"fail": "dead"}`` dead-letters (unless the
    seeded ``flaky`` switch for its id is turned off), ``{"fail": "retry"}`` asks to retry."""
    app = jobledger.App(target, clock=clock, authorize=jobledger.allow_all)
    seeded = Seeded()

    @app.handler("email")
    def email(ctx: jobledger.JobContext) -> dict:
        return {"sent": True, "to": (ctx.payload or {}).get("to", "someone@example.com")}

    @app.handler("report")
    def report(ctx: jobledger.JobContext) -> dict:
        payload = ctx.payload or {}
        if payload.get("fail") == "dead" and seeded.flaky.get(payload.get("invoice", ""), True):
            raise Fail("upstream rejected the invoice: HTTP 422")
        if payload.get("fail") == "retry" and ctx.occurrence.attempt < 2:
            raise Retry("rate limited by the billing API", delay=timedelta(seconds=30))
        return {"rows": 120 + ctx.occurrence.attempt}

    @app.handler("sync")
    def sync(ctx: jobledger.JobContext) -> dict:
        return {"synced": 42}

    return app, seeded


def seed(app: jobledger.App, clock: FakeClock, seeded: Seeded) -> Seeded:
    store = app.store
    rng = random.Random(7)
    app.ensure_job("welcome-email", "email", payload={"template": "welcome"})
    app.ensure_job("billing-export", "report", max_attempts=2)
    app.schedule("nightly-report", "report", cron="30 2 * * *", timezone="America/New_York")
    app.schedule("sync-inventory", "sync", every=timedelta(minutes=15))
    app.ensure_job("legacy-cleanup", "sync", enabled=False)
    start = clock()
    # An hour of traffic: a few emails a minute, some exports that retry or fail for good.
    for minute in range(60):
        for index in range(rng.choice((0, 1, 1, 2, 2, 3))):
            app.enqueue("welcome-email", payload={"to": f"user{minute}-{index}@example.com"})
        if minute % 7 == 3:
            app.enqueue("billing-export", payload={"fail": "retry", "invoice": f"inv-{minute}"})
        if minute in (21, 38, 52):
            invoice = f"inv-{minute}"
            occurrence = app.enqueue("billing-export", payload={"fail": "dead", "invoice": invoice})
            seeded.dead_letters.append(occurrence.id)
        app.plan()
        run_until_idle(app, limit=1000)
        clock.advance(MINUTE)
    # Retries that came due in the last minute run now.
    run_until_idle(app, limit=1000)
    # A reclaim: a runtime claims and vanishes; after its lease expires another takes over.
    lost = app.enqueue("welcome-email", payload={"to": "reclaim@example.com"})
    store.claim_occurrence(occurrence_id=lost.id, owner_id="runtime-gone:host-b", lease_ms=5_000)
    clock.advance(10_000)
    run_until_idle(app, limit=10)
    seeded.reclaimed = lost.id
    # A live worker holding one lease, with a small backlog behind it.
    store.register_worker(
        worker_id=WORKER_ID,
        hostname="host-a",
        pid=4242,
        info={"kinds": ["email", "report", "sync"], "concurrency": 4, "planner": True},
    )
    running = app.enqueue("welcome-email", payload={"to": "slow@example.com"})
    store.claim_occurrence(occurrence_id=running.id, owner_id=WORKER_ID, lease_ms=60_000)
    seeded.running = running.id
    for index in range(3):
        app.enqueue("welcome-email", payload={"to": f"queued{index}@example.com"})
    doomed = app.enqueue("welcome-email", payload={"to": "typo@exmaple.com"})
    store.cancel_occurrence(occurrence_id=doomed.id, actor="web:alice", reason="bad address")
    seeded.cancelled = doomed.id
    app.plan()
    clock.advance(95_000)  # the backlog has waited a while; the worker was seen just now
    store.touch_worker(WORKER_ID)
    assert clock() - start > 60 * MINUTE
    return seeded
