"""Searching wall-clock time for the next or previous match of a :class:`CronSpec`.

Wall time here is a naive local time written as integer seconds since 1970-01-01T00:00 (the
same arithmetic as UTC, without any zone): :mod:`jobledger.schedules.cron` maps it to real
instants. The search skips by fields — a month that is not allowed jumps to the next allowed
month, a day that does not match to the next day (or the next allowed day-of-month), an hour to
the next allowed hour — so a rare slot (``0 0 29 2 *``) years away costs a few dozen steps,
never a walk through every minute.

Every search is bounded: it stops at the calendar edges (:data:`MIN_WALL`, :data:`MAX_WALL`)
and raises a coded :class:`~jobledger.errors.SchedulerError` if it ever takes more than
:data:`MAX_SEARCH_STEPS` steps (a bug guard; real expressions need far fewer).
"""

from __future__ import annotations

from typing import Final

from ..errors import SchedulerError
from .cron_fields import CronField, CronSpec

__all__ = [
    "DAY",
    "MAX_SEARCH_STEPS",
    "MAX_WALL",
    "MIN_WALL",
    "SEARCH_LIMIT_CODE",
    "civil_from_days",
    "days_from_civil",
    "days_in_month",
    "format_wall",
    "next_match",
    "prev_match",
    "search_limit_error",
]

DAY: Final = 86_400
SEARCH_LIMIT_CODE: Final = "SCHEDULER_SCHEDULE_SEARCH_LIMIT"
# Any satisfiable expression matches within one 400-year Gregorian cycle, which is at most
# ~150,000 day steps; the guard sits well above that and well below "hangs".
MAX_SEARCH_STEPS: Final = 1_000_000


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146_097 + day_of_era - 719_468


def civil_from_days(days: int) -> tuple[int, int, int]:
    """The (year, month, day) of ``days`` since 1970-01-01."""
    days += 719_468
    era = days // 146_097
    day_of_era = days - era * 146_097
    year_of_era = (
        day_of_era - day_of_era // 1460 + day_of_era // 36_524 - day_of_era // 146_096
    ) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    shifted_month = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * shifted_month + 2) // 5 + 1
    month = shifted_month + 3 if shifted_month < 10 else shifted_month - 9
    return year_of_era + era * 400 + (month <= 2), month, day


