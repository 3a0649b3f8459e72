"""The public triggers of SPEC §6: :class:`Cron`, :class:`Every` and :class:`Once`.

Triggers are pure values: frozen, hashable, comparable, and functions of their arguments only
(``after`` is always passed in; nothing here reads a clock). Two interfaces sit on each:

* for people: ``fire_times(after)`` yields aware UTC datetimes strictly after ``after``,
  ``describe()`` says the schedule in words, ``to_json()`` gives the stored form;
* for the planner, in integer epoch milliseconds and always bounded: ``next_after``,
  ``slots_between``, ``latest_at_or_before``, ``count_between`` and ``notes``.

``schedule_json`` / ``parse_schedule`` convert a trigger plus its
:class:`~jobledger.schedules.policy.MisfirePolicy` to and from the JSON stored in ``job.trigger``
(format: :mod:`jobledger.schedules.json_format`); ``trigger_key`` names a slot
(``"cron:<ms>"``), which with the slot instant makes the occurrence identity.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Final, Literal, cast

from ..contract import is_safe_int
from ..errors import InvalidArgument
from .cron import CronEvaluator
from .cron_fields import parse_cron
from .describe import describe_cron, describe_interval, format_instant_ms
from .json_format import (
    AMBIGUOUS_POLICIES,
    FORMAT_VERSION,
    MAX_INSTANT_MS,
    MAX_INTERVAL_MS,
    MIN_INTERVAL_MS,
    NONEXISTENT_POLICIES,
    SCHEDULE_MARKER,
    check_choice,
    check_instant_ms,
    decode_schedule,
    is_schedule_json,
)
from .policy import DEFAULT_POLICY, MisfirePolicy, whole_ms
from .zones import load_zone

__all__ = [
    "Cron",
    "Every",
    "Once",
    "Trigger",
    "parse_schedule",
    "parse_trigger",
    "schedule_json",
    "trigger_key",
]

NonexistentPolicy = Literal["shift", "skip"]
AmbiguousPolicy = Literal["cron", "both", "first"]

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS: Final = timedelta(milliseconds=1)


def _aware_ms(value: object, field_name: str) -> tuple[int, timedelta]:
    """Whole epoch ms (floored) and the sub-millisecond remainder of an aware datetime."""
    if not isinstance(value, datetime):
        raise InvalidArgument(
            f"{field_name} must be an aware datetime", details={"field": field_name}
        )
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidArgument(
            f"{field_name} must be an aware datetime (naive datetimes are ambiguous; pass "
            "tzinfo=UTC or a ZoneInfo)",
            details={"field": field_name},
        )
    millis, remainder = divmod(value - _EPOCH, _ONE_MS)
    return int(millis), remainder


def _instant_ms(value: object, field_name: str) -> int:
    millis, remainder = _aware_ms(value, field_name)
    if remainder:
        raise InvalidArgument(
            f"{field_name} must be a whole millisecond (jobledger counts time in epoch ms); "
            "drop the microseconds",
            details={"field": field_name},
        )
    return check_instant_ms(millis, field_name)


def _datetime(instant_ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=instant_ms)


def _check_count(value: int, field_name: str) -> None:
    if not is_safe_int(value) or value < 0:
        raise InvalidArgument(
            f"{field_name} must be a non-negative integer", details={"field": field_name}
        )


class _Trigger:
    """What every trigger offers on top of its three slot primitives."""

    __slots__ = ()
    trigger_type: ClassVar[str]

    def next_after(self, after_ms: int) -> int | None:  # pragma: no cover - overridden
        """The first slot strictly after ``after_ms``, or ``None`` when there is none."""
        raise NotImplementedError

    def _iter_after(self, after_ms: int) -> Iterator[int]:
        slot = self.next_after(after_ms)
        while slot is not None:
            yield slot
            slot = self.next_after(slot)

    def fire_times(self, after: datetime) -> Iterator[datetime]:
        """Aware UTC datetimes strictly after ``after``, strictly increasing (lazy, may be
        endless)."""
        after_ms, _ = _aware_ms(after, "after")
        # A slot (whole ms) is after ``after`` exactly when it is after ``after`` floored to ms.
        return (_datetime(slot) for slot in self._iter_after(after_ms))

    def slots_between(self, after_ms: int, until_ms: int, limit: int) -> list[int]:
        """The slots in ``(after_ms, until_ms]``, oldest first, at most ``limit`` of them."""
        _check_count(limit, "limit")
        slots: list[int] = []
        if limit == 0:
            return slots
        for slot in self._iter_after(after_ms):
            if slot > until_ms:
                break
            slots.append(slot)
            if len(slots) >= limit:
                break
        return slots

    def count_between(self, after_ms: int, until_ms: int, cap: int) -> int | None:
        """How many slots lie in ``(after_ms, until_ms]``, or ``None`` when more than ``cap``
        (the walk stops at the first slot past ``cap``)."""
        _check_count(cap, "cap")
        count = 0
        for slot in self._iter_after(after_ms):
            if slot > until_ms:
                break
            count += 1
            if count > cap:
                return None
        return count

    def notes(self, slot_ms: int) -> list[str]:
        """DST remarks about a slot for people; empty when nothing is special."""
        return []

    def _json_params(self) -> dict[str, Any]:  # pragma: no cover - overridden
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        """The stored form with the default misfire policy (see :func:`schedule_json`)."""
        return schedule_json(cast("Trigger", self))


# Not slots=True: on Python 3.11 a frozen slotted dataclass raises TypeError instead of
# FrozenInstanceError when an unknown attribute is assigned.
@dataclass(frozen=True)
class Cron(_Trigger):
    """Fire when the wall time in ``timezone`` matches a 5- or 6-field cron expression.

    ``nonexistent`` (``"shift"`` | ``"skip"``) and ``ambiguous`` (``"cron"`` | ``"both"`` |
    ``"first"``) choose what happens to wall times that a DST change skips or repeats; the
    defaults are Debian cron's rules (see ``docs/schedules.md``).
    """

    expression: str
    timezone: str = field(default="UTC", kw_only=True)
    nonexistent: NonexistentPolicy = field(default="shift", kw_only=True)
    ambiguous: AmbiguousPolicy = field(default="cron", kw_only=True)
    _evaluator: CronEvaluator = field(init=False, repr=False, compare=False, hash=False)

    trigger_type: ClassVar[str] = "cron"

    def __post_init__(self) -> None:
        spec = parse_cron(self.expression, "expression")
        load_zone(self.timezone, "timezone")
        check_choice(self.nonexistent, NONEXISTENT_POLICIES, "nonexistent")
        check_choice(self.ambiguous, AMBIGUOUS_POLICIES, "ambiguous")
        object.__setattr__(self, "expression", spec.text)
        evaluator = CronEvaluator(spec, self.timezone, self.nonexistent, self.ambiguous)
        object.__setattr__(self, "_evaluator", evaluator)

    def _iter_after(self, after_ms: int) -> Iterator[int]:
        # Cron slots are whole seconds: a slot s·1000 is after ``after_ms`` iff s > ⌊after/1000⌋.
        for second in self._evaluator.iter_after(after_ms // 1000):
            yield second * 1000

    def next_after(self, after_ms: int) -> int | None:
        second = self._evaluator.next_after(after_ms // 1000)
        return None if second is None else second * 1000

    def latest_at_or_before(self, at_ms: int, not_before_ms: int) -> int | None:
        """The newest slot in ``(not_before_ms, at_ms]``; searches backwards, so a window of
        months of an every-second expression costs the same as one of a minute."""
        second = self._evaluator.latest_at_or_before(at_ms // 1000, not_before_ms // 1000)
        return None if second is None else second * 1000

    def notes(self, slot_ms: int) -> list[str]:
        if slot_ms % 1000:
            return []
        return self._evaluator.notes(slot_ms // 1000)

    def describe(self) -> str:
        """The schedule in words, e.g. ``at 02:30 every day (America/New_York)``."""
        return describe_cron(self._evaluator.spec, self.timezone)

    def _json_params(self) -> dict[str, Any]:
        return {
            "expression": self.expression,
            "timezone": self.timezone,
            "nonexistent": self.nonexistent,
            "ambiguous": self.ambiguous,
        }


@dataclass(frozen=True, init=False, repr=False)
class Every(_Trigger):
    """Fire at ``anchor + k·interval`` for k ≥ 0 (default anchor: the Unix epoch, so slots
    align in UTC). ``interval`` ≥ 1 s; interval and anchor are whole milliseconds."""

    interval: timedelta
    anchor: datetime
    interval_ms: int = field(compare=False, hash=False)
    anchor_ms: int = field(compare=False, hash=False)

    trigger_type: ClassVar[str] = "every"

    def __init__(self, interval: timedelta, *, anchor: datetime | None = None) -> None:
        interval_ms = whole_ms(
            interval, "interval", minimum=MIN_INTERVAL_MS, maximum=MAX_INTERVAL_MS
        )
        anchor_ms = 0 if anchor is None else _instant_ms(anchor, "anchor")
        object.__setattr__(self, "interval", timedelta(milliseconds=interval_ms))
        object.__setattr__(self, "anchor", _datetime(anchor_ms))
        object.__setattr__(self, "interval_ms", interval_ms)
        object.__setattr__(self, "anchor_ms", anchor_ms)

    def __repr__(self) -> str:
        interval = repr(self.interval).removeprefix("datetime.")
        if self.anchor_ms == 0:
            return f"Every(interval={interval})"
        return f"Every(interval={interval}, anchor={self.anchor.isoformat()!r})"

    def _iter_after(self, after_ms: int) -> Iterator[int]:
        slot = self.next_after(after_ms)
        while slot is not None and slot <= MAX_INSTANT_MS:
            yield slot
            slot += self.interval_ms

    def next_after(self, after_ms: int) -> int | None:
        if after_ms < self.anchor_ms:
            slot = self.anchor_ms
        else:
            slot = self.anchor_ms + ((after_ms - self.anchor_ms) // self.interval_ms + 1) * (
                self.interval_ms
            )
        return slot if slot <= MAX_INSTANT_MS else None

    def latest_at_or_before(self, at_ms: int, not_before_ms: int) -> int | None:
        """The newest slot in ``(not_before_ms, at_ms]``, by arithmetic."""
        at_ms = min(at_ms, MAX_INSTANT_MS)
        if at_ms < self.anchor_ms:
            return None
        slot = self.anchor_ms + (at_ms - self.anchor_ms) // self.interval_ms * self.interval_ms
        return slot if slot > not_before_ms else None

    def count_between(self, after_ms: int, until_ms: int, cap: int) -> int | None:
        _check_count(cap, "cap")
        first = self.next_after(after_ms)
        last = self.latest_at_or_before(until_ms, after_ms)
        if first is None or last is None or last < first:
            return 0
        count = (last - first) // self.interval_ms + 1
        return None if count > cap else count

    def slots_between(self, after_ms: int, until_ms: int, limit: int) -> list[int]:
        _check_count(limit, "limit")
        count = self.count_between(after_ms, until_ms, limit)
        first = self.next_after(after_ms)
        if first is None:
            return []
        return [
            first + index * self.interval_ms for index in range(limit if count is None else count)
        ]

    def describe(self) -> str:
        """``every 5 minutes`` (plus the anchor when it is not the Unix epoch)."""
        words = describe_interval(self.interval_ms)
        if self.anchor_ms:
            words += f" from {format_instant_ms(self.anchor_ms)}"
        return words

    def _json_params(self) -> dict[str, Any]:
        return {"intervalMs": self.interval_ms, "anchorMs": self.anchor_ms}


@dataclass(frozen=True, init=False, repr=False)
class Once(_Trigger):
    """Fire once, at ``at`` (an aware datetime, whole milliseconds, not before 1970)."""

    at: datetime
    at_ms: int = field(compare=False, hash=False)

    trigger_type: ClassVar[str] = "once"

    def __init__(self, at: datetime) -> None:
        at_ms = _instant_ms(at, "at")
        object.__setattr__(self, "at", _datetime(at_ms))
        object.__setattr__(self, "at_ms", at_ms)

    def __repr__(self) -> str:
        return f"Once(at={self.at.isoformat()!r})"

    def next_after(self, after_ms: int) -> int | None:
        return self.at_ms if self.at_ms > after_ms else None

    def latest_at_or_before(self, at_ms: int, not_before_ms: int) -> int | None:
        """``at`` when it lies in ``(not_before_ms, at_ms]``."""
        return self.at_ms if not_before_ms < self.at_ms <= at_ms else None

    def describe(self) -> str:
        """``once at 2026-12-01 09:00:00 UTC``."""
        return f"once at {format_instant_ms(self.at_ms)}"

    def _json_params(self) -> dict[str, Any]:
        return {"atMs": self.at_ms}


Trigger = Cron | Every | Once


def schedule_json(trigger: Trigger, policy: MisfirePolicy | None = None) -> dict[str, Any]:
    """The object stored in ``job.trigger``: the trigger's keys plus the misfire policy."""
    if not isinstance(trigger, Cron | Every | Once):
        raise InvalidArgument("trigger must be a Cron, Every or Once", details={"field": "trigger"})
    if policy is None:
        policy = DEFAULT_POLICY
    elif not isinstance(policy, MisfirePolicy):
        raise InvalidArgument("policy must be a MisfirePolicy", details={"field": "policy"})
    return {
        "jobledger": SCHEDULE_MARKER,
        "version": FORMAT_VERSION,
        "type": trigger.trigger_type,
        **trigger._json_params(),
        **policy.to_json(),
    }


