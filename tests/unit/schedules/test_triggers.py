"""Cron, Every and Once as values and through the planner's epoch-ms methods."""

from __future__ import annotations

import dataclasses
import itertools
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobledger.errors import InvalidArgument
from jobledger.schedules import Cron, Every, Once

from .oracle import POLICIES, ZONES
from .strategies import cron_expressions

SETTINGS = settings(derandomize=True, deadline=None, max_examples=120)
T2026 = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
MINUTE = 60_000


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


# -- Every ------------------------------------------------------------------------------------


def test_every_slots_align_on_the_epoch_by_default():
    every = Every(timedelta(minutes=5))
    assert every.anchor == datetime(1970, 1, 1, tzinfo=UTC)
    assert every.next_after(T2026) == T2026 + 5 * MINUTE
    assert every.next_after(T2026 - 1) == T2026
    assert every.next_after(T2026 + 1) == T2026 + 5 * MINUTE
    assert every.slots_between(T2026, T2026 + 15 * MINUTE, 10) == [
        T2026 + 5 * MINUTE,
        T2026 + 10 * MINUTE,
        T2026 + 15 * MINUTE,
    ]
    assert every.slots_between(T2026, T2026 + 15 * MINUTE, 2) == [
        T2026 + 5 * MINUTE,
        T2026 + 10 * MINUTE,
    ]
    assert every.slots_between(T2026, T2026 + 15 * MINUTE, 0) == []


def test_every_has_no_slots_before_its_anchor():
    anchor = datetime(2026, 1, 1, 9, 0, 0, 250_000, tzinfo=UTC)
    every = Every(timedelta(minutes=90), anchor=anchor)
    assert every.next_after(0) == ms(anchor)
    assert every.next_after(ms(anchor)) == ms(anchor) + 90 * MINUTE
    assert every.latest_at_or_before(ms(anchor) - 1, 0) is None
    assert every.latest_at_or_before(ms(anchor) + 100 * MINUTE, 0) == ms(anchor) + 90 * MINUTE
    assert every.latest_at_or_before(ms(anchor) + 100 * MINUTE, ms(anchor) + 90 * MINUTE) is None
    assert every.count_between(0, ms(anchor), 10) == 1


def test_every_counts_arithmetically_and_caps():
    every = Every(timedelta(seconds=1))
    year = 365 * 86_400_000
    assert every.count_between(T2026, T2026 + year, 10**9) == 365 * 86_400
    assert every.count_between(T2026, T2026 + year, 10_000) is None
    assert every.count_between(T2026, T2026 + 10_000_000, 10_000) == 10_000
    assert every.count_between(T2026, T2026 + 10_001_000, 10_000) is None
    assert every.count_between(T2026, T2026, 5) == 0
    assert every.count_between(T2026 + 5, T2026, 5) == 0


@SETTINGS
@given(
    interval=st.integers(1000, 10**8),
    anchor=st.integers(0, 2 * 10**12),
    after=st.integers(0, 3 * 10**12),
    span=st.integers(0, 10**9),
    cap=st.integers(0, 200),
)
def test_every_methods_agree_with_enumeration(interval, anchor, after, span, cap):
    anchor_at = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=anchor)
    every = Every(timedelta(milliseconds=interval), anchor=anchor_at)
    assert every.anchor_ms == anchor
    until = after + span
    first_slots = itertools.islice(every._iter_after(after), cap + 2)
    walked = list(itertools.takewhile(lambda s: s <= until, first_slots))
    assert all(slot > after and (slot - anchor) % interval == 0 for slot in walked)
    assert every.slots_between(after, until, cap) == walked[:cap]
    count = every.count_between(after, until, cap)
    assert count == (len(walked) if len(walked) <= cap else None)
    latest = every.latest_at_or_before(until, after)
    if walked and len(walked) <= cap + 1:
        assert latest is not None and latest >= walked[-1]
    assert latest is None or (after < latest <= until and (latest - anchor) % interval == 0)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"interval": timedelta(milliseconds=999)}, "interval"),
        ({"interval": timedelta(0)}, "interval"),
        ({"interval": timedelta(seconds=-5)}, "interval"),
        ({"interval": timedelta(seconds=1, microseconds=1)}, "interval"),
        ({"interval": 60}, "interval"),
        ({"interval": timedelta(days=999_999_999)}, "interval"),
        ({"interval": timedelta(minutes=1), "anchor": datetime(2026, 1, 1)}, "anchor"),
        (
            {"interval": timedelta(minutes=1), "anchor": datetime(2026, 1, 1, 0, 0, 0, 1, UTC)},
            "anchor",
        ),
        (
            {"interval": timedelta(minutes=1), "anchor": datetime(1969, 12, 31, tzinfo=UTC)},
            "anchor",
        ),
        ({"interval": timedelta(minutes=1), "anchor": "2026-01-01"}, "anchor"),
    ],
)
def test_every_refuses_bad_arguments(kwargs, field):
    with pytest.raises(InvalidArgument) as caught:
        Every(**kwargs)
    assert caught.value.code == "SCHEDULER_INVALID_ARGUMENT"
    assert caught.value.details == {"field": field}
    assert field in caught.value.message


