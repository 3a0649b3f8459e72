"""``jobledger job``: list, show, add, update, enable, disable, remove and backfill jobs.

Every write is a compare-and-swap on the job's revision (the one just read, or
``--expected-revision``) and records ``--actor`` in the job's audit event.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from .. import contract
from ..models import COUNT_CAP, MAX_BACKFILL_SLOTS, MAX_PAGE_LIMIT, UNSET, Job
from ..store import Store, unknown_job
from .context import Context
from .output import describe_trigger, job_json, occurrence_json
from .parsing import (
    add_command,
    add_group,
    instant_arg,
    int_within,
    job_arg,
    json_arg,
    kind_arg,
    positive_arg,
    principal_arg,
)
from .table import Column, render_table, status_style
from .timefmt import iso_utc
from .triggers import add_schedule_flags, schedule_flags_given, trigger_from_flags

__all__ = ["principal_from_actor", "register"]


def register(subparsers: Any) -> None:
    commands = add_group(
        subparsers,
        "job",
        aliases=("jobs",),
        help="list, show, add, update, enable, disable, remove and backfill jobs",
    )

    listing = add_command(
        commands, "list", aliases=("ls",), help="list jobs, ordered by id (paged with --after)"
    )
    listing.add_argument("--after", metavar="ID", help="start after this job id (the next page)")
    listing.add_argument(
        "--limit",
        metavar="N",
        type=int_within(1, MAX_PAGE_LIMIT),
        default=100,
        help=f"jobs per page, 1..{MAX_PAGE_LIMIT} (default: 100)",
    )
    listing.set_defaults(handler=run_list)

    show = add_command(commands, "show", help="print one job and its occurrence counts")
    show.add_argument("job_id", metavar="JOB", type=job_arg)
    show.set_defaults(handler=run_show)

    add = add_command(
        commands,
        "add",
        help="create a job: scheduled (--cron, --every, --at) or enqueued by callers (none)",
        description=(
            "Create a job. With --cron, --every or --at it is a schedule the planner fires (a\n"
            "worker plans by default, or run `jobledger plan`); without, its occurrences are\n"
            "enqueued by callers (`jobledger enqueue`). An existing id is a conflict (exit 4)."
        ),
    )
    add.add_argument("job_id", metavar="JOB", type=job_arg)
    add.add_argument(
        "--kind",
        required=True,
        type=kind_arg,
        help="the job kind: which handler runs it",
    )
    _definition_flags(add)
    add.add_argument("--disabled", action="store_true", help="create it disabled")
    add_schedule_flags(add, update=False)
    add.set_defaults(handler=run_add)

    update = add_command(
        commands,
        "update",
        help="change a job (compare-and-swap on its revision); unchanged fields are kept",
        description=(
            "Change a job: only the fields given change, the rest are kept (schedule options\n"
            "change the current schedule: `--misfire skip` keeps the cron expression). The\n"
            "update is a compare-and-swap on the revision just read, or on --expected-revision;\n"
            "it bumps the revision, so a schedule is planned again from now. Nothing is written\n"
            "when nothing differs."
        ),
    )
    update.add_argument("job_id", metavar="JOB", type=job_arg)
    update.add_argument("--kind", type=kind_arg, help="a new job kind")
    _definition_flags(update)
    _expected_revision(update)
    add_schedule_flags(update, update=True)
    update.set_defaults(handler=run_update)

    for name, enabled in (("enable", True), ("disable", False)):
        toggle = add_command(
            commands,
            name,
            help=(
                "enable a job: its schedule is planned again from now"
                if enabled
                else "disable a job: nothing of it is claimed or planned until it is enabled"
            ),
        )
        toggle.add_argument("job_id", metavar="JOB", type=job_arg)
        _expected_revision(toggle)
        toggle.set_defaults(handler=run_toggle, enabled=enabled)

    remove = add_command(
        commands,
        "remove",
        aliases=("rm",),
        help="delete a job with no live occurrences, with its history (audited; asks first)",
        description=(
            "Delete a job that has no queued, running or waiting occurrence, with its settled\n"
            "occurrences and their events. The store refuses while any is live\n"
            "(SCHEDULER_JOB_HAS_LIVE_OCCURRENCES, exit 4): cancel them or let them finish. What\n"
            "was removed — the definition and the counts — is written to the audit log with\n"
            "--actor and --reason (`jobledger audit`). Asks for confirmation unless --yes."
        ),
    )
    remove.add_argument("job_id", metavar="JOB", type=job_arg)
    remove.add_argument("--reason", required=True, help="why (recorded in the audit log)")
    _expected_revision(remove)
    remove.set_defaults(handler=run_remove)

    backfill = add_command(
        commands,
        "backfill",
        help="enqueue every slot of a schedule in [--from, --to) that has no occurrence yet",
        description=(
            "Enqueue every slot of the job's schedule from --from (included) to --to (excluded)\n"
            "that no occurrence of the job holds yet, under any revision; the misfire policy\n"
            "does not apply. Repeating it (or running two at once) creates each slot once.\n"
            f"At most {MAX_BACKFILL_SLOTS:,} slots per call: a larger range is refused (exit 2).\n"
            "Recorded in the audit log with --actor (schedule_backfilled)."
        ),
    )
    backfill.add_argument("job_id", metavar="JOB", type=job_arg)
    backfill.add_argument(
        "--from",
        dest="start",
        metavar="INSTANT",
        required=True,
        type=instant_arg,
        help="the first instant: 2026-01-01T00:00:00Z, …+01:00, or @<epoch ms> (included)",
    )
    backfill.add_argument(
        "--to",
        dest="end",
        metavar="INSTANT",
        required=True,
        type=instant_arg,
        help="the end of the range (excluded)",
    )
    backfill.set_defaults(handler=run_backfill)


def _definition_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--payload",
        metavar="JSON",
        type=json_arg,
        default=UNSET,
        help="the job's payload: JSON, @FILE or - (stdin)",
    )
    parser.add_argument(
        "--max-attempts",
        metavar="N",
        type=int_within(1, contract.MAX_JOB_ATTEMPTS),
        help=f"attempts per occurrence, 1..{contract.MAX_JOB_ATTEMPTS} (default: 3)",
    )
    authority = parser.add_argument_group("authority (who asked; evidence, never a grant)")
    authority.add_argument(
        "--principal",
        metavar="TYPE:ID",
        type=principal_arg,
        help="who the job acts for, e.g. user:alice (default: from --actor)",
    )
    authority.add_argument("--workspace", metavar="ID", help="the authority's workspaceId")
    authority.add_argument("--tenant", metavar="ID", help="the authority's tenantId")


def _expected_revision(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--expected-revision",
        metavar="N",
        type=positive_arg,
        help="refuse unless the job is at this revision (default: the revision just read)",
    )


def principal_from_actor(actor: str) -> dict[str, str]:
    """``cli:alice@host`` → ``{type: cli, id: alice@host}``; a bare name is a ``user``."""
    kind, sep, ident = actor.partition(":")
    if sep and kind.strip() and ident.strip():
        return {"type": kind.strip(), "id": ident.strip()}
    return {"type": "user", "id": actor}


def _get_job(store: Store, job_id: str) -> Job:
    job = store.get_job(job_id)
    if job is None:
        raise unknown_job(job_id, ((other.id, other.kind) for other in store.list_jobs(limit=1000)))
    return job


def _counts(store: Store, job_id: str, cap: int | None = None) -> tuple[dict[str, int], bool]:
    """The job's occurrences per status, and whether they are lower bounds (with ``cap``: the
    counts of its newest ``cap`` occurrences, all lower bounds when it has that many)."""
    counts: dict[str, int] = {}
    capped = False
    for row in store.count_occurrences(job_id=job_id, cap=cap):
        counts[row.status] = counts.get(row.status, 0) + row.count
        capped = capped or row.capped
    return counts, capped


def _pretty(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _job_text(
    ctx: Context, job: Job, counts: dict[str, int] | None = None, capped: bool = False
) -> str:
    lines = [
        f"job:          {job.id}",
        f"kind:         {job.kind}",
        f"state:        {'enabled' if job.enabled else 'disabled'}",
        f"revision:     {job.revision}",
        f"schedule:     {describe_trigger(job.trigger) or 'none (enqueued by callers)'}",
        f"max attempts: {job.max_attempts}",
        f"payload:      {_pretty(job.payload)}",
        f"authority:    {_pretty(job.authority)}",
        f"trigger:      {_pretty(job.trigger)}",
        f"created:      {ctx.when(job.created_at)}",
        f"updated:      {ctx.when(job.updated_at)}",
    ]
    if job.operator_fields:
        lines.append(
            f"set by:       an operator ({', '.join(job.operator_fields)}: stands until an "
            "operator changes it, or the app's declaration of it changes)"
        )
    if counts is not None:
        mark = "≥" if capped else ""
        shown = ", ".join(f"{status} {mark}{n}" for status, n in sorted(counts.items())) or "none"
        if capped:
            shown += f" (of its newest {COUNT_CAP})"
        lines.append(f"occurrences:  {shown}")
    return "\n".join(lines)


# -- commands --------------------------------------------------------------------------------


def run_list(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.open_store() as store:
        jobs = store.list_jobs(after=args.after, limit=args.limit)
    next_after = jobs[-1].id if len(jobs) == args.limit else None
    document = {"jobs": [job_json(job) for job in jobs], "nextAfter": next_after}

    def text() -> str:
        if not jobs:
            return "no jobs"
        columns = [
            Column("JOB", max_width=40),
            Column("KIND", max_width=28),
            Column("STATE", style=status_style),
            Column("REV", align="right"),
            Column("SCHEDULE", max_width=60),
            Column("UPDATED", shrink=False),
        ]
        rows = [
            [
                job.id,
                job.kind,
                "enabled" if job.enabled else "disabled",
                str(job.revision),
                describe_trigger(job.trigger) or "-",
                ctx.when(job.updated_at),
            ]
            for job in jobs
        ]
        return render_table(columns, rows, width=ctx.width, color=ctx.color)

    ctx.emit(document, text)
    if next_after is not None and not ctx.json:
        ctx.note(f"more: jobledger job list --after {next_after}")
    return 0


def run_show(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.open_store() as store:
        job = _get_job(store, args.job_id)
        counts, capped = _counts(store, job.id, COUNT_CAP)
    document = {"job": job_json(job), "occurrences": counts, "occurrencesCapped": capped}
    ctx.emit(document, lambda: _job_text(ctx, job, counts, capped))
    return 0


def _authority(ctx: Context, args: argparse.Namespace, base: dict[str, Any] | None) -> Any:
    """The authority envelope: ``base`` (the current one) with the flags given applied."""
    authority: dict[str, Any] = (
        {"principal": principal_from_actor(ctx.actor)} if base is None else dict(base)
    )
    if args.principal is not None:
        authority["principal"] = args.principal
    if args.workspace is not None:
        authority["workspaceId"] = args.workspace
    if args.tenant is not None:
        authority["tenantId"] = args.tenant
    return authority


def run_add(ctx: Context, args: argparse.Namespace) -> int:
    trigger = trigger_from_flags(args, current=None)
    with ctx.open_store() as store:
        job = store.create_job(
            id=args.job_id,
            kind=args.kind,
            authority=_authority(ctx, args, None),
            trigger=trigger,
            payload=None if args.payload is UNSET else args.payload,
            enabled=not args.disabled,
            max_attempts=contract.DEFAULT_MAX_ATTEMPTS
            if args.max_attempts is None
            else args.max_attempts,
            actor=ctx.actor,
        )
    document = {"job": job_json(job)}
    schedule = describe_trigger(job.trigger)
    ctx.emit(
        document,
        lambda: (
            f"created job {job.id} (kind {job.kind}, revision {job.revision}"
            f"{', disabled' if not job.enabled else ''}): "
            f"{schedule or 'enqueued by callers (jobledger enqueue)'}"
        ),
    )
    return 0


def _update(
    ctx: Context, store: Store, job: Job, wanted: dict[str, Any], expected: int | None
) -> tuple[Job, list[str]]:
    patch = job.changes_to(wanted)
    if expected is not None and expected != job.revision:
        # Let the store refuse it, with its own code and details.
        patch = patch or wanted
    if not patch:
        return job, []
    updated = store.update_job(
        job.id,
        expected_revision=job.revision if expected is None else expected,
        patch=patch,
        actor=ctx.actor,
    )
    return updated, sorted(patch)


def run_update(ctx: Context, args: argparse.Namespace) -> int:
    definition_given = args.payload is not UNSET or any(
        value is not None
        for value in (
            args.kind,
            args.max_attempts,
            args.principal,
            args.workspace,
            args.tenant,
        )
    )
    if not definition_given and not schedule_flags_given(args):
        raise _nothing_to_update()
    with ctx.open_store() as store:
        job = _get_job(store, args.job_id)
        wanted: dict[str, Any] = {}
        if args.kind is not None:
            wanted["kind"] = args.kind
        if args.payload is not UNSET:
            wanted["payload"] = args.payload
        if args.max_attempts is not None:
            wanted["max_attempts"] = args.max_attempts
        if args.principal is not None or args.workspace is not None or args.tenant is not None:
            wanted["authority"] = _authority(ctx, args, job.authority)
        if schedule_flags_given(args):
            wanted["trigger"] = trigger_from_flags(args, current=job.trigger)
        updated, changed = _update(ctx, store, job, wanted, args.expected_revision)
    document = {"job": job_json(updated), "changed": changed}
    ctx.emit(
        document,
        lambda: (
            f"updated job {updated.id} to revision {updated.revision}: {', '.join(changed)}"
            if changed
            else f"job {updated.id} already says that; nothing changed "
            f"(revision {updated.revision})"
        ),
    )
    return 0


def _nothing_to_update() -> Exception:
    from .parsing import UsageError

    return UsageError(
        "nothing to update: give at least one of --kind, --payload, --max-attempts, "
        "--principal, --workspace, --tenant or a schedule option",
        prog="jobledger job update",
    )


def run_toggle(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.open_store() as store:
        job = _get_job(store, args.job_id)
        updated, changed = _update(
            ctx, store, job, {"enabled": args.enabled}, args.expected_revision
        )
    state = "enabled" if updated.enabled else "disabled"
    document = {"job": job_json(updated), "changed": changed}
    ctx.emit(
        document,
        lambda: (
            f"{state} job {updated.id} (revision {updated.revision})"
            if changed
            else f"job {updated.id} is already {state}; nothing changed"
        ),
    )
    return 0


def run_remove(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.open_store() as store:
        job = _get_job(store, args.job_id)
        counts, _ = _counts(store, job.id)
        live = sum(counts.get(status, 0) for status in contract.LIVE_STATUSES)
        if not live:  # with live occurrences the store refuses: no point asking first
            settled = sum(counts.values())
            ctx.confirm(
                f"Remove job {job.id} (kind {job.kind}) with its {settled} settled "
                "occurrence(s) and their events?"
            )
        removed = store.remove_job(
            job.id,
            expected_revision=job.revision
            if args.expected_revision is None
            else args.expected_revision,
            actor=ctx.actor,
            reason=args.reason,
        )
    document = {"removed": removed, "actor": ctx.actor}
    ctx.emit(
        document,
        lambda: (
            f"removed job {job.id}: {removed.get('occurrences', 0)} occurrence(s), "
            f"{removed.get('events', 0)} event(s); recorded in the audit log as {ctx.actor}"
        ),
    )
    return 0


def run_backfill(ctx: Context, args: argparse.Namespace) -> int:
    from ..planning.backfill import backfill

    with ctx.open_store() as store:
        created = backfill(store, args.job_id, start=args.start, end=args.end, actor=ctx.actor)
    document = {
        "jobId": args.job_id,
        "from": iso_utc(args.start),
        "to": iso_utc(args.end),
        "created": [occurrence_json(occurrence) for occurrence in created],
        "actor": ctx.actor,
    }

    def text() -> str:
        if not created:
            return f"backfilled job {args.job_id}: every slot in the range has an occurrence"
        lines = [f"backfilled job {args.job_id}: {len(created)} slot(s) enqueued"]
        lines += [f"  {o.id}  {iso_utc(o.scheduled_for)}" for o in created[:20]]
        if len(created) > 20:
            lines.append(f"  … and {len(created) - 20} more (--json lists every one)")
        return "\n".join(lines)

    ctx.emit(document, text)
    return 0
