"""The trigger JSON format (what ``job.trigger`` holds for a planned job) and its validation.

A jobledger schedule is one self-describing, versioned JSON object::

    {"jobledger": "schedule", "version": 1, "type": "cron",
     "expression": "30 2 * * *", "timezone": "America/New_York",
     "nonexistent": "shift", "ambiguous": "cron",
     "misfire": "coalesce", "misfireGraceMs": 60000, "catchUpLimit": 100, "jitterMs": 0}

``type`` ``"every"`` carries ``intervalMs`` and ``anchorMs`` instead of the four cron keys,
``type`` ``"once"`` carries ``atMs``. Every key is required and no other key is allowed, so a
stored schedule always means exactly one thing — except ``overlap`` (SPEC §12), present only
when it is not ``"allow"`` (a schedule without it keeps the bytes it always had). Anything
that is not a dict with ``"jobledger": "schedule"`` is *foreign* JSON: the kernel keeps it
opaque and the planner leaves the job alone.

This module imports only the standard library, :mod:`jobledger.errors`,
:mod:`jobledger.contract` and the parsing half of this package, so the store can call
:func:`validate_trigger_json` from ``create_job``/``update_job`` cheaply (parsed expressions and
loaded zones are cached).
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, cast

from ..contract import is_safe_int
from ..errors import InvalidArgument
from .cron_fields import parse_cron
from .policy import MisfirePolicy
from .zones import MAX_INSTANT, load_zone

__all__ = [
    "AMBIGUOUS_POLICIES",
    "FORMAT_VERSION",
    "MAX_INSTANT_MS",
    "MAX_INTERVAL_MS",
    "MIN_INTERVAL_MS",
    "NONEXISTENT_POLICIES",
    "SCHEDULE_MARKER",
    "TRIGGER_TYPES",
    "DecodedSchedule",
    "check_choice",
    "check_instant_ms",
    "check_interval_ms",
    "decode_schedule",
    "is_schedule_json",
    "validate_trigger_json",
]

SCHEDULE_MARKER: Final = "schedule"
FORMAT_VERSION: Final = 1
TRIGGER_TYPES: Final = ("cron", "every", "once")
NONEXISTENT_POLICIES: Final = ("shift", "skip")
AMBIGUOUS_POLICIES: Final = ("cron", "both", "first")
MIN_INTERVAL_MS: Final = 1000
# Slots must stay inside the years datetime (and the cron layer) can represent.
MAX_INSTANT_MS: Final = MAX_INSTANT * 1000 + 999
MAX_INTERVAL_MS: Final = MAX_INSTANT_MS

_COMMON_KEYS: Final = frozenset(
    {"jobledger", "version", "type", "misfire", "misfireGraceMs", "catchUpLimit", "jitterMs"}
)
# Keys a schedule may carry or omit (omitted: the default), beside the required ones.
_OPTIONAL_KEYS: Final = frozenset({"overlap"})
_TYPE_KEYS: Final = {
    "cron": ("expression", "timezone", "nonexistent", "ambiguous"),
    "every": ("intervalMs", "anchorMs"),
    "once": ("atMs",),
}
_KEY_ORDER: Final = (
    "version", "type", "expression", "timezone", "nonexistent", "ambiguous", "intervalMs",
    "anchorMs", "atMs", "misfire", "misfireGraceMs", "catchUpLimit", "jitterMs", "overlap",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class DecodedSchedule:
    """A validated schedule object: its ``type``, its type's keys, and its misfire policy."""

    type: str
    params: Mapping[str, Any]
    policy: MisfirePolicy


def is_schedule_json(value: object) -> bool:
    """True when ``value`` claims to be a jobledger schedule (a dict with the marker)."""
    return isinstance(value, dict) and value.get("jobledger") == SCHEDULE_MARKER


def _shown(value: object) -> str:
    """``repr(value)`` for a message; a list or dict (any JSON, nested however deep) is cut
    short instead of recursing through it."""
    return reprlib.repr(value) if isinstance(value, (list, dict, tuple)) else repr(value)


