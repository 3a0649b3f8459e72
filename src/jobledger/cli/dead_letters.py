"""``jobledger dead-letter list | requeue``: the failures that ran out of attempts."""

from __future__ import annotations

import argparse
from typing import Any

from ..contract import MAX_HISTORY_LIMIT
from ..errors import RequeueConflict
from ..store import Store
from .bulk import Failure, apply_each, resolve_targets
from .context import Context
from .occurrences import OCCURRENCE_HELP, get_occurrence
from .output import occurrence_json, occurrences_table
from .parsing import UsageError, add_command, add_group, int_within, job_arg, positive_arg

__all__ = ["register"]

PAGE = 1000


def register(subparsers: Any) -> None:
    commands = add_group(
        subparsers,
        "dead-letter",
        aliases=("dead-letters",),
        help="list dead letters and requeue them (one more attempt each)",
    )
    listing = add_command(
        commands,
        "list",
        aliases=("ls",),
        help="dead letters, most recently settled first",
        description=(
            "Dead letters, most recently settled first, at most --limit of them (the store's\n"
            f"dead-letter read returns at most {MAX_HISTORY_LIMIT}). For all of them, page\n"
            "through `jobledger occurrence list --status dead_letter` (newest first)."
        ),
    )
    listing.add_argument("--job", metavar="JOB", type=job_arg, help="only this job's dead letters")
    listing.add_argument(
        "--limit",
        metavar="N",
        type=int_within(1, MAX_HISTORY_LIMIT),
        default=50,
        help=f"at most N, 1..{MAX_HISTORY_LIMIT} (default: 50)",
    )
    listing.set_defaults(handler=run_list)

    requeue = add_command(
        commands,
        "requeue",
        help="give dead letters exactly one more attempt (audited)",
        description=(
            "Give dead letters exactly one more attempt: each becomes retry_wait, claimable now,\n"
            "with its attempt count, fence and last error kept. Name them, or take --all (of\n"
            "--job). Each requeue is checked against the dead letter's fence as read here\n"
            "(--expected-fence to pin it), so two operators cannot requeue one failure twice\n"
            "(SCHEDULER_REQUEUE_EVIDENCE_CONFLICT, exit 4). --actor and --reason are recorded.\n"
            "An outcome-unknown dead letter is refused (SCHEDULER_REQUEUE_NEEDS_ADJUDICATION):\n"
            "decide it with `jobledger adjudicate decide`, or pass --override-adjudication.\n"
            "Several at once ask for confirmation unless --yes; progress goes to stderr."
        ),
    )
    requeue.add_argument("occurrence_ids", metavar="OCCURRENCE", nargs="*", help=OCCURRENCE_HELP)
    requeue.add_argument("--all", action="store_true", help="every dead letter (of --job)")
    requeue.add_argument(
        "--job", metavar="JOB", type=job_arg, help="with --all: only this job's dead letters"
    )
    requeue.add_argument("--reason", required=True, help="why (recorded in the audit log)")
    requeue.add_argument(
        "--expected-fence",
        metavar="N",
        type=positive_arg,
        help="with one OCCURRENCE: refuse unless it is a dead letter at this fence",
    )
    requeue.add_argument(
        "--revive-children",
        action="store_true",
        help=(
            "its descendants cancelled because of it (parent_failed) go back to blocked and "
            "follow its new run"
        ),
    )
    requeue.add_argument(
        "--override-adjudication",
        action="store_true",
        help=(
            "requeue an outcome-unknown dead letter without a decision (runs its side effect "
            "again; recorded in the audit log) — `jobledger adjudicate decide` is the normal way"
        ),
    )
    requeue.set_defaults(handler=run_requeue)


def run_list(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.open_store() as store:
        dead = store.list_dead_letters(job_id=args.job, limit=args.limit)
    document = {"occurrences": [occurrence_json(o) for o in dead]}
    ctx.emit(
        document,
        lambda: (
            occurrences_table(ctx, dead, show_job=args.job is None) if dead else "no dead letters"
        ),
    )
    if len(dead) == args.limit and not ctx.json:
        job = f" --job {args.job}" if args.job else ""
        ctx.note(f"more may exist: jobledger occurrence list --status dead_letter{job}")
    return 0


def _all_dead_letters(store: Store, job_id: str | None) -> dict[str, int]:
    """Every dead letter (of ``job_id``) and its fence, read page by page before acting."""
    found: dict[str, int] = {}
    cursor: str | None = None
    while True:
        page = store.list_occurrences(
            status="dead_letter", job_id=job_id, limit=PAGE, cursor=cursor
        )
        for occurrence in page.items:
            found[occurrence.id] = occurrence.fence
        cursor = page.next_cursor
        if cursor is None:
            return found


def run_requeue(ctx: Context, args: argparse.Namespace) -> int:
    prog = "jobledger dead-letter requeue"
    if args.all == bool(args.occurrence_ids):
        raise UsageError("name the dead letters to requeue, or pass --all (not both)", prog=prog)
    if args.job is not None and not args.all:
        raise UsageError("--job applies only with --all", prog=prog)
    if args.expected_fence is not None and len(args.occurrence_ids) != 1:
        raise UsageError("--expected-fence applies to exactly one OCCURRENCE", prog=prog)
    with ctx.open_store() as store:
        unknown: list[Failure] = []
        if args.all:
            fences = _all_dead_letters(store, args.job)
            scope = f" of job {args.job}" if args.job else ""
            if not fences:
                ctx.emit(
                    {"requeued": [], "failed": [], "actor": ctx.actor}, f"no dead letters{scope}"
                )
                return 0
            ctx.confirm(f"Requeue all {len(fences)} dead letter(s){scope}?")
        else:
            targets, unknown = resolve_targets(ctx, store, args.occurrence_ids)
            if len(targets) > 1:
                ctx.confirm(f"Requeue {len(targets)} dead letters?")
            fences = dict.fromkeys(targets, -1)  # read just before each requeue, below

        def requeue(key: str) -> Any:
            fence = fences[key]
            if args.expected_fence is not None:
                fence = args.expected_fence
            elif fence < 0:
                current = get_occurrence(store, key)
                if current.status != "dead_letter":  # its fence proves nothing: say why
                    raise RequeueConflict(
                        f"{key} is {current.status}, not a dead letter: only dead letters can "
                        "be requeued",
                        details={"status": current.status, "fence": current.fence},
                    )
                fence = current.fence
            return store.requeue_dead_letter(
                occurrence_id=key,
                expected_fence=fence,
                reason=args.reason,
                actor=ctx.actor,
                revive_children=args.revive_children,
                override_adjudication=args.override_adjudication,
            )

        outcome = apply_each(ctx, list(fences), requeue, verb="requeued", failed=unknown)
    document = {**outcome.document("requeued"), "actor": ctx.actor}

    def text() -> str:
        lines = [
            f"requeued {o.id} (job {o.job_id}): attempt {o.attempt + 1} of {o.max_attempts} "
            "is claimable now"
            for o in outcome.done
        ]
        if outcome.failed:
            lines.append(f"{len(outcome.failed)} could not be requeued (see above)")
        return "\n".join(lines)

    ctx.emit(document, text)
    return outcome.exit_code()
