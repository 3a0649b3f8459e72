"""Declaring a scheduled job: the body of ``App.schedule(...)`` (SPEC §6).

:func:`declare_schedule` builds the trigger and its misfire policy from keyword arguments,
creates the job if it is missing, changes nothing when the job already says exactly the same,
and otherwise updates it with a compare-and-swap on the revision it read (re-reading once if
another writer got there first). Declaring on every start-up is therefore free: no revision bump,
no ``job_updated`` event, and planning progress is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Final, TypedDict, TypeVar, Unpack

from .. import contract
from ..authority import normalize_authority
from ..errors import InvalidArgument
from ..models import Job
from ..schedules.json_format import AMBIGUOUS_POLICIES, NONEXISTENT_POLICIES, check_choice
from ..schedules.policy import (
    DEFAULT_CATCH_UP_LIMIT,
    DEFAULT_MISFIRE_GRACE,
    MISFIRE_MODES,
    OVERLAP_POLICIES,
    MisfirePolicy,
)
from ..schedules.triggers import Cron, Every, Once, Trigger, schedule_json
from ..store.base import Store
from .ensure import ensure_job

__all__ = ["SCHEDULE_DEFAULTS", "ScheduleOptions", "declare_schedule"]

T = TypeVar("T")


# What the trigger classes call a field, and what this function's caller calls it.
_ARGUMENT_NAMES: Final = {"expression": "cron", "interval": "every"}


def _refuse(message: str, field: str) -> InvalidArgument:
    return InvalidArgument(message, details={"field": field})


def _renamed(exc: InvalidArgument, field: str) -> InvalidArgument:
    """``exc`` with ``details["field"]`` set to the argument of :func:`declare_schedule`."""
    return InvalidArgument(
        exc.message, code=exc.code, details={**(exc.details or {}), "field": field}
    )


def _checked(field: str, normalize: Callable[[], T]) -> T:
    """``normalize()``, with a refusal's ``details["field"]`` naming ``field``."""
    try:
        return normalize()
    except InvalidArgument as exc:
        raise _renamed(exc, field) from None


def _truncate_ms(at: object) -> datetime:
    """An aware datetime without its sub-millisecond part (jobledger counts whole ms)."""
    if not isinstance(at, datetime):
        raise _refuse("at must be an aware datetime", "at")
    if at.tzinfo is None or at.utcoffset() is None:
        raise _refuse(
            "at must be an aware datetime (pass tzinfo=UTC or a ZoneInfo; naive datetimes are "
            "ambiguous)",
            "at",
        )
    return at.replace(microsecond=at.microsecond - at.microsecond % 1000)


def _build_trigger(
    *,
    cron: object,
    every: object,
    at: object,
    anchor: object,
    timezone: object,
    nonexistent: object,
    ambiguous: object,
) -> Trigger:
    given = [
        name for name, value in (("cron", cron), ("every", every), ("at", at)) if value is not None
    ]
    if len(given) != 1:
        raise InvalidArgument(
            "pass exactly one of cron=, every= or at="
            + (f" (got {', '.join(given)})" if given else ""),
            details={"field": given[1] if len(given) > 1 else "cron", "given": given},
        )
    if anchor is not None and every is None:
        raise _refuse("anchor applies only to every=", "anchor")
    if cron is None:
        for name, value, default in (
            ("timezone", timezone, "UTC"),
            ("nonexistent", nonexistent, "shift"),
            ("ambiguous", ambiguous, "cron"),
        ):
            if value != default:
                raise _refuse(f"{name} applies only to cron=", name)
    if cron is not None:
        if not isinstance(cron, str):
            raise _refuse("cron must be a cron expression string", "cron")
        if not isinstance(timezone, str):
            raise _refuse("timezone must be an IANA zone name", "timezone")
        return Cron(
            cron,
            timezone=timezone,
            nonexistent=check_choice(nonexistent, NONEXISTENT_POLICIES, "nonexistent"),  # type: ignore[arg-type]
            ambiguous=check_choice(ambiguous, AMBIGUOUS_POLICIES, "ambiguous"),  # type: ignore[arg-type]
        )
    if every is not None:
        if not isinstance(every, timedelta):
            raise _refuse("every must be a timedelta", "every")
        if anchor is not None and not isinstance(anchor, datetime):
            raise _refuse("anchor must be an aware datetime", "anchor")
        return Every(every, anchor=anchor)
    return Once(_truncate_ms(at))


def _build_policy(
    *,
    misfire: object,
    misfire_grace: object,
    catch_up_limit: object,
    jitter: object,
    overlap: object,
) -> MisfirePolicy:
    if misfire not in MISFIRE_MODES:
        raise _refuse(
            f"misfire must be one of {', '.join(MISFIRE_MODES)}, not {misfire!r}", "misfire"
        )
    if misfire_grace is not None and not isinstance(misfire_grace, timedelta):
        raise _refuse("misfire_grace must be a timedelta (or None for 1 minute)", "misfire_grace")
    if jitter is not None and not isinstance(jitter, timedelta):
        raise _refuse("jitter must be a timedelta (or None for none)", "jitter")
    if type(catch_up_limit) is not int:
        raise _refuse("catch_up_limit must be an integer", "catch_up_limit")
    if overlap not in OVERLAP_POLICIES:
        raise _refuse(
            f"overlap must be one of {', '.join(OVERLAP_POLICIES)}, not {overlap!r}", "overlap"
        )
    return MisfirePolicy(
        misfire=misfire,
        misfire_grace=DEFAULT_MISFIRE_GRACE if misfire_grace is None else misfire_grace,
        catch_up_limit=catch_up_limit,
        jitter=timedelta(0) if jitter is None else jitter,
        overlap=overlap,
    )


