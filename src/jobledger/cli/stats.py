"""``jobledger stats``: what is queued, what is stuck, who holds it, how fast work goes."""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from datetime import timedelta
from typing import Any

from ..contract import OCCURRENCE_STATUSES
from ..models import COUNT_CAP
from .context import Context
from .parsing import add_command, duration_within, timedelta_ms
from .table import Column, render_table
from .timefmt import format_duration, iso_utc

__all__ = ["register"]

MAX_WINDOW = timedelta(days=7)
MIN_WINDOW = timedelta(minutes=1)  # throughput is counted per minute
MINUTE_MS = 60_000


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers,
        "stats",
        help="counts by status and kind, oldest due work, lease holders, workers, throughput",
        description=(
            "A picture of the store now: occurrences by kind and status; per kind, the most\n"
            "overdue claimable occurrence (what the next claim takes) and how long it waited;\n"
            "who holds leases and until when; the workers that announced themselves; and\n"
            "settlements per minute over --window."
        ),
    )
    parser.add_argument(
        "--window",
        metavar="DURATION",
        type=duration_within(minimum=MIN_WINDOW, maximum=MAX_WINDOW),
        default=timedelta(minutes=15),
        help="how far back throughput is counted, 1m..7d (default: 15m)",
    )
    parser.set_defaults(handler=run_stats)


