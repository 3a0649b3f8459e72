"""Dependencies between occurrences (SPEC §10): blocked children, unblocking when parents
succeed, cancellation cascading from failed parents, ``"run"`` children, refusals."""

from __future__ import annotations

from typing import Any

from jobledger import EnqueueRequest, Store, contract

from .helpers import claim, fail, make_job, raises_code, succeed


def _node(store: Store, clock: Any, key: str, after: tuple[str, ...] = (), **options: Any) -> Any:
    [occurrence] = store.enqueue_batch(
        [EnqueueRequest("job-a", clock(), key, after=after, **options)]
    )
    return occurrence


def _run(store: Store, occurrence_id: str, *, ok: bool = True, result: Any = None) -> Any:
    claimed = store.claim_occurrence(occurrence_id=occurrence_id, owner_id="w1", lease_ms=60_000)
    assert claimed is not None, f"{occurrence_id} is not claimable"
    if ok:
        return succeed(store, claimed, result)
    return fail(store, claimed, retryable=False, error={"code": "boom"})


def _status(store: Store, occurrence_id: str) -> str:
    found = store.get_occurrence(occurrence_id)
    assert found is not None
    return found.status


def test_a_chain_runs_in_order(store, clock, authority):
    make_job(store, authority)
    a = _node(store, clock, "a")
    b = _node(store, clock, "b", (a.id,))
    c = _node(store, clock, "c", (b.id,))
    assert (a.status, b.status, c.status) == ("queued", "blocked", "blocked")
    assert b.parents == (a.id,) and c.parents == (b.id,)
    assert b.on_parent_failure == "cancel"
    # only the head is claimable
    assert claim(store).id == a.id
    assert store.claim_next(owner_id="w2", lease_ms=1000) is None
    clock.advance(5)
    _run_claimed = store.get_occurrence(a.id)
    assert _run_claimed is not None
    succeed(store, _run_claimed, {"n": 1})
    assert _status(store, b.id) == "queued"
    unblocked = store.history(occurrence_id=b.id)[0]
    assert unblocked.type == "occurrence_unblocked"
    assert unblocked.data == {}
    assert store.get_occurrence(b.id).available_at == clock()  # due at max(due, now)
    assert _status(store, c.id) == "blocked"
    _run(store, b.id)
    _run(store, c.id)
    assert _status(store, c.id) == "succeeded"
    states = store.parent_states(c.id)
    assert [(p.occurrence_id, p.status) for p in states] == [(b.id, "succeeded")]


def test_fan_out_then_fan_in_joins_exactly_once(store, clock, authority):
    make_job(store, authority)
    root = _node(store, clock, "root")
    leaves = store.enqueue_batch(
        [EnqueueRequest("job-a", clock(), f"leaf-{i}", after=(root.id,)) for i in range(20)]
    )
    join = _node(store, clock, "join", tuple(leaf.id for leaf in leaves))
    assert join.status == "blocked" and len(join.parents) == 20
    _run(store, root.id)
    assert {_status(store, leaf.id) for leaf in leaves} == {"queued"}
    for index, leaf in enumerate(leaves):
        assert _status(store, join.id) == "blocked"
        _run(store, leaf.id, result={"i": index})
    assert _status(store, join.id) == "queued"
    events = [e.type for e in store.history(occurrence_id=join.id)]
    assert events.count("occurrence_unblocked") == 1
    claimed = claim(store)
    assert claimed.id == join.id
    states = store.parent_states(join.id)
    assert [s.result for s in states] == [{"i": i} for i in range(20)]
    assert store.claim_next(owner_id="w9", lease_ms=1000) is None


