"""``jobledger occurrence list | show`` and ``jobledger cancel``.

Every command here (and ``dead-letter requeue``, ``history --occurrence``) names an occurrence by
its id or by a unique start of it: ``occ_`` and at least 8 hex digits, ``occ_`` optional — the
short ids the tables print. A start shared by several is ``SCHEDULER_AMBIGUOUS_ID`` (exit 2),
naming a few of them.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..contract import OCCURRENCE_STATUSES
from ..errors import NotFound
from ..models import MAX_PAGE_LIMIT, Occurrence, ParentState
from ..planning.explain import parent_lines
from ..planning.waiting import WaitReason, why_waiting
from ..store import Store
from .bulk import apply_each, resolve_targets
from .context import Context
from .output import (
    event_json,
    events_table,
    occurrence_json,
    occurrences_table,
    progress_text,
)
from .parsing import add_command, add_group, identifier_arg, int_within, job_arg, kind_arg

__all__ = ["OCCURRENCE_HELP", "get_occurrence", "register", "timeline"]

TIMELINE_PAGE = 1000
OCCURRENCE_HELP = "an occurrence id or a unique start of it (8+ hex digits; occ_ optional)"


def register(subparsers: Any) -> None:
    commands = add_group(
        subparsers,
        "occurrence",
        aliases=("occurrences",),
        help="list occurrences (filtered, paged) and show one with its audit timeline",
    )
    listing = add_command(
        commands,
        "list",
        aliases=("ls",),
        help="occurrences, newest first, by status, job, kind, queue, partition, key or tag",
        description=(
            "List occurrences, newest first, filtered by --status, --job, --kind, --queue,\n"
            "--partition, --key and --tag (combined). --key is the idempotency key given to\n"
            "enqueue (`--key order-21`, no `key:` prefix) and finds its occurrences in every\n"
            "job; --tag one of the tags given at enqueue (`--tag customer:21`).\n"
            "A page that may have more after it ends with the cursor of the next one (--cursor;\n"
            "`nextCursor` in --json). With --key, --tag, --partition, --job or --queue and\n"
            "another filter each page looks at up to 10,000 occurrences of the first of those,\n"
            "so a page may be short yet have more."
        ),
    )
    listing.add_argument("--status", choices=OCCURRENCE_STATUSES, help="only this status")
    listing.add_argument("--job", metavar="JOB", type=job_arg, help="only this job's occurrences")
    listing.add_argument(
        "--kind", metavar="KIND", type=kind_arg, help="only occurrences of this kind"
    )
    listing.add_argument(
        "--queue", metavar="QUEUE", type=identifier_arg(64), help="only this queue's occurrences"
    )
    listing.add_argument(
        "--partition",
        metavar="PARTITION",
        type=identifier_arg(256),
        help="only occurrences enqueued with this partition (customer:21)",
    )
    listing.add_argument(
        "--key",
        metavar="KEY",
        type=identifier_arg(200),
        help="only the occurrences enqueued with this idempotency key, in any job",
    )
    listing.add_argument(
        "--tag", metavar="TAG", help="only occurrences enqueued with this tag (customer:21)"
    )
    listing.add_argument(
        "--limit",
        metavar="N",
        type=int_within(1, MAX_PAGE_LIMIT),
        default=50,
        help=f"per page, 1..{MAX_PAGE_LIMIT} (default: 50)",
    )
    listing.add_argument("--cursor", metavar="CURSOR", help="the next page, from a previous one")
    listing.set_defaults(handler=run_list)

    show = add_command(
        commands, "show", help="one occurrence with its audit timeline (oldest event first)"
    )
    show.add_argument("occurrence_id", metavar="OCCURRENCE", help=OCCURRENCE_HELP)
    show.set_defaults(handler=run_show)

    cancel = add_command(
        subparsers,
        "cancel",
        help="cancel queued, waiting or running occurrences for good (audited; asks first)",
        description=(
            "Cancel queued, waiting or running occurrences for good. A running attempt loses its\n"
            "lease: its next renewal or settle is refused and its handler is cancelled. Each\n"
            "cancel records --actor and --reason in the occurrence's events. A settled\n"
            "occurrence is a conflict (exit 4). Asks for confirmation unless --yes."
        ),
    )
    cancel.add_argument("occurrence_ids", metavar="OCCURRENCE", nargs="+", help=OCCURRENCE_HELP)
    cancel.add_argument("--reason", required=True, help="why (recorded in the audit log)")
    cancel.set_defaults(handler=run_cancel)


def get_occurrence(store: Store, name: str) -> Occurrence:
    """The occurrence ``name`` (an id or a unique start of one) names."""
    occurrence_id = store.resolve_occurrence_id(name)
    occurrence = store.get_occurrence(occurrence_id)
    if occurrence is None:  # pruned or removed between the two reads
        raise NotFound(
            f"Scheduler occurrence does not exist: {occurrence_id}",
            details={"occurrenceId": occurrence_id},
        )
    return occurrence


def timeline(store: Store, occurrence_id: str) -> list[Any]:
    """Every event of one occurrence, oldest first (paged forwards through the log)."""
    events: list[Any] = []
    after = 0
    while True:
        page = store.events(occurrence_id=occurrence_id, after_id=after, limit=TIMELINE_PAGE)
        events.extend(page)
        if len(page) < TIMELINE_PAGE:
            return events
        after = page[-1].event_id


def run_list(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.open_store() as store:
        page = store.list_occurrences(
            status=args.status,
            job_id=args.job,
            kind=args.kind,
            queue=args.queue,
            partition=args.partition,
            key=args.key,
            tag=args.tag,
            limit=args.limit,
            cursor=args.cursor,
        )
    document = {
        "occurrences": [occurrence_json(o) for o in page.items],
        "nextCursor": page.next_cursor,
    }
    ctx.emit(
        document,
        lambda: (
            occurrences_table(
                ctx, page.items, show_job=args.job is None, show_kind=args.kind is None
            )
            if page.items
            else "no occurrences"
        ),
    )
    if page.next_cursor is not None and not ctx.json:
        ctx.note(f"more: add --cursor {page.next_cursor}")
    return 0


def _detail_text(
    ctx: Context,
    occurrence: Occurrence,
    events: list[Any],
    waiting: list[WaitReason],
    parents: list[ParentState],
) -> str:
    def pretty(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)

    o = occurrence
    lines = [
        f"occurrence:   {o.id}",
        f"job:          {o.job_id} (revision {o.job_revision}, kind {o.kind})",
        f"status:       {o.status}",
        f"scheduled:    {ctx.when(o.scheduled_for)} (trigger key {o.trigger_key})",
        f"available:    {ctx.when(o.available_at)}",
        f"attempt:      {o.attempt} of {o.max_attempts} (fence {o.fence})",
        f"queue:        {o.queue} (priority {o.priority}"
        + (f", partition {o.partition})" if o.partition is not None else ")"),
    ]
    if o.tags:
        lines.append(f"tags:         {', '.join(o.tags)}")
    if o.meta is not None:
        lines.append(f"meta:         {pretty(o.meta)}")
    if o.progress is not None:
        lines.append(f"progress:     {progress_text(o.progress)} ({ctx.when(o.progress.at)})")
    lines.extend(f"not running:  {reason.text}" for reason in waiting)
    if o.lease_owner is not None:
        lines.append(f"lease:        {o.lease_owner} until {ctx.when(o.lease_expires_at)}")
    if parents:
        lines.append(f"parents:      {len(parents)} (on failure: {o.on_parent_failure})")
        lines.extend(parent_lines(parents))
    lines.append(f"payload:      {pretty(o.payload)}")
    if o.result is not None:
        lines.append(f"result:       {pretty(o.result)}")
    if o.last_error is not None:
        lines.append(f"last error:   {pretty(o.last_error)}")
    lines.append(f"created:      {ctx.when(o.created_at)}")
    if o.started_at is not None:  # the handler of the current (or last) attempt began
        lines.append(f"started:      {ctx.when(o.started_at)}")
    if o.settled_at is not None:
        lines.append(f"settled:      {ctx.when(o.settled_at)}")
    lines.append("")
    lines.append("timeline:")
    table = events_table(ctx, events, show_job=False, show_occurrence=False)
    lines.append(table if events else "  no events")
    return "\n".join(lines)


def run_show(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.open_store() as store:
        occurrence = get_occurrence(store, args.occurrence_id)
        events = timeline(store, occurrence.id)
        waiting = why_waiting(store, occurrence, when=ctx.when)
        parents = store.parent_states(occurrence.id) if occurrence.parents else []
    document: dict[str, Any] = {
        "occurrence": occurrence_json(occurrence),
        "queue": {
            "name": occurrence.queue,
            "priority": occurrence.priority,
            "partition": occurrence.partition,
        },
        "waiting": [reason.to_json() for reason in waiting],
        "events": [event_json(event) for event in events],
    }
    if parents:
        document["parents"] = [
            {"id": p.occurrence_id, "jobId": p.job_id, "kind": p.kind, "status": p.status}
            for p in parents
        ]
        document["onParentFailure"] = occurrence.on_parent_failure
    ctx.emit(document, lambda: _detail_text(ctx, occurrence, events, waiting, parents))
    return 0


def run_cancel(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.open_store() as store:
        targets, unknown = resolve_targets(ctx, store, args.occurrence_ids)
        if targets:
            what = targets[0] if len(targets) == 1 else f"{len(targets)} occurrences"
            ctx.confirm(f"Cancel {what} for good (reason: {args.reason!r})?")
        outcome = apply_each(
            ctx,
            targets,
            lambda key: store.cancel_occurrence(
                occurrence_id=key, actor=ctx.actor, reason=args.reason
            ),
            verb="cancelled",
            failed=unknown,
        )
    document = {**outcome.document("cancelled"), "actor": ctx.actor}

    def text() -> str:
        lines = [
            f"cancelled {o.id} (job {o.job_id}, was attempt {o.attempt})" for o in outcome.done
        ]
        if outcome.failed:
            lines.append(f"{len(outcome.failed)} could not be cancelled (see above)")
        return "\n".join(lines)

    ctx.emit(document, text)
    return outcome.exit_code()
