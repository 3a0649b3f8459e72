"""``jobledger explain JOB`` (when will it fire, and why didn't it?) and ``jobledger plan`` (one
planner pass now)."""

from __future__ import annotations

import argparse
from typing import Any

from ..planning.explain import MAX_EXPLAIN_COUNT, explain
from ..planning.planner import Planner, PlanReport
from .context import Context
from .output import occurrence_json, short_id
from .parsing import add_command, int_within, job_arg
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
    parser.add_argument("job_id", metavar="JOB", type=job_arg)
    parser.add_argument(
        "--count",
        metavar="N",
        type=int_within(1, MAX_EXPLAIN_COUNT),
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


def run_explain(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.open_store() as store:
        explanation = explain(store, args.job_id, count=args.count)
    ctx.emit(
        explanation.to_dict(),
        lambda: explanation.render(when=ctx.when, duration=format_duration),
    )
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
        rows = [[short_id(o.id), o.job_id, ctx.when(o.scheduled_for)] for o in report.enqueued]
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
