"""Partition limits set, raised, lowered, removed and swapped while rows are held (SPEC §7).

A held row (gate 2) waits for its partition's limit: once no limit holds it — the limit was
removed, raised, swapped for a rate, its slot freed, its job enabled again — it must be
admitted at once, never stranded out of the claim index. On both stores.
"""

from __future__ import annotations

import itertools
from datetime import timedelta

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from jobledger import Queue, Rate
from jobledger.planning.waiting import why_waiting

from .helpers import enqueue, make_job, succeed

LEASE = 3_600_000  # no lease expires during a test: slots end by settling only
MINUTE = timedelta(minutes=1)


def _held_then(store, clock, authority, limited: Queue, after: Queue):
    """Three rows of one partition under ``limited``: one claimed, two held; then ``after``."""
    make_job(store, authority, "job-a")
    store.declare_queue(limited, actor="ops")
    rows = [
        enqueue(store, "job-a", clock() - 30 + n, f"t{n}", queue=limited.name, partition="cust:1")
        for n in range(3)
    ]
    [running] = store.claim_batch(owner_id="w1", lease_ms=LEASE, limit=10)
    assert running.id == rows[0].id
    held = [store.occurrence_gate(row.id).gate for row in rows[1:]]
    assert held == ["held", "held"]
    store.declare_queue(after, actor="deploy")
    return running, rows[1:]


def test_removing_partition_concurrency_admits_held_rows_at_once(store, clock, authority):
    running, held = _held_then(
        store, clock, authority, Queue("q", partition_concurrency=1), Queue("q")
    )
    assert [store.occurrence_gate(row.id).gate for row in held] == ["ready", "ready"]
    reasons = why_waiting(store, store.get_occurrence(held[0].id))
    assert [reason.code for reason in reasons] == ["ready"]
    # Claimed while the first still runs: nothing limits the partition any more.
    taken = store.claim_batch(owner_id="w2", lease_ms=LEASE, limit=10)
    assert sorted(o.id for o in taken) == sorted(row.id for row in held)
    succeed(store, running)


def test_removing_partition_rate_admits_held_rows_at_once(store, clock, authority):
    _, held = _held_then(
        store, clock, authority, Queue("q", partition_rate=Rate(1, MINUTE)), Queue("q")
    )
    taken = store.claim_batch(owner_id="w2", lease_ms=LEASE, limit=10)
    assert sorted(o.id for o in taken) == sorted(row.id for row in held)


def test_held_rows_stay_held_while_a_limit_still_holds_them(store, clock, authority):
    # Removing the rate but keeping the concurrency limit: the partition is still full.
    _, held = _held_then(
        store,
        clock,
        authority,
        Queue("q", partition_concurrency=1, partition_rate=Rate(5, MINUTE)),
        Queue("q", partition_concurrency=1),
    )
    assert [store.occurrence_gate(row.id).gate for row in held] == ["held", "held"]
    assert store.claim_batch(owner_id="w2", lease_ms=LEASE, limit=10) == []


def test_a_disabled_jobs_held_row_is_admitted_when_it_is_enabled_again(store, clock, authority):
    make_job(store, authority, "job-a")
    store.declare_queue(Queue("q", partition_concurrency=1), actor="ops")
    first = enqueue(store, "job-a", clock() - 20, "t0", queue="q", partition="cust:1")
    second = enqueue(store, "job-a", clock() - 10, "t1", queue="q", partition="cust:1")
    [running] = store.claim_batch(owner_id="w1", lease_ms=LEASE, limit=10)
    assert running.id == first.id
    job = store.get_job("job-a")
    job = store.update_job("job-a", expected_revision=job.revision, patch={"enabled": False})
    succeed(store, running)  # the slot frees while the held row's job is disabled
    store.update_job("job-a", expected_revision=job.revision, patch={"enabled": True})
    [taken] = store.claim_batch(owner_id="w2", lease_ms=LEASE, limit=10)
    assert taken.id == second.id


# -- the class: any sequence of limit changes, claims and settles ------------------------------

