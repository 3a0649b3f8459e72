"""``jobledger adjudicate list | show | decide``: occurrences whose outcome is unknown (SPEC §9).

``decide`` reads the case, shows its evidence, asks for confirmation (``--yes`` answers), and
records the decision with the case's evidence digest as read — so a case that changed meanwhile
is refused (``SCHEDULER_ADJUDICATION_EVIDENCE_CONFLICT``, exit 4) instead of being decided on
stale evidence. ``--evidence-digest`` pins the digest the operator saw elsewhere (the dashboard).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..contract import NO_RESULT
from ..models import MAX_CASES, AdjudicationCase
from .context import Context
from .occurrences import OCCURRENCE_HELP, get_occurrence
from .output import short_id
from .parsing import add_command, add_group, int_within, json_arg
from .table import Column, render_table

__all__ = ["register"]


def register(subparsers: Any) -> None:
    commands = add_group(
        subparsers,
        "adjudicate",
        aliases=("adjudication",),
        help="decide occurrences whose outcome is unknown (applied / not applied)",
    )
    listing = add_command(
        commands,
        "list",
        aliases=("ls",),
        help="open cases: outcome-unknown dead letters without a decision",
        description=(
            "Open cases, most recently settled first: dead letters whose error code ends in\n"
            '_OUTCOME_UNKNOWN (a lost worker of an on_lost_lease="adjudicate" kind, or a\n'
            "handler that raised OutcomeUnknown) and that nobody has decided yet. One case per\n"
            "lost attempt: a re-run granted by not_applied that is lost again is a new case.\n"
            "STARTED is when the lost attempt's handler began ('-': unknown, an older case);\n"
            "a claim whose handler never began is run again, never made a case."
        ),
    )
    listing.add_argument(
        "--limit",
        metavar="N",
        type=int_within(1, MAX_CASES),
        default=50,
        help=f"at most N, 1..{MAX_CASES} (default: 50)",
    )
    listing.set_defaults(handler=run_list)

    show = add_command(commands, "show", help="one case: its evidence, digest and decision, if any")
    show.add_argument("occurrence_id", metavar="OCCURRENCE", help=OCCURRENCE_HELP)
    show.set_defaults(handler=run_show)

    decide = add_command(
        commands,
        "decide",
        help="record the one decision on a case (asks for confirmation)",
        description=(
            "Record the decision on a case, once: 'applied' (the side effect happened) settles\n"
            "the occurrence succeeded without running its handler again; 'not_applied' runs it\n"
            "exactly once more. --reason and --actor are recorded with the decision. The case's\n"
            "evidence digest as read here is checked in the same transaction (exit 4 if the\n"
            "case changed or was decided meanwhile)."
        ),
    )
    decide.add_argument("occurrence_id", metavar="OCCURRENCE", help=OCCURRENCE_HELP)
    decide.add_argument("decision", choices=("applied", "not_applied"), help="what happened")
    decide.add_argument("--reason", required=True, help="why (recorded with the decision)")
    decide.add_argument(
        "--evidence-digest",
        metavar="SHA256",
        help="refuse unless the case's evidence digest is still this one",
    )
    decide.add_argument(
        "--result",
        metavar="JSON",
        type=json_arg,
        default=NO_RESULT,
        help=(
            "with applied: the result the handler would have returned (its children read it "
            'in ctx.parents; default {"adjudication": "applied", "requestId": ...}); '
            "@file or - for stdin"
        ),
    )
    decide.set_defaults(handler=run_decide)


def case_json(case: AdjudicationCase) -> dict[str, Any]:
    return case.to_dict()


def _table(ctx: Context, cases: list[AdjudicationCase]) -> str:
    columns = [
        Column("OCCURRENCE", shrink=False),
        Column("JOB", max_width=32),
        Column("KIND", max_width=24),
        Column("STARTED", shrink=False),
        Column("SETTLED", shrink=False),
        Column("ATTEMPT", align="right"),
        Column("ERROR", max_width=80),
    ]
    rows = [
        [
            short_id(case.occurrence_id),
            case.job_id,
            case.kind,
            ctx.when(case.started_at) if case.started_at is not None else "-",
            ctx.when(case.settled_at),
            f"{case.attempt}/{case.max_attempts}",
            _message(case.last_error),
        ]
        for case in cases
    ]
    return render_table(columns, rows, width=ctx.width, color=ctx.color)


def _message(error: Any) -> str:
    if isinstance(error, dict):
        return f"{error.get('code', '')}: {error.get('message', '')}"
    return "" if error is None else str(error)


def describe(ctx: Context, case: AdjudicationCase) -> str:
    """A case for people: what happened, the evidence, and the decision if any."""
    lines = [
        f"occurrence  {case.occurrence_id}",
        f"job         {case.job_id} (kind {case.kind})",
        f"status      {case.status}, attempt {case.attempt}/{case.max_attempts}, "
        f"fence {case.fence}",
        "started     "
        + (ctx.when(case.started_at) if case.started_at is not None else "- (unknown)"),
        f"settled     {ctx.when(case.settled_at)}",
        f"error       {_message(case.last_error)}",
        f"payload     {json.dumps(case.payload, ensure_ascii=False, sort_keys=True)}",
        f"eligible    {'yes' if case.eligible else 'no'}",
        f"evidence    {case.evidence_digest or '-'}",
    ]
    decided = case.adjudication
    if decided is not None:
        lines += [
            f"decision    {decided.decision} by {decided.actor} at {ctx.when(decided.created_at)}",
            f"reason      {decided.reason}",
            f"request     {decided.request_id}",
            f"effect      {decided.status}"
            + (f" ({decided.retry_outcome['status']})" if decided.retry_outcome else ""),
        ]
    for earlier in case.previous:  # the decisions on this occurrence's earlier lost attempts
        lines.append(
            f"earlier     fence {earlier.expected_fence}: {earlier.decision} by {earlier.actor} "
            f"at {ctx.when(earlier.created_at)}"
            + (f", its run {earlier.retry_outcome['status']}" if earlier.retry_outcome else "")
        )
    return "\n".join(lines)


def run_list(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.open_store() as store:
        cases = store.adjudication_cases(limit=args.limit)
    ctx.emit(
        {"cases": [case_json(case) for case in cases]},
        lambda: _table(ctx, cases) if cases else "no open cases",
    )
    return 0


def run_show(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.open_store() as store:
        occurrence = get_occurrence(store, args.occurrence_id)
        case = store.get_adjudication_case(occurrence.id)
    assert case is not None  # the occurrence was just read
    ctx.emit({"case": case_json(case)}, lambda: describe(ctx, case))
    return 0


def run_decide(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.open_store() as store:
        occurrence = get_occurrence(store, args.occurrence_id)
        case = store.get_adjudication_case(occurrence.id)
        assert case is not None
        digest = args.evidence_digest or case.evidence_digest
        if digest is None:  # not eligible: let the store say exactly why
            digest = "sha256:" + "0" * 64
        elif case.eligible and not ctx.yes and ctx.stdin is not None and ctx.stdin.isatty():
            ctx.note(describe(ctx, case))  # the evidence, right above the question
        if case.eligible:
            effect = (
                "settle it succeeded WITHOUT running its handler"
                if args.decision == "applied"
                else "run its handler exactly once more"
            )
            ctx.confirm(f"Record '{args.decision}' for {occurrence.id} and {effect}?")
        decided = store.adjudicate(
            occurrence_id=occurrence.id,
            decision=args.decision,
            evidence_digest=digest,
            reason=args.reason,
            actor=ctx.actor,
            result=args.result,
        )
    ctx.emit(
        {"case": case_json(decided), "actor": ctx.actor},
        lambda: f"recorded {args.decision} for {decided.occurrence_id}: now {decided.status}",
    )
    return 0
