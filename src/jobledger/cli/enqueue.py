"""``jobledger enqueue JOB``: record runs of a job now, at an instant or after a delay.

It goes through :meth:`jobledger.App.enqueue` / :meth:`~jobledger.App.enqueue_many` on the
opened store, so an occurrence enqueued here has exactly the identity the library gives it:
with ``--key K`` the same (job, revision, instant, ``key:K``) as ``app.enqueue(job, key=K, at=…)``
— enqueue it again and you get the same occurrence back (``deduplicated``).
"""

from __future__ import annotations

import argparse
from typing import Any

from ..app import App
from ..contract import MAX_ENQUEUE_BATCH
from ..errors import InvalidArgument
from ..models import UNSET
from .context import Context
from .output import occurrence_json
from .parsing import add_command, duration_arg, instant_arg, int_within, job_arg, json_arg

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers,
        "enqueue",
        help="enqueue runs of a job: now, --at an instant or after --delay",
        description=(
            "Enqueue runs of a job: now, --at an instant, or after --delay. Each call makes a\n"
            "new occurrence, unless --key names it: the first enqueue with a key makes the\n"
            "occurrence, every later one returns that same occurrence (deduplicated). The\n"
            "payload defaults to the job's. A disabled job refuses (exit 4)."
        ),
    )
    parser.add_argument("job_id", metavar="JOB", type=job_arg)
    when = parser.add_mutually_exclusive_group()
    when.add_argument(
        "--at",
        metavar="INSTANT",
        type=instant_arg,
        help="when it is due: 2026-01-01T09:00:00Z, …+01:00, or @<epoch ms> (default: now)",
    )
    when.add_argument(
        "--delay",
        metavar="DURATION",
        type=duration_arg,
        help="due this long from now (the store's clock), e.g. 30s, 5m, PT1H",
    )
    parser.add_argument(
        "--key",
        metavar="KEY",
        help="an idempotency key (an order id, a request id): one occurrence per key",
    )
    parser.add_argument(
        "--payload",
        metavar="JSON",
        type=json_arg,
        default=UNSET,
        help="this run's payload: JSON, @FILE or - (stdin) (default: the job's)",
    )
    parser.add_argument(
        "--tag",
        metavar="TAG",
        action="append",
        dest="tags",
        help="a tag to find it by (repeatable): customer:21, vip",
    )
    parser.add_argument(
        "--meta",
        metavar="JSON",
        type=json_arg,
        help="metadata shown with it: a JSON object, @FILE or - (stdin)",
    )
    parser.add_argument(
        "--count",
        metavar="N",
        type=int_within(1, MAX_ENQUEUE_BATCH),
        default=1,
        help=f"enqueue N occurrences in one transaction, 1..{MAX_ENQUEUE_BATCH:,} (default: 1)",
    )
    parser.set_defaults(handler=run_enqueue)


def run_enqueue(ctx: Context, args: argparse.Namespace) -> int:
    if args.count > 1 and args.key is not None:
        raise InvalidArgument(
            "--key names one occurrence; it cannot be combined with --count",
            details={"field": "--count"},
        )
    payload = args.payload
    with ctx.open_store() as store:
        app = App(store, name="cli")
        if args.count == 1:
            occurrences = [
                app.enqueue(
                    args.job_id,
                    payload=payload,
                    key=args.key,
                    at_ms=args.at,
                    delay=args.delay,
                    tags=args.tags,
                    meta=args.meta,
                )
            ]
        else:
            occurrences = app.enqueue_many(
                args.job_id,
                [payload] * args.count,
                at_ms=args.at,
                delay=args.delay,
                tags=args.tags,
                meta=args.meta,
            )
    document = {
        "occurrences": [{**occurrence_json(o), "deduplicated": o.deduplicated} for o in occurrences]
    }

    def text() -> str:
        if len(occurrences) == 1:
            o = occurrences[0]
            verb = "already enqueued" if o.deduplicated else "enqueued"
            return f"{verb} {o.id} (job {o.job_id}, due {ctx.when(o.available_at)}, {o.status})"
        first = occurrences[0]
        return (
            f"enqueued {len(occurrences)} occurrences of job {first.job_id}, "
            f"due {ctx.when(first.available_at)}"
        )

    ctx.emit(document, text)
    return 0
