"""Durations at the public edge: :class:`~datetime.timedelta`, or a number whose name says its unit.

A bare number is accepted only where the parameter's name carries the unit (``lease_ms``,
``delay_ms``, ``poll_interval_s``); everywhere else a duration must be a ``timedelta``, so
``Retry(delay=60)`` cannot silently mean 60 ms. Internally everything is whole milliseconds.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from .contract import MAX_SAFE_INTEGER, is_safe_int, normalize_epoch_ms
from .errors import InvalidArgument

__all__ = ["choose_ms", "epoch_ms_from", "ms_from_timedelta", "ms_value"]

_ONE_MS = timedelta(milliseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ms_from_timedelta(value: object, field: str, *, minimum_ms: int = 0) -> int:
    """Whole milliseconds of a ``timedelta`` (sub-millisecond parts are refused, not rounded)."""
    if not isinstance(value, timedelta):
        bare = isinstance(value, (int, float)) and not isinstance(value, bool)
        hint = " (e.g. timedelta(seconds=5)), not a bare number" if bare else ""
        raise InvalidArgument(
            f"{field} must be a datetime.timedelta{hint}", details={"field": field}
        )
    millis, remainder = divmod(value, _ONE_MS)
    if remainder:
        raise InvalidArgument(
            f"{field} must be a whole number of milliseconds", details={"field": field}
        )
    return _bounded(millis, field, minimum_ms)


def ms_value(value: object, field: str, *, minimum_ms: int = 0) -> int:
    """A duration given as an integer number of milliseconds (for ``*_ms`` parameters)."""
    if not is_safe_int(value):
        raise InvalidArgument(f"{field} must be an integer number of milliseconds")
    return _bounded(int(value), field, minimum_ms)  # type: ignore[call-overload]


def choose_ms(
    value: object,
    value_ms: object,
    field: str,
    *,
    default_ms: int | None = None,
    minimum_ms: int = 0,
) -> int | None:
    """One duration from a ``timedelta`` argument or its ``<field>_ms`` twin (not both)."""
    if value is not None and value_ms is not None:
        raise InvalidArgument(f"pass {field} or {field}_ms, not both")
    if value is not None:
        if not isinstance(value, timedelta):
            raise InvalidArgument(
                f"{field} must be a datetime.timedelta; for a number of milliseconds pass "
                f"{field}_ms=",
                details={"field": field},
            )
        return ms_from_timedelta(value, field, minimum_ms=minimum_ms)
    if value_ms is not None:
        return ms_value(value_ms, f"{field}_ms", minimum_ms=minimum_ms)
    return default_ms


def _bounded(millis: int, field: str, minimum_ms: int) -> int:
    if millis < minimum_ms:
        raise InvalidArgument(
            f"{field} must be at least {minimum_ms} ms"
            if minimum_ms
            else f"{field} must not be negative",
            details={"field": field},
        )
    if millis > MAX_SAFE_INTEGER:
        raise InvalidArgument(f"{field} is too large", details={"field": field})
    return millis


def epoch_ms_from(value: int | datetime, field: str) -> int:
    """Epoch ms from an int or an *aware* datetime (naive datetimes are ambiguous: refused)."""
    if isinstance(value, datetime):
        offset = value.utcoffset()
        if offset is None:
            raise InvalidArgument(f"{field} must be a timezone-aware datetime (got a naive one)")
        # Exact integer arithmetic; datetime.timestamp() would go through a float.
        return normalize_epoch_ms((value - _EPOCH) // timedelta(milliseconds=1), field)
    return normalize_epoch_ms(value, field)
