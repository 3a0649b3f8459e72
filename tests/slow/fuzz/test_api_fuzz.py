"""The App and Runtime entry points with generated arguments: 0 uncoded exceptions, and a failed
call changes nothing (``App.enqueue``/``enqueue_many``/``ensure_job``/``schedule``/``cancel``,
``App.handler``, ``App.worker``/``WorkerOptions``, ``Runtime`` construction and its run and
claim calls, ``FixedBackoff``/``ExponentialBackoff``)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import jobledger
from jobledger.engine.heartbeat import ManualHeartbeat

from .support import anything, budget, call_coded, integers, json_values, snapshot, text

AUTHORITY = {"principal": {"type": "user", "id": "fuzz"}}


def durations() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.timedeltas(min_value=timedelta(days=-2), max_value=timedelta(days=400)),
        st.sampled_from([timedelta(0), timedelta(milliseconds=1), timedelta(seconds=5)]),
        anything(),
    )


def instants() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.datetimes(
            min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
        ),
        st.datetimes(),  # naive
        anything(),
    )


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, jobledger.App]]:
    target = str(tmp_path_factory.mktemp("fuzz-app") / "db" / "app.sqlite3")
    with jobledger.App(
        target, name="fuzz", authorize=jobledger.allow_all, store_options={"synchronous": "NORMAL"}
    ) as made:

        @made.handler("work")
        def work(ctx: jobledger.JobContext) -> Any:
            return ctx.payload

        made.ensure_job("job", "work")
        made.enqueue("job", payload={"n": 1})
        yield target, made


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(strategy, anything())


def _calls(app: jobledger.App) -> dict[str, st.SearchStrategy[Any]]:
    ids = st.sampled_from(["job", "sched", "missing"])
    return {
        "enqueue": st.fixed_dictionaries(
            {"job_id": _maybe(ids)},
            optional={
                "payload": json_values,
                "key": _maybe(text()),
                "at": instants(),
                "at_ms": _maybe(integers()),
                "delay": durations(),
                "delay_ms": _maybe(integers()),
            },
        ),
        "enqueue_many": st.fixed_dictionaries(
            {"job_id": _maybe(ids), "payloads": _maybe(st.lists(json_values, max_size=4))},
            optional={
                "keys": _maybe(st.lists(text(), max_size=4)),
                "delay": durations(),
                "at": instants(),
            },
        ),
        "ensure_job": st.fixed_dictionaries(
            {"id": _maybe(ids), "kind": _maybe(st.just("work"))},
            optional={
                "payload": json_values,
                "authority": _maybe(st.just(AUTHORITY)),
                "trigger": _maybe(st.just({})),
                "max_attempts": _maybe(st.integers(min_value=0, max_value=40)),
                "enabled": anything(),
            },
        ),
        "schedule": st.fixed_dictionaries(
            {"job_id": _maybe(st.just("sched")), "kind": _maybe(st.just("work"))},
            optional={
                "cron": _maybe(st.sampled_from(["*/5 * * * *", "0 3 * * 1-5", "61 * * * *"])),
                "every": durations(),
                "at": instants(),
                "anchor": instants(),
                "timezone": _maybe(st.sampled_from(["UTC", "Europe/Paris", "Mars/Olympus"])),
                "misfire": _maybe(st.sampled_from(["coalesce", "skip", "catch_up"])),
                "misfire_grace": durations(),
                "catch_up_limit": _maybe(integers()),
                "jitter": durations(),
                "nonexistent": _maybe(st.sampled_from(["shift", "skip"])),
                "ambiguous": _maybe(st.sampled_from(["cron", "both", "first"])),
                "max_attempts": _maybe(integers()),
                "enabled": anything(),
            },
        ),
        "cancel": st.fixed_dictionaries(
            {"occurrence_id": _maybe(text()), "reason": _maybe(text())},
            optional={"actor": _maybe(text())},
        ),
        "handler": st.fixed_dictionaries(
            {"kind": _maybe(text())}, optional={"retry": anything(), "timeout": durations()}
        ),
        "worker": st.dictionaries(
            st.sampled_from(
                [
                    "concurrency",
                    "prefetch",
                    "kinds",
                    "workspace_id",
                    "lease",
                    "renew_interval",
                    "poll_interval",
                    "poll_jitter",
                    "grace_period",
                    "planner",
                    "plan_interval",
                    "retention",
                    "heartbeat_interval",
                    "reap_interval",
                    "owner_id",
                    "metrics_port",
                    "bogus_option",
                ]
            ),
            st.one_of(integers(), durations(), anything(), st.lists(text(), max_size=2)),
            max_size=4,
        ),
        "plan": st.just({}),
        "explain": st.fixed_dictionaries({"job_id": _maybe(ids)}, optional={"count": anything()}),
    }


MUTATING = {"enqueue", "enqueue_many", "ensure_job", "schedule", "cancel"}


@budget(short=400, long=8_000)
@given(data=st.data())
def test_app_entry_points(app, data):
    target, made = app
    calls = _calls(made)
    name = data.draw(st.sampled_from(sorted(calls)), label="call")
    arguments = data.draw(calls[name], label="arguments")
    before = snapshot(target) if name in MUTATING else None

    def call() -> Any:
        if name == "handler":
            return made.handler(**arguments)
        if name == "worker":
            return made.worker(**arguments)
        return getattr(made, name)(**arguments)

    ok, _ = call_coded(f"app.{name}", call)
    if not ok and before is not None:
        assert snapshot(target) == before, f"app.{name}({arguments}) failed but changed the store"


@budget(short=300, long=15_000)
@given(data=st.data())
def test_runtime_entry_points(app, data):
    target, made = app
    settings = data.draw(
        st.fixed_dictionaries(
            {},
            optional={
                "authorize": st.sampled_from([jobledger.allow_all] * 4 + [None, "yes", 1]),
                "owner_id": _maybe(text()),
                "lease_ms": st.one_of(st.just(60_000), st.integers(min_value=-5, max_value=10**8)),
                "renew_interval_ms": st.one_of(st.none(), integers()),
                "retry_policy": anything(),
                "handlers": st.one_of(st.none(), anything(), st.just({"work": lambda ctx: None})),
                "clock": anything(),
            },
        ),
        label="runtime",
    )
    settings.setdefault("authorize", jobledger.allow_all)
    settings.setdefault("heartbeat", ManualHeartbeat())
    ok, runtime = call_coded("Runtime()", lambda: jobledger.Runtime(made.store, **settings))
    if not ok:
        return
    try:
        operation = data.draw(st.sampled_from(["run_next", "claim_batch", "register_handler"]))
        if operation == "run_next":
            arguments = data.draw(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "kinds": _maybe(st.lists(st.sampled_from(["work", "x"]), max_size=2)),
                        "workspace_id": _maybe(text()),
                        "job_kind": _maybe(text()),
                    },
                )
            )
        elif operation == "claim_batch":
            arguments = data.draw(
                st.fixed_dictionaries(
                    {"limit": _maybe(st.integers(min_value=-1, max_value=2000))},
                    optional={"kinds": _maybe(st.lists(text(), max_size=2))},
                )
            )
        else:
            arguments = data.draw(
                st.fixed_dictionaries(
                    {"kind": _maybe(text()), "handler": anything()},
                    optional={"retry": anything(), "timeout": anything()},
                )
            )
        before = snapshot(target)
        ok, outcome = call_coded(
            f"runtime.{operation}", lambda: getattr(runtime, operation)(**arguments)
        )
        if ok and operation == "claim_batch":
            for claimed in outcome:  # give them back so later examples find work
                made.store.release_lease(
                    occurrence_id=claimed.id,
                    owner_id=runtime.owner_id,
                    fence=claimed.fence,
                    reason="fuzz",
                )
        if not ok and operation != "run_next":
            assert snapshot(target) == before
    finally:
        runtime.close()


PARAMETERS = {"fixed": ["delay", "delay_ms"], "exponential": ["base", "factor", "cap", "jitter"]}


@budget(short=300, long=10_000)
@given(data=st.data(), attempt=_maybe(st.integers(min_value=-2, max_value=10**6)))
def test_backoff_policies(data, attempt):
    import random

    kind = data.draw(st.sampled_from(sorted(PARAMETERS)))
    arguments = data.draw(
        st.dictionaries(
            st.sampled_from(PARAMETERS[kind]),
            st.one_of(durations(), integers(), st.floats(allow_nan=True)),
            max_size=3,
        )
    )
    cls = jobledger.FixedBackoff if kind == "fixed" else jobledger.ExponentialBackoff
    ok, policy = call_coded(f"{cls.__name__}()", lambda: cls(**arguments))
    if ok:
        call_coded(f"{cls.__name__}.delay_ms", lambda: policy.delay_ms(attempt, random.Random(1)))
