"""The schedule options of ``job add`` and ``job update``, turned into a stored trigger.

``--cron EXPR | --every DURATION | --at INSTANT`` choose the trigger (``--no-schedule`` on update
makes the job one that callers enqueue); ``--timezone``, ``--nonexistent``, ``--ambiguous`` refine
a cron trigger, ``--anchor`` an interval; ``--misfire``, ``--misfire-grace``,
``--catch-up-limit`` and ``--jitter`` are the misfire policy stored with it. On update, what is not
given is kept from the current schedule. The values become exactly what ``App.schedule`` would
store (:func:`jobledger.schedules.schedule_json` of a :class:`~jobledger.Cron`,
:class:`~jobledger.Every` or :class:`~jobledger.Once` and a :class:`~jobledger.MisfirePolicy`).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from ..errors import InvalidArgument, SchedulerError
from ..schedules import Cron, Every, MisfirePolicy, Once, Trigger, parse_schedule, schedule_json
from ..schedules.json_format import (
    AMBIGUOUS_POLICIES,
    MAX_INTERVAL_MS,
    MIN_INTERVAL_MS,
    NONEXISTENT_POLICIES,
)
from ..schedules.policy import MAX_CATCH_UP_LIMIT, MAX_JITTER_MS, MISFIRE_MODES, OVERLAP_POLICIES
from .parsing import duration_arg, duration_within, instant_arg, int_within

__all__ = ["add_schedule_flags", "schedule_flags_given", "trigger_from_flags"]

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_CRON_OPTIONS: Final = ("timezone", "nonexistent", "ambiguous")
_POLICY_OPTIONS: Final = ("misfire", "misfire_grace", "catch_up_limit", "jitter", "overlap")
_TYPE_OPTIONS: Final = ("cron", "every", "at")


def add_schedule_flags(parser: argparse.ArgumentParser, *, update: bool) -> None:
    group = parser.add_argument_group("schedule (one of --cron, --every, --at)")
    which = group.add_mutually_exclusive_group()
    which.add_argument(
        "--cron",
        metavar="EXPR",
        help="a 5- or 6-field cron expression, e.g. '30 2 * * *' (in --timezone)",
    )
    which.add_argument(
        "--every",
        metavar="DURATION",
        type=duration_within(
            minimum=timedelta(milliseconds=MIN_INTERVAL_MS),
            maximum=timedelta(milliseconds=MAX_INTERVAL_MS),
        ),
        help="a fixed interval of at least 1s, e.g. 10s, 5m, PT1H (slots aligned to --anchor)",
    )
    which.add_argument(
        "--at",
        metavar="INSTANT",
        type=instant_arg,
        help="once, at an instant: 2026-01-01T09:00:00Z or @<epoch ms>",
    )
    if update:
        which.add_argument(
            "--no-schedule",
            action="store_true",
            default=None,
            help="drop the schedule: occurrences are then enqueued by callers",
        )
    group.add_argument(
        "--timezone",
        metavar="ZONE",
        help="the IANA zone a cron expression is read in (default: UTC)",
    )
    group.add_argument(
        "--nonexistent",
        choices=NONEXISTENT_POLICIES,
        help="cron wall times a DST gap skips: shift (default) or skip",
    )
    group.add_argument(
        "--ambiguous",
        choices=AMBIGUOUS_POLICIES,
        help="cron wall times DST repeats: cron (default), both or first",
    )
    group.add_argument(
        "--anchor",
        metavar="INSTANT",
        type=instant_arg,
        help="--every slots are anchor + k·interval (default: the Unix epoch)",
    )
    policy = parser.add_argument_group("misfire policy (late and missed slots)")
    policy.add_argument(
        "--misfire",
        choices=MISFIRE_MODES,
        help="late slots: coalesce the due ones into one (default), catch_up (fire each "
        "missed one) or skip (drop the missed ones)",
    )
    policy.add_argument(
        "--misfire-grace",
        metavar="DURATION",
        type=duration_arg,
        help="how late a slot may be seen and still fire as usual (default: 1m)",
    )
    policy.add_argument(
        "--catch-up-limit",
        metavar="N",
        type=int_within(1, MAX_CATCH_UP_LIMIT),
        help=f"with catch_up: the most missed slots fired per pass, 1..{MAX_CATCH_UP_LIMIT:,} "
        "(default: 100)",
    )
    policy.add_argument(
        "--jitter",
        metavar="DURATION",
        type=duration_within(maximum=timedelta(milliseconds=MAX_JITTER_MS)),
        help="delay each firing by a deterministic [0, jitter), at most 1d (default: none)",
    )
    policy.add_argument(
        "--overlap",
        choices=OVERLAP_POLICIES,
        help="while an earlier occurrence is live: allow another (default), skip the slot, "
        "buffer_one (at most one waits) or cancel_other (the new one replaces it)",
    )


def schedule_flags_given(args: argparse.Namespace) -> bool:
    names = (*_TYPE_OPTIONS, "no_schedule", *_CRON_OPTIONS, "anchor", *_POLICY_OPTIONS)
    return any(getattr(args, name, None) is not None for name in names)


def _moment(instant_ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=instant_ms)


def _refuse(message: str, field: str) -> InvalidArgument:
    return InvalidArgument(message, details={"field": field})


def _current(trigger: Any) -> tuple[Trigger, MisfirePolicy] | None:
    try:
        return parse_schedule(trigger)
    except SchedulerError:
        return None


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _trigger(args: argparse.Namespace, current: Trigger | None) -> Trigger | None:
    """The trigger the flags describe; without --cron/--every/--at, ``current`` refined."""
    cron_given = [name for name in _CRON_OPTIONS if getattr(args, name) is not None]
    base_cron = current if isinstance(current, Cron) else None
    if args.cron is None and cron_given and (args.every is not None or args.at is not None):
        raise _refuse(f"{_flag(cron_given[0])} applies only to --cron", _flag(cron_given[0]))
    if args.anchor is not None and (args.cron is not None or args.at is not None):
        raise _refuse("--anchor applies only to --every", "--anchor")
    if args.cron is not None:
        return Cron(
            args.cron,
            timezone=args.timezone or (base_cron.timezone if base_cron else "UTC"),
            nonexistent=args.nonexistent or (base_cron.nonexistent if base_cron else "shift"),
            ambiguous=args.ambiguous or (base_cron.ambiguous if base_cron else "cron"),
        )
    if args.every is not None:
        if args.anchor is not None:
            anchor: datetime | None = _moment(args.anchor)
        else:  # a new interval keeps the schedule's anchor
            anchor = current.anchor if isinstance(current, Every) else None
        return Every(args.every, anchor=anchor)
    if args.at is not None:
        return Once(_moment(args.at))
    # No new trigger: refine the current one.
    if cron_given:
        if base_cron is None:
            flag = _flag(cron_given[0])
            raise _refuse(f"{flag} applies only to a cron schedule (--cron)", flag)
        return Cron(
            base_cron.expression,
            timezone=args.timezone or base_cron.timezone,
            nonexistent=args.nonexistent or base_cron.nonexistent,
            ambiguous=args.ambiguous or base_cron.ambiguous,
        )
    if args.anchor is not None:
        if not isinstance(current, Every):
            raise _refuse("--anchor applies only to an interval schedule (--every)", "--anchor")
        return Every(current.interval, anchor=_moment(args.anchor))
    return current


def _policy(args: argparse.Namespace, current: MisfirePolicy | None) -> MisfirePolicy:
    changes: dict[str, Any] = {
        name: getattr(args, name) for name in _POLICY_OPTIONS if getattr(args, name) is not None
    }
    return replace(current or MisfirePolicy(), **changes)


def trigger_from_flags(args: argparse.Namespace, *, current: Any) -> dict[str, Any] | None:
    """The trigger JSON the flags describe, starting from ``current`` (the stored trigger, or
    ``None`` for a new job). ``None`` means "no schedule" (a job enqueued by callers)."""
    if getattr(args, "no_schedule", None):
        others = [
            name
            for name in (*_TYPE_OPTIONS, *_CRON_OPTIONS, "anchor", *_POLICY_OPTIONS)
            if getattr(args, name) is not None
        ]
        if others:
            flag = _flag(others[0])
            raise _refuse(f"--no-schedule cannot be combined with {flag}", flag)
        return {}
    parsed = _current(current)
    try:
        trigger = _trigger(args, None if parsed is None else parsed[0])
        policy = _policy(args, None if parsed is None else parsed[1])
    except InvalidArgument as exc:
        raise _in_cli_words(exc) from None
    if trigger is None:
        policy_given = [name for name in _POLICY_OPTIONS if getattr(args, name) is not None]
        if policy_given:
            flag = _flag(policy_given[0])
            raise _refuse(
                f"{flag} applies only to a scheduled job: add --cron, --every or --at", flag
            )
        return None if parsed is None and current is None else current
    return schedule_json(trigger, policy)


# The schedule classes' argument names, as this command's options.
_FLAGS: Final = {
    "expression": "--cron",
    "timezone": "--timezone",
    "nonexistent": "--nonexistent",
    "ambiguous": "--ambiguous",
    "interval": "--every",
    "anchor": "--anchor",
    "at": "--at",
    "misfire": "--misfire",
    "misfire_grace": "--misfire-grace",
    "catch_up_limit": "--catch-up-limit",
    "jitter": "--jitter",
    "overlap": "--overlap",
}


def _in_cli_words(error: InvalidArgument) -> InvalidArgument:
    """A schedule class's refusal (``expression: minute value 61 …``, ``timezone 'X' is not
    …``) naming the option instead (``--cron: minute value 61 …``)."""
    field = (error.details or {}).get("field")
    flag = _FLAGS.get(field) if isinstance(field, str) else None
    if flag is None or field is None:
        return error
    message = error.message
    for lead in (f"{field}: ", f"{field} "):
        if message.startswith(lead):
            message = message[len(lead) :]
            break
    return InvalidArgument(f"{flag}: {message}", details={**(error.details or {}), "field": flag})
