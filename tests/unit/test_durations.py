"""Durations at the public edge (issue 8): ``timedelta`` everywhere; a bare number only where the
name carries the unit (``delay_ms``, ``at_ms``…). A bare number elsewhere is refused with
``SCHEDULER_INVALID_ARGUMENT`` and a message naming the field and what to pass instead.

No database is opened here: every check happens where the value enters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import jobledger
from jobledger.engine.options import MAX_CONCURRENCY, WorkerOptions

WORKER_DURATIONS = {
    "lease": timedelta(seconds=30),
    "renew_interval": timedelta(seconds=5),
    "poll_interval": timedelta(seconds=2),
    "grace_period": timedelta(seconds=7),
    "stuck_grace": timedelta(minutes=2),
    "plan_interval": timedelta(seconds=90),
    "retention": timedelta(days=7),
    "prune_interval": timedelta(minutes=30),
    "heartbeat_interval": timedelta(seconds=15),
    "reap_interval": timedelta(seconds=5),
}


def test_every_worker_duration_field_is_listed_here():
    durations = {f.name for f in fields(WorkerOptions) if "timedelta" in str(f.type)}
    assert durations == set(WORKER_DURATIONS)


@pytest.mark.parametrize("field", sorted(WORKER_DURATIONS))
@pytest.mark.parametrize("bare", [5, 5.0, 60_000])
def test_worker_durations_refuse_bare_numbers(field: str, bare: float):
    with pytest.raises(jobledger.InvalidArgument) as raised:
        WorkerOptions(**{field: bare})
    assert raised.value.code == "SCHEDULER_INVALID_ARGUMENT"
    assert raised.value.details == {"field": field}
    assert "timedelta" in raised.value.message
    assert "not a bare number" in raised.value.message


@pytest.mark.parametrize("field", sorted(WORKER_DURATIONS))
def test_worker_durations_accept_timedeltas(field: str):
    options = WorkerOptions(**{field: WORKER_DURATIONS[field]})
    assert getattr(options, field) == WORKER_DURATIONS[field]


def test_worker_duration_bounds():
    assert WorkerOptions(lease=timedelta(seconds=30)).lease_ms == 30_000
    assert WorkerOptions(lease=timedelta(seconds=30)).renew_interval_ms == 10_000
    for bad in (
        {"lease": timedelta(milliseconds=999)},
        {"lease": timedelta(hours=24, milliseconds=1)},
        {"lease": timedelta(seconds=10), "renew_interval": timedelta(seconds=10)},
        {"poll_interval": timedelta(0)},
        {"grace_period": timedelta(seconds=-1)},
        {"retention": timedelta(seconds=59)},
        {"poll_interval": timedelta(microseconds=1500)},  # not whole milliseconds
    ):
        with pytest.raises(jobledger.InvalidArgument):
            WorkerOptions(**bad)


def test_concurrency_beyond_a_claim_batch_is_refused_with_a_clear_code():
    assert MAX_CONCURRENCY == 1000
    assert WorkerOptions(concurrency=1000).concurrency == 1000
    with pytest.raises(jobledger.InvalidArgument) as raised:
        WorkerOptions(concurrency=1001)
    assert raised.value.code == "SCHEDULER_INVALID_ARGUMENT"
    assert raised.value.details == {"field": "concurrency", "max": 1000}
    assert "1000" in raised.value.message


def test_adaptive_prefetch_ceiling_is_four_per_slot_at_least_256():
    assert WorkerOptions().adaptive_prefetch
    assert WorkerOptions().effective_prefetch == 256
    assert WorkerOptions(concurrency=64).effective_prefetch == 256
    assert WorkerOptions(concurrency=100).effective_prefetch == 400
    assert WorkerOptions(prefetch=0).effective_prefetch == 0
    assert not WorkerOptions(prefetch=0).adaptive_prefetch


def test_unknown_worker_options_are_refused():
    with pytest.raises(jobledger.InvalidArgument) as raised:
        WorkerOptions().with_changes(poll_interval_ms=5)
    assert raised.value.details == {"fields": ["poll_interval_ms"]}


# -- everything else that takes a duration ----------------------------------------------------

REFUSED: list[tuple[str, Callable[[], Any]]] = [
    ("Retry(delay=60)", lambda: jobledger.Retry(delay=60)),
    ("Retry(at=epoch ms)", lambda: jobledger.Retry(at=1_767_225_600_000)),
    ("FixedBackoff(30)", lambda: jobledger.FixedBackoff(30)),
    ("ExponentialBackoff(base=1000)", lambda: jobledger.ExponentialBackoff(base=1000)),
    ("ExponentialBackoff(cap=600)", lambda: jobledger.ExponentialBackoff(cap=600)),
    (
        "handler timeout",
        lambda: jobledger.App("unused.sqlite3").handler("k", timeout=30),
    ),
    ("App.runtime(lease=60)", lambda: jobledger.App("unused.sqlite3").runtime(lease=60)),
    (
        "App.runtime(renew_interval=5)",
        lambda: jobledger.App("unused.sqlite3").runtime(renew_interval=5),
    ),
]


@pytest.mark.parametrize(("name", "call"), REFUSED, ids=[name for name, _ in REFUSED])
def test_bare_numbers_are_refused_where_the_name_has_no_unit(name: str, call: Callable[[], Any]):
    with pytest.raises(jobledger.InvalidArgument) as raised:
        call()
    assert raised.value.code == "SCHEDULER_INVALID_ARGUMENT"
    assert "timedelta" in raised.value.message or "datetime" in raised.value.message


def test_the_ms_twins_take_integers():
    assert jobledger.Retry(delay_ms=60_000).delay_ms == 60_000
    assert jobledger.Retry(at_ms=1_767_225_600_000).retry_at == 1_767_225_600_000
    assert jobledger.FixedBackoff(delay_ms=30_000) == jobledger.FixedBackoff(timedelta(seconds=30))
    assert jobledger.Retry(delay=timedelta(minutes=1)).delay_ms == 60_000
    at = datetime(2026, 1, 1, tzinfo=UTC)
    assert jobledger.Retry(at=at).retry_at == 1_767_225_600_000
    for bad in (lambda: jobledger.Retry(delay_ms=1.5), lambda: jobledger.Retry(delay_ms=-1)):
        with pytest.raises(jobledger.InvalidArgument):
            bad()
