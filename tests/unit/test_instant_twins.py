"""Every epoch-ms field of a value the API hands out has a datetime twin (``models/times.py``):
named by the rule (``_at``/``_for`` → ``_time``, else ``+ _time``), aware UTC, exact to the
millisecond, ``None`` kept."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

import jobledger
from jobledger.models import plans, records
from jobledger.models.times import UtcTime, UtcTimeOrNone, utc_time
from jobledger.planning.planner import PlanReport
from jobledger.testing import FakeClock

# Instant fields whose names carry no _at/_for ending.
BARE_INSTANTS = {
    "last",
    "minute",
    "before",
    "now",
    "planned_through",
    "last_slot",
    "earliest_expiry",
    "latest_expiry",
}
# What callers build and hand to a store (the twins are for reading results).
INPUTS = {
    records.EnqueueRequest,
    records.Renewal,
    records.Settlement,
    plans.SchedulePlan,
}
INSTANT = 1_772_955_000_250  # 2026-03-08T07:30:00.250Z
MOMENT = datetime(2026, 3, 8, 7, 30, 0, 250_000, tzinfo=UTC)


def _value_types() -> list[type]:
    found: list[type] = [PlanReport]
    for module in (records, plans):
        for name in module.__all__:
            value = getattr(module, name)
            if dataclasses.is_dataclass(value) and isinstance(value, type) and value not in INPUTS:
                found.append(value)
    return found


def _instant_fields(cls: type) -> list[tuple[str, bool]]:
    """(name, may be None) of every epoch-ms field."""
    fields = []
    for item in dataclasses.fields(cls):
        kind = str(item.type)
        if kind not in ("int", "int | None"):
            continue
        if item.name.endswith(("_at", "_for")) or item.name in BARE_INSTANTS:
            fields.append((item.name, kind == "int | None"))
    return fields


def twin_name(field: str) -> str:
    for ending in ("_at", "_for"):
        if field.endswith(ending):
            return field.removesuffix(ending) + "_time"
    return field + "_time"


def test_the_rule_finds_the_instants_we_know():
    assert _instant_fields(records.Occurrence) == [
        ("scheduled_for", False),
        ("available_at", False),
        ("lease_expires_at", True),
        ("created_at", False),
        ("updated_at", False),
        ("settled_at", True),
        ("started_at", True),
    ]
    assert [twin_name(name) for name, _ in _instant_fields(plans.SkippedSlots)] == [
        "scheduled_time",
        "last_time",
        "recorded_time",
    ]
    assert len(_value_types()) >= 15


@pytest.mark.parametrize("cls", _value_types(), ids=lambda cls: cls.__name__)
def test_every_instant_field_has_its_datetime_twin(cls):
    for name, optional in _instant_fields(cls):
        twin = twin_name(name)
        descriptor = cls.__dict__.get(twin)
        expected = UtcTimeOrNone if optional else UtcTime
        assert isinstance(descriptor, expected), f"{cls.__name__}.{twin} (for {name}) is missing"
        assert descriptor.field == name
        # Read it on an instance holding only that slot (the twin reads nothing else).
        instance = object.__new__(cls)
        object.__setattr__(instance, name, INSTANT)
        assert getattr(instance, twin) == MOMENT
        assert getattr(instance, twin).tzinfo is UTC
        if optional:
            object.__setattr__(instance, name, None)
            assert getattr(instance, twin) is None


def test_twins_on_values_from_a_store(tmp_path):
    clock = FakeClock(INSTANT)
    with jobledger.open_store(tmp_path / "jobs.sqlite3", clock=clock) as store:
        job = store.create_job(
            id="j", kind="k", authority={"principal": {"type": "user", "id": "a"}}
        )
        occurrence = store.enqueue_occurrence(
            job_id="j", scheduled_for=INSTANT - 250, trigger_key="t", available_at=INSTANT + 750
        )
        [event] = store.history(occurrence_id=occurrence.id)
    assert job.created_time == MOMENT == job.updated_time
    assert occurrence.scheduled_time == datetime(2026, 3, 8, 7, 30, tzinfo=UTC)
    assert occurrence.available_time == MOMENT + timedelta(seconds=1) - timedelta(milliseconds=250)
    assert (occurrence.lease_expires_time, occurrence.settled_time) == (None, None)
    assert event.occurred_time == MOMENT


def test_an_instant_past_year_9999_says_so():
    with pytest.raises(OverflowError, match="past the year 9999"):
        utc_time(2**53 - 1)
