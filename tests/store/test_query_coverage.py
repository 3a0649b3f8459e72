"""Every named query runs on every store.

The SQL lives in named blocks (``store/queries.sql`` plus one file per dialect); a block that no
operation runs is dead text that still has to be kept correct in two dialects, and a block that
only one store runs is a dialect difference nobody exercises. A representative workload through
the public API (jobs, enqueues, every kind of claim, leases, settlement, operator actions,
retention, statistics, workers, the planner, ``verify``) must run each name at least once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import jobledger
from jobledger import EnqueueRequest, Renewal, Settlement
from jobledger.planning.backfill import backfill
from jobledger.planning.planner import Planner
from jobledger.schedules import Every, MisfirePolicy, Once, schedule_json
from jobledger.store.postgres import store as pg_store
from jobledger.store.sqlite import store as sqlite_store
from jobledger.testing import FakeClock
from tests.store.helpers import call_all, grouped, hold_leader, wait_queued

MINUTE = 60_000


def _authority(workspace: str | None = None) -> dict[str, Any]:
    authority: dict[str, Any] = {"principal": {"type": "user", "id": "tester"}}
    if workspace is not None:
        authority["workspaceId"] = workspace
    return authority


@pytest.fixture
def recorded(backend: str, monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The names of the queries the store runs from now on (executions, not mentions)."""
    names: set[str] = set()
    if backend == "sqlite":
        tx = sqlite_store._SQLiteTx
        for method in ("one", "all", "run", "many", "rows_many"):
            original = getattr(tx, method)

            def recording(
                self: Any,
                query: str,
                params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
                _original: Callable[..., Any] = original,
                _batch: bool = method in ("many", "rows_many"),
            ) -> Any:
                if not _batch or params:
                    names.add(query)
                return _original(self, query, params)

            monkeypatch.setattr(tx, method, recording)
    else:
        execute = pg_store._PostgresTx._execute

        def recording_execute(self: Any, query: str, params: Any, *, many: bool = False) -> Any:
            names.add(query)
            return execute(self, query, params, many=many)

        monkeypatch.setattr(pg_store._PostgresTx, "_execute", recording_execute)
    return names


def _enqueue_in_a_callers_transaction(store: jobledger.Store, at: int) -> None:
    """SPEC §8: the same enqueue, in a transaction the caller opened on its own connection."""
    request = EnqueueRequest(job_id="mail", scheduled_for=at, trigger_key="key:in-tx")
    if isinstance(store, sqlite_store.SQLiteStore):
        conn = store.connect()
        conn.execute("BEGIN IMMEDIATE")
        store.enqueue_in_transaction(conn, [request])
        conn.execute("COMMIT")
        conn.close()
        return
    import psycopg

    assert isinstance(store, pg_store.PostgresStore)
    with psycopg.connect(store._conninfo) as pg:
        store.enqueue_in_transaction(pg, [request])


def _grouped_enqueues(store: jobledger.Store) -> None:
    group, _ = grouped(store)
    leader, release = hold_leader(group)
    threads, outcomes = call_all(
        [
            lambda: store.enqueue_batch([EnqueueRequest("mail", 0, "grouped")]),
            lambda: store.enqueue_batch([EnqueueRequest("no-such-job", 0, "grouped")]),
        ]
    )
    wait_queued(group, 2)
    release.set()
    leader.join(30)
    for thread in threads:
        thread.join(30)
    assert isinstance(outcomes[0], list) and isinstance(outcomes[1], jobledger.SchedulerError)