class ScheduleOptions(TypedDict, total=False):
    """The keyword arguments of a schedule declaration — declared once, here, and forwarded by
    :meth:`App.schedule <jobledger.App.schedule>` (defaults: :data:`SCHEDULE_DEFAULTS`)."""

    cron: str | None
    every: timedelta | None
    at: datetime | None
    anchor: datetime | None
    timezone: str
    payload: Any
    misfire: str
    misfire_grace: timedelta | None
    catch_up_limit: int
    jitter: timedelta | None
    overlap: str
    nonexistent: str
    ambiguous: str
    max_attempts: int
    enabled: bool
    queue: str
    priority: int
    on_lost_lease: str | None


SCHEDULE_DEFAULTS: Final[ScheduleOptions] = {
    "cron": None,
    "every": None,
    "at": None,
    "anchor": None,
    "timezone": "UTC",
    "payload": None,
    "misfire": "coalesce",
    "misfire_grace": None,
    "catch_up_limit": DEFAULT_CATCH_UP_LIMIT,
    "jitter": None,
    "overlap": "allow",
    "nonexistent": "shift",
    "ambiguous": "cron",
    "max_attempts": contract.DEFAULT_MAX_ATTEMPTS,
    "enabled": True,
    "queue": contract.DEFAULT_QUEUE,
    "priority": 0,
    "on_lost_lease": None,
}


def declare_schedule(
    store: Store,
    job_id: str,
    kind: str,
    *,
    authority: Mapping[str, Any],
    **options: Unpack[ScheduleOptions],
) -> Job:
    """Create or update the job ``job_id`` so that it fires on the given schedule.

    Exactly one of ``cron`` (an expression, evaluated in ``timezone`` with the ``nonexistent`` /
    ``ambiguous`` DST rules), ``every`` (a :class:`~datetime.timedelta` ≥ 1 s, slots at
    ``anchor + k·every``) or ``at`` (an aware datetime; its sub-millisecond part is dropped).
    ``misfire`` / ``misfire_grace`` (default 1 minute) / ``catch_up_limit`` / ``jitter`` /
    ``overlap`` (default ``"allow"``; ``"skip"``, ``"buffer_one"``, ``"cancel_other"``: what a
    firing does while an earlier occurrence of the job is live, SPEC §12) are the job's
    :class:`~jobledger.schedules.MisfirePolicy`.

    Idempotent: when the stored job already has this kind, trigger (with its policy), payload,
    authority, ``enabled`` and ``max_attempts``, nothing is written and the stored job is
    returned (same revision). Otherwise the job is created, or updated with a compare-and-swap on
    the revision just read (:func:`jobledger.planning.ensure.ensure_job`). An update bumps the
    revision, so Cron and Every slots are planned from the update on.
    Bad arguments raise ``SCHEDULER_INVALID_ARGUMENT`` with ``details["field"]`` naming the
    argument, before the store is touched.
    """
    unknown = sorted(set(options) - set(SCHEDULE_DEFAULTS))
    if unknown:
        raise InvalidArgument(
            f"unknown schedule option(s): {', '.join(unknown)}",
            details={"field": unknown[0], "unknown": unknown},
        )
    given: ScheduleOptions = {**SCHEDULE_DEFAULTS, **options}
    cron, every, at = given["cron"], given["every"], given["at"]
    timezone, nonexistent, ambiguous = given["timezone"], given["nonexistent"], given["ambiguous"]
    key = _checked("job_id", lambda: contract.normalize_identifier(job_id, "job_id"))
    job_kind = _checked("kind", lambda: contract.normalize_identifier(kind, "kind", max_length=128))
    try:
        trigger = _build_trigger(
            cron=cron,
            every=every,
            at=at,
            anchor=given["anchor"],
            timezone=timezone,
            nonexistent=nonexistent,
            ambiguous=ambiguous,
        )
    except InvalidArgument as exc:
        named = str((exc.details or {}).get("field", "cron"))
        raise _renamed(exc, _ARGUMENT_NAMES.get(named, named)) from None
    policy = _build_policy(
        misfire=given["misfire"],
        misfire_grace=given["misfire_grace"],
        catch_up_limit=given["catch_up_limit"],
        jitter=given["jitter"],
        overlap=given["overlap"],
    )
    enabled = given["enabled"]
    if type(enabled) is not bool:
        raise _refuse("enabled must be True or False", "enabled")
    attempts = _checked(
        "max_attempts", lambda: contract.normalize_max_attempts(given["max_attempts"])
    )
    payload = given["payload"]
    normalized_authority = _checked("authority", lambda: normalize_authority(authority))
    normalized_payload = _checked("payload", lambda: contract.normalize_json(payload, "payload"))
    wanted: dict[str, Any] = {
        "kind": job_kind,
        "trigger": schedule_json(trigger, policy),
        "payload": normalized_payload,
        "authority": normalized_authority,
        "enabled": enabled,
        "max_attempts": attempts,
        "queue": _checked("queue", lambda: contract.normalize_queue_name(given["queue"])),
        "priority": _checked("priority", lambda: contract.normalize_priority(given["priority"])),
        "on_lost_lease": _checked(
            "on_lost_lease",
            lambda: contract.normalize_lost_lease_policy(given["on_lost_lease"] or "retry"),
        ),
    }
    return ensure_job(store, key, wanted)
