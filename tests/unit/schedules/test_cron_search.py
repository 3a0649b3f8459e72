"""The zone-free wall-time search: field skipping, rare slots, bounds."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobledger.errors import SchedulerError
from jobledger.schedules import Cron, cron, cron_search
from jobledger.schedules.cron_fields import parse_cron
from jobledger.schedules.cron_search import (
    MAX_WALL,
    MIN_WALL,
    civil_from_days,
    days_from_civil,
    next_match,
    prev_match,
)

from .oracle import EPOCH_NAIVE, Matcher, wall_seconds
from .strategies import cron_expressions

SETTINGS = settings(derandomize=True, deadline=None, max_examples=150)


def to_wall(naive: datetime) -> int:
    return wall_seconds(naive)


def to_naive(wall: int) -> datetime:
    return EPOCH_NAIVE + timedelta(seconds=wall)


@SETTINGS
@given(st.dates(min_value=date(1, 1, 1), max_value=date(9999, 12, 31)))
def test_civil_conversions_agree_with_datetime(day):
    days = (day - date(1970, 1, 1)).days
    assert days_from_civil(day.year, day.month, day.day) == days
    assert civil_from_days(days) == (day.year, day.month, day.day)


@SETTINGS
@given(
    cron_expressions(),
    st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2090, 1, 1)),
)
def test_next_and_prev_match_are_the_nearest_matching_minutes(expression, start):
    matcher = Matcher(expression)
    spec = parse_cron(expression)
    start = start.replace(second=0, microsecond=0)
    wall = to_wall(start)
    found = next_match(spec, wall)
    assert found is not None and found >= wall
    assert matcher.matches(to_naive(found))
    # Nothing in between matches (checked minute by minute up to a day ahead).
    for minute in range(wall, min(found, wall + 86_400), 60):
        assert not matcher.matches(to_naive(minute))
    back = prev_match(spec, wall)
    assert back is not None and back <= wall
    assert matcher.matches(to_naive(back))
    for minute in range(max(back + 60, wall - 86_400), wall + 1, 60):
        assert not matcher.matches(to_naive(minute))


@SETTINGS
@given(
    cron_expressions(seconds=True),
    st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2090, 1, 1)),
)
def test_six_field_search_finds_the_nearest_matching_second(expression, start):
    matcher = Matcher(expression)
    spec = parse_cron(expression)
    wall = to_wall(start.replace(microsecond=0))
    found = next_match(spec, wall)
    assert found is not None and matcher.matches(to_naive(found))
    for second in range(wall, min(found, wall + 7200)):
        assert not matcher.matches(to_naive(second))
    back = prev_match(spec, wall)
    assert back is not None and matcher.matches(to_naive(back))
    for second in range(max(back + 1, wall - 7200), wall + 1):
        assert not matcher.matches(to_naive(second))


@pytest.mark.parametrize(
    ("expression", "start", "expected"),
    [
        ("0 0 29 2 *", datetime(2026, 1, 1), datetime(2028, 2, 29)),
        ("0 0 29 2 *", datetime(2097, 3, 1), datetime(2104, 2, 29)),  # 2100 is not a leap year
        ("0 0 31 * *", datetime(2026, 4, 1), datetime(2026, 5, 31)),
        ("0 0 31 * 1", datetime(2026, 4, 1), datetime(2026, 4, 6)),  # OR: the next Monday
        ("0 0 29 2 */7", datetime(2004, 3, 1), datetime(2032, 2, 29)),  # a Sunday leap day
        ("0 0 13 * */7", datetime(2026, 3, 14), datetime(2026, 9, 13)),  # Sunday the 13th
        ("59 23 31 12 *", datetime(2026, 1, 1), datetime(2026, 12, 31, 23, 59)),
    ],
)
def test_rare_slots_are_found_by_skipping_fields(expression, start, expected):
    assert next_match(parse_cron(expression), to_wall(start)) == to_wall(expected)
    assert prev_match(parse_cron(expression), to_wall(expected) + 1) == to_wall(expected)


def test_searches_stop_at_the_calendar_edges():
    spec = parse_cron("0 0 29 2 *")
    assert next_match(spec, MAX_WALL - 86_400 * 300) is None
    assert prev_match(spec, MIN_WALL + 86_400 * 30) is None
    late = datetime(9998, 12, 31, 23, 0, tzinfo=UTC)
    assert list(Cron("0 0 * * *").fire_times(late)) == []
    assert Cron("0 0 * * *").next_after(int(late.timestamp() * 1000)) is None


def test_a_search_that_exceeds_its_bound_raises_a_coded_error(monkeypatch):
    monkeypatch.setattr(cron_search, "MAX_SEARCH_STEPS", 5)
    with pytest.raises(SchedulerError) as caught:
        next_match(parse_cron("0 0 29 2 */7"), to_wall(datetime(2004, 3, 1)))
    assert caught.value.code == "SCHEDULER_SCHEDULE_SEARCH_LIMIT"
    with pytest.raises(SchedulerError):
        prev_match(parse_cron("0 0 29 2 */7"), to_wall(datetime(2031, 3, 1)))


def test_a_slot_search_across_too_many_zone_segments_raises(monkeypatch):
    monkeypatch.setattr(cron, "MAX_SEGMENTS_PER_SEARCH", 3)
    trigger = Cron("0 12 29 2 *", timezone="America/New_York")
    start = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
    with pytest.raises(SchedulerError) as caught:
        trigger.next_after(start)
    assert caught.value.code == "SCHEDULER_SCHEDULE_SEARCH_LIMIT"
    with pytest.raises(SchedulerError):
        trigger.latest_at_or_before(start, 0)
