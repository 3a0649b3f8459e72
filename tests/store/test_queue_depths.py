"""The per-queue read model: queue_depths and occurrence_gate (SPEC §7 surfaces)."""

from __future__ import annotations

from datetime import timedelta

import jobledger
from jobledger import Queue, Rate

from .helpers import claim, enqueue, make_job, raises_code

MINUTE = 60_000


def _depths(store: jobledger.Store, **options: object) -> dict[str, jobledger.QueueDepth]:
    return {depth.name: depth for depth in store.queue_depths(**options)}  # type: ignore[arg-type]


def test_depths_count_ready_waiting_held_and_running_per_queue(store, clock, authority):
    make_job(store, authority, "mail", kind="mail", queue="mail")
    make_job(store, authority, "report", kind="report", queue="reports")
    store.declare_queue(Queue("reports", partition_concurrency=1, concurrency=5), actor="ops")
    store.declare_queue(Queue("idle", concurrency=2), actor="ops")
    now = clock()
    for index in range(3):
        enqueue(store, "mail", now, f"m{index}")
    enqueue(store, "mail", now + MINUTE, "later")
    for index in range(3):
        enqueue(store, "report", now, f"r{index}", partition="customer:1")
    running = claim(store, kinds=["mail"])
    # The first claim of the reports queue stages its rows: one admitted, two held.
    assert claim(store, kinds=["report"]).partition == "customer:1"

    depths = _depths(store)
    assert set(depths) == {"idle", "mail", "reports"}
    mail, reports, idle = depths["mail"], depths["reports"], depths["idle"]
    assert (mail.ready, mail.waiting, mail.held, mail.running) == (2, 1, 0, 1)
    assert mail.depth == 3 and mail.queue.revision == 0  # nobody declared it
    assert (reports.ready, reports.waiting, reports.held, reports.running) == (0, 0, 2, 1)
    assert reports.queue.concurrency == 5 and reports.queue.partition_concurrency == 1
    assert (idle.depth, idle.running, idle.capped) == (0, 0, frozenset())
    assert running.queue == "mail"
    assert _depths(store, names=["mail", "nobody"]).keys() == {"mail", "nobody"}
    assert _depths(store, names=["nobody"])["nobody"].depth == 0


def test_depth_counts_stop_at_the_cap_and_say_so(store, clock, authority):
    make_job(store, authority, "mail", kind="mail")
    for index in range(5):
        enqueue(store, "mail", clock(), f"m{index}")
    for index in range(4):
        enqueue(store, "mail", clock() + MINUTE, f"w{index}")
    depth = _depths(store, cap=3)["default"]
    assert (depth.ready, depth.waiting) == (3, 3)
    assert depth.capped == frozenset({"ready", "waiting"})
    exact = _depths(store, cap=10)["default"]
    assert (exact.ready, exact.waiting, exact.capped) == (5, 4, frozenset())
    with raises_code("SCHEDULER_INVALID_ARGUMENT"):
        store.queue_depths(cap=0)


def test_depths_report_the_rate_window(store, clock, authority):
    make_job(store, authority, "mail", kind="mail", queue="slow")
    store.declare_queue(Queue("slow", rate=Rate(2, timedelta(minutes=1))), actor="ops")
    for index in range(3):
        enqueue(store, "mail", clock(), f"m{index}")
    claim(store)
    claim(store)
    assert store.claim_next(owner_id="w1", lease_ms=MINUTE) is None  # the window is used up
    slow = _depths(store)["slow"]
    now = clock()
    assert (slow.rate_claims, slow.rate_window_end) == (2, now - now % MINUTE + MINUTE)
    assert slow.ready == 1 and slow.running == 2


def test_occurrence_gate_says_where_a_queued_occurrence_stands(store, clock, authority):
    make_job(store, authority, "report", kind="report", queue="reports")
    store.declare_queue(
        Queue("reports", partition_concurrency=1, partition_rate=Rate(5, timedelta(minutes=1))),
        actor="ops",
    )
    # equally due: the smaller occurrence id is claimed first (SPEC §2)
    first, second = sorted(
        (enqueue(store, "report", clock(), key, partition="c:1") for key in "ab"),
        key=lambda occurrence: occurrence.id,
    )
    later = enqueue(store, "report", clock() + MINUTE, "c")
    assert store.occurrence_gate(first.id).gate == "waiting"  # not staged yet
    assert claim(store).id == first.id
    gate = store.occurrence_gate(second.id)
    assert gate is not None
    assert (gate.gate, gate.partition, gate.partition_running) == ("held", "c:1", 1)
    assert gate.partition_rate_claims == 1 and gate.runnable
    assert store.occurrence_gate(later.id).gate == "waiting"
    running = store.occurrence_gate(first.id)
    assert running is not None and running.gate is None
    assert store.occurrence_gate("occ_" + "0" * 64) is None


def test_a_first_partition_limit_holds_rows_enqueued_before_it(store, clock, authority):
    # Rows enqueued into an undeclared queue are ready at once; declaring a partition limit
    # afterwards must send them back through admission, or two claims run two of them.
    make_job(store, authority, "report", kind="report", queue="reports")
    for index in range(3):
        enqueue(store, "report", clock(), f"r{index}", partition="customer:1")
    store.declare_queue(Queue("reports", partition_concurrency=1), actor="ops")
    assert claim(store, owner="w1").partition == "customer:1"
    assert store.claim_next(owner_id="w2", lease_ms=MINUTE) is None
    depth = _depths(store)["reports"]
    assert (depth.running, depth.held, depth.ready) == (1, 2, 0)