def days_in_month(year: int, month: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


MIN_WALL: Final = days_from_civil(1, 1, 1) * DAY
MAX_WALL: Final = days_from_civil(10_000, 1, 1) * DAY - 1


def format_wall(wall: int, *, seconds: bool = False) -> str:
    """``HH:MM`` (or ``HH:MM:SS``) of a wall time."""
    second_of_day = wall % DAY
    hour, rest = divmod(second_of_day, 3600)
    minute, second = divmod(rest, 60)
    if seconds or second:
        return f"{hour:02d}:{minute:02d}:{second:02d}"
    return f"{hour:02d}:{minute:02d}"


def search_limit_error(what: str, start: int) -> SchedulerError:
    """The coded error a bounded search raises instead of looping on."""
    return SchedulerError(
        f"{what} gave up after its search bound; this is a jobledger bug, please report the "
        "expression",
        code=SEARCH_LIMIT_CODE,
        details={"start": start},
    )


def _day_matches(spec: CronSpec, month: int, day: int, days: int) -> bool:
    weekday = (days + 4) % 7  # 1970-01-01 was a Thursday; 0 = Sunday
    if spec.day_or:
        return day in spec.dom.values or weekday in spec.dow.values
    return day in spec.dom.values and weekday in spec.dow.values


def _first_month_start(month_field: CronField, year: int, month: int) -> int:
    """Wall second of the first allowed month at or after (year, month), day 1, 00:00."""
    following = month_field.next_at[month] if month <= 12 else -1
    if following < 0:
        year, following = year + 1, month_field.sorted_values[0]
    return days_from_civil(year, following, 1) * DAY


def next_match(spec: CronSpec, wall: int) -> int | None:
    """The smallest matching wall time ≥ ``wall``, or ``None`` past :data:`MAX_WALL`."""
    start = wall
    wall = max(wall, MIN_WALL)
    month_field, dom_field = spec.month, spec.dom
    hour_field, minute_field, second_field = spec.hour, spec.minute, spec.second
    skip_by_dom = not spec.day_or and not dom_field.is_every
    for _ in range(MAX_SEARCH_STEPS):
        if wall > MAX_WALL:
            return None
        days, second_of_day = divmod(wall, DAY)
        year, month, day = civil_from_days(days)
        if month not in month_field.values:
            wall = _first_month_start(month_field, year, month + 1)
            continue
        if not _day_matches(spec, month, day, days):
            if skip_by_dom:
                # With AND semantics the day must be an allowed day-of-month: jump to the next.
                following = dom_field.next_at[day + 1]
                if following < 0 or following > days_in_month(year, month):
                    wall = _first_month_start(month_field, year, month + 1)
                else:
                    wall = (days + following - day) * DAY
            else:
                wall = (days + 1) * DAY
            continue
        hour, rest = divmod(second_of_day, 3600)
        if hour not in hour_field.values:
            following = hour_field.next_at[hour]
            wall = (days + 1) * DAY if following < 0 else days * DAY + following * 3600
            continue
        minute, second = divmod(rest, 60)
        if minute not in minute_field.values:
            following = minute_field.next_at[minute]
            base = days * DAY + hour * 3600
            wall = base + 3600 if following < 0 else base + following * 60
            continue
        if second not in second_field.values:
            following = second_field.next_at[second]
            base = days * DAY + hour * 3600 + minute * 60
            wall = base + 60 if following < 0 else base + following
            continue
        return wall
    raise search_limit_error("the forward cron search", start)


def _last_month_end(month_field: CronField, year: int, month: int) -> int:
    """Wall second of the last second of the last allowed month at or before (year, month)."""
    preceding = month_field.prev_at[month] if month >= 1 else -1
    if preceding < 0:
        year, preceding = year - 1, month_field.sorted_values[-1]
    return (days_from_civil(year, preceding, 1) + days_in_month(year, preceding)) * DAY - 1


def prev_match(spec: CronSpec, wall: int) -> int | None:
    """The largest matching wall time ≤ ``wall``, or ``None`` before :data:`MIN_WALL`."""
    start = wall
    wall = min(wall, MAX_WALL)
    month_field, dom_field = spec.month, spec.dom
    hour_field, minute_field, second_field = spec.hour, spec.minute, spec.second
    skip_by_dom = not spec.day_or and not dom_field.is_every
    for _ in range(MAX_SEARCH_STEPS):
        if wall < MIN_WALL:
            return None
        days, second_of_day = divmod(wall, DAY)
        year, month, day = civil_from_days(days)
        if month not in month_field.values:
            wall = _last_month_end(month_field, year, month - 1)
            continue
        if not _day_matches(spec, month, day, days):
            if skip_by_dom:
                preceding = dom_field.prev_at[day - 1]
                if preceding < 0:
                    wall = days_from_civil(year, month, 1) * DAY - 1
                else:
                    wall = (days - day + preceding + 1) * DAY - 1
            else:
                wall = days * DAY - 1
            continue
        hour, rest = divmod(second_of_day, 3600)
        if hour not in hour_field.values:
            preceding = hour_field.prev_at[hour]
            wall = days * DAY - 1 if preceding < 0 else days * DAY + preceding * 3600 + 3599
            continue
        minute, second = divmod(rest, 60)
        if minute not in minute_field.values:
            preceding = minute_field.prev_at[minute]
            base = days * DAY + hour * 3600
            wall = base - 1 if preceding < 0 else base + preceding * 60 + 59
            continue
        if second not in second_field.values:
            preceding = second_field.prev_at[second]
            base = days * DAY + hour * 3600 + minute * 60
            wall = base - 1 if preceding < 0 else base + preceding
            continue
        return wall
    raise search_limit_error("the backward cron search", start)
