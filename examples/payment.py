"""A payment that may or may not have happened: outcome-unknown adjudication, end to end.

Run it with ``python examples/payment.py [path-or-postgresql-url]``.

The payment provider here keeps no idempotency keys (a repeated request is a second charge), so
a charge whose worker dies mid-call must not simply be run again. The ``charge`` kind is
declared with ``on_lost_lease="adjudicate"``:

1. a worker process takes order A, charges it, and is SIGKILLed while "reading the response";
2. another takes order B and is SIGKILLed *before* its request left ("connecting");
3. the workers are known dead (here: we killed them; in production, the owner-gone reaper or
   the lease running out), and the next claim pass makes both dead letters with
   ``SCHEDULER_OUTCOME_UNKNOWN`` — nothing is re-run;
4. an operator checks the provider's records and decides: A ``applied`` (settled succeeded, the
   handler is never called again), B ``not_applied`` (exactly one more run);
5. every order is charged exactly once.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import jobledger
from jobledger.engine.heartbeat import ManualHeartbeat
from jobledger.testing import run_until_idle

WORKER_ID = "payment-worker"


class Provider:
    """The payment provider's own records: one row per charge it made (a file of its own)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with self._db() as db:
            db.execute("CREATE TABLE IF NOT EXISTS charges (charge_id TEXT, order_id TEXT)")

    def _db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30)

    def charge(self, order_id: str, cents: int) -> str:
        with self._db() as db:
            count = db.execute("SELECT count(*) FROM charges").fetchone()[0]
            charge_id = f"ch_{count + 1}_{cents}"
            db.execute("INSERT INTO charges VALUES (?, ?)", (charge_id, order_id))
        return charge_id

    def charges_for(self, order_id: str) -> list[str]:
        with self._db() as db:
            rows = db.execute("SELECT charge_id FROM charges WHERE order_id = ?", (order_id,))
            return [row[0] for row in rows]


def make_app(target: str, provider: Provider, progress: Path | None) -> jobledger.App:
    app = jobledger.App(target, name="payments", authorize=jobledger.allow_all)

    @app.handler("charge", on_lost_lease="adjudicate")
    def charge(ctx: jobledger.JobContext) -> dict[str, str]:
        order = ctx.payload["order"]
        if progress is not None:  # the demo's worker process: it is killed in here
            progress.write_text(f"{order}:connecting")
            if ctx.payload.get("hangs") == "connecting":
                time.sleep(3600)
        charge_id = provider.charge(order, ctx.payload["cents"])
        if progress is not None:
            progress.write_text(f"{order}:charged")
            if ctx.payload.get("hangs") == "reading":
                time.sleep(3600)
        return {"chargeId": charge_id}

    app.ensure_job("charge-order", "charge", max_attempts=5)
    return app


def worker(target: str, provider_path: str, progress: str) -> None:
    """The worker process: runs one charge (and is killed while it runs)."""
    app = make_app(target, Provider(Path(provider_path)), Path(progress))
    runtime = app.runtime(owner_id=WORKER_ID, heartbeat=ManualHeartbeat())
    runtime.run_until_idle(limit=1)


def run_and_kill(target: str, provider: Provider, progress: Path, until: str) -> None:
    progress.write_text("")
    child = subprocess.Popen(
        [sys.executable, __file__, "--worker", target, str(provider.path), str(progress)]
    )
    deadline = time.monotonic() + 60
    while progress.read_text() != until:
        if child.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the worker did not reach {until!r}")
        time.sleep(0.02)
    child.send_signal(signal.SIGKILL)
    child.wait()
    print(f"worker SIGKILLed at {until}")


def main(target: str) -> None:
    workdir = Path(tempfile.mkdtemp())
    provider = Provider(workdir / "provider.sqlite3")
    progress = workdir / "progress.txt"
    with make_app(target, provider, None) as app:
        order_a = app.enqueue(
            "charge-order", payload={"order": "A", "cents": 1999, "hangs": "reading"}
        )
        run_and_kill(target, provider, progress, "A:charged")
        order_b = app.enqueue(
            "charge-order", payload={"order": "B", "cents": 500, "hangs": "connecting"}
        )
        run_and_kill(target, provider, progress, "B:connecting")

        # The worker is known to be gone (the reaper's job, done here by hand).
        app.store.expire_leases_of(WORKER_ID, reason="worker process killed")
        run_until_idle(app)  # a claim pass: no re-run, two outcome-unknown dead letters
        cases = {case.occurrence_id: case for case in app.adjudication_cases()}
        assert set(cases) == {order_a.id, order_b.id}, cases
        print(f"{len(cases)} cases waiting for a decision; nothing was re-run")

        for occurrence, order in ((order_a, "A"), (order_b, "B")):
            case = cases[occurrence.id]
            assert case.evidence_digest is not None
            charged = provider.charges_for(order)  # the operator checks the provider
            decision = "applied" if charged else "not_applied"
            app.adjudicate(
                occurrence.id,
                decision=decision,
                evidence_digest=case.evidence_digest,
                reason=f"provider records for order {order}: {charged or 'no charge'}",
                actor="ops:example",
            )
            print(f"order {order}: {decision} ({charged or 'no charge at the provider'})")

        run_until_idle(app)  # B's one granted run
        for occurrence, order in ((order_a, "A"), (order_b, "B")):
            result = app.result(occurrence.id, timeout=timedelta(seconds=10))
            assert len(provider.charges_for(order)) == 1
            print(f"order {order}: charged exactly once, result {result}")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        worker(*sys.argv[2:5])
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else str(Path(tempfile.mkdtemp()) / "jobs.sqlite3"))