def test_failed_parent_cancels_descendants_and_audits(store, clock, authority):
    make_job(store, authority)
    a = _node(store, clock, "a")
    b = _node(store, clock, "b", (a.id,))
    c = _node(store, clock, "c", (b.id,))
    d = _node(store, clock, "d", (c.id,), on_parent_failure="run")
    other = _node(store, clock, "other")
    e = _node(store, clock, "e", (other.id, b.id))
    _run(store, a.id, ok=False)
    assert _status(store, a.id) == "dead_letter"
    for child in (b, c, e):
        found = store.get_occurrence(child.id)
        assert found is not None and found.status == "cancelled"
        assert found.last_error["code"] == "parent_failed"
    # c's cancellation is a failed parent for d, whose policy is "run": it is queued
    assert _status(store, d.id) == "queued"
    cancelled = store.history(occurrence_id=c.id)[0]
    assert cancelled.type == "occurrence_cancelled"
    assert cancelled.data == {
        "actor": "jobledger",
        "parent": b.id,
        "previousStatus": "blocked",
        "reason": "parent_failed",
    }
    audited = {r.subject for r in store.audit_log() if r.action == "occurrence_cancelled"}
    assert audited == {b.id, c.id, e.id}
    # the other parent of e succeeding later changes nothing
    _run(store, other.id)
    assert _status(store, e.id) == "cancelled"


def test_run_policy_runs_after_every_parent_is_terminal(store, clock, authority):
    make_job(store, authority)
    good = _node(store, clock, "good")
    bad = _node(store, clock, "bad")
    child = _node(store, clock, "child", (good.id, bad.id), on_parent_failure="run")
    _run(store, bad.id, ok=False)
    assert _status(store, child.id) == "blocked"  # good is still pending
    _run(store, good.id, result=7)
    assert _status(store, child.id) == "queued"
    states = {s.occurrence_id: s for s in store.parent_states(child.id)}
    assert states[good.id].result == 7
    assert states[bad.id].result is None and states[bad.id].status == "dead_letter"
    assert states[bad.id].error == {"code": "boom"}


def test_unknown_or_later_parents_are_refused_and_nothing_is_written(store, clock, authority):
    make_job(store, authority)
    a = _node(store, clock, "a")
    missing = "occ_" + "0" * 64
    with raises_code("SCHEDULER_NOT_FOUND") as info:
        store.enqueue_batch(
            [
                EnqueueRequest("job-a", clock(), "x"),
                EnqueueRequest("job-a", clock(), "y", after=(a.id, missing)),
            ]
        )
    assert info.value.details["index"] == 1
    assert info.value.details["parent"] == missing
    assert store.list_occurrences_by_trigger(job_id="job-a", trigger_key="x") == []
    # naming itself, or a request later in the same batch (which did not exist yet when its
    # child was enqueued), is refused: no cycle can be written
    with raises_code("SCHEDULER_NOT_FOUND"):
        store.enqueue_batch(
            [
                EnqueueRequest("job-a", clock(), "z", after=(a.id,)),
                EnqueueRequest("job-a", clock(), "cyc", after=(_future_id(store, clock, "cyc"),)),
            ]
        )
    with raises_code("SCHEDULER_NOT_FOUND"):
        store.enqueue_batch(
            [
                EnqueueRequest("job-a", clock(), "z", after=(_future_id(store, clock, "l"),)),
                EnqueueRequest("job-a", clock(), "l"),
            ]
        )
    assert store.list_occurrences_by_trigger(job_id="job-a", trigger_key="z") == []
    assert store.list_occurrences_by_trigger(job_id="job-a", trigger_key="l") == []
    with raises_code("SCHEDULER_INVALID_ARGUMENT"):
        store.enqueue_batch(
            [EnqueueRequest("job-a", clock(), "p", on_parent_failure="ignore", after=(a.id,))]
        )


def _future_id(store: Store, clock: Any, trigger_key: str) -> str:
    """The id a request of job-a with this trigger key, now, will get."""
    job = store.get_job("job-a")
    assert job is not None
    return contract.occurrence_identity("job-a", job.revision, clock(), trigger_key)[0]


def test_children_of_already_decided_parents(store, clock, authority):
    make_job(store, authority)
    done = _node(store, clock, "done")
    _run(store, done.id)
    failed = _node(store, clock, "failed")
    _run(store, failed.id, ok=False)
    queued = _node(store, clock, "q", (done.id,))
    assert queued.status == "queued" and queued.parents == (done.id,)
    cancelled = _node(store, clock, "c", (done.id, failed.id))
    assert cancelled.status == "cancelled"
    assert cancelled.last_error["parent"] == failed.id
    ran = _node(store, clock, "r", (failed.id,), on_parent_failure="run")
    assert ran.status == "queued"


