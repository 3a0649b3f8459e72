"""WorkerOptions are defined once and reachable alike from Worker, App.worker and App.run_worker
(issue 8: each layer used to expose a different subset)."""

from __future__ import annotations

from dataclasses import fields
from datetime import timedelta
from typing import Any

import pytest

import jobledger
from jobledger.engine.heartbeat import ManualHeartbeat
from jobledger.engine.options import WorkerOptions

# A non-default value for every field.
EVERY_FIELD: dict[str, Any] = {
    "concurrency": 3,
    "prefetch": 5,
    "kinds": frozenset({"echo", "other"}),
    "queues": frozenset({"emails", "reports"}),
    "workspace_id": "w1",
    "lease": timedelta(seconds=30),
    "renew_interval": timedelta(seconds=5),
    "poll_interval": timedelta(seconds=2),
    "poll_jitter": 0.3,
    "grace_period": timedelta(seconds=7),
    "stuck_grace": timedelta(minutes=2),
    "planner": False,
    "plan_interval": timedelta(seconds=90),
    "retention": timedelta(days=7),
    "prune_interval": timedelta(minutes=30),
    "heartbeat_interval": timedelta(seconds=15),
    "reap_interval": timedelta(seconds=5),
    "owner_id": "worker-a",
    "metrics_port": 9464,  # never served here: no worker in this file runs
    "metrics_host": "localhost",
}
EXPECTED = WorkerOptions(**EVERY_FIELD)


def test_every_field_is_covered():
    assert set(EVERY_FIELD) == {f.name for f in fields(WorkerOptions)}
    defaults = WorkerOptions()
    assert all(getattr(EXPECTED, name) != getattr(defaults, name) for name in EVERY_FIELD)


@pytest.fixture
def app(store):
    with jobledger.App(store, authorize=jobledger.allow_all) as app:
        app.handler("echo")(lambda ctx: None)
        yield app


def _check_runtime(runtime: jobledger.Runtime) -> None:
    assert (runtime.lease_ms, runtime.renew_interval_ms, runtime.owner_id) == (
        30_000,
        5_000,
        "worker-a",
    )


def test_worker_takes_every_field_as_keywords_or_options(store, make_runtime):
    runtime = make_runtime(
        {"echo": print}, lease_ms=30_000, renew_interval_ms=5_000, owner_id="worker-a"
    )
    by_keyword = jobledger.Worker(runtime, **EVERY_FIELD)
    by_options = jobledger.Worker(runtime, EXPECTED)
    mixed = jobledger.Worker(
        runtime,
        WorkerOptions(concurrency=9),
        **{k: v for k, v in EVERY_FIELD.items() if k != "concurrency"},
    )
    assert by_keyword.options == by_options.options == EXPECTED
    assert mixed.options == EXPECTED.with_changes(concurrency=9)
    assert (by_keyword.concurrency, by_keyword.prefetch) == (3, 5)
    assert by_keyword.kinds == {"echo", "other"}
    assert by_keyword.poll_interval_ms == 2_000
    assert by_keyword.grace_period_ms == 7_000


def test_app_worker_takes_every_field_and_builds_the_runtime_from_it(app):
    for worker in (app.worker(**EVERY_FIELD), app.worker(EXPECTED)):
        assert worker.options == EXPECTED
        _check_runtime(worker.runtime)
    driver = ManualHeartbeat()
    worker = app.worker(heartbeat=driver, planner=False)
    assert worker.runtime.keeper._driver is driver
    assert worker.kinds == {"echo"}  # default: the app's handler kinds


def test_app_run_worker_takes_every_field(app, monkeypatch):
    seen: list[tuple[jobledger.Worker, bool]] = []

    def fake_run(self: jobledger.Worker, *, install_signal_handlers: bool = True) -> Any:
        seen.append((self, install_signal_handlers))
        return jobledger.WorkerSummary()

    monkeypatch.setattr(jobledger.Worker, "run", fake_run)
    app.run_worker(install_signal_handlers=False, **EVERY_FIELD)
    app.run_worker(EXPECTED)
    [(first, installs_first), (second, installs_second)] = seen
    assert first.options == second.options == EXPECTED
    assert (installs_first, installs_second) == (False, True)
    _check_runtime(first.runtime)
    _check_runtime(second.runtime)


@pytest.mark.parametrize("entry", ["Worker", "App.worker", "App.run_worker"])
def test_every_entry_refuses_what_options_refuse(app, make_runtime, entry):
    calls = {
        "Worker": lambda **kw: jobledger.Worker(make_runtime({"echo": print}), **kw),
        "App.worker": app.worker,
        "App.run_worker": lambda **kw: app.run_worker(install_signal_handlers=False, **kw),
    }
    call = calls[entry]
    with pytest.raises(jobledger.InvalidArgument) as raised:
        call(concurrency=1001)
    assert raised.value.details == {"field": "concurrency", "max": 1000}
    with pytest.raises(jobledger.InvalidArgument):
        call(poll_interval=5)  # a bare number: 5 ms before issue 8
    with pytest.raises(jobledger.InvalidArgument):
        call(poll_interval_ms=5)  # not an option


def test_lease_settings_belong_to_the_runtime(make_runtime):
    runtime = make_runtime({"echo": print}, lease_ms=30_000, owner_id="mine")
    # Equal to the runtime's: fine. Different: refused, not silently ignored.
    jobledger.Worker(runtime, lease=timedelta(seconds=30), owner_id="mine")
    with pytest.raises(jobledger.InvalidArgument) as raised:
        jobledger.Worker(runtime, lease=timedelta(seconds=60))
    assert raised.value.details == {"field": "lease"}
    with pytest.raises(jobledger.InvalidArgument) as raised:
        jobledger.Worker(runtime, renew_interval=timedelta(seconds=1))
    assert raised.value.details == {"field": "renew_interval"}
    with pytest.raises(jobledger.InvalidArgument) as raised:
        jobledger.Worker(runtime, owner_id="someone-else")
    assert raised.value.details == {"field": "owner_id"}
    with pytest.raises(jobledger.InvalidArgument):
        jobledger.Worker(runtime, {"concurrency": 2})  # options must be a WorkerOptions