def parse_schedule(value: object) -> tuple[Trigger, MisfirePolicy] | None:
    """The trigger and policy of a stored schedule; ``None`` for foreign JSON.

    Raises :class:`~jobledger.errors.InvalidArgument` (naming ``trigger.<key>``) when ``value``
    claims to be a jobledger schedule but is malformed.
    """
    if not is_schedule_json(value):
        return None
    decoded = decode_schedule(cast(dict[str, Any], value))
    params = decoded.params
    trigger: Trigger
    if decoded.type == "cron":
        trigger = Cron(
            params["expression"],
            timezone=params["timezone"],
            nonexistent=params["nonexistent"],
            ambiguous=params["ambiguous"],
        )
    elif decoded.type == "every":
        trigger = Every(
            timedelta(milliseconds=params["intervalMs"]), anchor=_datetime(params["anchorMs"])
        )
    else:
        trigger = Once(_datetime(params["atMs"]))
    return trigger, decoded.policy


def parse_trigger(value: object) -> Trigger | None:
    """The trigger of a stored schedule (its policy dropped); ``None`` for foreign JSON."""
    parsed = parse_schedule(value)
    return None if parsed is None else parsed[0]


def trigger_key(trigger: Trigger, slot_ms: int) -> str:
    """``"<type>:<slot_ms>"`` — the occurrence's trigger key for one slot (SPEC §6)."""
    if not isinstance(trigger, Cron | Every | Once):
        raise InvalidArgument("trigger must be a Cron, Every or Once", details={"field": "trigger"})
    if not is_safe_int(slot_ms) or slot_ms < 0:
        raise InvalidArgument(
            "slot_ms must be non-negative epoch milliseconds", details={"field": "slot_ms"}
        )
    return f"{trigger.trigger_type}:{slot_ms}"
