"""Runtime checks in the reference's order (§3.11 steps 1–6) and each rejection's retryability."""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

import jobledger
from jobledger.engine.commit import CommitNow
from jobledger.engine.options import LeaseOptions
from jobledger.testing import FakeClock

from .conftest import LEASE_MS, add_job, event_types

# Another authority: the one change besides a new kind that makes live work stale (SPEC §14).
OTHER_AUTHORITY = {"principal": {"type": "user", "id": "someone-else"}}


class Recorder:
    """A sync handler that records each call and returns a JSON result."""

    def __init__(self, result: Any = None) -> None:
        self.calls: list[jobledger.JobContext] = []
        self.result = result

    def __call__(self, ctx: jobledger.JobContext) -> Any:
        self.calls.append(ctx)
        return self.result


class StoreWithoutJobs:
    """Delegates to a real store but pretends every job is gone: reads find no job and claims
    carry none (as if the job vanished between the claim and the attempt)."""

    def __init__(self, store: jobledger.Store) -> None:
        self._store = store

    def get_job(self, job_id: str) -> None:
        return None

    def claim_next(self, **options: Any) -> jobledger.Occurrence | None:
        claimed = self._store.claim_next(**options)
        return None if claimed is None else dataclasses.replace(claimed, job=None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class CountingStore:
    """Delegates to a real store and counts the calls made through it."""

    def __init__(self, store: jobledger.Store) -> None:
        self._store = store
        self.calls: collections.Counter[str] = collections.Counter()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if not callable(value):
            return value

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return value(*args, **kwargs)

        return counted


def test_success_authorizes_snapshots_then_executes_and_settles(store, clock, make_runtime):
    occurrence = add_job(store, payload={"n": 1}, clock=clock)
    seen: list[jobledger.AuthorizationRequest] = []

    def authorize(request: jobledger.AuthorizationRequest) -> dict[str, Any]:
        seen.append(request)
        return {"allowed": True, "reason": "ok"}

    handler = Recorder({"done": True})
    result = make_runtime({"echo": handler}, authorize=authorize).run_next()

    assert result.status == "succeeded"
    assert result.result == {"done": True}
    assert seen[0].job.revision == 1
    assert seen[0].occurrence.id == occurrence.id
    assert len(handler.calls) == 1
    ctx = handler.calls[0]
    assert ctx.payload == {"n": 1}
    assert ctx.decision.allowed is True
    assert ctx.decision.reason == "ok"
    assert ctx.authority["principal"] == {"type": "user", "id": "tester"}
    # Step 5 holds without a write while the claim is fresh (issue 10): no occurrence_renewed.
    assert event_types(store, occurrence.id) == [
        "occurrence_enqueued",
        "occurrence_claimed",
        "occurrence_succeeded",
    ]


def test_the_claim_carries_the_job_so_a_fresh_attempt_reads_nothing_more(
    store, clock, make_runtime
):
    add_job(store, clock=clock)
    counting = CountingStore(store)
    result = make_runtime({"echo": Recorder("ok")}, store=counting).run_next()
    assert result.status == "succeeded"
    assert counting.calls["get_job"] == 0
    assert counting.calls["renew"] == 0
    assert (counting.calls["claim_next"], counting.calls["settle_batch"]) == (1, 1)


def test_job_missing_is_final(store, clock, make_runtime):
    occurrence = add_job(store, clock=clock)
    handler = Recorder()
    runtime = make_runtime({"echo": handler}, store=StoreWithoutJobs(store))
    result = runtime.run_next()
    assert result.status == "dead_letter"
    assert result.error["code"] == "SCHEDULER_RUNTIME_JOB_MISSING"
    assert result.error["name"] == "RuntimeRejection"
    assert handler.calls == []
    assert store.get_occurrence(occurrence.id).status == "dead_letter"


def test_stale_revision_is_final(store, clock, make_runtime):
    add_job(store, clock=clock)
    store.update_job("job-1", expected_revision=1, patch={"authority": OTHER_AUTHORITY})
    handler = Recorder()
    result = make_runtime({"echo": handler}).run_next()
    assert result.status == "dead_letter"
    assert result.error["code"] == "SCHEDULER_RUNTIME_STALE_REVISION"
    assert result.error["details"] == {"occurrenceRevision": 1, "currentRevision": 2}
    assert handler.calls == []


def test_an_unknown_kind_is_not_claimed_it_stays_queued(store, clock, make_runtime):
    # Issue 8: a runtime claims only the kinds it has handlers for (it used to claim every kind
    # and dead-letter the unknown ones), so during a rolling deploy the work waits for a runtime
    # that knows it.
    occurrence = add_job(store, kind="unknown", clock=clock)
    runtime = make_runtime({"echo": Recorder()})
    assert runtime.run_next() == jobledger.RunResult("idle")
    assert runtime.run_until_idle().status == "idle"
    assert runtime.claim_batch(10) == []
    assert store.get_occurrence(occurrence.id).status == "queued"
    assert make_runtime({}).run_next() == jobledger.RunResult("idle")  # no handlers at all
    assert store.get_occurrence(occurrence.id).status == "queued"


def test_missing_handler_is_final_and_keeps_the_reference_code(store, clock, make_runtime):
    # Only reachable when the caller asks for a kind explicitly (or the handler set changed).
    add_job(store, kind="unknown", clock=clock)
    result = make_runtime({"echo": Recorder()}).run_next(job_kind="unknown")
    assert result.status == "dead_letter"
    assert result.error["code"] == "SCHEDULER_RUNTIME_ADAPTER_MISSING"
    assert result.error["details"] == {"jobKind": "unknown"}


class Allowed:
    def __init__(self, allowed: object, reason: object = None) -> None:
        self.allowed = allowed
        self.reason = reason


@pytest.mark.parametrize(
    "decision",
    [
        False,
        True,
        None,
        "yes",
        {"allowed": False},
        {"allowed": "true"},
        {"allowed": 1},
        Allowed(1),
        Allowed("true"),
        {},
    ],
)
def test_anything_but_allowed_is_true_is_denied_and_final(store, clock, make_runtime, decision):
    add_job(store, clock=clock)
    handler = Recorder()
    result = make_runtime({"echo": handler}, authorize=lambda request: decision).run_next()
    assert result.status == "dead_letter"
    assert result.error["code"] == "SCHEDULER_RUNTIME_AUTHORIZATION_DENIED"
    assert result.error["details"] == {"reason": "not_allowed"}
    assert handler.calls == []


def test_denial_reason_is_kept_up_to_256_characters(store, clock, make_runtime):
    add_job(store, clock=clock)
    result = make_runtime(
        {"echo": Recorder()}, authorize=lambda r: Allowed(False, "x" * 256)
    ).run_next()
    assert result.error["details"] == {"reason": "x" * 256}
    add_job(store, "job-2", clock=clock)
    result = make_runtime(
        {"echo": Recorder()}, authorize=lambda r: {"allowed": False, "reason": "x" * 257}
    ).run_next()
    assert result.error["details"] == {"reason": "not_allowed"}


def test_allowed_decision_object_and_attribute_allow(store, clock, make_runtime):
    add_job(store, clock=clock)
    add_job(store, "job-2", clock=clock)
    runtime = make_runtime({"echo": Recorder()}, authorize=lambda r: Allowed(True))
    assert runtime.run_next().status == "succeeded"
    runtime2 = make_runtime(
        {"echo": Recorder()}, authorize=lambda r: jobledger.Decision(allowed=True)
    )
    assert runtime2.run_next().status == "succeeded"


class Hostile:
    @property
    def allowed(self) -> bool:
        raise RuntimeError("policy backend exploded")


@pytest.mark.parametrize("authorize", ["raises", "hostile"])
def test_failing_authorizer_is_retryable_unavailable(store, clock, make_runtime, authorize):
    occurrence = add_job(store, clock=clock)

    def raising(request: object) -> None:
        raise ConnectionError("policy service down")

    handler = Recorder()
    chosen = raising if authorize == "raises" else (lambda request: Hostile())
    result = make_runtime({"echo": handler}, authorize=chosen).run_next()
    assert result.status == "retry_wait"
    assert result.error["code"] == "SCHEDULER_RUNTIME_AUTHORIZATION_UNAVAILABLE"
    assert handler.calls == []
    assert store.get_occurrence(occurrence.id).attempt == 1


def test_async_authorizer_is_awaited(store, clock, make_runtime):
    add_job(store, clock=clock)

    async def authorize(request: jobledger.AuthorizationRequest) -> dict[str, bool]:
        return {"allowed": request.job.kind == "echo"}

    assert make_runtime({"echo": Recorder()}, authorize=authorize).run_next().status == "succeeded"


SLOW_S = 0.05  # longer than the renew interval of the runtimes below


def test_lease_is_revalidated_after_slow_authorization(store, clock: FakeClock, make_runtime):
    occurrence = add_job(store, clock=clock)

    def slow(request: object) -> dict[str, bool]:
        time.sleep(SLOW_S)  # slow on the monotonic clock: longer than one renew interval
        clock.advance(LEASE_MS)  # and the lease expired while the policy was consulted
        return {"allowed": True}

    handler = Recorder()
    runtime = make_runtime({"echo": handler}, authorize=slow, renew_interval_ms=20)
    result = runtime.run_next()
    assert result.status == "aborted"
    assert result.lease_lost is True
    assert result.error["code"] == "SCHEDULER_LEASE_LOST"
    assert handler.calls == []
    assert event_types(store, occurrence.id) == ["occurrence_enqueued", "occurrence_claimed"]


def test_a_slow_authorization_renews_once_before_the_handler(store, clock, make_runtime):
    occurrence = add_job(store, clock=clock)

    def slow(request: object) -> dict[str, bool]:
        time.sleep(SLOW_S)
        return {"allowed": True}

    runtime = make_runtime({"echo": Recorder("ok")}, authorize=slow, renew_interval_ms=20)
    assert runtime.run_next().status == "succeeded"
    assert event_types(store, occurrence.id) == [
        "occurrence_enqueued",
        "occurrence_claimed",
        "occurrence_renewed",
        "occurrence_succeeded",
    ]


def test_a_fresh_claim_is_not_revalidated_so_an_expired_lease_is_caught_at_the_settle(
    store, clock: FakeClock, make_runtime
):
    """Step 5 is judged on the monotonic clock: a store-clock jump inside a fast authorizer is
    not noticed before the handler; the settle's fence check refuses the result instead."""
    occurrence = add_job(store, clock=clock)

    def jumps(request: object) -> dict[str, bool]:
        clock.advance(LEASE_MS)
        return {"allowed": True}

    handler = Recorder("late")
    result = make_runtime({"echo": handler}, authorize=jumps).run_next()
    assert len(handler.calls) == 1  # changed by issue 10: the old runtime renewed here first
    assert (result.status, result.lease_lost) == ("aborted", True)
    assert result.error["code"] == "SCHEDULER_LEASE_LOST"
    assert store.get_occurrence(occurrence.id).result is None
    assert event_types(store, occurrence.id) == ["occurrence_enqueued", "occurrence_claimed"]


def test_a_stale_claim_is_renewed_and_its_job_read_again(store, clock, make_runtime):
    """A claim older than one renew interval (it waited, e.g. in a worker's prefetch buffer)
    gets the reference's revalidating renew, and its job is read again: a job changed while
    the claim waited is caught by step 2."""
    occurrence = add_job(store, clock=clock)
    counting = CountingStore(store)
    handler = Recorder()
    runtime = make_runtime({"echo": handler}, store=counting, renew_interval_ms=20)
    [claimed] = runtime.claim_batch(1)
    store.update_job("job-1", expected_revision=1, patch={"authority": OTHER_AUTHORITY})
    attempt = runtime.attempt(
        claimed,
        commit=CommitNow(store),
        claimed_at=runtime.monotonic() - 1,  # claimed a second ago: stale
    )
    attempt.run()
    done = [attempt.wait_reported()]
    [result] = done
    assert (result.status, result.error["code"]) == (
        "dead_letter",
        "SCHEDULER_RUNTIME_STALE_REVISION",
    )
    assert counting.calls["get_job"] == 1
    assert handler.calls == []
    assert "occurrence_renewed" not in event_types(store, occurrence.id)  # step 2 failed first


def test_a_stale_claim_still_held_is_renewed_once_then_runs(store, clock, make_runtime):
    occurrence = add_job(store, clock=clock)
    runtime = make_runtime({"echo": Recorder("ok")}, renew_interval_ms=20)
    [claimed] = runtime.claim_batch(1)
    attempt = runtime.attempt(
        claimed,
        commit=CommitNow(store),
        claimed_at=runtime.monotonic() - 1,
    )
    attempt.run()
    done = [attempt.wait_reported()]
    assert [(r.status, r.result) for r in done] == [("succeeded", "ok")]
    assert event_types(store, occurrence.id) == [
        "occurrence_enqueued",
        "occurrence_claimed",
        "occurrence_renewed",
        "occurrence_succeeded",
    ]


def test_a_stale_claim_whose_lease_is_gone_runs_nothing(store, clock: FakeClock, make_runtime):
    occurrence = add_job(store, clock=clock)
    handler = Recorder()
    runtime = make_runtime({"echo": handler}, renew_interval_ms=20)
    [claimed] = runtime.claim_batch(1)
    clock.advance(LEASE_MS)
    store.claim_next(owner_id="other", lease_ms=LEASE_MS)  # reclaimed while it waited
    attempt = runtime.attempt(
        claimed,
        commit=CommitNow(store),
        claimed_at=runtime.monotonic() - 1,
    )
    attempt.run()
    done = [attempt.wait_reported()]
    [result] = done
    assert (result.status, result.lease_lost) == ("aborted", True)
    assert handler.calls == []
    assert store.get_occurrence(occurrence.id).lease_owner == "other"


def test_run_claimed_revalidates_a_claim_that_waited(store, clock, make_runtime):
    add_job(store, clock=clock)
    handler = Recorder()
    runtime = make_runtime({"echo": handler}, renew_interval_ms=20)
    [claimed] = runtime.claim_batch(1)
    store.update_job("job-1", expected_revision=1, patch={"authority": OTHER_AUTHORITY})
    clock.advance(50)  # the claim is now older than one renew interval (by its lease)
    result = runtime.run_claimed(claimed)
    assert result.status == "dead_letter"
    assert result.error["code"] == "SCHEDULER_RUNTIME_STALE_REVISION"
    assert handler.calls == []


def test_cancellation_during_authorization_is_retryable_aborted(store, clock, make_runtime):
    add_job(store, clock=clock)
    cancel = threading.Event()

    def authorize(request: jobledger.AuthorizationRequest) -> dict[str, bool]:
        cancel.set()
        return {"allowed": True}

    handler = Recorder()
    result = make_runtime({"echo": handler}, authorize=authorize).run_next(cancel_event=cancel)
    assert result.status == "retry_wait"
    assert result.error["code"] == "SCHEDULER_RUNTIME_ABORTED"
    assert handler.calls == []


def test_a_handler_ignoring_cancellation_does_not_settle_success(store, clock, make_runtime):
    add_job(store, clock=clock)
    cancel = threading.Event()
    seen: list[bool] = []

    def handler(ctx: jobledger.JobContext) -> str:
        cancel.set()
        seen.append(ctx.is_cancelled())
        return "ignored"

    result = make_runtime({"echo": handler}).run_next(cancel_event=cancel)
    assert seen == [True]
    assert result.status == "retry_wait"
    assert result.error["code"] == "SCHEDULER_RUNTIME_ABORTED"
    assert result.occurrence.result is None


def test_cancelled_before_claiming_claims_nothing(store, clock, make_runtime):
    occurrence = add_job(store, clock=clock)
    cancel = threading.Event()
    cancel.set()
    runtime = make_runtime({"echo": Recorder()})
    assert runtime.run_next(cancel_event=cancel) == jobledger.RunResult("aborted")
    assert runtime.run_occurrence(occurrence.id, cancel_event=cancel).status == "aborted"
    assert store.get_occurrence(occurrence.id).status == "queued"
    summary = runtime.run_until_idle(cancel_event=cancel)
    assert summary.status == "aborted"
    assert summary.results == ()


def test_heartbeat_that_cannot_start_is_retryable(store, clock, make_runtime):
    occurrence = add_job(store, clock=clock)

    class BrokenDriver:
        def start(self, interval_ms: int, beat: object) -> object:
            raise OSError("no threads left")

    handler = Recorder()
    runtime = make_runtime({"echo": handler}, heartbeat=BrokenDriver())
    try:
        result = runtime.run_next()
    finally:
        assert handler.calls == []
        assert runtime.in_flight() == []
        assert runtime.keeper.tracked == 0
    assert result.status == "retry_wait"
    assert result.error["code"] == "SCHEDULER_RUNTIME_TIMER_FAILED"
    assert store.get_occurrence(occurrence.id).lease_owner is None


def test_non_json_result_is_a_final_failure(store, clock, make_runtime):
    add_job(store, clock=clock)
    result = make_runtime({"echo": lambda ctx: {1, 2}}).run_next()
    assert result.status == "dead_letter"
    assert result.error["code"] == "SCHEDULER_RUNTIME_INVALID_RESULT"


# -- targeted runs and loops ---------------------------------------------------------------


def test_run_occurrence_outcomes(store, clock, make_runtime):
    occurrence = add_job(store, clock=clock)
    first = make_runtime({"echo": Recorder(1)}, owner_id="first")
    second = make_runtime({"echo": Recorder(2)}, owner_id="second")
    with pytest.raises(jobledger.NotFound):
        first.run_occurrence("occ_missing")
    store.claim_occurrence(occurrence_id=occurrence.id, owner_id="someone", lease_ms=LEASE_MS)
    busy = first.run_occurrence(occurrence.id)
    assert busy.status == "busy"
    assert busy.occurrence.lease_owner == "someone"
    clock.advance(LEASE_MS)
    done = second.run_occurrence(occurrence.id)
    assert (done.status, done.result) == ("succeeded", 2)
    again = first.run_occurrence(occurrence.id)
    assert again.already_settled is True
    assert (again.status, again.result) == ("succeeded", 2)


def test_run_until_idle_stops_when_idle_or_at_the_limit(store, clock, make_runtime):
    for n in range(3):
        add_job(store, f"job-{n}", clock=clock)
    runtime = make_runtime({"echo": Recorder("ok")})
    limited = runtime.run_until_idle(limit=2)
    assert limited.status == "limit_reached"
    assert [r.status for r in limited.results] == ["succeeded", "succeeded"]
    rest = runtime.run_until_idle()
    assert rest.status == "idle"
    assert len(rest.results) == 1


@pytest.mark.parametrize("limit", [0, 10_001, 1.5, True, "3"])
def test_run_until_idle_limit_is_validated(make_runtime, limit):
    with pytest.raises(jobledger.RuntimeRejection) as raised:
        make_runtime({}).run_until_idle(limit=limit)
    assert raised.value.code == "SCHEDULER_RUNTIME_INVALID_LIMIT"


# -- configuration rejections --------------------------------------------------------------


def rejection_code(call: Any) -> str:
    with pytest.raises(jobledger.SchedulerError) as raised:
        call()
    return raised.value.code


def test_authorize_is_required_and_allow_all_must_be_named(store):
    assert rejection_code(lambda: jobledger.Runtime(store)) == (
        "SCHEDULER_RUNTIME_AUTHORIZER_REQUIRED"
    )
    assert rejection_code(lambda: jobledger.Runtime(store, authorize="yes")) == (
        "SCHEDULER_RUNTIME_AUTHORIZER_REQUIRED"
    )
    jobledger.Runtime(store, authorize=jobledger.allow_all).close()


@pytest.mark.parametrize("lease_ms", [999, 0, -1, 1000.5, True, 24 * 3600 * 1000 + 1, "60000"])
def test_lease_ms_is_validated(store, lease_ms):
    # One LeaseOptions validates every lease setting, with one code (the runtime's own
    # SCHEDULER_RUNTIME_INVALID_LEASE is gone with its own copy of the check).
    with pytest.raises(jobledger.InvalidArgument) as raised:
        jobledger.Runtime(store, authorize=jobledger.allow_all, lease_ms=lease_ms)
    assert raised.value.code == "SCHEDULER_INVALID_ARGUMENT"
    assert raised.value.details == {"field": "lease_ms"}


@pytest.mark.parametrize("interval", [0, 1000, 5000, 1.5, False])
def test_renew_interval_is_validated(store, interval):
    with pytest.raises(jobledger.InvalidArgument) as raised:
        jobledger.Runtime(
            store, authorize=jobledger.allow_all, lease_ms=1000, renew_interval_ms=interval
        )
    assert raised.value.code == "SCHEDULER_INVALID_ARGUMENT"
    assert raised.value.details == {"field": "renew_interval_ms"}


def test_lease_options_are_one_object_shared_by_every_layer(store):
    leases = LeaseOptions(timedelta(seconds=30), timedelta(seconds=5))
    assert (leases.lease_ms, leases.renew_interval_ms) == (30_000, 5_000)
    assert LeaseOptions.from_ms(30_000, 5_000) == leases
    with jobledger.Runtime(store, authorize=jobledger.allow_all, leases=leases) as runtime:
        assert runtime.leases == leases
        assert (runtime.lease_ms, runtime.renew_interval_ms) == (30_000, 5_000)
    assert jobledger.WorkerOptions(lease=timedelta(seconds=30)).leases == LeaseOptions(
        timedelta(seconds=30)
    )
    with pytest.raises(jobledger.InvalidArgument) as raised:
        jobledger.Runtime(store, authorize=jobledger.allow_all, leases=leases, lease_ms=30_000)
    assert raised.value.details == {"field": "leases"}


def test_defaults_follow_the_reference(store):
    with jobledger.Runtime(store, authorize=jobledger.allow_all) as runtime:
        assert runtime.lease_ms == 60_000
        assert runtime.renew_interval_ms == 20_000
        assert runtime.owner_id.startswith("jobledger:")
        assert len(runtime.owner_id.rsplit(":", 1)[1]) == 8
    with jobledger.Runtime(store, authorize=jobledger.allow_all, lease_ms=1000) as runtime:
        assert runtime.renew_interval_ms == 333
    with jobledger.Runtime(
        store, authorize=jobledger.allow_all, lease_ms=1000, renew_interval_ms=999
    ) as runtime:
        assert runtime.renew_interval_ms == 999


def test_handlers_are_validated(store):
    def make(**options: Any) -> Any:
        return lambda: jobledger.Runtime(store, authorize=jobledger.allow_all, **options)

    assert rejection_code(make(handlers={"": print})) == "SCHEDULER_RUNTIME_INVALID_HANDLER"
    assert rejection_code(make(handlers={"x" * 129: print})) == (
        "SCHEDULER_RUNTIME_INVALID_HANDLER"
    )
    assert rejection_code(make(handlers={"echo": "not callable"})) == (
        "SCHEDULER_RUNTIME_INVALID_HANDLER"
    )
    assert rejection_code(make(handlers=[("echo", print), (" echo ", print)])) == (
        "SCHEDULER_RUNTIME_DUPLICATE_HANDLER"
    )
    runtime = jobledger.Runtime(store, authorize=jobledger.allow_all, handlers={"echo": print})
    assert runtime.kinds == frozenset({"echo"})
    assert rejection_code(lambda: runtime.register_handler("echo", print)) == (
        "SCHEDULER_RUNTIME_DUPLICATE_HANDLER"
    )


def test_store_heartbeat_and_policy_are_validated(store):
    assert (
        rejection_code(lambda: jobledger.Runtime(object(), authorize=jobledger.allow_all))
        == "SCHEDULER_RUNTIME_INVALID_STORE"
    )
    assert (
        rejection_code(
            lambda: jobledger.Runtime(store, authorize=jobledger.allow_all, heartbeat=object())
        )
        == "SCHEDULER_RUNTIME_INVALID_TIMER"
    )
    assert (
        rejection_code(
            lambda: jobledger.Runtime(store, authorize=jobledger.allow_all, retry_policy=3)
        )
        == "SCHEDULER_RUNTIME_INVALID_RETRY_POLICY"
    )
    assert (
        rejection_code(lambda: jobledger.Runtime(store, authorize=jobledger.allow_all, owner_id=""))
        == "SCHEDULER_INVALID_ARGUMENT"
    )


def test_a_failing_authorizer_is_logged_not_only_recorded(store, clock, make_runtime, caplog):
    add_job(store, clock=clock)

    def raising(request: object) -> None:
        raise ConnectionError("policy service down")

    with caplog.at_level("WARNING", logger="jobledger.runtime"):
        make_runtime({"echo": Recorder()}, authorize=raising).run_next()
    [record] = [r for r in caplog.records if r.name == "jobledger.runtime"]
    assert "authorizer failed" in record.getMessage()
    assert record.exc_info[0] is ConnectionError


def test_run_next_claims_only_the_requested_kind_and_workspace(store, clock, make_runtime):
    for job_id, kind, workspace in [("a", "echo", "w1"), ("b", "other", "w1"), ("c", "echo", "w2")]:
        store.create_job(
            id=job_id,
            kind=kind,
            authority={"principal": {"type": "user", "id": "t"}, "workspaceId": workspace},
        )
        store.enqueue_occurrence(job_id=job_id, scheduled_for=clock(), trigger_key="m")
    runtime = make_runtime({"echo": lambda ctx: ctx.job.id, "other": lambda ctx: ctx.job.id})
    assert runtime.run_next(job_kind="other").result == "b"
    assert runtime.run_next(job_kind="other").status == "idle"
    assert runtime.run_next(job_kind="echo", workspace_id="w2").result == "c"
    assert runtime.run_next(workspace_id="w2").status == "idle"
    assert runtime.run_until_idle(workspace_id="w1").results[0].result == "a"


def test_without_a_clock_retry_instants_come_from_the_store(store, clock, make_runtime):
    add_job(store, clock=clock)
    runtime = make_runtime(
        {"echo": lambda ctx: 1 / 0},
        clock=None,
        retry_policy=jobledger.FixedBackoff(timedelta(seconds=7)),
    )
    assert runtime.clock == store.now
    clock.advance(123)  # the store's FakeClock, far from the wall clock
    assert runtime.run_next().occurrence.available_at == clock() + 7_000


class BrokenPolicy:
    def delay_ms(self, attempt: int, rng: object) -> int:
        raise ZeroDivisionError("bad policy")


def test_a_failing_retry_policy_on_a_retryable_rejection_dead_letters(store, clock, make_runtime):
    occurrence = add_job(store, clock=clock)

    def raising(request: object) -> None:
        raise ConnectionError("policy service down")

    handler = Recorder()
    result = make_runtime(
        {"echo": handler}, authorize=raising, retry_policy=BrokenPolicy()
    ).run_next()
    assert result.status == "dead_letter"
    assert result.error["code"] == "SCHEDULER_RUNTIME_ERROR_POLICY_FAILED"
    assert result.error["details"]["rejected"] == "SCHEDULER_RUNTIME_AUTHORIZATION_UNAVAILABLE"
    assert handler.calls == []
    current = store.get_occurrence(occurrence.id)
    assert current.status == "dead_letter"
    assert current.lease_owner is None