def test_operator_cancel_of_a_blocked_occurrence_cascades(store, clock, authority):
    make_job(store, authority)
    a = _node(store, clock, "a")
    b = _node(store, clock, "b", (a.id,))
    c = _node(store, clock, "c", (b.id,))
    cancelled = store.cancel_occurrence(occurrence_id=b.id, actor="ops", reason="not needed")
    assert cancelled.status == "cancelled"
    assert _status(store, c.id) == "cancelled"
    _run(store, a.id)
    assert _status(store, b.id) == "cancelled"


def test_requeued_parent_does_not_revive_or_double_count(store, clock, authority):
    make_job(store, authority)
    bad = _node(store, clock, "bad")
    slow = _node(store, clock, "slow")
    cancel_child = _node(store, clock, "cc", (bad.id,))
    run_child = _node(store, clock, "rc", (bad.id, slow.id), on_parent_failure="run")
    dead = _run(store, bad.id, ok=False)
    assert _status(store, cancel_child.id) == "cancelled"
    assert store.get_occurrence(run_child.id).status == "blocked"
    store.requeue_dead_letter(
        occurrence_id=bad.id, expected_fence=dead.fence, reason="retry", actor="ops"
    )
    _run(store, bad.id)  # succeeds now: already counted for run_child
    assert _status(store, cancel_child.id) == "cancelled"
    assert _status(store, run_child.id) == "blocked"  # still waits for slow
    _run(store, slow.id)
    assert _status(store, run_child.id) == "queued"


def test_a_reused_key_keeps_its_first_parents(store, clock, authority):
    make_job(store, authority)
    a = _node(store, clock, "a")
    b = _node(store, clock, "b")
    first = store.enqueue_batch(
        [
            EnqueueRequest(
                "job-a", clock(), "key:k", once_per_trigger=True, match_payload=True, after=(a.id,)
            )
        ]
    )[0]
    again = store.enqueue_batch(
        [
            EnqueueRequest(
                "job-a", clock(), "key:k", once_per_trigger=True, match_payload=True, after=(b.id,)
            )
        ]
    )[0]
    assert again.deduplicated and again.id == first.id
    assert again.parents == (a.id,)


def test_an_outcome_unknown_parent_keeps_children_blocked(store, clock, authority):
    make_job(store, authority, on_lost_lease="adjudicate")
    parent = _node(store, clock, "p")
    child = _node(store, clock, "c", (parent.id,))
    claim(store, lease_ms=1_000)
    clock.advance(2_000)
    store.claim_next(owner_id="w2", lease_ms=1_000)  # the sweep dead-letters the parent
    found = store.get_occurrence(parent.id)
    assert found is not None and found.status == "dead_letter"
    assert found.last_error["code"] == "SCHEDULER_OUTCOME_UNKNOWN"
    assert _status(store, child.id) == "blocked"


def test_a_final_lease_expiry_is_a_failed_parent(store, clock, authority):
    make_job(store, authority, max_attempts=1)
    parent = _node(store, clock, "p")
    child = _node(store, clock, "c", (parent.id,))
    claim(store, lease_ms=1_000)
    clock.advance(2_000)
    store.claim_next(owner_id="w2", lease_ms=1_000)
    assert _status(store, parent.id) == "dead_letter"
    assert _status(store, child.id) == "cancelled"


def test_enqueue_flow_checks_expected_ids(store, clock, authority):
    make_job(store, authority)
    [a] = store.enqueue_batch([EnqueueRequest("job-a", clock(), "a")])
    with raises_code("SCHEDULER_FLOW_CONFLICT"):
        store.enqueue_flow(
            [
                EnqueueRequest("job-a", clock(), "f1"),
                EnqueueRequest("job-a", clock(), "f2", after=(a.id,)),
            ],
            expected_ids=["occ_" + "1" * 64, "occ_" + "2" * 64],
        )
    assert store.list_occurrences_by_trigger(job_id="job-a", trigger_key="f1") == []


