"""``jobledger db``: create, inspect, check, upgrade and prune the store.

Only ``db init`` and ``db migrate`` ever create or upgrade a database; every other command of
the tool opens the store without migrating and says so when it needs ``db migrate``.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from typing import Any

from ..contract import PRUNABLE_STATUSES
from ..errors import MigrationRequired, SchedulerError, StoreNotFound
from ..models import DEFAULT_PRUNE_BATCH, MAX_PRUNE_BATCH, PruneReport, SchemaInfo
from ..store import LATEST_VERSION, SchemaOutcome, Store
from .context import Context, is_postgres
from .errors import VERIFY_FAILED
from .output import schema_json
from .parsing import add_command, add_group, duration_arg, int_within, timedelta_ms
from .table import Column, render_table
from .timefmt import format_duration, iso_utc

__all__ = ["register"]


def register(subparsers: Any) -> None:
    commands = add_group(
        subparsers,
        "db",
        help="create, inspect, check, upgrade and prune the store",
        description=(
            "Create, inspect, check, upgrade and prune the store.\n\n"
            "Only `db init` and `db migrate` create or upgrade a database; every other command\n"
            "opens the store as it is and stops with SCHEDULER_STORE_NOT_FOUND or\n"
            "SCHEDULER_MIGRATION_REQUIRED (exit 5) when it is missing or older than this jobledger."
        ),
    )
    init = add_command(
        commands,
        "init",
        help="create a new, empty store at --db (nothing happens to an existing current one)",
        description=(
            "Create a new, empty store at --db. An existing store at the newest schema is left as\n"
            "it is (`created: false`); an older one is refused: upgrade it with `db migrate`."
        ),
    )
    init.set_defaults(handler=run_init)

    info = add_command(commands, "info", help="print the store's location and schema version")
    info.set_defaults(handler=run_info)

    verify = add_command(
        commands,
        "verify",
        help="check the whole database now (integrity, schema, stored authorities); read-only",
        description=(
            "Check the whole database now: the O(size) checks an open skips (SQLite's\n"
            "integrity_check and foreign keys, the schema catalog, every stored authority).\n"
            "Reads only. Exits 1 (SCHEDULER_VERIFY_FAILED) when a check fails."
        ),
    )
    verify.set_defaults(handler=run_verify)

    migrate = add_command(
        commands,
        "migrate",
        help="create the store or upgrade it to the newest schema (SQLite: backed up first)",
        description=(
            "Create the store, or upgrade it to the newest schema in one transaction. A SQLite\n"
            "file is copied to <file>.v<N>.bak first; a database written by a newer jobledger\n"
            "is refused unchanged. Progress goes to stderr."
        ),
    )
    migrate.set_defaults(handler=run_migrate)

    prune = add_command(
        commands,
        "prune",
        help="delete settled occurrences older than a duration, with their events (audited)",
        description=(
            "Delete settled occurrences (succeeded, dead_letter, cancelled) settled more than\n"
            "--older-than ago, with their events and requeue records, in batches of\n"
            "--batch-size, one transaction each. Every batch writes an audit record (action\n"
            "`pruned`, with the actor and what it removed): see `jobledger audit`. Live\n"
            "occurrences are never touched. Asks for confirmation unless --yes; progress per\n"
            "batch goes to stderr."
        ),
    )
    prune.add_argument(
        "--older-than",
        metavar="DURATION",
        type=duration_arg,
        required=True,
        help="settled longer ago than this, e.g. 30d, 12h, P90D",
    )
    prune.add_argument(
        "--status",
        action="append",
        choices=PRUNABLE_STATUSES,
        help="only these statuses (repeatable; default: all three)",
    )
    prune.add_argument(
        "--batch-size",
        metavar="N",
        type=int_within(1, MAX_PRUNE_BATCH),
        default=DEFAULT_PRUNE_BATCH,
        help=f"occurrences per transaction, 1..{MAX_PRUNE_BATCH} (default: {DEFAULT_PRUNE_BATCH})",
    )
    prune.set_defaults(handler=run_prune)


# -- helpers ---------------------------------------------------------------------------------


def _backend(ctx: Context) -> str:
    return "postgresql" if is_postgres(ctx.target) else "sqlite"


def _info_json(ctx: Context, store: Store, info: SchemaInfo) -> dict[str, Any]:
    return {
        "target": store.target,
        "backend": _backend(ctx),
        "latestVersion": LATEST_VERSION,
        **schema_json(info),
    }


def _info_text(ctx: Context, document: dict[str, Any], info: SchemaInfo) -> str:
    lines = [
        f"store:          {document['target']} ({document['backend']})",
        f"schema version: {document['schemaVersion']} (this jobledger: {LATEST_VERSION})",
        f"application id: {document['applicationId']:#x}",
        "migrations:",
    ]
    columns = [Column("VERSION", align="right"), Column("NAME"), Column("APPLIED AT")]
    rows = [
        [str(m.version), m.name, ctx.when(m.applied_at)]
        for m in (info.migrations or (info.migration,))
    ]
    table = render_table(columns, rows, width=ctx.width, color=ctx.color)
    lines.extend("  " + line for line in table.splitlines())
    return "\n".join(lines)


def _state(ctx: Context) -> tuple[str, int | None]:
    """What is at the target now, without changing it: ("missing" | "old" | "current", version)."""
    try:
        store = ctx.open_store(migrate=False)
    except StoreNotFound:
        return "missing", None
    except MigrationRequired as exc:
        version = (exc.details or {}).get("schemaVersion")
        return "old", version if isinstance(version, int) else None
    with store:
        return "current", store.schema_info().schema_version


# -- commands --------------------------------------------------------------------------------


def run_init(ctx: Context, args: argparse.Namespace) -> int:
    state, version = _state(ctx)
    if state == "old" and version:
        raise MigrationRequired(
            f"a store already exists here at schema v{version}; `db init` only creates new "
            f"stores — upgrade it to v{LATEST_VERSION} with `jobledger db migrate`",
            details={"schemaVersion": version, "requiredVersion": LATEST_VERSION},
        )
    with ctx.open_store(migrate=state != "current") as store:
        outcome = _outcome(store)
        # Created by this process: another one may have made it since the look above.
        created = outcome is not None and outcome.created
        document = {"created": created, **_info_json(ctx, store, store.schema_info())}
    verb = "created" if created else "already exists:"
    ctx.emit(
        document,
        lambda: f"{verb} {document['target']} (schema v{document['schemaVersion']})",
    )
    return 0


def run_info(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.open_store() as store:
        info = store.schema_info()
        document = _info_json(ctx, store, info)
    ctx.emit(document, lambda: _info_text(ctx, document, info))
    return 0


def run_verify(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.open_store() as store:
        report = store.verify()
        target = store.target
    document = {
        "target": target,
        "ok": report.ok,
        "checks": [
            {"name": check.name, "ok": check.ok, "details": check.details}
            for check in report.checks
        ],
    }

    def text() -> str:
        columns = [Column("CHECK"), Column("RESULT"), Column("DETAILS", max_width=70)]
        rows = [
            [
                check.name,
                "ok" if check.ok else "FAILED",
                "" if check.details is None else str(check.details),
            ]
            for check in report.checks
        ]
        return render_table(
            columns,
            rows,
            width=ctx.width,
            color=ctx.color,
        )

    ctx.emit(document, text)
    if not report.ok:
        failed = [check.name for check in report.checks if not check.ok]
        raise SchedulerError(
            f"{len(failed)} of {len(report.checks)} checks failed: {', '.join(failed)}",
            code=VERIFY_FAILED,
            details={"failed": failed},
        )
    return 0


def _outcome(store: Store) -> SchemaOutcome | None:
    """What opening ``store`` did to its schema (both stores record it; ``None`` for others)."""
    outcome = getattr(store, "schema_outcome", None)
    return outcome if isinstance(outcome, SchemaOutcome) else None


def run_migrate(ctx: Context, args: argparse.Namespace) -> int:
    started = time.monotonic()
    ctx.note(f"checking {ctx.target} …")
    state, version = _state(ctx)
    if state == "current":
        ctx.note(f"already at schema v{version}; nothing to do")
    elif state == "missing" or not version:
        ctx.note(f"creating a new store at schema v{LATEST_VERSION} …")
    else:
        ctx.note(
            f"upgrading schema v{version} → v{LATEST_VERSION} in one transaction "
            "(integrity checked and, for SQLite, a backup copied first) …"
        )
    with ctx.open_store(migrate=True) as store:
        info = store.schema_info()
        outcome = _outcome(store)
        # Report what this process did: another `db migrate`, worker or app may have created
        # or upgraded the store between the look above and this open (or during it).
        created = outcome is not None and outcome.created
        upgraded_from = None if outcome is None else outcome.upgraded_from
        backup = None if outcome is None else outcome.backup
        elsewhere = state != "current" and not created and upgraded_from is None
        document = {
            "fromVersion": upgraded_from or (version if state != "missing" else None),
            "toVersion": info.schema_version,
            "created": created,
            "upgraded": upgraded_from is not None,
            "byAnotherProcess": elsewhere,
            "backup": None if backup is None else str(backup),
            **_info_json(ctx, store, info),
        }
    elapsed = format_duration(int((time.monotonic() - started) * 1000))
    if state != "current":
        ctx.note(f"done in {elapsed}")

    def text() -> str:
        target, now = document["target"], info.schema_version
        if document["upgraded"]:
            line = f"upgraded {target} from v{document['fromVersion']} to v{now}"
        elif document["created"]:
            line = f"created {target} at schema v{now}"
        elif elsewhere and (state == "missing" or not version):
            line = f"{target} was already created at schema v{now} by another process"
        elif elsewhere:
            line = f"{target} was already upgraded to v{now} by another process"
        else:
            line = f"{target} is at schema v{now}; nothing to do"
        if document["backup"]:
            line += f"\nbackup: {document['backup']}"
        return line

    ctx.emit(document, text)
    return 0


def run_prune(ctx: Context, args: argparse.Namespace) -> int:
    statuses = tuple(dict.fromkeys(args.status or PRUNABLE_STATUSES))
    older_ms = timedelta_ms(args.older_than)
    with ctx.open_store() as store:
        before = max(0, store.now() - older_ms)
        ctx.confirm(
            f"Delete {', '.join(statuses)} occurrences settled before {ctx.when(before)} "
            f"({format_duration(older_ms)} ago) and their events from {store.target}?"
        )
        totals: Counter[str] = Counter()
        by_status: Counter[str] = Counter()

        # Progress per batch; Ctrl-C stops between batches (each batch is its own transaction
        # with its own audit record).
        def progress(report: PruneReport) -> None:
            totals.update(
                batches=1,
                occurrences=report.occurrences,
                events=report.events,
                requeues=report.requeues,
            )
            by_status.update(report.by_status)
            ctx.note(
                f"batch {totals['batches']}: {report.occurrences} occurrence(s), "
                f"{report.events} event(s) — {totals['occurrences']} so far"
            )

        store.prune(
            before=before,
            actor=ctx.actor,
            statuses=statuses,
            batch_size=args.batch_size,
            on_batch=progress,
        )
        batches = totals["batches"]
    document = {
        "before": iso_utc(before),
        "actor": ctx.actor,
        "occurrences": totals["occurrences"],
        "events": totals["events"],
        "requeues": totals["requeues"],
        "batches": batches,
        "byStatus": {status: by_status[status] for status in statuses},
    }

    def text() -> str:
        if not batches:  # nothing was deleted, so the audit log has nothing new either
            return (
                f"nothing to prune: no {' or '.join(statuses)} occurrence settled before "
                f"{ctx.when(before)}, so no audit record was written"
            )
        return (
            f"pruned {document['occurrences']} occurrence(s), {document['events']} event(s) and "
            f"{document['requeues']} requeue record(s) settled before {ctx.when(before)} "
            f"in {batches} batch(es); recorded in the audit log as {ctx.actor}"
        )

    ctx.emit(document, text)
    return 0