def _workload(store: jobledger.Store, clock: FakeClock, other: jobledger.Store) -> None:
    """Something of everything, in the order an installation would do it (``other`` is a
    second store on the same database, as another process would be)."""
    now = clock()
    # jobs: plain ones (one in a workspace) and schedules the planner will plan
    store.create_job(id="mail", kind="mail", authority=_authority("ws-1"), max_attempts=2)
    store.create_job(id="sms", kind="sms", authority=_authority(), max_attempts=1)
    store.create_job(
        id="tick",
        kind="tick",
        authority=_authority(),
        trigger=schedule_json(Every(timedelta(minutes=1)), MisfirePolicy(misfire="skip")),
    )
    store.create_job(  # an overlap policy: the store reads the job's live occurrences
        id="sync",
        kind="sync",
        authority=_authority(),
        trigger=schedule_json(Every(timedelta(minutes=1)), MisfirePolicy(overlap="skip")),
    )
    at = datetime.fromtimestamp((now + 2 * MINUTE) / 1000, tz=UTC)
    store.create_job(
        id="once", kind="tick", authority=_authority(), trigger=schedule_json(Once(at))
    )
    store.get_job("mail")
    store.list_jobs()
    # disabling and re-enabling a job keeps its live occurrences in step
    first = store.enqueue_occurrence(job_id="sms", scheduled_for=now, trigger_key="s-1")
    store.update_job("sms", expected_revision=1, patch={"enabled": False})
    store.update_job("sms", expected_revision=2, patch={"enabled": True})

    # enqueue: single (twice: the second finds the first by its idempotency key), once per
    # trigger (twice: the second finds the first by its trigger), batch
    later = now + 1_000 * MINUTE
    store.enqueue_occurrence(job_id="mail", scheduled_for=later, trigger_key="dup")
    again = store.enqueue_occurrence(job_id="mail", scheduled_for=later, trigger_key="dup")
    with pytest.raises(jobledger.SchedulerError):  # a job nobody declared: the hint's names
        store.enqueue_occurrence(job_id="mial", scheduled_for=later, trigger_key="typo")
    assert again.deduplicated
    store.enqueue_occurrence_once_per_trigger(job_id="mail", scheduled_for=now, trigger_key="m")
    store.enqueue_occurrence_once_per_trigger(job_id="mail", scheduled_for=now, trigger_key="m")
    store.enqueue_batch(
        [
            EnqueueRequest(
                job_id="mail",
                scheduled_for=now - 10 + i,
                trigger_key=f"b-{i}",
                tags=("vip",) if i == 0 else (),
                meta={"i": i},
            )
            for i in range(6)
        ]
    )
    # tagged with an idempotency key (the one-by-one path)
    store.enqueue_batch(
        [EnqueueRequest("mail", now, "key:order-1", once_per_trigger=True, tags=("vip",))]
    )
    _enqueue_in_a_callers_transaction(store, later)
    store.get_occurrence(first.id)
    store.resolve_occurrence_id(first.id[:12])
    store.list_occurrences_by_trigger(job_id="sms", trigger_key="s-1")
    # a keyed enqueue whose cached job is stale (another process updated it): the key it took
    # is pointed at the firing of the job's current revision
    other.update_job("mail", expected_revision=1, patch={"payload": {"v": 2}})
    store.enqueue_occurrence_once_per_trigger(
        job_id="mail", scheduled_for=now, trigger_key="key:stale"
    )

    # claims: by kind, kinds, workspace, any kind, a batch, one named occurrence
    one = store.claim_next(owner_id="w1", lease_ms=MINUTE, job_kind="sms")
    two = store.claim_next(owner_id="w1", lease_ms=MINUTE, kinds=["mail", "sms"])
    three = store.claim_next(owner_id="w1", lease_ms=MINUTE, workspace_id="ws-1")
    four = store.claim_next(owner_id="w2", lease_ms=MINUTE)
    batch = store.claim_batch(
        owner_id="w2", lease_ms=MINUTE, limit=2, job_kind="mail", workspace_id="ws-1"
    )
    target = store.enqueue_occurrence(job_id="mail", scheduled_for=now, trigger_key="target")
    named = store.claim_occurrence(occurrence_id=target.id, owner_id="w3", lease_ms=MINUTE)
    assert None not in (one, two, three, four, named) and len(batch) == 2
    assert one is not None and two is not None and three is not None and four is not None
    assert named is not None

    # leases: renew, renew a batch, settle (success; sms has one attempt: dead letter),
    # settle a batch, release, expire a dead owner's leases
    store.renew(occurrence_id=two.id, owner_id="w1", fence=two.fence, lease_ms=2 * MINUTE)
    store.record_progress(occurrence_id=two.id, owner_id="w1", fence=two.fence, done=1, total=2)
    store.renew_batch([Renewal(b.id, "w2", b.fence, 2 * MINUTE) for b in batch])
    store.settle(occurrence_id=two.id, owner_id="w1", fence=two.fence, outcome="succeeded")
    dead = store.settle(
        occurrence_id=one.id, owner_id="w1", fence=one.fence, outcome="failed", error={"e": 1}
    )
    assert dead.status == "dead_letter"
    store.settle_batch([Settlement(b.id, "w2", b.fence, "failed", error={"e": 2}) for b in batch])
    store.release_lease(
        occurrence_id=three.id, owner_id="w1", fence=three.fence, reason="shutting down"
    )
    store.expire_leases_of("w3", reason="worker gone")

    # a final attempt whose lease runs out is dead-lettered by the next claim's sweep; of two
    # claims held ahead, one is marked started (and dead-lettered too), the other given back
    store.enqueue_occurrence(job_id="sms", scheduled_for=now, trigger_key="s-2")
    assert store.claim_next(owner_id="w5", lease_ms=MINUTE, job_kind="sms") is not None
    for key in ("s-3", "s-4"):
        store.enqueue_occurrence(job_id="sms", scheduled_for=now, trigger_key=key)
    ahead = store.claim_batch(owner_id="w5", lease_ms=MINUTE, limit=2, job_kind="sms", start=0)
    assert len(ahead) == 2
    store.start_batch([Renewal(ahead[0].id, "w5", ahead[0].fence, MINUTE)])
    clock.advance(10 * MINUTE)
    store.claim_next(owner_id="w4", lease_ms=MINUTE, job_kind="nothing-here")
    given_back = store.get_occurrence(ahead[1].id)
    assert given_back is not None and (given_back.status, given_back.attempt) == ("retry_wait", 0)
    store.cancel_occurrence(occurrence_id=ahead[1].id, actor="ops", reason="done with it")

    # operator actions
    store.requeue_dead_letter(
        occurrence_id=dead.id, expected_fence=dead.fence, reason="fixed", actor="ops"
    )
    store.cancel_occurrence(occurrence_id=dead.id, actor="ops", reason="not needed")

    # deploys (SPEC §14): a new max_attempts follows live work; a new authority makes a dead
    # parent stale, and its requeue binds it and revives the child its failure cancelled
    mail = store.get_job("mail")
    assert mail is not None
    # a job declared from code, again with what it already is: only the declaration is recorded
    store.record_job_declaration("mail", expected_revision=mail.revision, declared={"kind": "mail"})
    store.update_job("mail", expected_revision=mail.revision, patch={"max_attempts": 3})
    parent = store.enqueue_occurrence(job_id="sms", scheduled_for=now, trigger_key="p")
    store.enqueue_batch([EnqueueRequest("sms", now, "c", after=(parent.id,))])
    held = store.claim_occurrence(occurrence_id=parent.id, owner_id="w6", lease_ms=MINUTE)
    assert held is not None
    failed = store.settle(
        occurrence_id=held.id, owner_id="w6", fence=held.fence, outcome="failed", error={"e": 3}
    )
    sms = store.get_job("sms")
    assert sms is not None
    store.update_job("sms", expected_revision=sms.revision, patch={"authority": _authority("ws-2")})
    store.requeue_dead_letter(
        occurrence_id=parent.id,
        expected_fence=failed.fence,
        reason="fixed",
        actor="ops",
        revive_children=True,
    )
    store.cancel_occurrence(occurrence_id=parent.id, actor="ops", reason="not needed")

    # the planner: plans the schedules' due slots (skipping the missed ones), then explains
    Planner(store).tick()
    clock.advance(5 * MINUTE)
    Planner(store).tick()
    store.schedule_state("tick")
    backfill(store, "tick", start=clock() - 60 * MINUTE, end=clock(), actor="ops")

    # group commit: two enqueues queued behind a held leader share one transaction, one of
    # them refused alone (its savepoint rolled back)
    _grouped_enqueues(store)

    # reads for operators
    store.history()
    store.history(job_id="mail")
    store.history(occurrence_id=dead.id)
    store.history(occurrence_id=dead.id, job_id="sms")
    page = store.events(job_id="mail", limit=3)
    store.events(after_id=page[-1].event_id)
    store.events(event_type="occurrence_enqueued", limit=3)
    # every events page, backwards and forwards: the log, an occurrence, a job, a type, both
    for filters in (
        {},
        {"occurrence_id": dead.id},
        {"job_id": "mail"},
        {"event_type": "occurrence_enqueued"},
        {"job_id": "mail", "event_type": "job_created"},
    ):
        store.events(**filters, before_id=page[0].event_id + 1, limit=2)
        store.events(**filters, after_id=0, limit=2)
    store.list_dead_letters()
    store.list_dead_letters(job_id="mail")
    store.list_occurrences()
    store.list_occurrences(status="queued")
    store.list_occurrences(kind="mail")
    store.list_occurrences(job_id="mail")
    store.list_occurrences(status="queued", kind="mail")
    store.list_occurrences(job_id="mail", status="queued")
    # finding work (issue 32): alone, and each with another filter (a bounded walk)
    for found in ({"queue": "default"}, {"partition": "p"}, {"key": "k"}, {"tag": "vip"}):
        store.list_occurrences(**found)
        store.list_occurrences(**found, status="queued")
    store.count_occurrences()
    store.count_occurrences(job_id="mail")
    store.count_occurrences(cap=10)
    store.count_occurrences(job_id="mail", cap=10)
    store.lease_holders()
    store.oldest_due()
    store.throughput(since=0)

    # queues: declarations, limits counted by claims, partitions admitted and promoted, pause
    store.create_job(id="report", kind="report", authority=_authority(), queue="reports")
    store.declare_queue(
        jobledger.Queue(
            "reports",
            concurrency=5,
            worker_concurrency=3,
            rate=jobledger.Rate(100, timedelta(minutes=1)),
            partition_concurrency=1,
            partition_rate=jobledger.Rate(1, timedelta(minutes=1)),
        ),
        actor="ops",
    )
    store.get_queue("reports")
    store.list_queues()
    for index in range(3):
        store.enqueue_occurrence(
            job_id="report", scheduled_for=clock(), trigger_key=f"r-{index}", partition="c:1"
        )
    claimed = store.claim_batch(owner_id="w6", lease_ms=MINUTE, limit=5, kinds=["report"])
    assert len(claimed) == 1  # one per partition
    store.settle(
        occurrence_id=claimed[0].id, owner_id="w6", fence=claimed[0].fence, outcome="succeeded"
    )
    clock.advance(MINUTE)  # the partition's rate window reopens
    assert len(store.claim_batch(owner_id="w6", lease_ms=MINUTE, limit=5, kinds=["report"])) == 1
    store.declare_queue(jobledger.Queue("reports", partition_concurrency=2), actor="ops")
    store.declare_queue(jobledger.Queue("reports", partition_concurrency=1), actor="ops")
    # an operator takes over a limit that already has the declared value: only its source moves
    store.declare_queue(
        jobledger.Queue("reports", partition_concurrency=1),
        actor="ops",
        source="operator",
        fields=["partition_concurrency"],
    )
    store.declare_queue(jobledger.Queue("reports"), actor="ops")  # removed: held rows admitted
    store.pause_queue("reports", reason="incident", actor="ops")
    assert store.claim_next(owner_id="w6", lease_ms=MINUTE, kinds=["report"]) is None
    assert {depth.name for depth in store.queue_depths()} >= {"reports", "default"}
    assert store.occurrence_gate(claimed[0].id) is not None
    store.resume_queue("reports", actor="ops")
    future = store.enqueue_occurrence(
        job_id="mail", scheduled_for=clock(), trigger_key="later", available_at=clock() + 5
    )
    clock.advance(10)
    assert store.claim_occurrence(occurrence_id=future.id, owner_id="w6", lease_ms=MINUTE)
    page = store.list_occurrences(limit=2)
    store.list_occurrences(limit=2, cursor=page.next_cursor)

    # dependencies (SPEC §10): a chain and a fan-in linked in one batch, a parent that succeeds
    # (unblocking), one that fails (cancelling, and a "run" child counting it), a requeued
    # parent, reads of parents and of the graph
    [head, tail] = store.enqueue_batch(
        [
            EnqueueRequest(job_id="mail", scheduled_for=clock(), trigger_key="flow-head"),
            EnqueueRequest(job_id="mail", scheduled_for=clock(), trigger_key="flow-tail"),
        ]
    )
    [pending] = store.enqueue_batch(
        [EnqueueRequest(job_id="mail", scheduled_for=clock() + MINUTE, trigger_key="pending")]
    )
    [join, runs] = store.enqueue_batch(
        [
            EnqueueRequest(
                job_id="mail", scheduled_for=clock(), trigger_key="join", after=(head.id, tail.id)
            ),
            EnqueueRequest(
                job_id="mail",
                scheduled_for=clock(),
                trigger_key="runs",
                after=(tail.id, pending.id),
                on_parent_failure="run",
            ),
        ]
    )
    for parent, outcome in ((head, "succeeded"), (tail, "failed")):
        held = store.claim_occurrence(occurrence_id=parent.id, owner_id="w7", lease_ms=MINUTE)
        assert held is not None
        store.settle(
            occurrence_id=held.id,
            owner_id="w7",
            fence=held.fence,
            outcome=outcome,  # type: ignore[arg-type]
            retryable=False,
        )
    assert store.get_occurrence(join.id).status == "cancelled"  # type: ignore[union-attr]
    assert store.get_occurrence(runs.id).status == "blocked"  # type: ignore[union-attr]
    # the failed parent, requeued, succeeds: it already counted for "runs", and is not again
    dead_tail = store.get_occurrence(tail.id)
    assert dead_tail is not None
    store.requeue_dead_letter(
        occurrence_id=tail.id, expected_fence=dead_tail.fence, reason="retry", actor="ops"
    )
    again = store.claim_occurrence(occurrence_id=tail.id, owner_id="w7", lease_ms=MINUTE)
    assert again is not None
    store.settle(occurrence_id=tail.id, owner_id="w7", fence=again.fence, outcome="succeeded")
    assert store.get_occurrence(runs.id).status == "blocked"  # type: ignore[union-attr]
    store.parent_states(join.id)
    store.flow_graph(head.id)
    # results and outcome-unknown adjudication (SPEC §9)
    store.read_result(two.id)
    store.create_job(id="pay", kind="pay", authority=_authority(), on_lost_lease="adjudicate")
    for index in range(2):
        store.enqueue_occurrence(job_id="pay", scheduled_for=clock(), trigger_key=f"p-{index}")
        paid = store.claim_next(owner_id="w7", lease_ms=MINUTE, kinds=["pay"])
        assert paid is not None
        unknown = {"code": "SCHEDULER_OUTCOME_UNKNOWN", "message": "?"}
        store.settle(
            occurrence_id=paid.id,
            owner_id="w7",
            fence=paid.fence,
            outcome="failed",
            error=unknown,
            retryable=False,
        )
    for case, decision in zip(store.adjudication_cases(), ("applied", "not_applied"), strict=True):
        assert store.get_adjudication_case(case.occurrence_id) == case
        assert case.evidence_digest is not None
        store.adjudicate(
            occurrence_id=case.occurrence_id,
            decision=decision,
            evidence_digest=case.evidence_digest,
            reason="checked",
            actor="ops",
        )
    # the re-run not_applied granted is lost again: a case of its own, decided in turn
    rerun = store.claim_next(owner_id="w7", lease_ms=MINUTE, kinds=["pay"])
    assert rerun is not None
    store.settle(
        occurrence_id=rerun.id,
        owner_id="w7",
        fence=rerun.fence,
        outcome="failed",
        error={"code": "SCHEDULER_OUTCOME_UNKNOWN", "message": "?"},
        retryable=False,
    )
    [again_lost] = store.adjudication_cases()
    assert again_lost.evidence_digest is not None
    store.adjudicate(
        occurrence_id=rerun.id,
        decision="applied",
        evidence_digest=again_lost.evidence_digest,
        reason="checked again",
        actor="ops",
    )

    # workers
    store.register_worker(worker_id="w1", hostname="host", pid=1, info={"kinds": ["mail"]})
    store.touch_worker("w1")
    store.stop_worker("w1")
    store.list_workers()

    # retention, removal, audit, verification
    clock.advance(60 * MINUTE)
    store.prune(before=clock(), actor="ops")
    sms = store.get_job("sms")
    assert sms is not None
    store.remove_job("sms", expected_revision=sms.revision, actor="ops", reason="retired")
    store.audit_log()
    assert store.verify().ok


# Blocks that no store operation runs (dead text in the query files) would be listed here; the
# test fails as soon as one appears.
NO_OPERATION_RUNS: set[str] = set()


def test_every_named_query_runs_during_a_representative_workload(
    backend: str,
    store_factory: Callable[..., jobledger.Store],
    clock: FakeClock,
    recorded: set[str],
) -> None:
    _workload(store_factory(), clock, store_factory())
    queries = sqlite_store.QUERIES if backend == "sqlite" else pg_store.QUERIES
    never_run = set(queries) - recorded
    assert sorted(never_run) == sorted(NO_OPERATION_RUNS), (
        f"named queries no operation ran on {backend}: {sorted(never_run)}"
    )
    assert recorded <= set(queries)


def test_both_dialects_name_the_same_queries() -> None:
    assert sqlite_store.QUERIES.keys() == pg_store.QUERIES.keys()
