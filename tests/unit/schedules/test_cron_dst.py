"""Cron across DST transitions: worked examples per policy, and properties (Hypothesis).

Zones: America/New_York (1 h at 02:00), Europe/Berlin (1 h at 01:00 UTC), Australia/Lord_Howe
(30-minute shifts), America/Santiago (midnight does not exist on its spring-forward day, the
repeated hour is 23:00 of the day before) and Asia/Kolkata (no DST, +05:30).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobledger.schedules import Cron

from .oracle import (
    POLICIES,
    ZONES,
    Matcher,
    instants_of_wall,
    iso,
    policy_flags,
    transitions,
    ts,
    wall_of,
)
from .strategies import cron_expressions


def slots(expression, zone, after, count=6, **policy):
    trigger = Cron(expression, timezone=zone, **policy)
    return [iso(s // 1000) for s in trigger.slots_between(ts(after) * 1000, 10**15, count)]


# (expression, zone, after, policy, the first slots) — the tables in docs/schedules.md.
WORKED = [
    # New York spring forward, 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z).
    ("30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z", ("shift", "cron"),
     ["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"]),
    ("30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z", ("skip", "both"),
     ["2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z"]),
    ("0,30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z", ("shift", "cron"),
     ["2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"]),
    ("*/30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z", ("shift", "cron"),
     ["2026-03-09T06:00:00Z", "2026-03-09T06:30:00Z"]),  # not fixed-time: no shift
    # New York fall back, 2026-11-01 02:00 EDT -> 01:00 EST (06:00Z); 01:xx happens twice.
    ("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", ("shift", "cron"),
     ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]),
    ("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", ("skip", "both"),
     ["2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z", "2026-11-02T06:30:00Z"]),
    ("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", ("shift", "first"),
     ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]),
    ("*/30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", ("shift", "cron"),
     ["2026-11-01T05:00:00Z", "2026-11-01T05:30:00Z", "2026-11-01T06:00:00Z",
      "2026-11-01T06:30:00Z", "2026-11-02T06:00:00Z"]),
    ("*/30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", ("shift", "first"),
     ["2026-11-01T05:00:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:00:00Z"]),
    # Lord Howe spring forward, 2026-10-04 02:00 +10:30 -> 02:30 +11 (15:30Z on the 3rd).
    ("15 2 * * *", "Australia/Lord_Howe", "2026-10-03T00:00:00Z", ("shift", "cron"),
     ["2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"]),
    ("15 2 * * *", "Australia/Lord_Howe", "2026-10-03T00:00:00Z", ("skip", "cron"),
     ["2026-10-04T15:15:00Z", "2026-10-05T15:15:00Z"]),
    ("15,45 2 * * *", "Australia/Lord_Howe", "2026-10-03T00:00:00Z", ("shift", "cron"),
     ["2026-10-03T15:30:00Z", "2026-10-03T15:45:00Z", "2026-10-04T15:15:00Z"]),
    # Lord Howe fall back, 2026-04-05 02:00 +11 -> 01:30 +10:30 (15:00Z on the 4th).
    ("45 1 * * *", "Australia/Lord_Howe", "2026-04-04T00:00:00Z", ("skip", "both"),
     ["2026-04-04T14:45:00Z", "2026-04-04T15:15:00Z", "2026-04-05T15:15:00Z"]),
    ("45 1 * * *", "Australia/Lord_Howe", "2026-04-04T00:00:00Z", ("shift", "cron"),
     ["2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"]),
    ("*/20 0 * * *", "Australia/Lord_Howe", "2026-04-05T10:00:00Z", ("shift", "cron"),
     ["2026-04-05T13:30:00Z", "2026-04-05T13:50:00Z", "2026-04-05T14:10:00Z"]),
    # Santiago spring forward, 2026-09-06 00:00 -04 -> 01:00 -03 (04:00Z): no midnight.
    ("0 0 * * *", "America/Santiago", "2026-09-05T12:00:00Z", ("shift", "cron"),
     ["2026-09-06T04:00:00Z", "2026-09-07T03:00:00Z"]),
    ("0 0 * * *", "America/Santiago", "2026-09-05T12:00:00Z", ("skip", "cron"),
     ["2026-09-07T03:00:00Z", "2026-09-08T03:00:00Z"]),
    # Santiago fall back, 2026-04-05 00:00 -03 -> 2026-04-04 23:00 -04 (03:00Z).
    ("30 23 * * *", "America/Santiago", "2026-04-04T12:00:00Z", ("skip", "both"),
     ["2026-04-05T02:30:00Z", "2026-04-05T03:30:00Z", "2026-04-06T03:30:00Z"]),
    ("30 23 * * *", "America/Santiago", "2026-04-04T12:00:00Z", ("shift", "cron"),
     ["2026-04-05T02:30:00Z", "2026-04-06T03:30:00Z"]),
    # Kolkata: no DST, half-hour offset.
    ("30 2 * * *", "Asia/Kolkata", "2026-03-07T12:00:00Z", ("shift", "cron"),
     ["2026-03-07T21:00:00Z", "2026-03-08T21:00:00Z"]),
    # Six fields: the same rule, the seconds field does not make an entry fixed-time.
    ("10 30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z", ("shift", "cron"),
     ["2026-03-08T07:00:00Z", "2026-03-09T06:30:10Z"]),
    ("*/20 30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", ("shift", "cron"),
     ["2026-11-01T05:30:00Z", "2026-11-01T05:30:20Z", "2026-11-01T05:30:40Z",
      "2026-11-02T06:30:00Z"]),
]  # fmt: skip


@pytest.mark.parametrize(("expression", "zone", "after", "policy", "expected"), WORKED)
def test_worked_examples(expression, zone, after, policy, expected):
    nonexistent, ambiguous = policy
    got = slots(
        expression, zone, after, len(expected), nonexistent=nonexistent, ambiguous=ambiguous
    )
    assert got == expected


def test_defaults_are_shift_and_cron():
    trigger = Cron("0 0 * * *")
    assert (trigger.nonexistent, trigger.ambiguous) == ("shift", "cron")


def _near_transition(zone_index: int, pick: int, delta: int) -> tuple[str, int]:
    zone = ZONES[zone_index]
    found = transitions(zone, 2024, 2029)
    center = found[pick % len(found)] if found else ts("2026-06-01T00:00:00Z") + pick * 86_400
    return zone, center + delta


def _gap_has_match(matcher, zone, transition):
    """Whether a wall time skipped just before ``transition`` matches (None: no gap)."""
    before, at = wall_of(transition - 1, zone), wall_of(transition, zone)
    jump = int((at - before).total_seconds())
    if jump <= 1:
        return None
    return any(matcher.matches(before + timedelta(seconds=s)) for s in range(1, jump))


def check_promises(expression, zone, nonexistent, ambiguous, after, window=3 * 86_400):
    """Every promise of SPEC §6 for the slots in the ``window`` seconds after ``after``."""
    trigger = Cron(expression, timezone=zone, nonexistent=nonexistent, ambiguous=ambiguous)
    horizon = after + window
    fired = [
        int(moment.timestamp())
        for moment in _take_until(trigger.fire_times(datetime.fromtimestamp(after, UTC)), horizon)
    ]
    matcher = Matcher(expression)
    shift, first_only = policy_flags(matcher, nonexistent, ambiguous)
    assert all(b > a for a, b in zip([after, *fired], fired, strict=False)), "strictly increasing"
    fired_set = set(fired)
    for slot in fired:
        wall = wall_of(slot, zone)
        if not matcher.matches(wall):
            # Only a shifting fixed-time entry fires off its wall time: at the first instant
            # after a gap whose skipped wall times include a match.
            assert shift, f"{iso(slot)} does not match and the policy does not shift"
            assert _gap_has_match(matcher, zone, slot), f"{iso(slot)} is not after a gap"
            continue
        first, second, _ = instants_of_wall(wall, zone)
        if first == second:
            continue
        if first_only:
            assert slot == first, f"{iso(slot)} repeats a wall time under a first-only policy"
        elif first > after and second <= horizon:
            assert {first, second} <= fired_set, "both instants of a repeated time fire"
    for transition in transitions(zone, 2024, 2029):
        if not after < transition <= horizon:
            continue
        gap_match = _gap_has_match(matcher, zone, transition)
        if gap_match is None:
            continue
        # Skipped wall times never fire as themselves; a shifting entry fires once right after.
        expected = (shift and gap_match) or matcher.matches(wall_of(transition, zone))
        assert (transition in fired_set) == expected, f"gap at {iso(transition)}"


def _take_until(iterator, horizon):
    for moment in iterator:
        if moment.timestamp() > horizon:
            return
        assert moment.tzinfo is UTC
        yield moment


@settings(derandomize=True, deadline=None, max_examples=250)
@given(
    expression=cron_expressions(),
    zone_index=st.integers(0, len(ZONES) - 1),
    pick=st.integers(0, 50),
    delta=st.integers(-36 * 3600, 36 * 3600),
    policy=st.sampled_from(POLICIES),
)
def test_promises_hold_across_transitions(expression, zone_index, pick, delta, policy):
    zone, after = _near_transition(zone_index, pick, delta)
    check_promises(expression, zone, *policy, after)


@settings(derandomize=True, deadline=None, max_examples=80)
@given(
    expression=cron_expressions(seconds=True),
    zone_index=st.integers(0, len(ZONES) - 1),
    pick=st.integers(0, 50),
    delta=st.integers(-2 * 3600, 2 * 3600),
    policy=st.sampled_from(POLICIES),
)
def test_promises_hold_for_six_fields(expression, zone_index, pick, delta, policy):
    zone, after = _near_transition(zone_index, pick, delta)
    check_promises(expression, zone, *policy, after, window=3 * 3600)
