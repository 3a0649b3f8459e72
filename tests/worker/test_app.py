"""The App façade: handler registration, datetime/timedelta conversion, defaults, the test kit."""

from __future__ import annotations

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
    assert (occurrence.scheduled_for, occurrence.trigger_key) == (clock(), f"manual:{clock()}")
    [result] = run_until_idle(app)
    assert (result.status, result.result) == ("succeeded", "hello Ada (fence 1)")
    assert [e.type for e in reversed(app.history(occurrence_id=occurrence.id))] == [
        "occurrence_enqueued",
        "occurrence_claimed",
        "occurrence_renewed",
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
    assert app.enqueue("j", at=base + 5).scheduled_for == base + 5
    delayed = app.enqueue("j", delay=timedelta(minutes=5))
    assert (delayed.scheduled_for, delayed.available_at) == (base + 300_000, base + 300_000)
    assert app.enqueue("j", delay=250).scheduled_for == base + 250


def test_enqueue_rejects_naive_datetimes_and_conflicting_arguments(app):
    app.create_job("j", "k")
    with pytest.raises(jobledger.InvalidArgument, match="timezone-aware"):
        app.enqueue("j", at=datetime(2026, 1, 1))  # noqa: DTZ001 - the point of the test
    with pytest.raises(jobledger.InvalidArgument):
        app.enqueue("j", at=1, delay=1)
    with pytest.raises(jobledger.InvalidArgument):
        app.enqueue("j", delay=timedelta(seconds=-1))


def test_occurrence_identity_is_deterministic(app):
    app.create_job("j", "k")
    first = app.enqueue("j", at=1_000)
    again = app.enqueue("j", at=1_000)
    assert again.id == first.id
    assert again.deduplicated is True
    other = app.enqueue("j", at=1_000, trigger_key="order-17")
    assert other.id != first.id
    assert app.enqueue("j", at=1_000, trigger_key="order-17").deduplicated is True


def test_delayed_work_runs_only_when_due(app, clock: FakeClock):
    app.handler("k")(lambda ctx: "ran")
    app.create_job("j", "k")
    app.enqueue("j", delay=timedelta(seconds=30))
    assert run_until_idle(app) == []
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
        app = jobledger.App(store, clock=clock, authorize=jobledger.allow_all)
        app.create_job("j", "k")
        app.close()
        assert store.get_job("j") is not None
        assert app.store is store


def test_run_worker_returns_after_stop(app, clock):
    done = []

    @app.handler("k")
    def handler(ctx: jobledger.JobContext) -> None:
        done.append(ctx.occurrence_id)

    app.create_job("j", "k")
    app.enqueue("j")
    worker = app.worker(poll_interval=5)
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
