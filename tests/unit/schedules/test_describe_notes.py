"""``describe()`` for dashboards and ``notes()`` for DST remarks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobledger.schedules import Cron, Every, Once

from .oracle import ZONES, ts
from .strategies import cron_expressions


@pytest.mark.parametrize(
    ("trigger", "words"),
    [
        (Every(timedelta(minutes=5)), "every 5 minutes"),
        (Every(timedelta(hours=1)), "every hour"),
        (Every(timedelta(days=1)), "every day"),
        (Every(timedelta(days=14)), "every 2 weeks"),
        (Every(timedelta(milliseconds=1500)), "every 1500 milliseconds"),
        (
            Every(timedelta(minutes=90), anchor=datetime(2026, 1, 1, 9, tzinfo=UTC)),
            "every 90 minutes from 2026-01-01 09:00:00 UTC",
        ),
        (Once(datetime(2026, 12, 1, 9, tzinfo=UTC)), "once at 2026-12-01 09:00:00 UTC"),
        (
            Once(datetime(2026, 12, 1, 9, 0, 0, 250_000, tzinfo=UTC)),
            "once at 2026-12-01 09:00:00.250 UTC",
        ),
        (Cron("30 2 * * *", timezone="America/New_York"), "at 02:30 every day (America/New_York)"),
        (
            Cron("0 */2 * * 1-5"),
            "at minute 0 past every 2nd hour on Monday through Friday (UTC)",
        ),
        (Cron("*/5 * * * *"), "every 5 minutes (UTC)"),
        (Cron("* * * * *"), "every minute (UTC)"),
        (Cron("* * * * * *"), "every second (UTC)"),
        (Cron("*/10 * * * * *"), "every 10 seconds (UTC)"),
        (Cron("0 * * * *"), "at minute 0 past every hour (UTC)"),
        (Cron("15,45 8,20 * * *"), "at 08:15, 08:45, 20:15 and 20:45 every day (UTC)"),
        (Cron("30 0 12 * * *"), "at 12:00:30 every day (UTC)"),
        (Cron("0 0 29 2 *"), "at 00:00 on day 29 of the month in February (UTC)"),
        (Cron("0 0 13 * fri"), "at 00:00 on day 13 of the month or on Friday (UTC)"),
        (
            Cron("0 9 * * 1-5", timezone="Europe/Berlin"),
            "at 09:00 on Monday through Friday (Europe/Berlin)",
        ),
        (Cron("*/15 9-17 * * *"), "every 15 minutes past hours 9 through 17 (UTC)"),
        (Cron("0 0 1 */3 *"), "at 00:00 on day 1 of the month in every 3rd month (UTC)"),
    ],
    ids=repr,
)
def test_describe(trigger, words):
    assert trigger.describe() == words


@settings(derandomize=True, deadline=None, max_examples=300)
@given(cron_expressions(), st.sampled_from(ZONES))
def test_describe_never_raises(expression, zone):
    words = Cron(expression, timezone=zone).describe()
    assert words.endswith(f"({zone})") and len(words) > len(zone) + 3


@settings(derandomize=True, deadline=None, max_examples=150)
@given(cron_expressions(seconds=True))
def test_describe_never_raises_for_six_fields(expression):
    assert Cron(expression).describe().endswith("(UTC)")


def ms(text: str) -> int:
    return ts(text) * 1000


def test_notes_for_a_shifted_slot():
    trigger = Cron("30 2 * * *", timezone="America/New_York")
    slot = trigger.next_after(ms("2026-03-08T00:00:00Z"))
    assert slot == ms("2026-03-08T07:00:00Z")
    assert trigger.notes(slot) == [
        "shifted: 02:30 does not exist on 2026-03-08 in America/New_York; fires at 03:00"
    ]
    assert trigger.notes(trigger.next_after(slot)) == []


def test_notes_list_several_shifted_times():
    trigger = Cron("0,20,40 2 * * *", timezone="America/New_York")
    assert trigger.notes(ms("2026-03-08T07:00:00Z")) == [
        "shifted: 02:00, 02:20 and 02:40 do not exist on 2026-03-08 in America/New_York; "
        "fires at 03:00"
    ]
    many = Cron("0-59 2 * * *", timezone="America/New_York")
    assert many.notes(ms("2026-03-08T07:00:00Z")) == [
        "shifted: 02:00, 02:01, 02:02 and later times do not exist on 2026-03-08 in "
        "America/New_York; fires at 03:00"
    ]


def test_notes_for_repeated_times():
    both = Cron("30 1 * * *", timezone="America/New_York", ambiguous="both")
    assert both.notes(ms("2026-11-01T05:30:00Z")) == [
        "repeated: 01:30 happens twice on 2026-11-01 in America/New_York; this is the first"
    ]
    assert both.notes(ms("2026-11-01T06:30:00Z")) == [
        "repeated: 01:30 happens twice on 2026-11-01 in America/New_York; this is the second"
    ]
    default = Cron("30 1 * * *", timezone="America/New_York")
    assert default.notes(ms("2026-11-01T05:30:00Z")) == [
        "repeated: 01:30 happens twice on 2026-11-01 in America/New_York; this is the first, "
        "the second does not fire"
    ]


def test_notes_in_half_hour_and_midnight_zones():
    lord_howe = Cron("15 2 * * *", timezone="Australia/Lord_Howe")
    assert lord_howe.notes(ms("2026-10-03T15:30:00Z")) == [
        "shifted: 02:15 does not exist on 2026-10-04 in Australia/Lord_Howe; fires at 02:30"
    ]
    santiago = Cron("0 0 * * *", timezone="America/Santiago")
    assert santiago.notes(ms("2026-09-06T04:00:00Z")) == [
        "shifted: 00:00 does not exist on 2026-09-06 in America/Santiago; fires at 01:00"
    ]
    repeated = Cron("30 23 * * *", timezone="America/Santiago", ambiguous="both")
    assert repeated.notes(ms("2026-04-05T03:30:00Z")) == [
        "repeated: 23:30 happens twice on 2026-04-04 in America/Santiago; this is the second"
    ]
    seconds = Cron("15 30 2 * * *", timezone="America/New_York")
    assert seconds.notes(ms("2026-03-08T07:00:00Z")) == [
        "shifted: 02:30:15 does not exist on 2026-03-08 in America/New_York; fires at 03:00"
    ]


def test_notes_are_empty_when_nothing_is_special():
    assert Cron("30 2 * * *", timezone="America/New_York").notes(ms("2026-03-09T06:30:00Z")) == []
    assert Cron("30 2 * * *", timezone="Asia/Kolkata").notes(ms("2026-03-07T21:00:00Z")) == []
    assert Cron("* * * * * *").notes(ms("2026-03-07T21:00:00Z") + 500) == []
    assert Every(timedelta(minutes=5)).notes(0) == []
    assert Once(datetime(2026, 1, 1, tzinfo=UTC)).notes(0) == []
