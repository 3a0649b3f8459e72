"""Oversize input and authority bypass attempts, on both stores.

* The 1 MiB limit on every JSON value (payloads, results, errors, triggers, authority) and the
  depth limit hold at every door — ``create_job``, ``enqueue``, ``enqueue_many``, ``settle`` —
  and a refused value writes nothing (a refused settle leaves the lease as it was).
* The runtime refuses to run without an explicit authorizer; only a decision whose ``allowed``
  is exactly ``True`` runs the handler (fail closed); an authorizer that raises runs nothing;
  and an authority forged inside a payload changes nothing: the authorizer and the handler see
  the job's snapshotted authority.
"""

from __future__ import annotations

from typing import Any

import pytest

import jobledger
from jobledger.contract import MAX_JSON_BYTES, MAX_JSON_DEPTH
from jobledger.engine.heartbeat import ManualHeartbeat

AUTHORITY = {"principal": {"type": "user", "id": "alice"}, "workspaceId": "ws-1"}


def _payload_of_size(size: int) -> dict[str, str]:
    """A JSON object whose canonical encoding is exactly ``size`` bytes."""
    overhead = len('{"p":""}')
    return {"p": "x" * (size - overhead)}


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def test_the_one_mib_limit_holds_at_every_door(store):
    at_limit = _payload_of_size(MAX_JSON_BYTES)
    over = _payload_of_size(MAX_JSON_BYTES + 1)
    store.create_job(id="j", kind="work", authority=AUTHORITY, payload=at_limit)
    assert len(jobledger.canonical_json(store.get_job("j").payload)) == MAX_JSON_BYTES
    with pytest.raises(jobledger.InvalidArgument):
        store.create_job(id="big", kind="work", authority=AUTHORITY, payload=over)
    assert store.get_job("big") is None
    with pytest.raises(jobledger.InvalidArgument):
        store.create_job(
            id="deep", kind="work", authority=AUTHORITY, payload=_nested(MAX_JSON_DEPTH + 2)
        )
    with pytest.raises(jobledger.InvalidArgument):
        store.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="t", payload=over)
    with pytest.raises(jobledger.InvalidArgument):
        store.enqueue_batch(
            [
                jobledger.EnqueueRequest(job_id="j", scheduled_for=0, trigger_key="a"),
                jobledger.EnqueueRequest(
                    job_id="j", scheduled_for=0, trigger_key="b", payload=over
                ),
            ]
        )
    assert store.count_occurrences() == []
    store.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="ok", payload={"small": 1})
    claimed = store.claim_next(owner_id="w", lease_ms=60_000)
    assert claimed is not None
    for outcome, field in (("succeeded", "result"), ("failed", "error")):
        with pytest.raises(jobledger.InvalidArgument):
            store.settle(
                occurrence_id=claimed.id,
                owner_id="w",
                fence=claimed.fence,
                outcome=outcome,
                **{field: over},
            )
    still = store.get_occurrence(claimed.id)
    assert (still.status, still.lease_owner, still.fence) == ("running", "w", claimed.fence)
    with pytest.raises(jobledger.InvalidArgument):
        store.create_job(
            id="a", kind="work", authority={**AUTHORITY, "extra": "x" * MAX_JSON_BYTES}
        )
    assert store.verify().ok


def test_app_enqueue_refuses_oversize_payloads(target):
    with jobledger.App(target, authorize=jobledger.allow_all) as app:
        app.ensure_job("j", "work")
        with pytest.raises(jobledger.InvalidArgument):
            app.enqueue("j", payload=_payload_of_size(MAX_JSON_BYTES + 1))
        with pytest.raises(jobledger.InvalidArgument):
            app.enqueue_many("j", [{"a": 1}, _payload_of_size(MAX_JSON_BYTES + 1)])
        assert app.store.count_occurrences() == []


# -- authority ---------------------------------------------------------------------------------


def test_the_runtime_refuses_to_run_without_an_explicit_authorizer(store):
    for authorize in (None, True, "allow", 1):
        with pytest.raises(jobledger.SchedulerError) as refused:
            jobledger.Runtime(store, authorize=authorize, heartbeat=ManualHeartbeat())  # type: ignore[arg-type]
        assert refused.value.code.startswith("SCHEDULER_RUNTIME_")
    app = jobledger.App(store)
    app.handler("work")(lambda ctx: None)
    with pytest.raises(jobledger.SchedulerError) as refused:
        app.runtime()
    assert refused.value.code == "SCHEDULER_RUNTIME_AUTHORIZER_REQUIRED"


DENIALS = [
    pytest.param(lambda request: True, id="bare-true"),
    pytest.param(lambda request: "true", id="string-true"),
    pytest.param(lambda request: 1, id="one"),
    pytest.param(lambda request: {"allowed": "yes"}, id="mapping-yes"),
    pytest.param(lambda request: {"allowed": 1}, id="mapping-one"),
    pytest.param(lambda request: None, id="none"),
    pytest.param(lambda request: jobledger.Decision(allowed=False, reason="no"), id="denied"),
    pytest.param(lambda request: {"allowed": True, "principal": "root"}["missing"], id="raises"),
]


@pytest.mark.parametrize("authorize", DENIALS)
def test_anything_but_an_explicit_allow_never_runs_the_handler(store, authorize):
    ran: list[str] = []
    store.create_job(id="j", kind="work", authority=AUTHORITY, max_attempts=1)
    occurrence = store.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="t")
    runtime = jobledger.Runtime(
        store,
        authorize=authorize,
        handlers={"work": lambda ctx: ran.append(ctx.occurrence_id)},
        heartbeat=ManualHeartbeat(),
    )
    try:
        result = runtime.run_next()
    finally:
        runtime.close()
    assert ran == []
    assert result.status != "succeeded"
    assert store.get_occurrence(occurrence.id).status != "succeeded"


def test_a_forged_authority_in_the_payload_changes_nothing(store):
    forged = {"principal": {"type": "admin", "id": "root"}, "workspaceId": "ws-admin"}
    seen: list[dict[str, Any]] = []

    def authorize(request: jobledger.AuthorizationRequest) -> jobledger.Decision:
        seen.append(request.authority)
        allowed = request.authority["principal"]["id"] == "alice"
        return jobledger.Decision(allowed=allowed)

    handled: list[dict[str, Any]] = []
    store.create_job(id="j", kind="work", authority=AUTHORITY)
    occurrence = store.enqueue_occurrence(
        job_id="j",
        scheduled_for=0,
        trigger_key="t",
        payload={"authority": forged, "principal": forged["principal"], "workspaceId": "ws-admin"},
    )
    assert occurrence.authority["principal"] == AUTHORITY["principal"]
    runtime = jobledger.Runtime(
        store,
        authorize=authorize,
        handlers={"work": lambda ctx: handled.append(ctx.authority)},
        heartbeat=ManualHeartbeat(),
    )
    try:
        assert runtime.run_next().status == "succeeded"
        # The forged workspace does not reach work filtered to it either.
        store.enqueue_occurrence(
            job_id="j", scheduled_for=1, trigger_key="u", payload={"workspaceId": "ws-admin"}
        )
        assert runtime.run_next(workspace_id="ws-admin").status == "idle"
    finally:
        runtime.close()
    assert [a["principal"] for a in seen] == [AUTHORITY["principal"]]
    assert [a["principal"] for a in handled] == [AUTHORITY["principal"]]
    assert handled[0]["workspaceId"] == "ws-1"
