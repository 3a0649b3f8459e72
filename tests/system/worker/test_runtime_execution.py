"""Handler outcomes: results, Retry/Fail, backoff, error records, async handlers, the fence."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import jobledger
from jobledger.engine.outcomes import sanitize_error
from jobledger.testing import FakeClock

from .conftest import add_job


def test_retry_with_delay_waits_then_succeeds(store, clock: FakeClock, make_runtime):
    occurrence = add_job(store, clock=clock)
    calls: list[int] = []

    def handler(ctx: jobledger.JobContext) -> str:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise jobledger.Retry("rate limited", delay=timedelta(milliseconds=100), code="rate")
        return "ok"

    runtime = make_runtime({"echo": handler})
    first = runtime.run_next()
    assert first.status == "retry_wait"
    assert first.error["code"] == "rate"
    assert first.occurrence.available_at == clock() + 100
    assert runtime.run_occurrence(occurrence.id).status == "busy"
    assert runtime.run_next().status == "idle"
    clock.advance(100)
    second = runtime.run_next()
    assert (second.status, second.result) == ("succeeded", "ok")
    assert calls == [1, 2]


def test_retry_at_accepts_aware_datetimes_and_epoch_ms(store, clock: FakeClock, make_runtime):
    target = clock() + 5_000
    add_job(store, "job-1", clock=clock)
    add_job(store, "job-2", kind="ms", clock=clock)
    at = datetime.fromtimestamp(target / 1000, tz=UTC)

    def by_datetime(ctx: jobledger.JobContext) -> None:
        raise jobledger.Retry(at=at)

    def by_ms(ctx: jobledger.JobContext) -> None:
        raise jobledger.Retry(at_ms=target + 1)

    runtime = make_runtime({"echo": by_datetime, "ms": by_ms})
    results = runtime.run_until_idle().results
    assert sorted(r.occurrence.available_at for r in results) == [target, target + 1]


def test_retry_rejects_naive_datetimes_and_both_arguments():
    with pytest.raises(jobledger.InvalidArgument):
        jobledger.Retry(at=datetime(2026, 1, 1))  # noqa: DTZ001 - the point of the test
    with pytest.raises(jobledger.InvalidArgument):
        jobledger.Retry(delay=timedelta(seconds=1), at=datetime(2026, 1, 1, tzinfo=UTC))
    with pytest.raises(jobledger.InvalidArgument):
        jobledger.Retry(delay_ms=1, at_ms=2)
    with pytest.raises(jobledger.InvalidArgument):
        jobledger.Retry(delay=timedelta(seconds=-1))
    with pytest.raises(jobledger.InvalidArgument):
        jobledger.Retry(delay_ms=-1)


@pytest.mark.parametrize(
    ("arguments", "hint"),
    [
        ({"delay": 60}, "delay_ms"),  # Retry(delay=60) used to be 60 ms (issue 8)
        ({"delay": 1.5}, "delay_ms"),
        ({"at": 1_700_000_000_000}, "at_ms"),
    ],
)
def test_retry_refuses_bare_numbers_where_the_name_has_no_unit(arguments, hint):
    with pytest.raises(jobledger.InvalidArgument) as raised:
        jobledger.Retry(**arguments)
    assert raised.value.code == "SCHEDULER_INVALID_ARGUMENT"
    assert hint in raised.value.message


def test_retry_takes_timedeltas_datetimes_and_their_ms_twins():
    assert jobledger.Retry(delay=timedelta(minutes=1)).delay_ms == 60_000
    assert jobledger.Retry(delay_ms=60_000).delay_ms == 60_000
    at = datetime(2026, 1, 1, tzinfo=UTC)
    assert jobledger.Retry(at=at).retry_at == 1_767_225_600_000
    assert jobledger.Retry(at_ms=1_767_225_600_000).retry_at == 1_767_225_600_000
    assert (jobledger.Retry().delay_ms, jobledger.Retry().retry_at) == (None, None)


def test_plain_exceptions_retry_with_the_kinds_backoff(store, clock: FakeClock, make_runtime):
    add_job(store, "job-1", kind="slow", clock=clock)
    add_job(store, "job-2", kind="fast", clock=clock)

    def boom(ctx: jobledger.JobContext) -> None:
        raise ValueError("dependency down")

    runtime = make_runtime(
        {"slow": boom, "fast": boom},
        retry_policy=jobledger.FixedBackoff(timedelta(seconds=7)),
        retry_policies={"fast": jobledger.FixedBackoff(delay_ms=250)},
    )
    by_kind = {}
    for result in runtime.run_until_idle().results:
        by_kind[result.occurrence.job_id] = result
    assert by_kind["job-1"].status == "retry_wait"
    assert by_kind["job-1"].occurrence.available_at == clock() + 7_000
    assert by_kind["job-2"].occurrence.available_at == clock() + 250
    error = by_kind["job-1"].error
    assert error == {"code": "execution_failed", "message": "dependency down", "name": "ValueError"}


def test_retry_without_a_delay_uses_the_backoff(store, clock: FakeClock, make_runtime):
    add_job(store, clock=clock)

    def handler(ctx: jobledger.JobContext) -> None:
        raise jobledger.Retry()

    policy = jobledger.ExponentialBackoff(
        base=timedelta(seconds=1), factor=3, cap=timedelta(minutes=1), jitter=0
    )
    runtime = make_runtime({"echo": handler}, retry_policies={"echo": policy})
    assert runtime.run_next().occurrence.available_at == clock() + 1000
    clock.advance(1000)
    assert runtime.run_next().occurrence.available_at == clock() + 3000


def test_default_backoff_does_not_hammer(store, clock: FakeClock, make_runtime, driver):
    add_job(store, clock=clock)
    runtime = jobledger.Runtime(
        store,
        handlers={"echo": lambda ctx: 1 / 0},
        authorize=jobledger.allow_all,
        clock=clock,
        heartbeat=driver,
    )
    with runtime:
        result = runtime.run_next()
    delay = result.occurrence.available_at - clock()
    assert 800 <= delay <= 1200  # 1 s ± 20 % jitter


def test_exhausted_attempts_dead_letter(store, clock: FakeClock, make_runtime):
    add_job(store, max_attempts=2, clock=clock)
    runtime = make_runtime({"echo": lambda ctx: 1 / 0})
    assert runtime.run_next().status == "retry_wait"
    final = runtime.run_next()
    assert final.status == "dead_letter"
    assert final.error["name"] == "ZeroDivisionError"


class NotRetryable(Exception):
    retryable = False
    code = "bad_input"


class RetryLater(Exception):
    def __init__(self, at: int) -> None:
        super().__init__("later")
        self.retry_at = at


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (
            jobledger.Fail("invalid address", code="invalid_address"),
            "dead_letter",
            "invalid_address",
        ),
        (jobledger.Fail(), "dead_letter", "execution_failed"),
        (NotRetryable("no"), "dead_letter", "bad_input"),
        (KeyError("k"), "retry_wait", "execution_failed"),
    ],
)
def test_failure_classification(store, clock, make_runtime, error, status, code):
    add_job(store, clock=clock)

    def handler(ctx: jobledger.JobContext) -> None:
        raise error

    result = make_runtime({"echo": handler}).run_next()
    assert result.status == status
    assert result.error["code"] == code


def test_an_exception_may_carry_its_retry_instant(store, clock: FakeClock, make_runtime):
    add_job(store, clock=clock)

    def handler(ctx: jobledger.JobContext) -> None:
        raise RetryLater(clock() + 42)

    assert make_runtime({"echo": handler}).run_next().occurrence.available_at == clock() + 42


def test_an_unreadable_error_policy_is_final(store, clock, make_runtime):
    add_job(store, clock=clock)

    class Weird(Exception):
        retry_at = "tomorrow"

    def handler(ctx: jobledger.JobContext) -> None:
        raise Weird("?")

    result = make_runtime({"echo": handler}).run_next()
    assert result.status == "dead_letter"
    assert result.error["code"] == "SCHEDULER_RUNTIME_ERROR_POLICY_FAILED"


# -- error records -------------------------------------------------------------------------


class Detailed(Exception):
    def __init__(self, code: Any, message: Any, details: Any) -> None:
        super().__init__("fallback text")
        self.code = code
        self.message = message
        self.details = details


def test_error_records_are_sanitised():
    record = sanitize_error(Detailed("  c" * 100, "m" * 5000, {"ok": [1, 2]}))
    assert len(record["code"]) == 128
    assert record["code"] == ("c" + "  c" * 100).strip()[:128] or record["code"]
    assert record["message"] == "m" * 2000
    assert record["details"] == {"ok": [1, 2]}
    assert sanitize_error(Detailed("", None, object()))["details"] == {
        "omitted": "invalid_error_details"
    }
    assert sanitize_error(Detailed(None, None, {"n": float("nan")}))["details"] == {
        "omitted": "invalid_error_details"
    }
    huge = sanitize_error(Detailed("x", "y", {"blob": "z" * 1_100_000}))
    assert huge["details"] == {"omitted": "error_details_too_large"}
    near = sanitize_error(Detailed("x", "y" * 2000, {"blob": "z" * (1_048_576 - 100)}))
    assert near["details"] == {"omitted": "error_details_too_large"}
    plain = sanitize_error(Detailed(None, None, None))
    assert plain == {"code": "execution_failed", "message": "fallback text", "name": "Detailed"}
    assert sanitize_error(RuntimeError())["message"] == "RuntimeError"


def test_stored_error_records_are_sanitised(store, clock, make_runtime):
    add_job(store, clock=clock)

    def handler(ctx: jobledger.JobContext) -> None:
        raise Detailed("E" * 300, "long " * 1000, {"bad": {1, 2}})

    result = make_runtime({"echo": handler}).run_next()
    stored = store.get_occurrence(result.occurrence.id).last_error
    assert stored["code"] == "E" * 128
    assert len(stored["message"]) == 2000
    assert stored["details"] == {"omitted": "invalid_error_details"}


# -- sync and async handlers, the fence -----------------------------------------------------


def test_async_handlers_run_on_the_runtime_loop(store, clock, make_runtime):
    add_job(store, "job-1", clock=clock)
    add_job(store, "job-2", kind="fails", clock=clock)

    async def handler(ctx: jobledger.JobContext) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"fence": ctx.fence, "cancelled": ctx.is_cancelled()}

    async def fails(ctx: jobledger.JobContext) -> None:
        await asyncio.sleep(0)
        raise jobledger.Fail("nope")

    runtime = make_runtime({"echo": handler, "fails": fails})
    results = {r.occurrence.job_id: r for r in runtime.run_until_idle().results}
    assert results["job-1"].result == {"fence": 1, "cancelled": False}
    assert results["job-2"].status == "dead_letter"


def test_the_fence_reaches_the_handler_and_grows_per_claim(store, clock: FakeClock, make_runtime):
    occurrence = add_job(store, clock=clock)
    fences: list[tuple[str, int, str]] = []

    def handler(ctx: jobledger.JobContext) -> None:
        fences.append((ctx.occurrence_id, ctx.fence, ctx.idempotency_key))
        if len(fences) < 3:
            raise jobledger.Retry(delay=timedelta(0))

    runtime = make_runtime({"echo": handler})
    runtime.run_until_idle()
    assert fences == [
        (occurrence.id, 1, occurrence.idempotency_key),
        (occurrence.id, 2, occurrence.idempotency_key),
        (occurrence.id, 3, occurrence.idempotency_key),
    ]