def test_flow_graph_walks_both_ways(store, clock, authority):
    make_job(store, authority)
    a = _node(store, clock, "a")
    b = _node(store, clock, "b", (a.id,))
    c = _node(store, clock, "c", (a.id,))
    d = _node(store, clock, "d", (b.id, c.id))
    _node(store, clock, "unrelated")
    graph = store.flow_graph(c.id)
    assert [n.occurrence_id for n in graph.nodes] == [a.id, b.id, c.id, d.id]
    assert {(e.parent, e.child) for e in graph.edges} == {
        (a.id, b.id),
        (a.id, c.id),
        (b.id, d.id),
        (c.id, d.id),
    }
    assert not graph.truncated
    small = store.flow_graph(a.id, limit=2)
    assert len(small.nodes) == 2 and small.truncated
    with raises_code("SCHEDULER_NOT_FOUND"):
        store.parent_states("occ_" + "3" * 64)
    assert store.verify().ok


def test_adjudicating_an_outcome_unknown_parent_decides_its_children(store, clock, authority):
    """SPEC §9 with §10: "applied" counts as a success for the children; "not applied" leaves
    them for the re-run's outcome."""
    make_job(store, authority, on_lost_lease="adjudicate")
    parent = _node(store, clock, "p")
    other = _node(store, clock, "o")
    child = _node(store, clock, "c", (parent.id,))
    run_child = _node(store, clock, "r", (other.id,), on_parent_failure="run")
    for _ in range(2):
        claim(store, lease_ms=1_000)
    clock.advance(2_000)
    store.claim_next(owner_id="w2", lease_ms=1_000)  # the sweep: two outcome-unknown dead letters
    assert _status(store, child.id) == "blocked" and _status(store, run_child.id) == "blocked"
    cases = {case.occurrence_id: case for case in store.adjudication_cases()}
    store.adjudicate(
        occurrence_id=other.id,
        decision="not_applied",
        evidence_digest=cases[other.id].evidence_digest,
        reason="no charge found",
        actor="ops",
    )
    assert _status(store, run_child.id) == "blocked"
    store.adjudicate(
        occurrence_id=parent.id,
        decision="applied",
        evidence_digest=cases[parent.id].evidence_digest,
        reason="charge found",
        actor="ops",
    )
    assert _status(store, parent.id) == "succeeded"
    assert _status(store, child.id) == "queued"
    _run(store, other.id)  # the re-run succeeds: it decides its child
    assert _status(store, run_child.id) == "queued"


def test_a_key_repeated_later_in_the_batch_is_still_an_earlier_parent(store, clock, authority):
    make_job(store, authority)
    keyed = {"once_per_trigger": True, "match_payload": True}
    first, child, again = store.enqueue_batch(
        [
            EnqueueRequest("job-a", clock(), "key:k", **keyed),
            EnqueueRequest("job-a", clock(), "child", after=(_future_id(store, clock, "key:k"),)),
            EnqueueRequest("job-a", clock(), "key:k", **keyed),
        ]
    )
    assert again.deduplicated and again.id == first.id
    assert child.status == "blocked" and child.parents == (first.id,)


def test_a_child_cancelled_as_it_is_written_cancels_its_children_in_the_batch(
    store, clock, authority
):
    make_job(store, authority)
    dead = _node(store, clock, "dead")
    _run(store, dead.id, ok=False)
    b_id = _future_id(store, clock, "b")
    b, c, d = store.enqueue_batch(
        [
            EnqueueRequest("job-a", clock(), "b", after=(dead.id,)),
            EnqueueRequest("job-a", clock(), "c", after=(b_id,)),
            EnqueueRequest("job-a", clock(), "d", after=(b_id,), on_parent_failure="run"),
        ]
    )
    assert (b.status, c.status, d.status) == ("cancelled", "cancelled", "queued")
    assert c.last_error["parent"] == b.id