def check_choice(value: object, choices: tuple[str, ...], field: str) -> str:
    """``value`` when it is one of ``choices``, else ``InvalidArgument`` naming ``field``."""
    if not isinstance(value, str) or value not in choices:
        raise InvalidArgument(
            f"{field} must be one of {', '.join(repr(c) for c in choices)}, not {_shown(value)}",
            details={"field": field},
        )
    return value


def check_interval_ms(value: object, field: str) -> int:
    """An interval of at least one second, in whole milliseconds."""
    if not is_safe_int(value) or not MIN_INTERVAL_MS <= cast(int, value) <= MAX_INTERVAL_MS:
        raise InvalidArgument(
            f"{field} must be a whole number of milliseconds, at least {MIN_INTERVAL_MS} (1 s)",
            details={"field": field},
        )
    return cast(int, value)


def check_instant_ms(value: object, field: str) -> int:
    """An epoch-ms instant from 1970-01-01 to the end of year 9998."""
    if not is_safe_int(value) or not 0 <= cast(int, value) <= MAX_INSTANT_MS:
        raise InvalidArgument(
            f"{field} must be epoch milliseconds between 0 (1970-01-01) and {MAX_INSTANT_MS} "
            "(the end of year 9998)",
            details={"field": field},
        )
    return cast(int, value)


def _check_keys(value: Mapping[str, Any], kind: str) -> None:
    allowed = _COMMON_KEYS | frozenset(_TYPE_KEYS[kind])
    extra = sorted(str(key) for key in value if key not in allowed | _OPTIONAL_KEYS)
    if extra:
        raise InvalidArgument(
            f"trigger.{extra[0]} is not a key of a {kind!r} schedule (allowed: "
            f"{', '.join(sorted(allowed | _OPTIONAL_KEYS))})",
            details={"field": f"trigger.{extra[0]}"},
        )
    for key in _KEY_ORDER:
        if key in allowed and key not in value:
            raise InvalidArgument(
                f"trigger.{key} is missing (a {kind!r} schedule needs every key)",
                details={"field": f"trigger.{key}"},
            )


def decode_schedule(value: Mapping[str, Any]) -> DecodedSchedule:
    """Validate a schedule object and return its parts; ``InvalidArgument`` names the key."""
    version = value.get("version")
    if not is_safe_int(version) or version != FORMAT_VERSION:
        raise InvalidArgument(
            f"trigger.version {_shown(version)} is not supported: this jobledger reads schedule "
            f"version {FORMAT_VERSION} (was the job written by a newer jobledger?)",
            details={"field": "trigger.version"},
        )
    kind = check_choice(value.get("type"), TRIGGER_TYPES, "trigger.type")
    _check_keys(value, kind)
    params: dict[str, Any]
    if kind == "cron":
        expression = parse_cron(value["expression"], "trigger.expression").text
        load_zone(value["timezone"], "trigger.timezone")
        params = {
            "expression": expression,
            "timezone": value["timezone"],
            "nonexistent": check_choice(
                value["nonexistent"], NONEXISTENT_POLICIES, "trigger.nonexistent"
            ),
            "ambiguous": check_choice(value["ambiguous"], AMBIGUOUS_POLICIES, "trigger.ambiguous"),
        }
    elif kind == "every":
        params = {
            "intervalMs": check_interval_ms(value["intervalMs"], "trigger.intervalMs"),
            "anchorMs": check_instant_ms(value["anchorMs"], "trigger.anchorMs"),
        }
    else:
        params = {"atMs": check_instant_ms(value["atMs"], "trigger.atMs")}
    return DecodedSchedule(kind, params, MisfirePolicy.from_json(value))


def validate_trigger_json(value: object) -> None:
    """Refuse a malformed jobledger schedule; accept foreign JSON untouched.

    Raises :class:`~jobledger.errors.InvalidArgument` with ``details={"field": "trigger.<key>"}``
    when ``value`` is a dict with ``"jobledger": "schedule"`` but an unknown version or type,
    a missing or extra key, or a bad value (expression, zone, interval, grace …).
    """
    if is_schedule_json(value):
        decode_schedule(cast(dict[str, Any], value))
