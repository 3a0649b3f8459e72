"""The kernel in one screen: open a store, create a job, enqueue, claim, settle, read history.

Run it with `python examples/quickstart.py [path-to-database]`.
"""

import sys
import tempfile
from pathlib import Path

import jobledger

target = sys.argv[1] if len(sys.argv) > 1 else str(Path(tempfile.mkdtemp()) / "jobs.sqlite3")

with jobledger.open_store(target) as store:  # SQLite, created on first use
    job = store.create_job(
        id="send-digest",
        kind="email.digest",
        authority={"principal": {"type": "user", "id": "alice"}},
        payload={"to": "alice@example.com"},
    )

    # One firing of the job. Enqueueing the same firing again is a no-op (deduplicated=True).
    now = store.now()  # epoch ms, from the store's clock
    occurrence = store.enqueue_occurrence(
        job_id=job.id, scheduled_for=now, trigger_key="manual:first"
    )
    again = store.enqueue_occurrence(job_id=job.id, scheduled_for=now, trigger_key="manual:first")
    assert again.id == occurrence.id
    assert again.deduplicated

    # A worker leases it; the fence guards every later write for this attempt.
    claimed = store.claim_next(owner_id="worker-1", lease_ms=30_000)
    assert claimed is not None
    print(f"claimed {claimed.id[:16]}… attempt={claimed.attempt} fence={claimed.fence}")

    done = store.settle(
        occurrence_id=claimed.id,
        owner_id="worker-1",
        fence=claimed.fence,
        outcome="succeeded",
        result={"sent": 1},
    )
    print(f"status={done.status} result={done.result}")

    for event in reversed(store.history(occurrence_id=claimed.id)):
        print(f"  {event.type:<24} owner={event.owner_id} fence={event.fence} {event.data}")
    print(f"database: {store.target}")
