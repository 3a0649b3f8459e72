"""The stored trigger JSON: shape, round trips, validation errors, policy, jitter, keys."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobledger.contract import canonical_json
from jobledger.errors import InvalidArgument
from jobledger.schedules import (
    Cron,
    Every,
    MisfirePolicy,
    Once,
    jitter_offset_ms,
    parse_schedule,
    parse_trigger,
    schedule_json,
    trigger_key,
    validate_trigger_json,
)

from .strategies import cron_expressions

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DEFAULT_POLICY_KEYS = {
    "misfire": "coalesce",
    "misfireGraceMs": 60_000,
    "catchUpLimit": 100,
    "jitterMs": 0,
}


def test_cron_json_shape():
    trigger = Cron("30 2 * * *", timezone="America/New_York", ambiguous="both")
    assert trigger.to_json() == {
        "jobledger": "schedule",
        "version": 1,
        "type": "cron",
        "expression": "30 2 * * *",
        "timezone": "America/New_York",
        "nonexistent": "shift",
        "ambiguous": "both",
        **DEFAULT_POLICY_KEYS,
    }


def test_every_and_once_json_shapes():
    every = Every(timedelta(minutes=5), anchor=datetime(2026, 1, 1, tzinfo=UTC))
    assert every.to_json() == {
        "jobledger": "schedule",
        "version": 1,
        "type": "every",
        "intervalMs": 300_000,
        "anchorMs": 1_767_225_600_000,
        **DEFAULT_POLICY_KEYS,
    }
    once = Once(datetime(2026, 12, 1, 9, tzinfo=UTC))
    assert once.to_json() == {
        "jobledger": "schedule",
        "version": 1,
        "type": "once",
        "atMs": 1_796_115_600_000,
        **DEFAULT_POLICY_KEYS,
    }


def test_schedule_json_carries_the_policy_and_parse_schedule_returns_it():
    policy = MisfirePolicy(
        misfire="catch_up",
        misfire_grace=timedelta(seconds=30),
        catch_up_limit=7,
        jitter=timedelta(seconds=5),
    )
    stored = schedule_json(Every(timedelta(hours=1)), policy)
    assert stored["misfire"] == "catch_up"
    assert stored["misfireGraceMs"] == 30_000
    assert stored["catchUpLimit"] == 7
    assert stored["jitterMs"] == 5000
    assert parse_schedule(stored) == (Every(timedelta(hours=1)), policy)
    assert schedule_json(Every(timedelta(hours=1))) == Every(timedelta(hours=1)).to_json()
    # What the store keeps is canonical JSON text; it reads back to the same schedule.
    assert parse_schedule(json.loads(canonical_json(stored))) == (Every(timedelta(hours=1)), policy)


@pytest.mark.parametrize(
    "trigger",
    [
        Cron("0 0 * * *"),
        Cron("*/10 30 2 * * mon-fri", timezone="Australia/Lord_Howe", nonexistent="skip"),
        Cron("0 0 29 2 *", timezone="America/Santiago", ambiguous="first"),
        Every(timedelta(seconds=1)),
        Every(timedelta(days=7), anchor=datetime(2026, 1, 5, 9, tzinfo=UTC)),
        Once(datetime(2030, 1, 1, 0, 0, 0, 123_000, tzinfo=UTC)),
    ],
    ids=repr,
)
def test_round_trip(trigger):
    assert parse_trigger(trigger.to_json()) == trigger
    assert parse_trigger(json.loads(json.dumps(trigger.to_json()))) == trigger
    assert all(type(v) in (str, int) for v in trigger.to_json().values())


@settings(derandomize=True, deadline=None, max_examples=100)
@given(
    expression=cron_expressions(),
    zone=st.sampled_from(["UTC", "America/New_York", "Europe/Berlin", "Asia/Kolkata"]),
    nonexistent=st.sampled_from(["shift", "skip"]),
    ambiguous=st.sampled_from(["cron", "both", "first"]),
    interval=st.integers(1000, 10**11),
    anchor=st.integers(0, 10**13),
    misfire=st.sampled_from(["coalesce", "catch_up", "skip"]),
    grace=st.integers(0, 10**9),
    limit=st.integers(1, 10_000),
    jitter=st.integers(0, 86_400_000),
)
def test_round_trips_for_random_schedules(
    expression, zone, nonexistent, ambiguous, interval, anchor, misfire, grace, limit, jitter
):
    policy = MisfirePolicy(
        misfire=misfire,
        misfire_grace=timedelta(milliseconds=grace),
        catch_up_limit=limit,
        jitter=timedelta(milliseconds=jitter),
    )
    for trigger in (
        Cron(expression, timezone=zone, nonexistent=nonexistent, ambiguous=ambiguous),
        Every(timedelta(milliseconds=interval), anchor=EPOCH + timedelta(milliseconds=anchor)),
        Once(EPOCH + timedelta(milliseconds=anchor)),
    ):
        stored = schedule_json(trigger, policy)
        validate_trigger_json(stored)
        assert parse_schedule(stored) == (trigger, policy)
        assert parse_trigger(trigger.to_json()) == trigger


@pytest.mark.parametrize(
    "value",
    [None, {}, [], "cron", 5, {"source": "agenda"}, {"jobledger": "other", "version": 99},
     {"jobledger": None}, {"expression": "0 0 * * *"}, [{"jobledger": "schedule"}]],
)  # fmt: skip
def test_foreign_json_is_accepted_and_not_parsed(value):
    validate_trigger_json(value)
    assert parse_trigger(value) is None
    assert parse_schedule(value) is None


def good(kind: str = "cron", **changes):
    base = {
        "cron": Cron("0 0 * * *"),
        "every": Every(timedelta(minutes=1)),
        "once": Once(datetime(2026, 1, 1, tzinfo=UTC)),
    }[kind].to_json()
    base.update(changes)
    return base


def without(kind: str, key: str):
    value = good(kind)
    del value[key]
    return value


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (good(version=2), "trigger.version"),
        (good(version="1"), "trigger.version"),
        (good(version=True), "trigger.version"),
        (without("cron", "version"), "trigger.version"),
        (good(type="weekly"), "trigger.type"),
        (without("cron", "type"), "trigger.type"),
        (good(extra=1), "trigger.extra"),
        (good(intervalMs=60_000), "trigger.intervalMs"),  # an every key on a cron schedule
        (without("cron", "expression"), "trigger.expression"),
        (without("cron", "timezone"), "trigger.timezone"),
        (without("cron", "misfire"), "trigger.misfire"),
        (without("every", "anchorMs"), "trigger.anchorMs"),
        (without("once", "atMs"), "trigger.atMs"),
        (without("once", "jitterMs"), "trigger.jitterMs"),
        (good(expression="0 0 30 2 *"), "trigger.expression"),
        (good(expression="61 * * * *"), "trigger.expression"),
        (good(expression=5), "trigger.expression"),
        (good(timezone="Mars/Olympus"), "trigger.timezone"),
        (good(timezone=None), "trigger.timezone"),
        (good(nonexistent="later"), "trigger.nonexistent"),
        (good(ambiguous="twice"), "trigger.ambiguous"),
        (good("every", intervalMs=999), "trigger.intervalMs"),
        (good("every", intervalMs=1.5), "trigger.intervalMs"),
        (good("every", intervalMs="60000"), "trigger.intervalMs"),
        (good("every", anchorMs=-1), "trigger.anchorMs"),
        (good("every", anchorMs=True), "trigger.anchorMs"),
        (good("once", atMs=-5), "trigger.atMs"),
        (good("once", atMs=2**53), "trigger.atMs"),
        (good(misfire="later"), "trigger.misfire"),
        (good(misfireGraceMs=-1), "trigger.misfireGraceMs"),
        (good(misfireGraceMs=None), "trigger.misfireGraceMs"),
        (good(catchUpLimit=0), "trigger.catchUpLimit"),
        (good(catchUpLimit=10_001), "trigger.catchUpLimit"),
        (good(jitterMs=-1), "trigger.jitterMs"),
        (good(jitterMs=86_400_001), "trigger.jitterMs"),
    ],
)
def test_malformed_schedules_name_the_field(value, field):
    with pytest.raises(InvalidArgument) as caught:
        validate_trigger_json(value)
    error = caught.value
    assert error.code == "SCHEDULER_INVALID_ARGUMENT"
    assert error.details is not None and error.details["field"] == field
    assert field in error.message
    with pytest.raises(InvalidArgument):
        parse_schedule(value)


def test_expression_errors_also_name_the_cron_field():
    with pytest.raises(InvalidArgument) as caught:
        validate_trigger_json(good(expression="0 25 * * *"))
    assert caught.value.details == {"field": "trigger.expression", "cronField": "hour"}


# The store validates triggers with these modules, so they must stay pure; the planner, declare
# and explain sit on top of the store and may import it.
STORE_SIDE = {"planner.py", "declare.py", "explain.py"}


def test_validation_module_imports_only_errors_contract_and_the_standard_library():
    import ast
    import pathlib

    import jobledger.schedules as package

    root = pathlib.Path(package.__file__).parent
    allowed_internal = {"errors", "contract"}
    pure = [path for path in root.glob("*.py") if path.name not in STORE_SIDE]
    assert len(pure) >= 8
    for path in pure:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 2:
                assert node.module in allowed_internal, f"{path.name} imports ..{node.module}"
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                assert not node.module.startswith("jobledger"), path.name


# -- MisfirePolicy ----------------------------------------------------------------------------


def test_misfire_policy_defaults():
    policy = MisfirePolicy()
    assert policy.misfire == "coalesce"
    assert policy.misfire_grace == timedelta(minutes=1) and policy.misfire_grace_ms == 60_000
    assert policy.catch_up_limit == 100
    assert policy.jitter == timedelta(0) and policy.jitter_ms == 0
    assert policy.to_json() == DEFAULT_POLICY_KEYS
    assert MisfirePolicy() == MisfirePolicy() and hash(MisfirePolicy()) == hash(MisfirePolicy())


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"misfire": "later"}, "misfire"),
        ({"misfire_grace": timedelta(seconds=-1)}, "misfire_grace"),
        ({"misfire_grace": 60_000}, "misfire_grace"),
        ({"misfire_grace": timedelta(microseconds=1)}, "misfire_grace"),
        ({"catch_up_limit": 0}, "catch_up_limit"),
        ({"catch_up_limit": 10_001}, "catch_up_limit"),
        ({"catch_up_limit": True}, "catch_up_limit"),
        ({"jitter": timedelta(hours=24, milliseconds=1)}, "jitter"),
        ({"jitter": timedelta(seconds=-1)}, "jitter"),
    ],
)
def test_misfire_policy_refuses_bad_values(kwargs, field):
    with pytest.raises(InvalidArgument) as caught:
        MisfirePolicy(**kwargs)
    assert caught.value.details == {"field": field}
    assert field in caught.value.message


def test_schedule_json_refuses_non_triggers():
    with pytest.raises(InvalidArgument):
        schedule_json({"type": "cron"})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        schedule_json(Cron("0 0 * * *"), {"misfire": "skip"})  # type: ignore[arg-type]


# -- jitter and trigger keys ------------------------------------------------------------------


def test_jitter_offset_is_the_spec_formula():
    for job_id, slot, jitter in [("job-1", 1_767_225_600_000, 30_000), ("x", 0, 1), ("é", 5, 7)]:
        digest = hashlib.sha256(f"{job_id}\0{slot}".encode()).digest()
        assert jitter_offset_ms(job_id, slot, jitter) == int.from_bytes(digest[:8], "big") % jitter
    assert jitter_offset_ms("job-1", 1_767_225_600_000, 0) == 0
    with pytest.raises(InvalidArgument):
        jitter_offset_ms("job-1", 0, -1)


@settings(derandomize=True, max_examples=200)
@given(st.text(max_size=20), st.integers(0, 2**53 - 1), st.integers(1, 86_400_000))
def test_jitter_offset_is_deterministic_and_in_range(job_id, slot, jitter):
    offset = jitter_offset_ms(job_id, slot, jitter)
    assert 0 <= offset < jitter
    assert offset == jitter_offset_ms(job_id, slot, jitter)


def test_trigger_keys():
    assert trigger_key(Cron("0 0 * * *"), 1_767_225_600_000) == "cron:1767225600000"
    assert trigger_key(Every(timedelta(minutes=5)), 300_000) == "every:300000"
    assert trigger_key(Once(datetime(2026, 1, 1, tzinfo=UTC)), 5) == "once:5"
    with pytest.raises(InvalidArgument):
        trigger_key(Cron("0 0 * * *"), -1)
    with pytest.raises(InvalidArgument):
        trigger_key("cron", 5)  # type: ignore[arg-type]
