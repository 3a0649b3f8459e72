"""Queues, priorities, limits and pause at the store (SPEC §7), on both stores."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobledger import EnqueueRequest, Queue, Rate
from jobledger.store.operations.admission import STAGE_BATCH

from .helpers import claim, enqueue, fail, make_job, raises_code, succeed

INVALID = "SCHEDULER_INVALID_ARGUMENT"


def _running(store) -> int:
    return sum(c.count for c in store.count_occurrences() if c.status == "running")


def test_larger_priority_first_then_due_order(store, clock, authority):
    make_job(store, authority, "job-a")
    low = enqueue(store, "job-a", clock() - 30, "low", priority=-5)
    late_high = enqueue(store, "job-a", clock() - 10, "late-high", priority=7)
    early_high = enqueue(store, "job-a", clock() - 20, "early-high", priority=7)
    plain = enqueue(store, "job-a", clock() - 40, "plain")
    order = [claim(store, lease_ms=60_000).id for _ in range(4)]
    assert order == [early_high.id, late_high.id, plain.id, low.id]


def test_occurrences_snapshot_the_jobs_queue_and_priority_unless_given(store, clock, authority):
    make_job(store, authority, "job-a", queue="mail", priority=3)
    inherited = enqueue(store, "job-a", clock(), "a")
    assert (inherited.queue, inherited.priority, inherited.partition) == ("mail", 3, None)
    given = enqueue(store, "job-a", clock(), "b", queue="bulk", priority=-1, partition="c:1")
    assert (given.queue, given.priority, given.partition) == ("bulk", -1, "c:1")
    job = store.get_job("job-a")
    store.update_job("job-a", expected_revision=job.revision, patch={"queue": "other"})
    # A change of queue alone does not make live occurrences stale: they keep their snapshot.
    taken = claim(store, queues=["mail"])
    assert taken.id == inherited.id and taken.queue == "mail"


def test_a_claim_takes_only_the_queues_it_names(store, clock, authority):
    make_job(store, authority, "job-a")
    bulk = enqueue(store, "job-a", clock() - 10, "bulk", queue="bulk")
    mail = enqueue(store, "job-a", clock(), "mail", queue="mail")
    assert claim(store, queues=["mail"]).id == mail.id
    assert store.claim_next(owner_id="w1", lease_ms=1_000, queues=["mail"]) is None
    assert claim(store, queues=["bulk", "mail"]).id == bulk.id


def test_a_paused_queue_is_claimed_by_no_claim_and_keeps_its_work(store, clock, authority):
    make_job(store, authority, "job-a")
    held = enqueue(store, "job-a", clock() - 10, "held", queue="bulk")
    store.pause_queue("bulk", reason="incident 7", actor="ops")
    paused = store.get_queue("bulk")
    assert paused.paused and paused.paused_reason == "incident 7" and paused.paused_by == "ops"
    # Enqueue into a paused queue still works; no claim takes from it, targeted ones included.
    also = enqueue(store, "job-a", clock() - 5, "also", queue="bulk")
    assert store.claim_next(owner_id="w1", lease_ms=1_000) is None
    assert store.claim_batch(owner_id="w1", lease_ms=1_000, limit=10) == []
    assert store.claim_occurrence(occurrence_id=held.id, owner_id="w1", lease_ms=1_000) is None
    store.resume_queue("bulk", actor="ops")
    assert not store.get_queue("bulk").paused
    taken = store.claim_batch(owner_id="w1", lease_ms=1_000, limit=10)
    assert [o.id for o in taken] == [held.id, also.id]
    assert all(o.attempt == 1 for o in taken)  # held back, not charged


def test_pausing_an_undeclared_queue_declares_it_without_limits(store, clock, authority):
    assert store.get_queue("fresh") is None
    paused = store.pause_queue("fresh", reason="r", actor="ops")
    assert paused.paused and paused.concurrency is None and paused.rate is None
    declared = store.declare_queue(Queue(name="fresh", concurrency=2), actor="ops")
    assert declared.paused  # a declaration never resumes a queue
    assert declared.concurrency == 2


def test_concurrency_counts_running_occurrences_of_the_queue(store, clock, authority):
    make_job(store, authority, "job-a")
    store.declare_queue(Queue(name="q", concurrency=2), actor="ops")
    for n in range(4):
        enqueue(store, "job-a", clock() - 10 + n, f"t{n}", queue="q")
    first = store.claim_batch(owner_id="w1", lease_ms=60_000, limit=10)
    assert len(first) == 2
    assert store.claim_next(owner_id="w2", lease_ms=60_000) is None
    succeed(store, first[0])
    third = claim(store, "w2", lease_ms=60_000)
    assert third.queue == "q" and _running(store) == 2
    assert store.claim_next(owner_id="w3", lease_ms=60_000) is None


def test_worker_concurrency_counts_per_owner(store, clock, authority):
    make_job(store, authority, "job-a")
    store.declare_queue(Queue(name="q", worker_concurrency=1), actor="ops")
    for n in range(3):
        enqueue(store, "job-a", clock() - 10 + n, f"t{n}", queue="q")
    assert len(store.claim_batch(owner_id="w1", lease_ms=60_000, limit=10)) == 1
    assert store.claim_next(owner_id="w1", lease_ms=60_000) is None
    assert claim(store, "w2", lease_ms=60_000).queue == "q"


def test_partition_concurrency_holds_a_partition_and_admits_on_settle(store, clock, authority):
    make_job(store, authority, "job-a")
    store.declare_queue(Queue(name="t", partition_concurrency=1), actor="ops")
    a1 = enqueue(store, "job-a", clock() - 30, "a1", queue="t", partition="customer:a")
    a2 = enqueue(store, "job-a", clock() - 20, "a2", queue="t", partition="customer:a")
    b1 = enqueue(store, "job-a", clock() - 10, "b1", queue="t", partition="customer:b")
    taken = store.claim_batch(owner_id="w1", lease_ms=60_000, limit=10)
    assert sorted(o.id for o in taken) == sorted([a1.id, b1.id])
    assert store.claim_next(owner_id="w2", lease_ms=60_000) is None  # a2 held
    first = next(o for o in taken if o.id == a1.id)
    failed = fail(store, first, retryable=True)  # its slot ends: a2 is admitted
    assert failed.status == "retry_wait"
    assert claim(store, "w2", lease_ms=60_000).id == a2.id
    held = store.get_occurrence(a2.id)
    assert held.attempt == 1  # held back, never charged


def test_rate_limits_claims_per_aligned_window(store, clock, authority):
    make_job(store, authority, "job-a")
    store.declare_queue(Queue(name="r", rate=Rate(2, timedelta(seconds=10))), actor="ops")
    for n in range(5):
        enqueue(store, "job-a", clock() - 10 + n, f"t{n}", queue="r")
    window = 10_000
    clock.advance(window - clock() % window)  # the start of a window
    assert len(store.claim_batch(owner_id="w1", lease_ms=60_000, limit=10)) == 2
    clock.advance(window - 1)
    assert store.claim_next(owner_id="w1", lease_ms=60_000) is None
    clock.advance(1)  # the next window
    assert len(store.claim_batch(owner_id="w1", lease_ms=60_000, limit=10)) == 2


def test_partition_rate_limits_each_partition(store, clock, authority):
    make_job(store, authority, "job-a")
    store.declare_queue(Queue(name="r", partition_rate=Rate(1, timedelta(seconds=60))), actor="ops")
    for n in range(2):
        enqueue(store, "job-a", clock() - 10 + n, f"a{n}", queue="r", partition="a")
        enqueue(store, "job-a", clock() - 10 + n, f"b{n}", queue="r", partition="b")
    window = 60_000
    clock.advance(window - clock() % window)
    taken = store.claim_batch(owner_id="w1", lease_ms=120_000, limit=10)
    assert sorted(o.partition for o in taken) == ["a", "b"]
    assert store.claim_next(owner_id="w1", lease_ms=120_000) is None
    clock.advance(window)
    assert sorted(
        o.partition for o in store.claim_batch(owner_id="w1", lease_ms=120_000, limit=10)
    ) == ["a", "b"]


def test_limited_bounds_the_rows_taken_from_limited_queues(store, clock, authority):
    make_job(store, authority, "job-a")
    store.declare_queue(Queue(name="lim", concurrency=10), actor="ops")
    for n in range(3):
        enqueue(store, "job-a", clock() - 10 + n, f"l{n}", queue="lim")
        enqueue(store, "job-a", clock() - 10 + n, f"f{n}", queue="free")
    taken = store.claim_batch(owner_id="w1", lease_ms=60_000, limit=6, limited=1)
    assert sorted(o.queue for o in taken) == ["free", "free", "free", "lim"]


def test_a_claim_finds_work_behind_more_than_a_staging_batch_of_held_rows(store, clock, authority):
    """A partition at its limit whose backlog is due before everything else: the rows one claim
    stages are all held, yet the claim still returns the work behind them."""
    make_job(store, authority, "job-a")
    store.declare_queue(Queue(name="t", partition_concurrency=1), actor="ops")
    backlog = 2 * STAGE_BATCH + 50  # the occupant's claim stages one batch, the next claim another
    store.enqueue_batch(
        [
            EnqueueRequest(
                job_id="job-a",
                scheduled_for=clock() - 100_000 + n,
                trigger_key=f"big{n}",
                queue="t",
                partition="big",
            )
            for n in range(backlog)
        ]
    )
    occupant = claim(store, "occupant", lease_ms=3_600_000)
    assert occupant.partition == "big"
    wanted = enqueue(store, "job-a", clock() - 10, "small", queue="t", partition="small")
    assert claim(store, "w1", lease_ms=60_000).id == wanted.id
    assert store.claim_next(owner_id="w1", lease_ms=60_000) is None


@pytest.mark.parametrize(
    "declaration",
    [
        {"concurrency": 0},
        {"worker_concurrency": -1},
        {"partition_concurrency": 0},
    ],
)
def test_bad_limits_are_refused(store, declaration):
    with raises_code(INVALID):
        store.declare_queue(Queue(name="q", **declaration), actor="ops")
    assert store.get_queue("q") is None


def test_bad_rates_and_priorities_are_refused(store, clock, authority):
    with raises_code(INVALID):
        Rate(0, timedelta(seconds=1))
    with raises_code(INVALID):
        Rate(1, timedelta(milliseconds=999))
    make_job(store, authority, "job-a")
    with raises_code(INVALID):
        enqueue(store, "job-a", clock(), "p", priority=101)
    with raises_code(INVALID):
        make_job(store, authority, "job-b", priority=-101)
    assert store.get_job("job-b") is None
    assert list(store.list_occurrences(limit=10).items) == []


# -- declarations vs operators (SPEC §14) --------------------------------------------------


def _mail(**limits) -> Queue:
    return Queue(name="mail", **limits)


def _updates(store) -> list[dict]:
    return [r.data for r in store.audit_log(limit=50) if r.action == "queue_updated"][::-1]


def test_an_operators_value_stands_against_an_unchanged_declaration(store):
    """Issue 32 item 4: `jobledger queue set` was reverted by the next process importing the
    app (its app.queue declaration applied again)."""
    per_second = Rate(5, timedelta(seconds=1))
    declared = store.declare_queue(_mail(concurrency=2, rate=per_second), actor="app:shop")
    assert declared.sources == {
        "concurrency": "declaration",
        "worker_concurrency": "declaration",
        "partition_concurrency": "declaration",
        "rate": "declaration",
        "partition_rate": "declaration",
    }
    operated = store.declare_queue(
        _mail(concurrency=10, rate=per_second),
        actor="ops:alice",
        source="operator",
        fields=["concurrency"],
    )
    assert operated.concurrency == 10 and operated.sources["concurrency"] == "operator"
    # The next process starts: the same declaration again writes nothing.
    again = store.declare_queue(_mail(concurrency=2, rate=per_second), actor="app:shop")
    assert (again.concurrency, again.revision) == (10, operated.revision)
    assert store.get_queue("mail").concurrency == 10
    assert len(_updates(store)) == 2
    # A deploy changes the rate in code: applied; the operator's concurrency stands.
    faster = Rate(10, timedelta(seconds=1))
    changed = store.declare_queue(_mail(concurrency=2, rate=faster), actor="app:shop")
    assert (changed.concurrency, changed.rate) == (10, faster)
    assert changed.sources["concurrency"] == "operator"
    # A deploy changes the concurrency in code: the new declaration takes it back.
    retaken = store.declare_queue(_mail(concurrency=3, rate=faster), actor="app:shop")
    assert retaken.concurrency == 3 and retaken.sources["concurrency"] == "declaration"
    assert [(u["source"], u["to"]["concurrency"]) for u in _updates(store)] == [
        ("declaration", 2),
        ("operator", 10),
        ("declaration", 10),
        ("declaration", 3),
    ]
    assert store.get_queue("mail").to_json()["sources"]["concurrency"] == "declaration"


def test_declaration_sources_are_refused_when_unknown(store):
    with raises_code("SCHEDULER_INVALID_ARGUMENT"):
        store.declare_queue(_mail(concurrency=1), actor="a", source="someone")
    with raises_code("SCHEDULER_INVALID_ARGUMENT"):
        store.declare_queue(_mail(concurrency=1), actor="a", source="operator", fields=["speed"])
    assert store.get_queue("mail") is None