def run_stats(ctx: Context, args: argparse.Namespace) -> int:
    window_ms = timedelta_ms(args.window)
    with ctx.open_store() as store:
        now = store.now()
        target = store.target
        counts = store.count_occurrences(cap=COUNT_CAP)
        due = store.oldest_due()
        holders = store.lease_holders()
        workers = store.list_workers()
        since = max(0, now - window_ms)
        buckets = store.throughput(since=since)

    by_kind: dict[str, Counter[str]] = defaultdict(Counter)
    by_status: Counter[str] = Counter()
    # Each (kind, status) is counted up to COUNT_CAP: a count that reached it (and any total
    # over it) is a lower bound, shown as "≥ n".
    capped: dict[str, set[str]] = defaultdict(set)
    for row in counts:
        by_kind[row.kind][row.status] += row.count
        by_status[row.status] += row.count
        if row.capped:
            capped[row.kind].add(row.status)
    capped_statuses = set().union(*capped.values()) if capped else set()

    def shown(kind: str | None, status: str) -> str:
        if kind is None:
            value, bound = by_status[status], status in capped_statuses
        else:
            value, bound = by_kind[kind][status], status in capped[kind]
        return f"≥{value}" if bound else str(value)

    per_minute: dict[int, Counter[str]] = defaultdict(Counter)
    totals: Counter[str] = Counter()
    for bucket in buckets:
        minute = per_minute[bucket.minute]
        for name, value in (
            ("succeeded", bucket.succeeded),
            ("retried", bucket.retried),
            ("deadLettered", bucket.dead_lettered),
        ):
            minute[name] += value
            totals[name] += value
    settled = totals["succeeded"] + totals["retried"] + totals["deadLettered"]
    minutes = max(window_ms / MINUTE_MS, 1 / 60)
    rate = round(settled / minutes, 3)

    document = {
        "target": target,
        "now": iso_utc(now),
        "occurrences": {
            "byStatus": {status: by_status[status] for status in OCCURRENCE_STATUSES},
            "byKind": {
                kind: {status: by_kind[kind][status] for status in OCCURRENCE_STATUSES}
                for kind in sorted(by_kind)
            },
            "cap": COUNT_CAP,
            "capped": {kind: sorted(capped[kind]) for kind in sorted(capped)},
        },
        "oldestDue": [
            {
                "kind": item.kind,
                "occurrenceId": item.occurrence_id,
                "jobId": item.job_id,
                "status": item.status,
                "dueAt": iso_utc(item.due_at),
                "waitingMs": max(0, now - item.due_at),
            }
            for item in due
        ],
        "leaseHolders": [
            {
                "ownerId": holder.owner_id,
                "leases": holder.leases,
                "earliestExpiry": iso_utc(holder.earliest_expiry),
                "latestExpiry": iso_utc(holder.latest_expiry),
            }
            for holder in holders
        ],
        "workers": [
            {
                "workerId": worker.worker_id,
                "hostname": worker.hostname,
                "pid": worker.pid,
                "startedAt": iso_utc(worker.started_at),
                "lastSeenAt": iso_utc(worker.last_seen_at),
                "stuckSlots": _stuck_slots(worker.info),
                "info": worker.info,
            }
            for worker in workers
        ],
        "throughput": {
            "since": iso_utc(since),
            "windowMs": window_ms,
            "perMinute": [
                {"minute": iso_utc(minute), **{k: per_minute[minute][k] for k in _KEYS}}
                for minute in sorted(per_minute)
            ],
            "byKind": [
                {
                    "minute": iso_utc(bucket.minute),
                    "kind": bucket.kind,
                    "succeeded": bucket.succeeded,
                    "retried": bucket.retried,
                    "deadLettered": bucket.dead_lettered,
                }
                for bucket in buckets
            ],
            "totals": {key: totals[key] for key in _KEYS},
            "settledPerMinute": rate,
        },
    }

    def text() -> str:
        sections = [f"store {target} at {ctx.when(now)}"]
        statuses = list(OCCURRENCE_STATUSES)
        columns = [Column("KIND", max_width=32)] + [
            Column(status.upper(), align="right") for status in statuses
        ]
        rows = [[kind] + [shown(kind, status) for status in statuses] for kind in sorted(by_kind)]
        if len(rows) > 1:
            rows.append(["(all)"] + [shown(None, status) for status in statuses])
        counted = f" (each counted up to {COUNT_CAP}: ≥ marks more)" if capped else ""
        sections.append(
            f"occurrences by kind and status{counted}\n"
            + (render_table(columns, rows, width=ctx.width, color=ctx.color) if rows else "  none")
        )
        if due:
            table = render_table(
                [
                    Column("KIND", max_width=32),
                    Column("OCCURRENCE", shrink=False),
                    Column("JOB", max_width=32),
                    Column("STATUS"),
                    Column("DUE AT", shrink=False),
                    Column("WAITING", align="right"),
                ],
                [
                    [
                        item.kind,
                        item.occurrence_id,
                        item.job_id,
                        item.status,
                        ctx.when(item.due_at),
                        format_duration(max(0, now - item.due_at)),
                    ]
                    for item in due
                ],
                width=ctx.width,
                color=ctx.color,
            )
        else:
            table = "  nothing is due"
        sections.append("oldest due (what the next claim of each kind takes)\n" + table)
        if holders:
            table = render_table(
                [
                    Column("OWNER"),
                    Column("LEASES", align="right"),
                    Column("EARLIEST EXPIRY", shrink=False),
                    Column("LATEST EXPIRY", shrink=False),
                ],
                [
                    [
                        holder.owner_id,
                        str(holder.leases),
                        ctx.when(holder.earliest_expiry),
                        ctx.when(holder.latest_expiry),
                    ]
                    for holder in holders
                ],
                width=ctx.width,
                color=ctx.color,
            )
        else:
            table = "  no live leases"
        sections.append("lease holders\n" + table)
        if workers:
            table = render_table(
                [
                    Column("WORKER"),
                    Column("HOST", max_width=24),
                    Column("PID", align="right"),
                    Column("KINDS", max_width=40),
                    Column("SLOTS", align="right"),
                    Column("STUCK", align="right"),
                    Column("STARTED", shrink=False),
                    Column("LAST SEEN", align="right"),
                ],
                [
                    [
                        worker.worker_id,
                        worker.hostname,
                        str(worker.pid),
                        ",".join(str(k) for k in worker.info.get("kinds", [])),
                        str(worker.info.get("concurrency", "")),
                        str(_stuck_slots(worker.info)),
                        ctx.when(worker.started_at),
                        ctx.ago(worker.last_seen_at, now),
                    ]
                    for worker in workers
                ],
                width=ctx.width,
                color=ctx.color,
            )
            for worker in workers:
                stuck = _stuck_slots(worker.info)
                if stuck:
                    ids = worker.info.get("stuckOccurrences")
                    held_by = ", ".join(str(o) for o in ids) if isinstance(ids, list) else ""
                    table += (
                        f"\n  {worker.worker_id}: {stuck} slot(s) stuck in a handler past its "
                        f"time limit ({held_by or 'occurrences not reported'})"
                    )
        else:
            table = "  none running"
        sections.append("workers\n" + table)
        header = f"throughput over the last {format_duration(window_ms)}"
        if per_minute:
            table = render_table(
                [
                    Column("MINUTE", shrink=False),
                    Column("SUCCEEDED", align="right"),
                    Column("RETRIED", align="right"),
                    Column("DEAD LETTERED", align="right"),
                ],
                [
                    [ctx.when(minute)] + [str(per_minute[minute][k]) for k in _KEYS]
                    for minute in sorted(per_minute)
                ],
                width=ctx.width,
                color=ctx.color,
            )
        else:
            table = "  nothing settled"
        summary = (
            f"{settled} settled ({rate:g}/min): {totals['succeeded']} succeeded, "
            f"{totals['retried']} retried, {totals['deadLettered']} dead-lettered"
        )
        sections.append(f"{header}\n{table}\n{summary}")
        return "\n\n".join(sections)

    ctx.emit(document, text)
    return 0


_KEYS = ("succeeded", "retried", "deadLettered")


def _stuck_slots(info: dict[str, Any]) -> int:
    """Slots the worker reported stuck in a handler past its time limit (0 for workers that do
    not report it)."""
    value = info.get("stuckSlots", 0)
    return value if type(value) is int and value >= 0 else 0
