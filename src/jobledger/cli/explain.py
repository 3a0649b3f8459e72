"""``jobledger explain JOB`` (when will it fire, and why didn't it?) and ``jobledger plan`` (one
planner pass now)."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from ..durations import epoch_ms_from
from ..planning.explain import MAX_EXPLAIN_COUNT, Explanation, explain
from ..planning.planner import Planner, PlanReport
from ..schedules import Cron
from ..schedules.zones import load_zone
from .context import Context
from .output import occurrence_json
from .parsing import add_command, positive_arg
from .table import Column, render_table
from .timefmt import format_duration, iso_utc

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers,
        "explain",
        help="when will a job fire next, and why didn't it fire?",
        description=(
            "When will a job fire next, and why didn't it? Prints the schedule in words, the\n"
            "next fire times (from the store's clock) with DST notes, the misfire policy, the\n"
            "last slot the planner decided, recent skipped slots and why, and the newest\n"
            "occurrence with its status, lease holder and lease expiry."
        ),
    )
    parser.add_argument("job_id", metavar="JOB")
    parser.add_argument(
        "--count",
        metavar="N",
        type=positive_arg,
        default=5,
        help=f"next fire times to show, 1..{MAX_EXPLAIN_COUNT} (default: 5)",
    )
    parser.set_defaults(handler=run_explain)

    plan = add_command(
        subparsers,
        "plan",
        help="run one planner pass now and print what it enqueued and skipped",
        description=(
            "Run one planner pass now: every due slot of every schedule becomes an occurrence\n"
            "(or is skipped by its misfire policy). Workers plan on their own (--planner); this\n"
            "is for stores without a planning worker, cron-driven set-ups and checking."
        ),
    )
    plan.set_defaults(handler=run_plan)


def _ms(moment: datetime) -> int:
    return epoch_ms_from(moment, "instant")


def _wall(e: Explanation, moment: datetime) -> str:
    """For a cron schedule in another zone than UTC, the slot's wall time in that zone."""
    if not isinstance(e.trigger, Cron) or e.trigger.timezone in ("UTC", "Etc/UTC"):
        return ""
    local = moment.astimezone(load_zone(e.trigger.timezone))
    return f"  ({local.strftime('%Y-%m-%d %H:%M')} {e.trigger.timezone})"


def _explanation_text(ctx: Context, e: Explanation) -> str:
    state = "enabled" if e.enabled else "disabled"
    lines = [f"job {e.job_id} (kind {e.kind}, revision {e.revision}, {state})"]
    if not e.is_schedule:
        lines.append("schedule: none (occurrences are enqueued by callers)")
    if e.schedule is not None:
        lines.append(f"schedule: {e.schedule}")
    if e.misfire is not None:
        policy = e.misfire
        limit = f", catch-up limit {policy.catch_up_limit}" if policy.misfire == "catch_up" else ""
        jitter = format_duration(policy.jitter_ms) if policy.jitter_ms else "none"
        lines.append(
            f"misfire: {policy.misfire}, grace {format_duration(policy.misfire_grace_ms)}"
            f"{limit}, jitter {jitter}"
        )
    if e.is_schedule:
        lines.append(f"next fire times (from {ctx.when(_ms(e.now))}):")
        lines.extend(f"  {ctx.when(_ms(moment))}{_wall(e, moment)}" for moment in e.next_fire_times)
        if not e.next_fire_times:
            lines.append("  none")
        lines.extend(f"  note: {note}" for note in e.notes)
        last = "never" if e.last_planned is None else ctx.when(_ms(e.last_planned))
        lines.append(f"last planned slot: {last}")
        if e.next_due_at is not None:
            lines.append(f"next planner look: {ctx.when(_ms(e.next_due_at))}")
    occurrence = e.current_occurrence
    if occurrence is None:
        lines.append("current occurrence: none")
    else:
        lines.append(
            f"current occurrence: {occurrence.id} {occurrence.status} "
            f"(slot {ctx.when(occurrence.scheduled_for)}, attempt {occurrence.attempt} of "
            f"{occurrence.max_attempts})"
        )
        if occurrence.lease_owner is not None:
            lines.append(
                f"  lease: held by {occurrence.lease_owner} until "
                f"{ctx.when(occurrence.lease_expires_at)}"
            )
    if e.recent_skips:
        lines.append("recent skips (newest first):")
        for skip in e.recent_skips:
            count = "more than 10,000" if skip.count is None else f"{skip.count:,}"
            span = ctx.when(skip.scheduled_for)
            if skip.last != skip.scheduled_for:
                span += f" … {ctx.when(skip.last)}"
            lines.append(f"  {span}: {count} slot(s) skipped ({skip.reason}, rev {skip.revision})")
    lines.extend(f"remark: {remark}" for remark in e.remarks)
    return "\n".join(lines)


def run_explain(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.open_store() as store:
        explanation = explain(store, args.job_id, count=args.count)
    ctx.emit(explanation.to_dict(), lambda: _explanation_text(ctx, explanation))
    return 0


def _plan_json(report: PlanReport) -> dict[str, Any]:
    return {
        "now": iso_utc(report.now),
        "enqueued": [occurrence_json(o) for o in report.enqueued],
        "skipped": [
            {
                "jobId": skip.job_id,
                "first": iso_utc(skip.scheduled_for),
                "last": iso_utc(skip.last),
                "count": skip.count,
                "reason": skip.reason,
            }
            for skip in report.skipped
        ],
        "nextDueAt": iso_utc(report.next_due_at),
        "plannedJobs": report.planned_jobs,
        "lostRaces": report.lost_races,
        "unreadable": list(report.unreadable),
    }


def _plan_text(ctx: Context, report: PlanReport) -> str:
    lines = [
        f"planned {report.planned_jobs} job(s) at {ctx.when(report.now)}: "
        f"{len(report.enqueued)} enqueued, {len(report.skipped)} skipped run(s)"
    ]
    if report.enqueued:
        columns = [Column("OCCURRENCE", shrink=False), Column("JOB"), Column("SLOT")]
        rows = [[o.id, o.job_id, ctx.when(o.scheduled_for)] for o in report.enqueued]
        lines.append(render_table(columns, rows, width=ctx.width, color=ctx.color))
    if report.skipped:
        columns = [
            Column("JOB"),
            Column("FIRST SLOT"),
            Column("LAST SLOT"),
            Column("COUNT", align="right"),
            Column("REASON"),
        ]
        rows = [
            [
                skip.job_id,
                ctx.when(skip.scheduled_for),
                ctx.when(skip.last),
                "> 10,000" if skip.count is None else str(skip.count),
                skip.reason,
            ]
            for skip in report.skipped
        ]
        lines.append(render_table(columns, rows, width=ctx.width, color=ctx.color))
    if report.lost_races:
        lines.append(f"{report.lost_races} decision(s) were made by another planner first")
    if report.unreadable:
        lines.append(f"unreadable schedules (written by a newer jobledger?): {report.unreadable}")
    nxt = "none waiting" if report.next_due_at is None else ctx.when(report.next_due_at)
    lines.append(f"next slot due: {nxt}")
    return "\n".join(lines)


def run_plan(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.open_store() as store:
        report = Planner(store).tick()
    ctx.emit(_plan_json(report), lambda: _plan_text(ctx, report))
    return 0
