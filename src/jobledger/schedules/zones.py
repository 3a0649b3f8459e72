"""Time zones as runs of constant UTC offset ("segments"), for the DST rules of cron.

A zone's timeline is cut into :class:`Segment` s: half-open UTC intervals ``[start, end)`` in
which the offset is constant, so inside one segment wall time is just ``instant + offset`` and
the cron search runs on plain calendar arithmetic. Segments are cut at every offset change and at
every UTC new year (so they can be computed and cached one year at a time; a cut where nothing
changes is harmless).

Each segment also records ``high_water``: the supremum of the wall times of every instant before
its start. At a spring-forward start, wall times in ``[high_water, start + offset)`` never happen
(the gap); after a fall-back, wall times in ``[start + offset, high_water)`` are happening for the
second time (the repeat).

``zoneinfo`` does not publish its transition table, so transitions are found by probing the
offset once a day and bisecting to the second where it changes. That is exact as long as a zone
never changes its offset twice within one day; the closest pair in the tz database since 1970 is
6.9 days apart (America/Cambridge_Bay, 2000), and a test checks the probe against the compiled
transitions of the zones we care about.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..errors import InvalidArgument
from .cron_search import DAY, days_from_civil

__all__ = [
    "MAX_INSTANT",
    "MIN_INSTANT",
    "Segment",
    "load_zone",
    "offset_at",
    "segment_at",
    "year_transitions",
]

# Instants (UTC seconds) the cron layer supports: whole years 2..9998, so that every probe and
# every local time stays inside ``datetime``'s range whatever the zone's offset.
MIN_INSTANT: Final = days_from_civil(2, 1, 1) * DAY
MAX_INSTANT: Final = days_from_civil(9999, 1, 1) * DAY - 1

PROBE_STEP: Final = DAY
# How far back a transition can still shape the wall times after a later segment start: UTC
# offsets lie within −12 h..+14 h, so no repeat lasts longer than 26 hours.
REPEAT_LOOKBACK: Final = 2 * DAY

_ZONE_KEY: Final = re.compile(r"[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*")
_HOST_DEPENDENT: Final = frozenset({"localtime", "posixrules", "Factory"})


@dataclass(frozen=True, slots=True)
class Segment:
    """UTC instants ``[start, end)`` with one ``offset`` (seconds east of UTC); ``high_water``
    is the supremum of the wall times of all earlier instants."""

    start: int
    end: int
    offset: int
    high_water: int

    @property
    def gap(self) -> tuple[int, int] | None:
        """The wall times ``[from, to)`` skipped right before this segment, if any."""
        if self.high_water < self.start + self.offset:
            return self.high_water, self.start + self.offset
        return None

    @property
    def repeat(self) -> tuple[int, int] | None:
        """The wall times ``[from, to)`` this segment repeats from before its start, if any."""
        if self.high_water > self.start + self.offset:
            return self.start + self.offset, self.high_water
        return None


def load_zone(name: object, field: str = "timezone") -> ZoneInfo:
    """The :class:`ZoneInfo` for an IANA name, or ``InvalidArgument`` naming ``field``."""
    if not isinstance(name, str):
        raise InvalidArgument(
            f"{field} must be an IANA time zone name such as 'Europe/Berlin'",
            details={"field": field},
        )
    # The pattern keeps file-system paths out of the zoneinfo lookup; host-dependent names would
    # make the same job fire at different instants on different machines.
    if not _ZONE_KEY.fullmatch(name) or name in _HOST_DEPENDENT or len(name) > 255:
        raise InvalidArgument(
            f"{field} {name!r} is not an IANA time zone name such as 'Europe/Berlin'",
            details={"field": field},
        )
    try:
        return _load(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise InvalidArgument(
            f"{field} {name!r} is not a known IANA time zone (install tzdata if the system has "
            "no zone database)",
            details={"field": field},
        ) from exc


@lru_cache(maxsize=512)
def _load(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def offset_at(zone: ZoneInfo, instant: int) -> int:
    """The zone's UTC offset in seconds at a UTC instant (clamped to the supported range)."""
    instant = min(max(instant, MIN_INSTANT - DAY), MAX_INSTANT + DAY)
    offset = datetime.fromtimestamp(instant, zone).utcoffset()
    assert offset is not None
    return offset.days * DAY + offset.seconds


def _year_start(year: int) -> int:
    return days_from_civil(year, 1, 1) * DAY


@lru_cache(maxsize=8192)
def year_transitions(key: str, year: int) -> tuple[int, ...]:
    """The UTC instants in ``year`` (UTC) at which the zone's offset changes, ascending.

    An instant ``T`` is listed when the offset at ``T`` differs from the offset at ``T - 1``.
    """
    if not 2 <= year <= 9998:
        return ()
    zone = load_zone(key)
    start, end = _year_start(year), _year_start(year + 1)
    found: list[int] = []
    previous_instant, previous_offset = start - 1, offset_at(zone, start - 1)
    probe = start
    while True:
        offset = offset_at(zone, probe)
        if offset != previous_offset:
            low, high = previous_instant, probe  # offset(low) = previous, offset(high) = new
            while high - low > 1:
                middle = (low + high) // 2
                if offset_at(zone, middle) == previous_offset:
                    low = middle
                else:
                    high = middle
            found.append(high)
        if probe == end - 1:
            return tuple(found)
        previous_instant, previous_offset = probe, offset
        probe = min(probe + PROBE_STEP, end - 1)


@lru_cache(maxsize=4096)
def _year_segments(key: str, year: int) -> tuple[tuple[int, ...], tuple[Segment, ...]]:
    zone = load_zone(key)
    start, end = _year_start(year), _year_start(year + 1)
    transitions = year_transitions(key, year)
    starts = [start, *(t for t in transitions if t != start)]
    nearby = [
        t for t in (*year_transitions(key, year - 1), *transitions) if t >= start - REPEAT_LOOKBACK
    ]
    segments = []
    for index, segment_start in enumerate(starts):
        segment_end = starts[index + 1] if index + 1 < len(starts) else end
        high_water = segment_start + offset_at(zone, segment_start - 1)
        for transition in nearby:
            if segment_start - REPEAT_LOOKBACK <= transition < segment_start:
                high_water = max(high_water, transition + offset_at(zone, transition - 1))
        segments.append(
            Segment(segment_start, segment_end, offset_at(zone, segment_start), high_water)
        )
    return tuple(starts), tuple(segments)


def segment_at(key: str, instant: int) -> Segment:
    """The segment of zone ``key`` that contains the UTC ``instant`` (seconds)."""
    # Years come from the civil calendar, not datetime, so this works for every supported year.
    year = _utc_year(instant)
    starts, segments = _year_segments(key, year)
    return segments[bisect_right(starts, instant) - 1]


def _utc_year(instant: int) -> int:
    # 365.2425 days per year on average; correct the estimate by at most one year either way.
    year = 1970 + instant // 31_556_952
    if instant < _year_start(year):
        year -= 1
    elif instant >= _year_start(year + 1):
        year += 1
    return year
