"""Instants and durations on the command line: parsed exactly, printed in one zone.

Input (every value is whole milliseconds, computed with integers — never through a float, so the
CLI and :class:`jobledger.App` derive the same occurrence for the same instant):

* an **instant** is ISO 8601 with an offset or ``Z`` (``2026-03-08T09:30:00Z``,
  ``2026-03-08T04:30:00.250-05:00``) or epoch milliseconds (``@1767225600000`` or plain digits);
* a **duration** is ISO 8601 (``PT30S``, ``P1DT2H``, ``PT0.250S``, ``P2W``) or a short form:
  units ``w d h m s ms`` from largest to smallest, each at most once (``30s``, ``5m``, ``1h30m``,
  ``250ms``). Years and months have no fixed length and are refused.

Anything else — a naive time, sub-millisecond digits, non-ASCII digits such as ``²`` — is a
one-line ``SCHEDULER_INVALID_ARGUMENT``.

Output: instants as ISO 8601 in the ``--tz`` zone (``Z`` for UTC), milliseconds shown only when
there are some; in ``--json`` always UTC, so scripts see one format whatever the operator's zone.
(An instant past the year 9999, which the store allows and ``datetime`` does not, prints as
``@<epoch ms>``.)
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Final

from ..contract import MAX_SAFE_INTEGER
from ..durations import epoch_ms_from
from ..errors import InvalidArgument
from ..schedules.zones import load_zone

__all__ = [
    "format_age",
    "format_duration",
    "format_instant",
    "iso_utc",
    "parse_duration",
    "parse_instant",
    "parse_zone",
]

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS: Final = timedelta(milliseconds=1)
_EPOCH_MS: Final = re.compile(r"@?([0-9]+)")
_SHORT_TOKEN: Final = re.compile(r"([0-9]+)(ms|w|d|h|m|s)")
# Largest unit first; each unit's size in ms.
_SHORT_UNITS: Final = {"w": 604_800_000, "d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000}
_SHORT_UNITS_MS: Final = {**_SHORT_UNITS, "ms": 1}
_SHORT_ORDER: Final = ("w", "d", "h", "m", "s", "ms")
_ISO_DURATION: Final = re.compile(
    r"P(?:(?P<w>[0-9]+)W)?(?:(?P<d>[0-9]+)D)?"
    r"(?:T(?:(?P<h>[0-9]+)H)?(?:(?P<m>[0-9]+)M)?(?:(?P<s>[0-9]+)(?:[.,](?P<frac>[0-9]+))?S)?)?",
    re.IGNORECASE,
)
_ISO_CALENDAR: Final = re.compile(r"P(?:[0-9]+Y|[0-9]+M(?![0-9])|.*[0-9]+Y|[^T]*[0-9]+M)", re.I)
_INSTANT_EXAMPLE: Final = (
    "ISO 8601 with an offset, e.g. 2026-01-01T09:00:00Z, or epoch ms @1767225600000"
)
_DURATION_EXAMPLE: Final = "e.g. 30s, 5m, 1h30m, 250ms, 1d, or ISO 8601 PT30S, P1D"
_UTC_NAMES: Final = frozenset({"UTC", "Z", "Etc/UTC", "GMT", "Etc/GMT", "Universal", "Zulu"})


def _details(field: str | None) -> dict[str, str] | None:
    return None if field is None else {"field": field}


def _p(field: str | None) -> str:
    """The message prefix naming the field (none when argparse names the option itself)."""
    return "" if field is None else f"{field}: "


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 60 else repr(text[:57] + "...")


def parse_instant(text: str, field: str | None = None) -> int:
    """Epoch milliseconds from ``@<ms>``, ``<ms>`` or an ISO 8601 instant with an offset."""
    stripped = text.strip()
    if not stripped or not stripped.isascii() or not stripped.isprintable():
        raise InvalidArgument(
            f"{_p(field)}not an instant: {_shown(text)} (use {_INSTANT_EXAMPLE})",
            details=_details(field),
        )
    digits = _EPOCH_MS.fullmatch(stripped)
    if digits is not None:
        value = int(digits[1])
        if value > MAX_SAFE_INTEGER:
            raise InvalidArgument(f"{_p(field)}epoch ms is too large", details=_details(field))
        return value
    try:
        moment = datetime.fromisoformat(stripped)
    except ValueError:
        raise InvalidArgument(
            f"{_p(field)}not an instant: {_shown(text)} (use {_INSTANT_EXAMPLE})",
            details=_details(field),
        ) from None
    if moment.utcoffset() is None:
        raise InvalidArgument(
            f"{_p(field)}{_shown(text)} has no offset; add Z or +HH:MM (a wall time alone is "
            "ambiguous)",
            details=_details(field),
        )
    if moment.microsecond % 1000:
        raise InvalidArgument(
            f"{_p(field)}{_shown(text)} is more precise than a millisecond; jobledger counts "
            "whole milliseconds",
            details=_details(field),
        )
    try:
        return epoch_ms_from(moment, field or "instant")
    except InvalidArgument:
        raise InvalidArgument(
            f"{_p(field)}{_shown(text)} is before 1970 or too far in the future",
            details=_details(field),
        ) from None


def parse_duration(text: str, field: str | None = None) -> timedelta:
    """A whole-millisecond :class:`timedelta` from a short form or an ISO 8601 duration."""
    stripped = text.strip()
    refusal = InvalidArgument(
        f"{_p(field)}not a duration: {_shown(text)} ({_DURATION_EXAMPLE})",
        details=_details(field),
    )
    if not stripped or not stripped.isascii():
        raise refusal
    if stripped[0] in "Pp":
        millis = _iso_duration_ms(stripped, field, refusal)
    else:
        millis = _short_duration_ms(stripped, refusal)
    if millis > MAX_SAFE_INTEGER:
        raise InvalidArgument(f"{_p(field)}duration is too long", details=_details(field))
    return timedelta(milliseconds=millis)


def _short_duration_ms(text: str, refusal: InvalidArgument) -> int:
    position = 0
    seen: list[str] = []
    total = 0
    for token in _SHORT_TOKEN.finditer(text):
        if token.start() != position:
            raise refusal
        unit = token[2]
        # Units from largest to smallest, each once ("1h30m", not "30m1h" or "1m1m").
        if seen and _SHORT_ORDER.index(unit) <= _SHORT_ORDER.index(seen[-1]):
            raise refusal
        seen.append(unit)
        total += int(token[1]) * _SHORT_UNITS_MS[unit]
        position = token.end()
    if position != len(text) or not seen:
        raise refusal
    return total


def _iso_duration_ms(text: str, field: str | None, refusal: InvalidArgument) -> int:
    match = _ISO_DURATION.fullmatch(text)
    if match is None or text.upper() in ("P", "PT") or text.upper().endswith("T"):
        if _ISO_CALENDAR.match(text):
            raise InvalidArgument(
                f"{_p(field)}{_shown(text)} uses years or months, which have no fixed length; "
                "give days instead (P30D)",
                details=_details(field),
            )
        raise refusal
    parts = match.groupdict()
    if all(value is None for value in parts.values()):
        raise refusal
    total = 0
    for unit in ("w", "d", "h", "m", "s"):
        if parts[unit] is not None:
            total += int(parts[unit]) * _SHORT_UNITS[unit]
    fraction = parts["frac"]
    if fraction is not None:
        if len(fraction) > 3 and int(fraction[3:]) != 0:
            raise InvalidArgument(
                f"{_p(field)}{_shown(text)} is more precise than a millisecond",
                details=_details(field),
            )
        total += int(fraction[:3].ljust(3, "0"))
    return total


def parse_zone(name: str) -> tzinfo:
    """``UTC`` (and its aliases) → :data:`datetime.UTC`; otherwise an IANA zone."""
    stripped = name.strip()
    if stripped in _UTC_NAMES:
        return UTC
    try:
        return load_zone(stripped, "tz")  # the schedules' rules: IANA names only, never a path
    except InvalidArgument:
        raise InvalidArgument(
            f"unknown time zone: {_shown(name)} (use an IANA name such as Europe/Paris)",
            details={"field": "tz"},
        ) from None


def _moment(instant_ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=instant_ms)


def format_instant(instant_ms: int | None, zone: tzinfo = UTC) -> str:
    """ISO 8601 in ``zone``: ``2026-01-01T09:00:00Z``, ``…T10:00:00.250+01:00``; ``-`` for none."""
    if instant_ms is None:
        return "-"
    try:
        moment = _moment(instant_ms).astimezone(zone)
    except OverflowError:  # past year 9999: the store allows it, datetime does not
        return f"@{instant_ms}"
    text = moment.isoformat(timespec="milliseconds" if instant_ms % 1000 else "seconds")
    if zone is UTC:
        text = text.removesuffix("+00:00") + "Z"
    return text


def iso_utc(instant_ms: int | None) -> str | None:
    """The JSON form of an instant: ISO 8601 UTC with ``Z`` (``None`` stays ``None``)."""
    return None if instant_ms is None else format_instant(instant_ms, UTC)


def format_duration(millis: int) -> str:
    """A short form for people: ``250ms``, ``45s``, ``3m12s``, ``2h5m``, ``3d4h`` (two units)."""
    if millis < 0:
        return "-" + format_duration(-millis)
    if millis < 1000:
        return f"{millis}ms"
    parts: list[str] = []
    rest = millis
    for unit in ("d", "h", "m", "s"):
        size = _SHORT_UNITS[unit]
        amount, rest = divmod(rest, size)
        if amount or parts:
            parts.append(f"{amount}{unit}")
    # Keep the two most significant units; drop zero tails ("2h0m" → "2h").
    shown = [part for part in parts[:2] if not part.startswith("0")]
    return "".join(shown) or "0s"


def format_age(since_ms: int | None, now_ms: int) -> str:
    """How long ago ``since_ms`` was, e.g. ``3m12s ago`` (``in 5s`` for a future instant)."""
    if since_ms is None:
        return "-"
    delta = now_ms - since_ms
    return f"in {format_duration(-delta)}" if delta < 0 else f"{format_duration(delta)} ago"