# -- Once -------------------------------------------------------------------------------------


def test_once_has_one_slot():
    at = datetime(2026, 12, 1, 9, 0, tzinfo=ZoneInfo("Europe/Berlin"))
    once = Once(at)
    assert once.at == at and once.at.tzinfo is UTC
    assert once.next_after(ms(at) - 1) == ms(at)
    assert once.next_after(ms(at)) is None
    assert once.slots_between(0, ms(at), 5) == [ms(at)]
    assert once.slots_between(0, ms(at) - 1, 5) == []
    assert once.slots_between(0, ms(at), 0) == []
    assert once.latest_at_or_before(ms(at), ms(at) - 1) == ms(at)
    assert once.latest_at_or_before(ms(at), ms(at)) is None
    assert once.latest_at_or_before(ms(at) - 1, 0) is None
    assert once.count_between(0, ms(at), 1) == 1
    assert once.count_between(0, ms(at), 0) is None
    assert list(once.fire_times(at - timedelta(days=1))) == [at]
    assert list(once.fire_times(at)) == []


@pytest.mark.parametrize(
    "at",
    [
        datetime(2026, 1, 1),
        datetime(2026, 1, 1, 0, 0, 0, 500, UTC),
        datetime(1969, 1, 1, tzinfo=UTC),
        "2026-01-01T00:00:00Z",
        1_767_225_600_000,
    ],
)
def test_once_refuses_bad_instants(at):
    with pytest.raises(InvalidArgument) as caught:
        Once(at)
    assert caught.value.details == {"field": "at"}


# -- Shared behaviour -------------------------------------------------------------------------

TRIGGERS = [
    Cron("*/5 * * * *"),
    Cron("30 2 * * *", timezone="America/New_York", nonexistent="skip", ambiguous="both"),
    Every(timedelta(minutes=5)),
    Every(timedelta(hours=1), anchor=datetime(2026, 1, 1, 0, 30, tzinfo=UTC)),
    Once(datetime(2026, 6, 1, tzinfo=UTC)),
]


