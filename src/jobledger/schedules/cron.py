"""Cron evaluation in a time zone: which real instants a cron expression fires at.

:class:`CronEvaluator` combines a parsed :class:`~jobledger.schedules.cron_fields.CronSpec` with
a zone's :class:`~jobledger.schedules.zones.Segment` s. Inside one segment the UTC offset is
constant, so the candidates are simply ``wall - offset`` for the matching wall times in the
segment's wall range; the DST policies only decide what happens at the segment starts:

* **every real instant** (``ambiguous="both"``, and ``"cron"`` for entries that are not
  fixed-time) — every instant whose wall time matches fires, so a repeated wall time fires twice;
* **first instant only** (``ambiguous="first"``, and ``"cron"`` for fixed-time entries) — after a
  fall-back, wall times below the segment's ``high_water`` already happened and do not fire again;
* **gap** — wall times that never happen do not fire (``nonexistent="skip"``, and ``"shift"`` for
  entries that are not fixed-time); with ``"shift"`` a fixed-time entry that matches anything in
  the gap fires once, at the first instant after it (the segment start).

A *fixed-time* entry is one whose minute and hour fields do not start with ``*`` (Debian cron's
rule; the seconds field does not count). All instants here are integer UTC seconds.

Every loop is bounded: a search that crosses :data:`MAX_SEGMENTS_PER_SEARCH` segments without
finding a slot raises a coded :class:`~jobledger.errors.SchedulerError` rather than spin.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from .cron_fields import CronSpec
from .cron_search import DAY, civil_from_days, format_wall, next_match, prev_match
from .cron_search import search_limit_error as _search_limit_error
from .zones import MAX_INSTANT, MIN_INSTANT, Segment, segment_at

__all__ = ["MAX_SEGMENTS_PER_SEARCH", "CronEvaluator"]

# A zone has about three segments a year (two transitions and the new-year cut) and any
# satisfiable expression matches within a 400-year Gregorian cycle; 5,000 is generous.
MAX_SEGMENTS_PER_SEARCH: Final = 5_000
_NOTE_MATCHES_SHOWN: Final = 3


def _date(wall: int) -> str:
    year, month, day = civil_from_days(wall // DAY)
    return f"{year:04d}-{month:02d}-{day:02d}"


class CronEvaluator:
    """The slots of one cron expression in one zone under one pair of DST policies."""

    __slots__ = ("first_only", "shift_gaps", "spec", "zone")

    def __init__(self, spec: CronSpec, zone: str, nonexistent: str, ambiguous: str) -> None:
        self.spec = spec
        self.zone = zone
        self.shift_gaps = nonexistent == "shift" and spec.fixed_time
        self.first_only = ambiguous == "first" or (ambiguous == "cron" and spec.fixed_time)

    def _gap_fires(self, segment: Segment) -> bool:
        gap = segment.gap
        if gap is None or not self.shift_gaps:
            return False
        match = next_match(self.spec, gap[0])
        return match is not None and match < gap[1]

    def _wall_floor(self, segment: Segment) -> int:
        """The lowest wall time that may fire inside ``segment``."""
        floor = segment.start + segment.offset
        if self.first_only and segment.high_water > floor:
            floor = segment.high_water
        return floor

    def iter_after(self, instant: int) -> Iterator[int]:
        """Slots strictly after ``instant``, ascending, until :data:`MAX_INSTANT`."""
        spec = self.spec
        position = max(instant + 1, MIN_INSTANT)  # the first instant still allowed to fire
        match: int | None = None
        match_from = 0  # ``match`` is the first matching wall ≥ ``match_from`` (when not None)
        searched = 0
        while position <= MAX_INSTANT:
            searched += 1
            if searched > MAX_SEGMENTS_PER_SEARCH:
                raise _search_limit_error("the cron slot search", instant)
            segment = segment_at(self.zone, position)
            offset = segment.offset
            if position == segment.start and self._gap_fires(segment):
                yield position
                searched = 0
                position += 1
                continue
            low = max(position + offset, self._wall_floor(segment))
            end_wall = segment.end + offset
            while True:
                if match is None or not match_from <= low <= match:
                    match, match_from = next_match(spec, low), low
                    if match is None:
                        return
                if match >= end_wall:
                    break
                slot = match - offset
                if slot > MAX_INSTANT:
                    return
                yield slot
                searched = 0
                low = match + 1
            position = segment.end

    def next_after(self, instant: int) -> int | None:
        """The first slot strictly after ``instant``, or ``None``."""
        return next(self.iter_after(instant), None)

    def latest_at_or_before(self, instant: int, floor: int) -> int | None:
        """The newest slot in ``(floor, instant]``, searching backwards segment by segment."""
        spec = self.spec
        position = min(instant, MAX_INSTANT)
        match: int | None = None
        match_to: int | None = None  # ``match`` is the last matching wall ≤ ``match_to``
        searched = 0
        while position > floor and position >= MIN_INSTANT:
            searched += 1
            if searched > MAX_SEGMENTS_PER_SEARCH:
                raise _search_limit_error("the backward cron slot search", instant)
            segment = segment_at(self.zone, position)
            offset = segment.offset
            low, high = self._wall_floor(segment), position + offset
            if high >= low:
                if match_to is None or high > match_to or (match is not None and match > high):
                    match, match_to = prev_match(spec, high), high
                if match is not None and match >= low:
                    slot = match - offset
                    return slot if slot > floor else None
            if self._gap_fires(segment):
                return segment.start if segment.start > floor else None
            position = segment.start - 1
        return None

    def notes(self, instant: int) -> list[str]:
        """DST remarks for people about the slot at ``instant`` (empty when nothing is special)."""
        if not MIN_INSTANT <= instant <= MAX_INSTANT:
            return []
        segment = segment_at(self.zone, instant)
        wall = instant + segment.offset
        notes: list[str] = []
        gap = segment.gap
        if instant == segment.start and gap is not None and self.shift_gaps:
            matches: list[int] = []
            match = next_match(self.spec, gap[0])
            while match is not None and match < gap[1] and len(matches) <= _NOTE_MATCHES_SHOWN:
                matches.append(match)
                match = next_match(self.spec, match + 1)
            if matches:
                notes.append(
                    f"shifted: {self._list_walls(matches)} not exist on {_date(gap[0])} in "
                    f"{self.zone}; fires at {format_wall(wall)}"
                )
        repeat = segment.repeat
        if repeat is not None and repeat[0] <= wall < repeat[1]:
            notes.append(f"{self._repeated(wall)}; this is the second")
        elif self._repeated_later(segment, wall):
            suffix = ", the second does not fire" if self.first_only else ""
            notes.append(f"{self._repeated(wall)}; this is the first{suffix}")
        return notes

    def _repeated(self, wall: int) -> str:
        return f"repeated: {format_wall(wall)} happens twice on {_date(wall)} in {self.zone}"

    def _repeated_later(self, segment: Segment, wall: int) -> bool:
        # A repeat lasts at most 26 hours, so only the next two segments can repeat this wall.
        for _ in range(2):
            if segment.end > MAX_INSTANT:
                return False
            segment = segment_at(self.zone, segment.end)
            repeat = segment.repeat
            if repeat is not None and repeat[0] <= wall < repeat[1]:
                return True
        return False

    @staticmethod
    def _list_walls(walls: list[int]) -> str:
        shown = [format_wall(wall) for wall in walls[:_NOTE_MATCHES_SHOWN]]
        if len(walls) > _NOTE_MATCHES_SHOWN:
            return f"{', '.join(shown)} and later times do"
        if len(shown) == 1:
            return f"{shown[0]} does"
        return f"{', '.join(shown[:-1])} and {shown[-1]} do"
