"""Parsing cron expressions into field sets (no time zones, no clocks).

The dialect (SPEC §6): 5 fields ``minute hour day-of-month month day-of-week`` or 6 with a
leading ``second`` field. Each field is a comma-separated list of items::

    *        every value            */n      every n-th value from the minimum
    a        one value              a-b      a through b
    a-b/n    every n-th of a..b     a/n      every n-th from a to the maximum

Months and weekdays also take three-letter names (``jan``…``dec``, ``sun``…``sat``, any case);
day-of-week runs 0-7 where both 0 and 7 are Sunday. When day-of-month and day-of-week are both
restricted (neither field starts with ``*``) a day matches if *either* matches (Vixie/Debian
cron); otherwise both must. Extensions (``L``, ``W``, ``#``, ``?``, ``H``, ``@daily`` …) are
refused, and so is an expression that can never fire (``0 0 30 2 *``).

:func:`parse_cron` returns a :class:`CronSpec` with the sets and the next/previous-value lookup
tables that :mod:`jobledger.schedules.cron_search` walks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from ..errors import InvalidArgument

__all__ = [
    "FIELD_NAMES",
    "MAX_EXPRESSION_LENGTH",
    "CronField",
    "CronItem",
    "CronSpec",
    "normalize_expression",
    "parse_cron",
]

FIELD_NAMES: Final = ("second", "minute", "hour", "day-of-month", "month", "day-of-week")
MAX_EXPRESSION_LENGTH: Final = 1000

MONTH_NAMES: Final = (
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
)  # fmt: skip
DOW_NAMES: Final = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# The longest month of each month number; February counts 29 so leap days stay reachable.
MAX_DAYS_IN_MONTH: Final = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)

_BOUNDS: Final = ((0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_ITEM: Final = re.compile(r"(\*|[0-9a-z]+(?:-[0-9a-z]+)?)(?:/([0-9]+))?")
_MAX_DIGITS: Final = 6
# Quartz/Jenkins extensions: L (last), W (nearest weekday), # (n-th weekday), ? and H (hash).
_EXTENSION: Final = re.compile(r"\?|[0-9]*l|[0-9]*w|lw|.*#.*|h.*")


class _CronSyntaxError(Exception):
    """A refusal inside one field; :func:`parse_cron` turns it into ``InvalidArgument``."""

    def __init__(self, message: str, cron_field: str) -> None:
        super().__init__(message)
        self.message = message
        self.cron_field = cron_field


@dataclass(frozen=True, slots=True)
class CronItem:
    """One comma-separated item of a field: ``start..end`` every ``step``; ``star`` for ``*``."""

    start: int
    end: int
    step: int
    star: bool
    open_end: bool  # ``a/n``: the end is the field's maximum, not written by the user


@dataclass(frozen=True, slots=True)
class CronField:
    """One parsed field: its text, items, the values it allows, and lookup tables.

    ``next_at[v]`` is the smallest allowed value ≥ ``v`` (−1 when none); ``prev_at[v]`` the
    largest allowed value ≤ ``v`` (−1 when none). Day-of-week values are 0-6 (7 folded to 0).
    """

    name: str
    text: str
    items: tuple[CronItem, ...]
    values: frozenset[int]
    sorted_values: tuple[int, ...]
    next_at: tuple[int, ...]
    prev_at: tuple[int, ...]

    @property
    def starts_with_star(self) -> bool:
        """True when the field text begins with ``*`` (cron's "unrestricted" test)."""
        return self.text.startswith("*")

    @property
    def is_every(self) -> bool:
        """True when the field is exactly ``*``."""
        return self.text == "*"


@dataclass(frozen=True, slots=True)
class CronSpec:
    """A parsed expression. ``fields`` always has six entries (second first); a 5-field
    expression gets a synthetic ``0`` seconds field and ``has_seconds=False``."""

    text: str
    has_seconds: bool
    fields: tuple[CronField, ...]
    day_or: bool
    fixed_time: bool

    @property
    def second(self) -> CronField:
        return self.fields[0]

    @property
    def minute(self) -> CronField:
        return self.fields[1]

    @property
    def hour(self) -> CronField:
        return self.fields[2]

    @property
    def dom(self) -> CronField:
        return self.fields[3]

    @property
    def month(self) -> CronField:
        return self.fields[4]

    @property
    def dow(self) -> CronField:
        return self.fields[5]


def _value(token: str, index: int) -> int:
    name = FIELD_NAMES[index]
    low, high = _BOUNDS[index]
    if token.isdigit():
        if len(token) > _MAX_DIGITS:
            raise _CronSyntaxError(f"{name} value {token[:12]}… is out of range {low}-{high}", name)
        number = int(token)
    elif index == 4 and token in MONTH_NAMES:
        number = MONTH_NAMES.index(token) + 1
    elif index == 5 and token in DOW_NAMES:
        number = DOW_NAMES.index(token)
    else:
        hint = " (names: jan..dec)" if index == 4 else " (names: sun..sat)" if index == 5 else ""
        raise _CronSyntaxError(f"{name} value {token!r} is not a number{hint}", name)
    if not low <= number <= high:
        raise _CronSyntaxError(f"{name} value {number} is out of range {low}-{high}", name)
    return number


def _item(token: str, index: int) -> CronItem:
    name = FIELD_NAMES[index]
    low, high = _BOUNDS[index]
    if _EXTENSION.fullmatch(token):
        raise _CronSyntaxError(
            f"{name} item {token.upper()!r} is a cron extension (L, W, #, ?, H) that jobledger "
            "does not support",
            name,
        )
    match = _ITEM.fullmatch(token)
    if match is None:
        raise _CronSyntaxError(f"{name} item {token!r} is not valid cron syntax", name)
    body, step_text = match.group(1), match.group(2)
    step = 1
    if step_text is not None:
        step = int(step_text) if len(step_text) <= _MAX_DIGITS else 0
        if not 1 <= step <= high - low + 1:
            raise _CronSyntaxError(
                f"{name} step /{step_text} must be between 1 and {high - low + 1}", name
            )
    if body == "*":
        return CronItem(low, high, step, star=True, open_end=False)
    if "-" in body:
        first, last = body.split("-")
        start, end = _value(first, index), _value(last, index)
        if end < start:
            raise _CronSyntaxError(
                f"{name} range {body!r} runs backwards; write the smaller value first", name
            )
        return CronItem(start, end, step, star=False, open_end=False)
    start = _value(body, index)
    if step_text is not None:
        return CronItem(start, high, step, star=False, open_end=True)
    return CronItem(start, start, 1, star=False, open_end=False)


def _field(text: str, index: int) -> CronField:
    items = tuple(_item(token, index) for token in text.lower().split(","))
    values: set[int] = set()
    for item in items:
        values.update(range(item.start, item.end + 1, item.step))
    if index == 5 and 7 in values:
        # 7 is Sunday's second spelling; keep one value per weekday.
        values.discard(7)
        values.add(0)
    high = 6 if index == 5 else _BOUNDS[index][1]
    table_size = high + 2
    next_at = [-1] * table_size
    following = -1
    for value in range(table_size - 1, -1, -1):
        if value in values:
            following = value
        next_at[value] = following
    prev_at = [-1] * table_size
    preceding = -1
    for value in range(table_size):
        if value in values:
            preceding = value
        prev_at[value] = preceding
    return CronField(
        name=FIELD_NAMES[index],
        text=text,
        items=items,
        values=frozenset(values),
        sorted_values=tuple(sorted(values)),
        next_at=tuple(next_at),
        prev_at=tuple(prev_at),
    )


def _check_can_fire(dom: CronField, month: CronField, day_or: bool, text: str) -> None:
    # With OR semantics the weekday alone keeps the entry alive. With AND semantics a
    # day-of-month field that starts with * contains the 1st, and every (month, day) that exists
    # falls on every weekday within 400 years, so only the (month, day-of-month) pairs can be
    # empty.
    if day_or or dom.starts_with_star:
        return
    if any(day <= MAX_DAYS_IN_MONTH[m] for m in month.values for day in dom.values):
        return
    months = ", ".join(MONTH_NAMES[m - 1].capitalize() for m in month.sorted_values)
    days = ", ".join(str(day) for day in dom.sorted_values)
    raise _CronSyntaxError(
        f"day-of-month {days} never occurs in {months}, so {text!r} can never fire",
        "day-of-month",
    )


@lru_cache(maxsize=1024)
def _compile(text: str) -> CronSpec:
    parts = text.split()
    if len(parts) == 5:
        parts.insert(0, "0")
        has_seconds = False
    elif len(parts) == 6:
        has_seconds = True
    else:
        raise _CronSyntaxError(
            f"{text!r} has {len(parts)} fields; cron takes 5 (minute hour day-of-month month "
            "day-of-week) or 6 (with a leading second)",
            "expression",
        )
    fields = tuple(_field(part, index) for index, part in enumerate(parts))
    dom, dow = fields[3], fields[5]
    day_or = not (dom.starts_with_star or dow.starts_with_star)
    _check_can_fire(dom, fields[4], day_or, text)
    fixed_time = not (fields[1].starts_with_star or fields[2].starts_with_star)
    return CronSpec(
        text=text, has_seconds=has_seconds, fields=fields, day_or=day_or, fixed_time=fixed_time
    )


def normalize_expression(expression: object, field: str = "expression") -> str:
    """The expression with runs of whitespace folded to one space (case is kept)."""
    if not isinstance(expression, str):
        raise InvalidArgument(f"{field} must be a cron expression string", details={"field": field})
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise InvalidArgument(
            f"{field} is longer than {MAX_EXPRESSION_LENGTH} characters", details={"field": field}
        )
    return " ".join(expression.split())


def parse_cron(expression: object, field: str = "expression") -> CronSpec:
    """Parse ``expression``; refuse bad syntax or a never-firing expression.

    Raises :class:`~jobledger.errors.InvalidArgument` whose message names ``field`` and the cron
    field at fault; ``details`` is ``{"field": field, "cronField": <cron field name>}``.
    """
    text = normalize_expression(expression, field)
    if text.startswith("@"):
        raise InvalidArgument(
            f"{field}: macros such as {text.split(' ')[0]!r} are not supported; write the five "
            "fields (e.g. '0 0 * * *' for @daily)",
            details={"field": field, "cronField": "expression"},
        )
    try:
        return _compile(text)
    except _CronSyntaxError as exc:
        raise InvalidArgument(
            f"{field}: {exc.message}", details={"field": field, "cronField": exc.cron_field}
        ) from None