@pytest.mark.parametrize("trigger", TRIGGERS, ids=repr)
def test_triggers_are_frozen_hashable_values(trigger):
    twin = {
        Cron: lambda t: Cron(
            t.expression, timezone=t.timezone, nonexistent=t.nonexistent, ambiguous=t.ambiguous
        ),
        Every: lambda t: Every(t.interval, anchor=t.anchor),
        Once: lambda t: Once(t.at),
    }[type(trigger)](trigger)
    assert twin == trigger and hash(twin) == hash(trigger)
    assert len({trigger, twin}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        trigger.anything = 1  # type: ignore[attr-defined]
    field_name = dataclasses.fields(trigger)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(trigger, field_name, None)


def test_reprs_are_readable():
    assert repr(Cron("0 0 * * *")) == (
        "Cron(expression='0 0 * * *', timezone='UTC', nonexistent='shift', ambiguous='cron')"
    )
    assert repr(Every(timedelta(minutes=5))) == "Every(interval=timedelta(seconds=300))"
    assert repr(Every(timedelta(hours=1), anchor=datetime(2026, 1, 1, tzinfo=UTC))) == (
        "Every(interval=timedelta(seconds=3600), anchor='2026-01-01T00:00:00+00:00')"
    )
    assert (
        repr(Once(datetime(2026, 12, 1, 9, tzinfo=UTC))) == "Once(at='2026-12-01T09:00:00+00:00')"
    )


def test_different_triggers_are_not_equal():
    assert Cron("0 0 * * *") != Cron("0 0 * * *", timezone="Europe/Berlin")
    assert Cron("0 0 * * *") != Cron("0 0 * * *", ambiguous="both")
    assert Every(timedelta(minutes=5)) != Every(
        timedelta(minutes=5), anchor=datetime(2026, 1, 1, tzinfo=UTC)
    )
    assert Once(datetime(2026, 1, 1, tzinfo=UTC)) == Once(
        datetime(2026, 1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
    )


@pytest.mark.parametrize("trigger", TRIGGERS, ids=repr)
def test_fire_times_are_aware_utc_strictly_after_and_increasing(trigger):
    after = datetime(2026, 1, 1, 0, 0, 0, 400, tzinfo=UTC)
    times = list(itertools.islice(trigger.fire_times(after), 20))
    assert times, "every sample trigger fires after 2026-01-01"
    assert all(moment.tzinfo is UTC for moment in times)
    assert all(b > a for a, b in itertools.pairwise([after, *times]))


@pytest.mark.parametrize("after", [datetime(2026, 1, 1), "2026-01-01", 0, None])
def test_fire_times_needs_an_aware_datetime_and_says_so_at_once(after):
    with pytest.raises(InvalidArgument) as caught:
        Cron("* * * * *").fire_times(after)  # no iteration: refused when called
    assert caught.value.details == {"field": "after"}


def test_fire_times_is_strict_at_sub_millisecond_precision():
    after = datetime(2026, 1, 1, 0, 5, 0, 1, tzinfo=UTC)  # 1 µs after a slot
    assert next(Every(timedelta(minutes=5)).fire_times(after)) == datetime(
        2026, 1, 1, 0, 10, tzinfo=UTC
    )
    assert next(Cron("*/5 * * * *").fire_times(after)) == datetime(2026, 1, 1, 0, 10, tzinfo=UTC)
    exact = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
    assert next(Cron("*/5 * * * *").fire_times(exact)) == datetime(2026, 1, 1, 0, 10, tzinfo=UTC)


@pytest.mark.parametrize("method", ["slots_between", "count_between"])
def test_limits_must_not_be_negative(method):
    with pytest.raises(InvalidArgument):
        getattr(Cron("* * * * *"), method)(T2026, T2026 + MINUTE, -1)


# -- Cron through the epoch-ms methods ---------------------------------------------------------


def test_cron_ms_methods_floor_to_whole_seconds():
    cron = Cron("* * * * * *")
    assert cron.next_after(T2026 + 999) == T2026 + 1000
    assert cron.next_after(T2026 + 1000) == T2026 + 2000
    assert cron.latest_at_or_before(T2026 + 999, T2026 - 1) == T2026
    assert cron.latest_at_or_before(T2026 + 999, T2026) is None
    assert cron.slots_between(T2026 - 1, T2026 + 2500, 10) == [T2026, T2026 + 1000, T2026 + 2000]


def test_cron_count_between_stops_at_the_cap():
    cron = Cron("* * * * * *")
    assert cron.count_between(T2026, T2026 + 10_000 * 1000, 10_000) == 10_000
    assert cron.count_between(T2026, T2026 + 10_001 * 1000, 10_000) is None
    assert cron.count_between(T2026, T2026 + 365 * 86_400_000, 10) is None


def test_rare_cron_slots_years_ahead():
    leap = Cron("0 0 29 2 *", timezone="Europe/Berlin")
    assert leap.next_after(T2026) == ms(datetime(2028, 2, 28, 23, 0, tzinfo=UTC))
    assert leap.slots_between(T2026, ms(datetime(2040, 1, 1, tzinfo=UTC)), 10) == [
        ms(datetime(year, 2, 28, 23, 0, tzinfo=UTC)) for year in (2028, 2032, 2036)
    ]
    assert leap.count_between(T2026, ms(datetime(2100, 12, 31, tzinfo=UTC)), 100) == 18


@settings(derandomize=True, deadline=None, max_examples=150)
@given(
    expression=cron_expressions(),
    zone=st.sampled_from(ZONES),
    policy=st.sampled_from(POLICIES),
    after=st.integers(T2026, T2026 + 3 * 365 * 86_400_000),
    span=st.integers(0, 4 * 86_400_000),
    cap=st.integers(0, 50),
)
def test_cron_methods_agree_with_each_other(expression, zone, policy, after, span, cap):
    cron = Cron(expression, timezone=zone, nonexistent=policy[0], ambiguous=policy[1])
    until = after + span
    walked = list(
        itertools.takewhile(
            lambda s: s <= until, itertools.islice(cron._iter_after(after), cap + 2)
        )
    )
    assert cron.slots_between(after, until, cap) == walked[:cap]
    count = cron.count_between(after, until, cap)
    assert count == (len(walked) if len(walked) <= cap else None)
    assert cron.next_after(after) == next(cron._iter_after(after), None)
    if len(walked) <= cap:  # the whole window was walked: its newest slot is known
        assert cron.latest_at_or_before(until, after) == (walked[-1] if walked else None)
    for slot in walked:
        assert cron.latest_at_or_before(slot, after) == slot
        assert cron.latest_at_or_before(slot - 1, after) == (
            None if slot == walked[0] else walked[walked.index(slot) - 1]
        )
