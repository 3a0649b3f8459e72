"""Independent oracles for the cron tests.

* :class:`Matcher` decides whether a wall time matches an expression using cronsim's *parser*
  (its field sets) and plain ``datetime`` — nothing from jobledger's parser or search.
* :func:`brute_force` scans every real instant of a UTC window (every minute, or every second)
  and applies the DST policies literally: a slot is an instant whose wall time matches (only its
  first occurrence for first-only policies), plus, for shifting fixed-time entries, the first
  instant after a forward jump whose skipped wall times include a match.
* :func:`transitions` finds offset changes by scanning zoneinfo hourly (independent of
  ``jobledger.schedules.zones``).
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from cronsim import CronSim

EPOCH_NAIVE = datetime(1970, 1, 1)
ZONES = [
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Asia/Kolkata",
]
POLICIES = [
    (nonexistent, ambiguous)
    for nonexistent in ("shift", "skip")
    for ambiguous in ("cron", "both", "first")
]


def ts(text: str) -> int:
    """UTC seconds of an ISO-8601 instant with an offset or ``Z``."""
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())


def iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def wall_of(seconds: int, zone: str) -> datetime:
    """The naive local time of a UTC instant."""
    return datetime.fromtimestamp(seconds, ZoneInfo(zone)).replace(tzinfo=None)


def wall_seconds(naive: datetime) -> int:
    return (naive - EPOCH_NAIVE) // timedelta(seconds=1)


def instants_of_wall(naive: datetime, zone: str) -> tuple[int, int, bool]:
    """(fold-0 instant, fold-1 instant, exists) of a naive wall time, via zoneinfo."""
    z = ZoneInfo(zone)
    first = int(naive.replace(tzinfo=z, fold=0).timestamp())
    second = int(naive.replace(tzinfo=z, fold=1).timestamp())
    exists = wall_of(first, zone) == naive or wall_of(second, zone) == naive
    return first, second, exists


class Matcher:
    """Wall-time matching built on cronsim's parsed field sets."""

    def __init__(self, expression: str) -> None:
        parsed = CronSim(expression, datetime(2000, 1, 1))
        self.seconds = set(parsed.seconds)
        self.minutes = set(parsed.minutes)
        self.hours = set(parsed.hours)
        self.days = set(parsed.days)
        self.months = set(parsed.months)
        self.weekdays = {w % 7 for w in parsed.weekdays if isinstance(w, int)}
        self.day_and = parsed.day_and
        parts = expression.split()
        minute, hour = (parts[0], parts[1]) if len(parts) == 5 else (parts[1], parts[2])
        self.fixed_time = not minute.startswith("*") and not hour.startswith("*")
        self.has_seconds = len(parts) == 6

    def matches(self, naive: datetime) -> bool:
        if (
            naive.second not in self.seconds
            or naive.minute not in self.minutes
            or naive.hour not in self.hours
            or naive.month not in self.months
        ):
            return False
        dom = naive.day in self.days
        dow = naive.isoweekday() % 7 in self.weekdays
        return (dom and dow) if self.day_and else (dom or dow)


def policy_flags(matcher: Matcher, nonexistent: str, ambiguous: str) -> tuple[bool, bool]:
    """(shift gaps, first instant only) for an entry under a pair of policies."""
    shift = nonexistent == "shift" and matcher.fixed_time
    first_only = ambiguous == "first" or (ambiguous == "cron" and matcher.fixed_time)
    return shift, first_only


def brute_force(
    expression: str,
    zone: str,
    nonexistent: str,
    ambiguous: str,
    after: int,
    until: int,
    step: int = 60,
) -> list[int]:
    """Every slot in ``(after, until]`` by scanning each ``step``-second instant of UTC."""
    matcher = Matcher(expression)
    shift, first_only = policy_flags(matcher, nonexistent, ambiguous)
    z = ZoneInfo(zone)
    # Enough history to know which wall times were seen (a repeat lasts at most a few hours).
    history = 3 * 86_400 if step >= 60 else 2 * 3600
    begin = (after - history) // step * step
    seen: set[int] = set()
    previous: int | None = None
    slots = []
    for instant in range(begin, until + 1, step):
        naive = datetime.fromtimestamp(instant, z).replace(tzinfo=None)
        wall = wall_seconds(naive)
        fires = matcher.matches(naive) and not (first_only and wall in seen)
        if not fires and shift and previous is not None and wall > previous + step:
            fires = any(
                skipped not in seen and matcher.matches(EPOCH_NAIVE + timedelta(seconds=skipped))
                for skipped in range(previous + step, wall, step)
            )
        seen.add(wall)
        previous = wall
        if fires and instant > after:
            slots.append(instant)
    return slots


@lru_cache(maxsize=64)
def transitions(zone: str, first_year: int, last_year: int) -> tuple[int, ...]:
    """UTC seconds at which the zone's offset changes, found by an hourly zoneinfo scan."""
    z = ZoneInfo(zone)
    start = int(datetime(first_year, 1, 1, tzinfo=UTC).timestamp())
    end = int(datetime(last_year + 1, 1, 1, tzinfo=UTC).timestamp())
    found = []

    def offset(t: int) -> timedelta | None:
        return datetime.fromtimestamp(t, z).utcoffset()

    previous = offset(start)
    for hour in range(start + 3600, end, 3600):
        current = offset(hour)
        if current != previous:
            low, high = hour - 3600, hour
            while high - low > 1:
                middle = (low + high) // 2
                if offset(middle) == previous:
                    low = middle
                else:
                    high = middle
            found.append(high)
        previous = current
    return tuple(found)


def take(iterator, count: int) -> list:
    return list(itertools.islice(iterator, count))
