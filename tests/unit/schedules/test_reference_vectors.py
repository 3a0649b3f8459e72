"""The reference implementation's schedule vectors (upstream.md §4.3)."""

from __future__ import annotations

from datetime import UTC, datetime

from jobledger.schedules import Cron

from .oracle import iso, ts


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


REFERENCE = {"nonexistent": "skip", "ambiguous": "both"}


def test_spring_forward_skips_the_missing_time():
    trigger = Cron("30 2 * * *", timezone="America/New_York", **REFERENCE)
    assert trigger.next_after(ms("2026-03-08T06:59:00Z")) == ms("2026-03-09T06:30:00Z")
    first = next(trigger.fire_times(datetime(2026, 3, 8, 6, 59, tzinfo=UTC)))
    assert first == datetime(2026, 3, 9, 6, 30, tzinfo=UTC)


def test_fall_back_fires_twice_with_distinct_instants():
    trigger = Cron("30 1 * * *", timezone="America/New_York", **REFERENCE)
    slots = trigger.slots_between(ms("2026-11-01T00:00:00Z"), ms("2026-11-01T23:59:59Z"), 10)
    assert slots == [ms("2026-11-01T05:30:00Z"), ms("2026-11-01T06:30:00Z")]
    # Distinct instants give distinct trigger keys, hence distinct occurrence identities.
    assert len({f"cron:{slot}" for slot in slots}) == 2


def test_collapse_backlog_of_an_every_second_cron_is_the_latest_whole_second():
    trigger = Cron("* * * * * *", **REFERENCE)
    latest = trigger.latest_at_or_before(ms("2026-08-12T12:34:56.789Z"), ms("2026-01-01T00:00:00Z"))
    assert latest == ms("2026-08-12T12:34:56Z")
    # The same without walking: the window holds about 19.3 million slots.
    assert (
        trigger.count_between(ms("2026-01-01T00:00:00Z"), ms("2026-08-12T12:34:56.789Z"), 10_000)
        is None
    )


def test_collapse_in_a_zone_with_dst_searches_back_across_transitions():
    trigger = Cron("* * * * * *", timezone="America/New_York", **REFERENCE)
    latest = trigger.latest_at_or_before(ms("2026-08-12T12:34:56.789Z"), ms("2026-01-01T00:00:00Z"))
    assert latest == ms("2026-08-12T12:34:56Z")
    yearly = Cron("0 0 1 1 *", timezone="America/New_York", **REFERENCE)
    found = yearly.latest_at_or_before(ms("2026-08-12T00:00:00Z"), ms("2020-01-01T00:00:00Z"))
    assert iso(found // 1000) == "2026-01-01T05:00:00Z"


def test_an_exhausted_window_is_never_due():
    leap = Cron("0 0 29 2 *", **REFERENCE)
    assert leap.latest_at_or_before(ms("2027-12-31T00:00:00Z"), ms("2024-03-01T00:00:00Z")) is None
    assert leap.next_after(ms("2026-01-01T00:00:00Z")) == ms("2028-02-29T00:00:00Z")
    assert ts("2028-02-29T00:00:00Z") * 1000 == ms("2028-02-29T00:00:00Z")
