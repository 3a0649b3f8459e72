"""Many threads and many stores on one database: SKIP LOCKED claims, races on one row, the pool."""

from __future__ import annotations

import threading
import time
from collections import Counter

import psycopg
import pytest

from jobledger import SchedulerError

AUTHORITY = {"principal": {"type": "user", "id": "tester"}}


def _run_threads(count: int, target) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def wrapped(index: int) -> None:
        try:
            barrier.wait()
            target(index)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=wrapped, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return errors


def test_threads_sharing_a_pool_claim_each_occurrence_once(open_pg, admin):
    store = open_pg(pool_min_size=2, pool_max_size=4)
    store.create_job(id="j", kind="k", authority=AUTHORITY)
    for i in range(200):
        store.enqueue_occurrence(job_id="j", scheduled_for=i, trigger_key="t")
    claims: Counter[str] = Counter()
    lock = threading.Lock()

    def work(index: int) -> None:
        while (claimed := store.claim_next(owner_id=f"w{index}", lease_ms=60_000)) is not None:
            with lock:
                claims[claimed.id] += 1
            store.settle(
                occurrence_id=claimed.id,
                owner_id=f"w{index}",
                fence=claimed.fence,
                outcome="succeeded",
            )

    assert _run_threads(8, work) == []
    assert len(claims) == 200 and set(claims.values()) == {1}
    stats = store.pool_stats()
    assert stats.get("pool_max", 4) <= 4
    events = admin.execute(
        "SELECT event_type, count(*) AS n FROM jobledger.events GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert {e["event_type"]: e["n"] for e in events} == {
        "job_created": 1,
        "occurrence_claimed": 200,
        "occurrence_enqueued": 200,
        "occurrence_succeeded": 200,
    }


def test_concurrent_enqueues_of_one_firing_write_one_occurrence(open_pg, admin):
    stores = [open_pg() for _ in range(4)]
    stores[0].create_job(id="j", kind="k", authority=AUTHORITY)
    results = {}

    def enqueue(index: int) -> None:
        results[index] = stores[index].enqueue_occurrence(
            job_id="j", scheduled_for=1, trigger_key="t"
        )

    assert _run_threads(4, enqueue) == []
    assert len({o.id for o in results.values()}) == 1
    assert sorted(o.deduplicated for o in results.values()) == [False, True, True, True]
    count = admin.execute(
        "SELECT count(*) AS n FROM jobledger.events WHERE event_type = 'occurrence_enqueued'"
    ).fetchone()["n"]
    assert count == 1


def test_concurrent_creates_of_one_job_conflict(open_pg):
    stores = [open_pg() for _ in range(4)]
    outcomes: dict[int, object] = {}

    def create(index: int) -> None:
        try:
            outcomes[index] = stores[index].create_job(id="j", kind="k", authority=AUTHORITY)
        except SchedulerError as exc:
            outcomes[index] = exc.code

    assert _run_threads(4, create) == []
    codes = sorted(o if isinstance(o, str) else "created" for o in outcomes.values())
    assert codes == ["SCHEDULER_CONFLICT"] * 3 + ["created"]


def test_concurrent_updates_of_one_revision_let_one_win(open_pg):
    stores = [open_pg() for _ in range(4)]
    stores[0].create_job(id="j", kind="k", authority=AUTHORITY)
    outcomes: dict[int, object] = {}

    def update(index: int) -> None:
        try:
            outcomes[index] = (
                stores[index]
                .update_job("j", expected_revision=1, patch={"payload": index})
                .revision
            )
        except SchedulerError as exc:
            outcomes[index] = exc.code

    assert _run_threads(4, update) == []
    assert sorted(map(str, outcomes.values())) == ["2"] + ["SCHEDULER_REVISION_CONFLICT"] * 3


@pytest.mark.parametrize("targeted_first", [True, False])
def test_a_targeted_claim_racing_claim_next_leases_once(open_pg, targeted_first):
    stores = [open_pg() for _ in range(2)]
    stores[0].create_job(id="j", kind="k", authority=AUTHORITY)
    occurrence = stores[0].enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="t")
    got: dict[int, object] = {}

    def claim(index: int) -> None:
        if (index == 0) == targeted_first:
            got[index] = stores[index].claim_occurrence(
                occurrence_id=occurrence.id, owner_id=f"w{index}", lease_ms=60_000
            )
        else:
            got[index] = stores[index].claim_next(owner_id=f"w{index}", lease_ms=60_000)

    assert _run_threads(2, claim) == []
    winners = [o for o in got.values() if o is not None]
    assert len(winners) == 1 and winners[0].fence == 1


def test_a_settle_reads_partition_limits_only_after_a_redeclaration_of_its_queue(
    open_pg, pg_url, admin
):
    # A settle that frees a partition's slot admits its next held rows by the partition limit
    # in force. A re-declaration holds its queue's lock exclusively while it tightens the limit
    # and regates the rows admitted under the old one; a settle that read the old limit before
    # that commit would admit by it afterwards, and the partition would run past its new limit
    # (seen once under load: two running in a partition limited to one).
    from jobledger import Queue
    from jobledger.store.operations.admission import queue_lock

    store = open_pg()
    store.declare_queue(Queue("q", partition_concurrency=2), actor="tester")
    store.create_job(id="j", kind="k", authority=AUTHORITY, queue="q")
    for i in range(4):
        store.enqueue_occurrence(job_id="j", scheduled_for=i, trigger_key=f"t{i}", partition="p")
    claimed = store.claim_next(owner_id="w", lease_ms=60_000)
    assert claimed is not None
    waits = (
        "SELECT COUNT(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    done = threading.Event()
    with psycopg.connect(pg_url) as redeclaration:
        redeclaration.execute(
            "SELECT pg_advisory_xact_lock(%s)", (store._lock_key(queue_lock("q")),)
        )
        worker = threading.Thread(
            target=lambda: (
                store.settle(
                    occurrence_id=claimed.id, owner_id="w", fence=claimed.fence, outcome="succeeded"
                ),
                done.set(),
            )
        )
        worker.start()
        deadline = time.monotonic() + 30
        while admin.execute(waits).fetchone()["n"] == 0 and not done.is_set():
            assert time.monotonic() < deadline, "the settle neither waited nor finished"
            time.sleep(0.01)
        assert not done.is_set(), "the settle read the queue's limits without its lock"
        redeclaration.rollback()
    worker.join(30)
    assert done.is_set()
    assert store.get_occurrence(claimed.id).status == "succeeded"
