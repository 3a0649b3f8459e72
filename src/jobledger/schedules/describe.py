"""Schedules in words, for dashboards and ``explain`` output.

Good, plain English rather than perfect English: ``every 5 minutes``, ``at 02:30 every day
(America/New_York)``, ``at minute 0 past every 2nd hour on Monday through Friday (UTC)``. The
functions here never raise for a schedule that parsed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

from .cron_fields import CronField, CronItem, CronSpec

__all__ = ["describe_cron", "describe_interval", "format_instant_ms", "ordinal"]

_MONTHS: Final = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
_WEEKDAYS: Final = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_UNITS: Final = (
    (7 * 86_400_000, "week"),
    (86_400_000, "day"),
    (3_600_000, "hour"),
    (60_000, "minute"),
    (1000, "second"),
    (1, "millisecond"),
)
_MAX_TIMES_LISTED: Final = 4
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def ordinal(number: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ``11th``, ``22nd`` …"""
    if 10 <= number % 100 <= 20:
        return f"{number}th"
    return f"{number}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(number % 10, 'th') }"


def _join(words: list[str], conjunction: str = "and") -> str:
    if len(words) <= 1:
        return "".join(words)
    return f"{', '.join(words[:-1])} {conjunction} {words[-1]}"


def _plural(count: int, unit: str) -> str:
    return f"{count} {unit}" if count == 1 else f"{count} {unit}s"


def describe_interval(interval_ms: int) -> str:
    """``every 5 minutes``, ``every hour``, ``every 90 minutes`` …"""
    for size, unit in _UNITS:
        if interval_ms % size == 0:
            count = interval_ms // size
            return f"every {unit}" if count == 1 else f"every {count} {unit}s"
    return f"every {interval_ms} milliseconds"  # pragma: no cover - size 1 always divides


def format_instant_ms(instant_ms: int) -> str:
    """``2026-12-01 09:00:00 UTC`` (with ``.123`` when the instant has milliseconds)."""
    moment = _EPOCH + timedelta(milliseconds=instant_ms)
    text = moment.strftime("%Y-%m-%d %H:%M:%S")
    if instant_ms % 1000:
        text += f".{instant_ms % 1000:03d}"
    return f"{text} UTC"


def _name(field_index: int, value: int) -> str:
    if field_index == 4:
        return _MONTHS[value - 1]
    if field_index == 5:
        return _WEEKDAYS[value % 7]
    return str(value)


def _item_words(item: CronItem, field_index: int, unit: str) -> str:
    start, end = _name(field_index, item.start), _name(field_index, item.end)
    if item.star:
        return f"every {unit}" if item.step == 1 else f"every {ordinal(item.step)} {unit}"
    if item.start == item.end:
        return start
    every = f"every {ordinal(item.step)} {unit} from " if item.step > 1 else ""
    if item.open_end:
        return f"every {ordinal(item.step)} {unit} from {start}"
    return f"{every}{start} through {end}"


def _field_words(field: CronField, field_index: int, unit: str) -> str:
    return _join([_item_words(item, field_index, unit) for item in field.items])


def _single_values(field: CronField) -> list[int] | None:
    if all(item.start == item.end for item in field.items):
        return list(field.sorted_values)
    return None


def _clock_times(spec: CronSpec) -> str | None:
    seconds, minutes, hours = (_single_values(f) for f in (spec.second, spec.minute, spec.hour))
    if seconds is None or minutes is None or hours is None:
        return None
    if len(seconds) * len(minutes) * len(hours) > _MAX_TIMES_LISTED:
        return None
    show_seconds = any(seconds)
    times = [
        f"{h:02d}:{m:02d}:{s:02d}" if show_seconds else f"{h:02d}:{m:02d}"
        for h in hours
        for m in minutes
        for s in seconds
    ]
    return f"at {_join(times)}"


def _step_phrase(field: CronField, unit: str, plural: str) -> str | None:
    """``every minute`` / ``every 5 minutes`` for ``*`` and ``*/n``, else ``None``."""
    if len(field.items) == 1 and field.items[0].star:
        step = field.items[0].step
        return f"every {unit}" if step == 1 else f"every {step} {plural}"
    return None


def _values_phrase(field: CronField, index: int, unit: str, preposition: str) -> str:
    words = _field_words(field, index, unit)
    if any(item.star or item.step > 1 for item in field.items):
        return f"{preposition} {words}"  # the words already say "every 5th minute …"
    label = unit if len(field.values) == 1 else f"{unit}s"
    return f"{preposition} {label} {words}"


def _time_words(spec: CronSpec) -> str:
    clock = _clock_times(spec)
    if clock is not None:
        return clock
    parts: list[str] = []
    seconds_step = None
    if spec.has_seconds and spec.second.sorted_values != (0,):
        seconds_step = _step_phrase(spec.second, "second", "seconds")
        parts.append(seconds_step or _values_phrase(spec.second, 0, "second", "at"))
    if parts and spec.minute.is_every:
        if seconds_step is None:
            parts.append("past every minute")
    else:
        minute_step = _step_phrase(spec.minute, "minute", "minutes")
        if minute_step is not None:
            parts.append(f"past {minute_step}" if parts else minute_step)
        else:
            parts.append(_values_phrase(spec.minute, 1, "minute", "past" if parts else "at"))
    if _step_phrase(spec.hour, "hour", "hours") is not None:
        if not spec.hour.is_every:
            parts.append(f"past {_field_words(spec.hour, 2, 'hour')}")
        elif _step_phrase(spec.minute, "minute", "minutes") is None:
            parts.append("past every hour")
    else:
        parts.append(_values_phrase(spec.hour, 2, "hour", "past"))
    return " ".join(parts)


def _day_words(spec: CronSpec) -> str:
    dom, month, dow = spec.dom, spec.month, spec.dow
    phrases: list[str] = []
    if not dom.is_every:
        phrases.append(f"{_values_phrase(dom, 3, 'day', 'on')} of the month")
    if not dow.is_every:
        phrases.append(f"on {_field_words(dow, 5, 'day of the week')}")
    if len(phrases) == 2:
        days = f"{phrases[0]} {'or' if spec.day_or else 'and'} {phrases[1]}"
    elif phrases:
        days = phrases[0]
    else:
        days = "every day"
    if not month.is_every:
        days += f" in {_field_words(month, 4, 'month')}"
    return days


def describe_cron(spec: CronSpec, zone: str) -> str:
    """The expression in words, with the zone in parentheses."""
    time_words = _time_words(spec)
    day_words = _day_words(spec)
    if day_words == "every day" and _clock_times(spec) is None:
        return f"{time_words} ({zone})"
    return f"{time_words} {day_words} ({zone})"
