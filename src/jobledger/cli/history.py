"""``jobledger history`` (the event log, optionally followed) and ``jobledger audit`` (operator
records whose subject may be gone: removed jobs, prunes)."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any, Final

from ..models import MAX_PAGE_LIMIT, Event
from .context import Context
from .output import audit_json, event_json, event_row_line, events_table
from .parsing import (
    UsageError,
    add_command,
    duration_within,
    int_within,
    job_arg,
    positive_arg,
    timedelta_ms,
)
from .table import Column, render_table

__all__ = ["register"]

FOLLOW_PAGE: Final = 1000
MIN_INTERVAL: Final = timedelta(milliseconds=50)


def register(subparsers: Any) -> None:
    history = add_command(
        subparsers,
        "history",
        help="the audit event log: filter it, page back, or --follow new events",
        description=(
            "The audit event log, oldest of the page first: every state change of jobs and\n"
            "occurrences, written in the same transaction as the change. Filter by --job,\n"
            "--occurrence and --type; page back with --before (`nextBefore` in --json).\n\n"
            "--follow prints the last --limit events, then every new one as it is written,\n"
            "polling every --interval, until Ctrl-C (exit 0). With --json it prints one JSON\n"
            "object per event per line (JSON Lines) instead of one document."
        ),
    )
    history.add_argument("--job", metavar="JOB", type=job_arg, help="only this job's events")
    history.add_argument(
        "--occurrence",
        metavar="OCCURRENCE",
        help="only this occurrence's (its id or a unique start of it, as tables show it)",
    )
    history.add_argument(
        "--type", metavar="TYPE", help="only this event type, e.g. occurrence_dead_lettered"
    )
    history.add_argument(
        "--limit",
        metavar="N",
        type=int_within(1, MAX_PAGE_LIMIT),
        default=50,
        help=f"events, 1..{MAX_PAGE_LIMIT} (default: 50)",
    )
    history.add_argument(
        "--before", metavar="EVENT_ID", type=positive_arg, help="only events older than this id"
    )
    history.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    history.add_argument(
        "--interval",
        metavar="DURATION",
        type=duration_within(minimum=MIN_INTERVAL),
        default=timedelta(seconds=1),
        help="with --follow: how often to look for new events, at least 50ms (default: 1s)",
    )
    history.set_defaults(handler=run_history)

    audit = add_command(
        subparsers,
        "audit",
        help="operator records that outlive their subject: removed jobs, prunes",
        description=(
            "Operator records whose subject may no longer exist — `job_removed` (with the\n"
            "removed definition and counts) and `pruned` (one per batch) — newest first, with\n"
            "who did it. Other operator actions (requeue, cancel, job changes) are events of\n"
            "their job: see `jobledger history`."
        ),
    )
    audit.add_argument(
        "--limit",
        metavar="N",
        type=int_within(1, MAX_PAGE_LIMIT),
        default=50,
        help=f"records, 1..{MAX_PAGE_LIMIT} (default: 50)",
    )
    audit.add_argument(
        "--before", metavar="AUDIT_ID", type=positive_arg, help="only records older than this id"
    )
    audit.set_defaults(handler=run_audit)


def _filters(args: argparse.Namespace) -> dict[str, Any]:
    return {"job_id": args.job, "occurrence_id": args.occurrence, "event_type": args.type}


def run_history(ctx: Context, args: argparse.Namespace) -> int:
    if args.follow and args.before is not None:
        raise UsageError("--before cannot be combined with --follow", prog="jobledger history")
    with ctx.open_store() as store:
        if args.occurrence is not None:
            args.occurrence = store.resolve_occurrence_id(args.occurrence)
        newest_first = store.events(**_filters(args), before_id=args.before, limit=args.limit)
        events = list(reversed(newest_first))
        if args.follow:
            return _follow(ctx, store, args, events)
    full = len(events) == args.limit
    document = {
        "events": [event_json(event) for event in events],
        "nextBefore": events[0].event_id if full and events else None,
    }
    ctx.emit(
        document,
        lambda: (
            events_table(
                ctx,
                events,
                show_job=args.job is None and args.occurrence is None,
                show_occurrence=args.occurrence is None,
            )
            if events
            else "no events"
        ),
    )
    if document["nextBefore"] is not None and not ctx.json:
        ctx.note(f"older: add --before {document['nextBefore']}")
    return 0


def _print_event(ctx: Context, event: Event) -> None:
    if ctx.json:
        ctx.emit_line(event_json(event))
    else:
        ctx.write(event_row_line(ctx, event))


def _follow(ctx: Context, store: Any, args: argparse.Namespace, events: list[Event]) -> int:
    """Print ``events``, then poll for newer ones after the last id seen, until Ctrl-C."""
    interval = args.interval
    if events:
        last = events[-1].event_id
    else:
        # Nothing matched yet: start after the newest event of the whole log, so only events
        # written from now on are printed.
        newest = store.events(limit=1)
        last = newest[0].event_id if newest else 0
    for event in events:
        _print_event(ctx, event)
    if not ctx.json:
        ctx.note("following new events; Ctrl-C to stop")
    try:
        while True:
            ctx.pause(timedelta_ms(interval) / 1000)
            while True:
                page = store.events(**_filters(args), after_id=last, limit=FOLLOW_PAGE)
                for event in page:
                    _print_event(ctx, event)
                if page:
                    last = page[-1].event_id
                if len(page) < FOLLOW_PAGE:
                    break
    except KeyboardInterrupt:
        return 0


def run_audit(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.open_store() as store:
        records = store.audit_log(before_id=args.before, limit=args.limit)
    full = len(records) == args.limit
    document = {
        "records": [audit_json(record) for record in records],
        "nextBefore": records[-1].audit_id if full and records else None,
    }

    def text() -> str:
        if not records:
            return "no audit records"
        columns = [
            Column("ID", align="right", shrink=False),
            Column("AT", shrink=False),
            Column("ACTION"),
            Column("ACTOR", max_width=32),
            Column("SUBJECT", max_width=32),
            Column("WHAT", max_width=60),
        ]
        rows = []
        for record in records:
            data = record.data
            if record.action == "pruned":
                what = (
                    f"{data.get('occurrences', 0)} {data.get('status', '')} occurrence(s), "
                    f"{data.get('events', 0)} event(s)"
                )
            elif record.action == "job_removed":
                what = (
                    f"reason={data.get('reason')} occurrences={data.get('occurrences', 0)} "
                    f"events={data.get('events', 0)}"
                )
            else:
                what = " ".join(f"{k}={v}" for k, v in sorted(data.items()))
            rows.append(
                [
                    str(record.audit_id),
                    ctx.when(record.occurred_at),
                    record.action,
                    record.actor,
                    record.subject or "-",
                    what,
                ]
            )
        return render_table(columns, rows, width=ctx.width, color=ctx.color)

    ctx.emit(document, text)
    return 0