LIMITS = (
    {},
    {"partition_concurrency": 1},
    {"partition_concurrency": 2},
    {"partition_rate": Rate(1, MINUTE)},
    {"partition_rate": Rate(2, MINUTE)},
    {"partition_concurrency": 1, "partition_rate": Rate(2, MINUTE)},
    {"concurrency": 3},
)


def make_machine(store, clock, authority):
    namespaces = itertools.count()

    class LimitsMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            ns = next(namespaces)
            self.queue = f"lq{ns}"
            self.job = f"lj{ns}"
            self.kind = f"lk{ns}"
            make_job(store, authority, self.job, kind=self.kind, queue=self.queue)
            self.ids: list[str] = []
            self.running: dict[str, object] = {}
            self.done: set[str] = set()
            self.declared = Queue(self.queue)
            self.enabled = True

        def claim(self, limit: int) -> None:
            for occ in store.claim_batch(
                owner_id="w", lease_ms=LEASE, limit=limit, kinds=[self.kind], queues=[self.queue]
            ):
                self.running[occ.id] = occ

        @rule(limits=st.sampled_from(LIMITS))
        def declare(self, limits):
            self.declared = store.declare_queue(Queue(self.queue, **limits), actor="ops")

        @rule(partition=st.integers(0, 2), count=st.integers(1, 3))
        def enqueue(self, partition, count):
            if not self.enabled:
                return  # a disabled job takes no new work (SCHEDULER_JOB_DISABLED)
            for _ in range(count):
                occ = enqueue(
                    store,
                    self.job,
                    clock(),
                    f"k{len(self.ids)}",
                    queue=self.queue,
                    partition=f"p{partition}",
                )
                self.ids.append(occ.id)

        @rule(limit=st.integers(1, 4))
        def claim_some(self, limit):
            self.claim(limit)

        @rule(index=st.integers(0, 10))
        def settle(self, index):
            if self.running:
                key = sorted(self.running)[index % len(self.running)]
                succeed(store, self.running.pop(key))
                self.done.add(key)

        @rule(ms=st.sampled_from([1, 1_000, 30_000, 60_000]))
        def advance(self, ms):
            clock.advance(ms)

        @rule()
        def toggle_job(self):
            job = store.get_job(self.job)
            store.update_job(
                self.job, expected_revision=job.revision, patch={"enabled": not job.enabled}
            )
            self.enabled = not job.enabled

        @invariant()
        def nothing_is_held_that_no_limit_holds(self):
            queue = self.declared
            for key in self.ids:
                gate = store.occurrence_gate(key)
                if gate.gate != "held" or not gate.runnable:
                    continue
                assert queue.partition_limited, f"{key} held on a queue without partition limits"
                ready = sum(
                    1
                    for other in self.ids
                    if (g := store.occurrence_gate(other)).gate == "ready"
                    and g.runnable
                    and g.partition == gate.partition
                )
                cap = queue.partition_concurrency
                full = cap is not None and gate.partition_running + ready >= cap
                rate = queue.partition_rate
                # A used-up window holds it until the window's wake-up (the next claim after it).
                waits_for_window = rate is not None and gate.partition_wake_at is not None
                assert full or waits_for_window, (
                    f"{key} held in {gate.partition}: {gate.partition_running} running, "
                    f"{ready} ready, limits {queue}"
                )

        def teardown(self):
            # Liveness: with no limit and every slot settled, every row is claimed.
            if not self.enabled:
                self.toggle_job()
            store.declare_queue(Queue(self.queue), actor="ops")
            for occ in list(self.running.values()):
                succeed(store, occ)
                self.done.add(occ.id)
            self.running.clear()
            self.claim(1000)
            assert set(self.running) | self.done == set(self.ids)

    return LimitsMachine


def test_no_sequence_of_limit_changes_strands_held_rows(store, clock, authority):
    run_state_machine_as_test(
        make_machine(store, clock, authority),
        settings=settings(
            max_examples=60,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            database=None,
        ),
    )
