"""Instants as datetimes: the read-only twins of the models' epoch-millisecond fields.

The store keeps every instant as epoch milliseconds (``int``), and the models carry them so.
Each such field also has a twin holding the same instant as an aware UTC
:class:`~datetime.datetime`, named by one rule: a field ending in ``_at`` or ``_for`` swaps that
ending for ``_time`` (``scheduled_for`` → ``scheduled_time``, ``lease_expires_at`` →
``lease_expires_time``); any other adds ``_time`` (``SkippedSlots.last`` → ``last_time``).
``None`` stays ``None``. The conversion is integer arithmetic, exact to the millisecond; an
instant past the year 9999 (the store allows it, ``datetime`` does not) raises
:class:`OverflowError` when its twin is read.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, overload

__all__ = ["UtcTime", "UtcTimeOrNone", "utc_time", "utc_time_or_none"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def utc_time(instant_ms: int) -> datetime:
    """An epoch-ms instant as an aware UTC datetime."""
    try:
        return _EPOCH + timedelta(milliseconds=instant_ms)
    except OverflowError:
        raise OverflowError(
            f"the instant {instant_ms} (epoch ms) is past the year 9999, which a datetime "
            "cannot hold; read the epoch-ms field instead"
        ) from None


def utc_time_or_none(instant_ms: int | None) -> datetime | None:
    """:func:`utc_time`, with ``None`` for "no instant"."""
    return None if instant_ms is None else utc_time(instant_ms)


class UtcTime:
    """A class attribute that reads the epoch-ms field ``field`` as an aware UTC datetime.

    One line per twin (``scheduled_time = UtcTime("scheduled_for")``) instead of a property
    each; not annotated, so a dataclass does not take it for a field.
    """

    def __init__(self, field: str) -> None:
        self.field = field
        self.__doc__ = f"``{field}`` as an aware UTC datetime."

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> UtcTime: ...

    @overload
    def __get__(self, instance: object, owner: type[Any]) -> datetime: ...

    def __get__(self, instance: object, owner: type[Any]) -> UtcTime | datetime:
        if instance is None:
            return self
        return utc_time(getattr(instance, self.field))


class UtcTimeOrNone:
    """:class:`UtcTime` for a field that may be ``None``."""

    def __init__(self, field: str) -> None:
        self.field = field
        self.__doc__ = f"``{field}`` as an aware UTC datetime (``None`` when unset)."

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> UtcTimeOrNone: ...

    @overload
    def __get__(self, instance: object, owner: type[Any]) -> datetime | None: ...

    def __get__(self, instance: object, owner: type[Any]) -> UtcTimeOrNone | datetime | None:
        if instance is None:
            return self
        return utc_time_or_none(getattr(instance, self.field))
