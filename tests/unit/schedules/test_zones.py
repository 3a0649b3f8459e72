"""Zone segments: the daily offset probe against the compiled tz database, gaps and repeats."""

from __future__ import annotations

from zoneinfo import ZoneInfo
from zoneinfo._zoneinfo import ZoneInfo as PurePythonZoneInfo  # test-only: its table is public

import pytest

from jobledger.schedules import Cron
from jobledger.schedules.zones import segment_at, year_transitions

from .oracle import ZONES, brute_force, iso, transitions, ts

TRICKY_ZONES = [
    "America/Cambridge_Bay",  # two transitions 6.9 days apart in 2000
    "America/Boa_Vista",
    "Asia/Gaza",
    "America/Asuncion",
    "Africa/Cairo",
    "Pacific/Fiji",
    "Pacific/Apia",  # skipped 2011-12-30 entirely (a 24-hour gap)
    "Pacific/Kiritimati",  # +14:00 since 1995
    "Antarctica/Casey",
    "Africa/Casablanca",  # Ramadan suspensions of DST
    "Europe/Moscow",
]


def compiled_changes(zone: str, first_year: int, last_year: int) -> list[int]:
    """Offset changes listed in the zone's compiled TZif table (1970-2037 is explicit there)."""
    table = PurePythonZoneInfo.no_cache(zone)._trans_utc
    start, end = ts(f"{first_year}-01-01T00:00:00Z"), ts(f"{last_year + 1}-01-01T00:00:00Z")
    z = ZoneInfo(zone)

    def offset(instant):
        from datetime import datetime

        return datetime.fromtimestamp(instant, z).utcoffset()

    return [t for t in table if start <= t < end and offset(t - 1) != offset(t)]


@pytest.mark.parametrize("zone", ZONES + TRICKY_ZONES)
def test_daily_probe_finds_every_compiled_transition(zone):
    found = [t for year in range(1970, 2038) for t in year_transitions(zone, year)]
    assert found == compiled_changes(zone, 1970, 2037)


@pytest.mark.parametrize("zone", ZONES)
def test_daily_probe_matches_an_hourly_scan_in_rule_years(zone):
    found = [t for year in range(2038, 2046) for t in year_transitions(zone, year)]
    assert found == list(transitions(zone, 2038, 2045))


def test_segments_tile_the_timeline_and_record_gaps_and_repeats():
    zone = "America/New_York"
    instant = ts("2026-01-01T00:00:00Z")
    seen = []
    while instant < ts("2027-01-02T00:00:00Z"):
        segment = segment_at(zone, instant)
        assert segment.start <= instant < segment.end
        seen.append(segment)
        instant = segment.end
    assert all(a.end == b.start for a, b in zip(seen, seen[1:], strict=False))
    gaps = [(iso(s.start), s.gap) for s in seen if s.gap]
    repeats = [(iso(s.start), s.repeat) for s in seen if s.repeat]
    spring, fall = ts("2026-03-08T07:00:00Z"), ts("2026-11-01T06:00:00Z")
    assert gaps == [("2026-03-08T07:00:00Z", (spring - 5 * 3600, spring - 4 * 3600))]
    assert repeats == [("2026-11-01T06:00:00Z", (fall - 5 * 3600, fall - 4 * 3600))]


def test_a_repeat_that_crosses_the_utc_new_year_cut_is_still_a_repeat():
    # The only such repeat in the database: Niamey left local mean time at 1911-12-31T23:51:32Z,
    # repeating 68 minutes of wall time across the segment cut at 1912-01-01T00:00Z.
    zone = "Africa/Niamey"
    after, until = ts("1911-12-31T22:00:00Z"), ts("1912-01-01T02:00:00Z")
    cut = segment_at(zone, ts("1912-01-01T00:00:00Z"))
    assert cut.start == ts("1912-01-01T00:00:00Z") and cut.repeat is not None
    for ambiguous in ("first", "both"):
        trigger = Cron("*/10 * * * *", timezone=zone, ambiguous=ambiguous)
        got = [s // 1000 for s in trigger.slots_between(after * 1000, until * 1000, 100)]
        assert got == brute_force("*/10 * * * *", zone, "shift", ambiguous, after, until, step=1)


def test_a_whole_day_gap_shifts_fixed_time_entries_to_the_next_day():
    # Samoa moved across the date line: 2011-12-29 23:59:59 -10:00 was followed by
    # 2011-12-31 00:00:00 +14:00, so 2011-12-30 never happened there.
    after, until = ts("2011-12-29T00:00:00Z"), ts("2012-01-01T12:00:00Z")
    for policy in [("shift", "cron"), ("skip", "cron"), ("shift", "both")]:
        trigger = Cron(
            "0 12 * * *", timezone="Pacific/Apia", nonexistent=policy[0], ambiguous=policy[1]
        )
        got = [s // 1000 for s in trigger.slots_between(after * 1000, until * 1000, 10)]
        assert got == brute_force("0 12 * * *", "Pacific/Apia", *policy, after, until), policy
    shifted = Cron("0 12 * * *", timezone="Pacific/Apia")
    slot = shifted.next_after(ts("2011-12-29T23:00:00Z") * 1000)
    assert iso(slot // 1000) == "2011-12-30T10:00:00Z"  # 2011-12-31 00:00 +14:00
    assert shifted.notes(slot) == [
        "shifted: 12:00 does not exist on 2011-12-30 in Pacific/Apia; fires at 00:00"
    ]
