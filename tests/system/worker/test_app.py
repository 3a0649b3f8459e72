"""The App façade: handler registration, datetime/timedelta conversion, defaults, the test kit."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

import jobledger
from jobledger.testing import FakeClock, run_until_idle


@pytest.fixture
def app(tmp_path, clock: FakeClock):
    with jobledger.App(
        tmp_path / "app.sqlite3", name="billing", clock=clock, authorize=jobledger.allow_all
    ) as app:
        yield app


def test_handler_create_enqueue_run_and_history(app, clock):
    @app.handler("greet")
    def greet(ctx: jobledger.JobContext) -> str:
        return f"hello {ctx.payload['name']} (fence {ctx.fence})"

    job = app.create_job("greet-ada", "greet", payload={"name": "Ada"})
    assert job.authority["principal"] == {"type": "app", "id": "billing"}
    occurrence = app.enqueue("greet-ada")
    assert occurrence.scheduled_for == clock()
    # Every call is its own occurrence (issue 8): a unique trigger key, not manual:<ms>.
    assert re.fullmatch(r"enqueue:[0-9a-f]{32}", occurrence.trigger_key)
    [result] = run_until_idle(app)
    assert (result.status, result.result) == ("succeeded", "hello Ada (fence 1)")
    # A fresh claim is not revalidated with a renew (issue 10): no occurrence_renewed event.
    assert [e.type for e in reversed(app.history(occurrence_id=occurrence.id))] == [
        "occurrence_enqueued",
        "occurrence_claimed",
        "occurrence_succeeded",
    ]
    assert app.get_occurrence(occurrence.id).status == "succeeded"
    assert app.get_job("greet-ada").revision == 1


def test_enqueue_converts_datetimes_and_timedeltas(app, clock: FakeClock):
    app.create_job("j", "k")
    base = clock()
    plus_two = timezone(timedelta(hours=2))
    at = datetime.fromtimestamp(base / 1000 + 60, tz=UTC).astimezone(plus_two)
    assert app.enqueue("j", at=at).scheduled_for == base + 60_000
    assert app.enqueue("j", at_ms=base + 5).scheduled_for == base + 5
    delayed = app.enqueue("j", delay=timedelta(minutes=5))
    assert (delayed.scheduled_for, delayed.available_at) == (base + 300_000, base + 300_000)
    assert app.enqueue("j", delay_ms=250).scheduled_for == base + 250


def test_enqueue_rejects_naive_datetimes_and_conflicting_arguments(app):
    app.create_job("j", "k")
    with pytest.raises(jobledger.InvalidArgument, match="timezone-aware"):
        app.enqueue("j", at=datetime(2026, 1, 1))  # noqa: DTZ001 - the point of the test
    with pytest.raises(jobledger.InvalidArgument):
        app.enqueue("j", at_ms=1, delay_ms=1)
    with pytest.raises(jobledger.InvalidArgument):
        app.enqueue("j", delay=timedelta(seconds=1), delay_ms=1000)
    with pytest.raises(jobledger.InvalidArgument):
        app.enqueue("j", delay=timedelta(seconds=-1))
    with pytest.raises(jobledger.InvalidArgument):
        app.enqueue("j", delay_ms=-1)


@pytest.mark.parametrize(
    ("arguments", "hint"),
    [
        ({"delay": 250}, "delay_ms"),  # was 250 ms; now a bare number must say its unit
        ({"delay": 1.5}, "delay_ms"),
        ({"at": 1_000}, "at_ms"),  # was epoch ms
    ],
)
def test_enqueue_refuses_bare_numbers_where_the_name_has_no_unit(app, arguments, hint):
    app.create_job("j", "k")
    with pytest.raises(jobledger.InvalidArgument) as raised:
        app.enqueue("j", **arguments)
    assert raised.value.code == "SCHEDULER_INVALID_ARGUMENT"
    assert hint in raised.value.message
    assert app.store.count_occurrences() == []


def test_every_enqueue_is_a_new_occurrence_unless_a_key_is_given(app):
    app.create_job("j", "k")
    first = app.enqueue("j", at_ms=1_000)
    again = app.enqueue("j", at_ms=1_000)
    assert again.id != first.id
    assert (first.deduplicated, again.deduplicated) == (False, False)
    keyed = app.enqueue("j", at_ms=1_000, key="order-17")
    assert keyed.trigger_key == "key:order-17"
    assert keyed.id not in {first.id, again.id}
    assert app.enqueue("j", at_ms=1_000, key="order-17").deduplicated is True
    # The identity is still deterministic: derived from job, revision, instant and trigger key.
    assert (keyed.id, keyed.idempotency_key) == jobledger.derive_occurrence_identity(
        job_id="j", job_revision=1, scheduled_for=1_000, trigger_key="key:order-17"
    )


def test_delayed_work_runs_only_when_due(app, clock: FakeClock):
    app.handler("k")(lambda ctx: "ran")
    app.create_job("j", "k")
    app.enqueue("j", delay=timedelta(seconds=30))
    summary = run_until_idle(app)
    assert (summary.status, list(summary)) == ("idle", [])
    clock.advance(timedelta(seconds=30))
    assert [r.result for r in run_until_idle(app)] == ["ran"]


def test_per_kind_retry_policy(app, clock: FakeClock):
    @app.handler("flaky", retry=jobledger.FixedBackoff(timedelta(seconds=9)))
    def flaky(ctx: jobledger.JobContext) -> None:
        raise ConnectionError("try later")

    app.create_job("j", "flaky")
    app.enqueue("j")
    [result] = run_until_idle(app)
    assert result.occurrence.available_at == clock() + 9_000


def test_duplicate_and_invalid_handlers(app):
    app.handler("k")(lambda ctx: None)
    with pytest.raises(jobledger.RuntimeRejection) as raised:
        app.handler("k")(lambda ctx: None)
    assert raised.value.code == "SCHEDULER_RUNTIME_DUPLICATE_HANDLER"
    with pytest.raises(jobledger.RuntimeRejection) as raised:
        app.handler("")
    assert raised.value.code == "SCHEDULER_RUNTIME_INVALID_HANDLER"
    with pytest.raises(jobledger.RuntimeRejection) as raised:
        app.handler("x")(42)
    assert raised.value.code == "SCHEDULER_RUNTIME_INVALID_HANDLER"


def test_running_work_needs_an_explicit_authorizer(tmp_path, clock):
    with jobledger.App(tmp_path / "a.sqlite3", clock=clock) as app:
        app.create_job("j", "k")
        app.enqueue("j")  # enqueueing needs no authorizer
        with pytest.raises(jobledger.RuntimeRejection) as raised:
            run_until_idle(app)
        assert raised.value.code == "SCHEDULER_RUNTIME_AUTHORIZER_REQUIRED"


def test_an_open_store_is_used_and_left_open(tmp_path, clock):
    with jobledger.open_store(tmp_path / "s.sqlite3", clock=clock) as store:
        app = jobledger.App(store, authorize=jobledger.allow_all)
        app.create_job("j", "k")
        app.close()
        assert store.get_job("j") is not None
        assert app.store is store
        assert app.enqueue("j").scheduled_for == clock()  # the store's clock


def test_an_open_store_keeps_its_own_clock_and_options(tmp_path, clock):
    # Before issue 8 App(store, clock=…) was accepted and the clock silently not applied.
    with jobledger.open_store(tmp_path / "s.sqlite3", clock=clock) as store:
        with pytest.raises(jobledger.InvalidArgument) as raised:
            jobledger.App(store, clock=FakeClock(0), authorize=jobledger.allow_all)
        assert raised.value.details == {"field": "clock"}
        assert "open_store" in raised.value.message
        with pytest.raises(jobledger.InvalidArgument) as raised:
            jobledger.App(store, store_options={"busy_timeout_ms": 10})
        assert raised.value.details == {"field": "store_options"}


def test_app_worker_steps_with_run_once(app, clock):
    done = []

    @app.handler("k")
    def handler(ctx: jobledger.JobContext) -> None:
        done.append(ctx.occurrence_id)

    app.create_job("j", "k")
    app.enqueue("j")
    worker = app.worker(poll_interval=timedelta(milliseconds=5), planner=False)
    assert [r.status for r in worker.run_once(5)] == ["succeeded"]
    assert len(done) == 1


# -- the testing kit ---------------------------------------------------------------------------


def test_fake_clock_moves_by_exact_milliseconds():
    clock = FakeClock(0)
    assert clock.advance(timedelta(milliseconds=1001)) == 1001  # not 1000 via a float
    assert clock.advance(timedelta(days=1, microseconds=999)) == 1001 + 86_400_000
    target = datetime(2026, 1, 1, 0, 0, 0, 1000, tzinfo=UTC)
    assert clock.set(target) == 1_767_225_600_001
    with pytest.raises(jobledger.InvalidArgument):
        clock.set(datetime(2027, 1, 1))  # noqa: DTZ001 - naive datetimes are refused
    with pytest.raises(jobledger.InvalidArgument):
        clock.set(0)
    with pytest.raises(jobledger.InvalidArgument):
        clock.advance(-1)


def test_temp_store_gives_a_fresh_file_store_removed_afterwards():
    import tempfile
    from pathlib import Path

    from jobledger.testing import temp_store

    def temp_dirs() -> set[Path]:
        return set(Path(tempfile.gettempdir()).glob("jobledger-*"))

    before = temp_dirs()
    clock = FakeClock()
    with temp_store(clock) as store, jobledger.App(store, authorize=jobledger.allow_all) as app:
        [made] = temp_dirs() - before
        assert (made / "jobledger.sqlite3").exists()
        app.handler("k")(lambda ctx: ctx.occurrence.scheduled_for)
        app.create_job("j", "k")
        app.enqueue("j")  # "now" is the store's clock: no clock given to the App
        [result] = run_until_idle(app)
        assert result.result == clock()
    assert not made.exists()
    with temp_store() as other:
        assert other.get_job("j") is None


def test_run_until_idle_does_not_pile_up_runtimes_on_the_app(app):
    app.handler("k")(lambda ctx: None)
    for _ in range(3):
        run_until_idle(app)
    assert app._runtimes == []
