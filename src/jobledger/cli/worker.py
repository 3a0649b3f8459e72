"""``jobledger worker MODULE:APP``: run an :class:`~jobledger.App`'s handlers (and its planner).

Every :class:`~jobledger.WorkerOptions` field is a flag, generated from the dataclass
(``concurrency`` → ``--concurrency``, ``planner`` → ``--planner/--no-planner``), so the command
cannot fall behind the library; a flag left out keeps the library's default.

The app decides its store. ``--db`` (or ``$JOBLEDGER_DB``) is exported to the app's import as
``$JOBLEDGER_DB`` — apps that read it (like ``examples/demo.py``) follow it — and if the app then
uses another store the command refuses rather than silently ignore ``--db``. Before the app first
opens its store, the worker checks that the store exists at the newest schema, and creates or
upgrades it only with ``--migrate``. (An app that opens its store while being imported — to
declare schedules, say — has already opened it by its own rules: :class:`~jobledger.App` creates
and upgrades by default; ``store_options={"migrate": False}`` makes it strict.)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import re
import sys
import typing
from collections.abc import Iterator
from dataclasses import MISSING, fields
from datetime import timedelta
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

from ..app import App
from ..engine.drain import DEFAULT_IDLE_HORIZON, Backlog, Drain, DrainReport, idle_horizon_ms
from ..engine.options import WorkerOptions
from ..engine.worker import WorkerSummary
from ..errors import InvalidArgument, MigrationRequired, SchedulerError, StoreNotFound
from ..store import Store, open_store
from ..store.paths import DB_ENV
from .context import Context, is_postgres
from .errors import APP_IMPORT_FAILED, EXIT_STUCK
from .parsing import add_command, duration_arg, float_arg, natural_arg
from .timefmt import format_duration, iso_utc

__all__ = [
    "OPTION_FLAGS",
    "add_option_flags",
    "load_app",
    "options_from_args",
    "register",
    "same_target",
]

logger = logging.getLogger("jobledger.cli")

_HELP: Final = {
    "concurrency": "occurrences run at the same time, 1..1000",
    "prefetch": "most occurrences claimed ahead of free slots (default: adaptive, up to "
    "max(256, 4 × concurrency))",
    "kinds": "job kinds to claim: comma-separated or repeated (default: every kind the app "
    "handles)",
    "queues": "queues to claim from: comma-separated or repeated (default: every queue)",
    "workspace_id": "only claim jobs whose authority names this workspace",
    "lease": "how long a claim is leased, 1s..24h (default: 60s)",
    "renew_interval": "how often every held lease is renewed (default: a third of the lease)",
    "poll_interval": "how long an idle worker waits before looking again",
    "poll_jitter": "± this fraction of --poll-interval, in [0, 1)",
    "grace_period": "at shutdown, how long running handlers may take to finish",
    "stuck_grace": "how long every slot may be stuck in a handler past its time limit before "
    "the worker gives up and exits with status 75, for its supervisor to restart it",
    "planner": "also plan schedules (--no-planner: only run occurrences)",
    "plan_interval": "the longest the planner sleeps between passes",
    "retention": "prune settled occurrences older than this (default: keep them)",
    "prune_interval": "with --retention: how often to prune",
    "heartbeat_interval": "how often the worker records that it is alive (see `stats`)",
    "reap_interval": "how often to end the leases of workers that are certainly dead",
    "metrics_port": "serve Prometheus metrics on this port (needs jobledger[metrics]; "
    "default: off)",
    "metrics_host": "the address --metrics-port binds to",
    "owner_id": "the lease owner recorded in the audit log (default: jobledger:<host>:<pid>:<rnd>)",
}
# WorkerOptions field → the flag that sets it (every field has one; a test checks it).
OPTION_FLAGS: Final = {f.name: "--" + f.name.replace("_", "-") for f in fields(WorkerOptions)}
_DEST_PREFIX: Final = "worker_option_"
LOG_LEVELS: Final = ("debug", "info", "warning", "error")


def _default_text(value: Any) -> str:
    if isinstance(value, timedelta):
        return format_duration(value // timedelta(milliseconds=1))
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _docstring_help(name: str) -> str:
    """The first clause of the field's bullet in WorkerOptions' docstring (for fields added
    after the help texts above were written)."""
    doc = " ".join((WorkerOptions.__doc__ or "").split())
    found = re.search(rf"``{name}``(?: \([^)]*\))? — (.+?)(?:; ``|\. (?=[A-Z*])|\.$)", doc)
    if found is None:
        return f"WorkerOptions.{name}"
    text = re.sub(r":\w+:`~?(?:[\w.]+\.)?(\w+)`", r"\1", found[1])
    return text.replace("``", "")


def _metavar(name: str) -> str:
    if name.endswith("_id"):
        return "ID"
    return "HOST" if name.endswith("host") else "TEXT"


def add_option_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per WorkerOptions field, typed from the field's annotation (shared by
    ``jobledger worker`` and Django's ``manage.py jobledger_worker``)."""
    group = parser.add_argument_group(
        "worker options (jobledger.WorkerOptions; one flag per field)"
    )
    hints = typing.get_type_hints(WorkerOptions)
    for item in fields(WorkerOptions):
        flag = OPTION_FLAGS[item.name]
        dest = _DEST_PREFIX + item.name
        annotation = hints[item.name]
        text = _HELP.get(item.name) or _docstring_help(item.name)
        if item.default is not MISSING and item.default is not None and "default:" not in text:
            text += f" (default: {_default_text(item.default)})"
        base = set(typing.get_args(annotation)) - {type(None)} or {annotation}
        if base == {bool}:
            group.add_argument(
                flag, dest=dest, action=argparse.BooleanOptionalAction, default=None, help=text
            )
        elif base == {int}:
            group.add_argument(flag, dest=dest, metavar="N", type=natural_arg, help=text)
        elif base == {float}:
            group.add_argument(flag, dest=dest, metavar="X", type=float_arg, help=text)
        elif base == {timedelta}:
            group.add_argument(flag, dest=dest, metavar="DURATION", type=duration_arg, help=text)
        elif base == {str}:
            group.add_argument(flag, dest=dest, metavar=_metavar(item.name), help=text)
        elif base == {frozenset[str]}:
            metavar = "QUEUE[,QUEUE]" if item.name == "queues" else "KIND[,KIND]"
            group.add_argument(flag, dest=dest, metavar=metavar, action="append", help=text)
        else:  # a new field of a new type: fail loudly when the parser is built (and in tests)
            raise TypeError(f"no command-line flag for WorkerOptions.{item.name}: {annotation}")


def options_from_args(args: argparse.Namespace) -> WorkerOptions:
    """The WorkerOptions the flags give; fields not given keep the library's defaults."""
    given: dict[str, Any] = {}
    for item in fields(WorkerOptions):
        value = getattr(args, _DEST_PREFIX + item.name, None)
        if value is None:
            continue
        if item.name in ("kinds", "queues"):
            value = frozenset(
                name.strip() for chunk in value for name in chunk.split(",") if name.strip()
            )
        given[item.name] = value
    return WorkerOptions().with_changes(**given)


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers,
        "worker",
        help="run a worker for an App: its handlers, and its planner for schedules",
        description=(
            "Run a worker for the jobledger.App named MODULE:APP (e.g. examples.demo:app): it\n"
            "claims and runs occurrences with the app's handlers and, unless --no-planner,\n"
            "plans the schedules, until SIGTERM or Ctrl-C (a graceful stop: running handlers get\n"
            "--grace-period to finish). With --until-idle it plans once, runs what is due (and\n"
            "what falls due within --idle-horizon, such as retries), then exits and says what\n"
            "still waits.\n\n"
            "The app decides its store. --db / $JOBLEDGER_DB is passed to the app's import as\n"
            "$JOBLEDGER_DB; if the app uses another store, the worker refuses. The store must\n"
            "exist at the newest schema: the worker creates or upgrades it only with --migrate\n"
            "(an app that opens its store while being imported does so by its own rules).\n"
            "Logs go to stderr; the summary goes to stdout when the worker stops."
        ),
    )
    parser.add_argument("app", metavar="MODULE:APP", help="the App object, e.g. examples.demo:app")
    parser.add_argument(
        "--until-idle",
        action="store_true",
        help="plan once, run everything due, then exit (progress on stderr)",
    )
    parser.add_argument(
        "--idle-horizon",
        metavar="DURATION",
        type=duration_arg,
        help="with --until-idle: also wait for work (retries, delayed occurrences) falling due "
        f"within this long (default: {_default_text(DEFAULT_IDLE_HORIZON)}; 0s: only what is "
        "due now)",
    )
    parser.add_argument(
        "--migrate",
        action="store_true",
        help="create the store, or upgrade its schema, if needed (default: refuse)",
    )
    parser.add_argument(
        "--log-level", choices=LOG_LEVELS, default="info", help="stderr logging (default: info)"
    )
    parser.add_argument(
        "--app-dir",
        metavar="DIR",
        default=".",
        help="look for MODULE here first (default: the current directory)",
    )
    add_option_flags(parser)
    parser.set_defaults(handler=run_worker)


# -- loading the app -------------------------------------------------------------------------


def load_app(reference: str, app_dir: str) -> App:
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name.strip() or not attribute.strip():
        raise InvalidArgument(
            f"the app must be given as MODULE:APP, e.g. examples.demo:app (got {reference!r})",
            details={"field": "app"},
        )
    directory = str(Path(app_dir).resolve())
    if directory not in sys.path:
        sys.path.insert(0, directory)
    try:
        _setup_django()
        module = importlib.import_module(module_name.strip())
    except ModuleNotFoundError as exc:
        wanted = module_name.strip()
        if exc.name is not None and (wanted == exc.name or wanted.startswith(exc.name + ".")):
            raise InvalidArgument(
                f"cannot import {module_name!r}: no module named {exc.name!r} (looked in "
                f"{directory} and the Python path; see --app-dir)",
                details={"field": "app"},
            ) from exc
        raise _import_failed(module_name, exc) from exc
    except SchedulerError:
        raise
    except Exception as exc:
        raise _import_failed(module_name, exc) from exc
    try:
        app = getattr(module, attribute.strip())
    except AttributeError:
        raise InvalidArgument(
            f"module {module_name!r} has no attribute {attribute!r}", details={"field": "app"}
        ) from None
    if not isinstance(app, App):
        raise InvalidArgument(
            f"{reference} is a {type(app).__name__}, not a jobledger.App",
            details={"field": "app"},
        )
    return app


def _setup_django() -> None:
    """With ``DJANGO_SETTINGS_MODULE`` set, load Django's apps before the app module is
    imported, so modules and handlers may use models ("Apps aren't loaded yet" otherwise)."""
    if not os.environ.get("DJANGO_SETTINGS_MODULE"):
        return
    try:
        import django
        from django.apps import apps
    except ImportError:
        return
    if not apps.ready:
        django.setup()


def _import_failed(module_name: str, exc: BaseException) -> SchedulerError:
    return SchedulerError(
        f"importing {module_name!r} failed: {type(exc).__name__}: {exc}",
        code=APP_IMPORT_FAILED,
    )


@contextlib.contextmanager
def _exported_db(target: str | None) -> Iterator[None]:
    """``$JOBLEDGER_DB`` set to ``target`` while the app is imported and run, then restored."""
    if target is None:
        yield
        return
    previous = os.environ.get(DB_ENV)
    os.environ[DB_ENV] = target
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(DB_ENV, None)
        else:
            os.environ[DB_ENV] = previous


def _app_store(app: App) -> tuple[str | Path | Store, dict[str, Any]]:
    # The worker needs both to check --db and to open the store without migrating before the
    # app does.
    return app.target, app.store_options


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host += f":{parts.port}"
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit(("postgresql", user + host, parts.path, parts.query, ""))


def _normalized(target: str | Path) -> str:
    text = str(target)
    if is_postgres(text):
        return _without_password(text.strip())
    for prefix in ("sqlite:///", "sqlite://"):
        if text.startswith(prefix):
            rest = text[len(prefix) :]
            text = ":memory:" if rest.lstrip("/") == ":memory:" else "/" + rest.lstrip("/")
            break
    if text == ":memory:":
        return text
    return str(Path(text).expanduser().resolve())


def same_target(first: str | Path, second: str | Path) -> bool:
    """Whether two store targets name the same store (paths resolved, passwords ignored)."""
    return _normalized(first) == _normalized(second) != ":memory:"


def _check_store(
    target: str | Path, options: dict[str, Any], *, migrate: bool, ctx: Context
) -> None:
    """Open the app's store once before the app does: refuse a missing or old one unless
    ``--migrate`` (which creates or upgrades it now)."""
    extra = dict(options)
    if is_postgres(str(target)):
        extra["listen"] = False
    try:
        store = open_store(target, migrate=migrate, **extra)
    except (StoreNotFound, MigrationRequired) as exc:
        raise type(exc)(
            f"{exc.message} (or start the worker with --migrate)",
            code=exc.code,
            details=exc.details,
        ) from exc
    with store:
        if migrate:
            ctx.note(f"store {store.target} is at schema v{store.schema_info().schema_version}")


# -- running ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _logging(level: str, stream: Any) -> Iterator[None]:
    """Log records to stderr while the worker runs (the root logger, so apps' logs show too)."""
    root = logging.getLogger()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    previous = root.level
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper()))
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)


def _summary_json(summary: WorkerSummary) -> dict[str, Any]:
    return {
        "statuses": dict(sorted(summary.statuses.items())),
        "released": [occurrence.id for occurrence in summary.released],
        "forced": summary.forced,
        "gaveUpStuck": summary.gave_up_stuck,
        "plans": summary.plans,
        "claimTransactions": summary.claim_transactions,
        "settleTransactions": summary.settle_transactions,
    }


def _counts(statuses: Any) -> str:
    return ", ".join(f"{n} {status}" for status, n in sorted(statuses.items())) or "nothing run"


def _run_until_stopped(ctx: Context, app: App, options: WorkerOptions) -> WorkerSummary:
    """Run until SIGTERM/SIGINT (handled by the worker: a graceful stop)."""
    return app.run_worker(options)


def _drain(
    ctx: Context, app: App, options: WorkerOptions, horizon: timedelta | None
) -> DrainReport:
    """Plan once, then run a real worker until it is idle (``jobledger.engine.drain``)."""
    if options.planner:
        planned = app.plan()
        ctx.note(f"planned {len(planned.enqueued)} occurrence(s)")
    worker = app.worker(options.with_changes(planner=False))

    def progress(report: DrainReport) -> None:
        ctx.note(f"drained {_occurrences(report)}; kinds with due work: {report.due_kinds}")

    def waiting(left: Backlog) -> None:
        assert left.next is not None
        ctx.note(f"waiting for {_next_due(ctx, left)} ({left.next.id})")

    drain = Drain(
        worker,
        horizon=DEFAULT_IDLE_HORIZON if horizon is None else horizon,
        sleep=ctx.pause,
        on_progress=progress,
        on_wait=waiting,
    )
    report = drain.run()
    if report.outcome == "stalled":
        ctx.note("due work remains that this worker does not take; stopping")
    ctx.note(f"{report.outcome}: drained {_occurrences(report)}")
    return report


def _occurrences(report: DrainReport) -> str:
    if not report.attempts:
        return "nothing run"
    return (
        f"{report.occurrences} occurrence(s) ({_counts(report.statuses)}) in "
        f"{report.attempts} attempt(s)"
    )


def _next_due(ctx: Context, left: Backlog) -> str:
    """``a retry due at … (in 2m)`` for the next waiting occurrence."""
    assert left.next is not None
    what = "a retry" if left.next.status == "retry_wait" else "a delayed occurrence"
    wait = format_duration(max(0, left.next.available_at - left.now))
    return f"{what} due at {ctx.when(left.next.available_at)} (in {wait})"


def _left_text(ctx: Context, left: Backlog | None) -> str:
    if left is None:
        return "what is left is unknown (the store could not be read)"
    if not left.waiting:
        text = "nothing waits"
    elif left.next is None:
        text = f"{left.waiting} occurrence(s) wait, already due"
    else:
        among = "" if left.complete else " among those read"
        text = f"{left.waiting} occurrence(s) wait: next, {_next_due(ctx, left)}{among}"
    if left.running:
        text += f"; {left.running} running on other workers"
    return text


def _left_json(left: Backlog | None) -> dict[str, Any] | None:
    if left is None:
        return None
    following = left.next
    return {
        "waiting": left.waiting,
        "running": left.running,
        "nextDueAt": None if following is None else iso_utc(following.available_at),
        "nextStatus": None if following is None else following.status,
        "nextOccurrenceId": None if following is None else following.id,
        "complete": left.complete,
    }


def _drain_json(report: DrainReport) -> dict[str, Any]:
    return {
        **_summary_json(report.summary),
        "statuses": dict(sorted(report.statuses.items())),
        "occurrences": report.occurrences,
        "attempts": report.attempts,
        "attemptStatuses": dict(sorted(report.summary.statuses.items())),
        "outcome": report.outcome,
        "left": _left_json(report.left),
    }


def run_worker(ctx: Context, args: argparse.Namespace) -> int:
    options = options_from_args(args)
    if args.idle_horizon is not None:
        if not args.until_idle:
            raise InvalidArgument(
                "--idle-horizon only applies with --until-idle", details={"field": "idle_horizon"}
            )
        idle_horizon_ms(args.idle_horizon)  # checked before anything runs
    explicit = None if ctx.uses_default_target else ctx.target
    with _logging(args.log_level, ctx.err), _exported_db(explicit):
        app = load_app(args.app, args.app_dir)
        try:
            target, store_options = _app_store(app)
            shown = target.target if isinstance(target, Store) else str(target)
            if explicit is not None and not same_target(explicit, shown):
                raise InvalidArgument(
                    f"{ctx.target_source} names {explicit}, but {args.app} uses the store at "
                    f"{shown}: the app decides its store — drop {ctx.target_source}, or make the "
                    f"app read ${DB_ENV}",
                    details={"db": explicit, "app": shown},
                )
            schema = store_options.get("schema", "jobledger")
            if ctx.pg_schema is not None and ctx.pg_schema != schema:
                raise InvalidArgument(
                    f"--pg-schema is {ctx.pg_schema}, but {args.app} uses schema {schema}: the "
                    "app decides its store",
                    details={"pgSchema": ctx.pg_schema, "app": schema},
                )
            # From here on, errors are about the app's store, not a default one.
            ctx.target, ctx.target_source = shown, "app"
            if not isinstance(target, Store):
                _check_store(target, store_options, migrate=args.migrate, ctx=ctx)
            kinds = sorted(options.kinds or app.kinds)
            ctx.note(
                f"worker for {args.app} on {shown}: kinds {', '.join(kinds) or '(none)'}; "
                + (f"queues {', '.join(sorted(options.queues))}; " if options.queues else "")
                + f"concurrency {options.concurrency}; planner {'on' if options.planner else 'off'}"
                + ("; until idle" if args.until_idle else "; Ctrl-C to stop")
            )
            if args.until_idle:
                report = _drain(ctx, app, options, args.idle_horizon)
                summary = report.summary
            else:
                report = None
                summary = _run_until_stopped(ctx, app, options)
        finally:
            app.close()
    released = (f"; gave back {len(summary.released)} lease(s)" if summary.released else "") + (
        "; grace period ran out" if summary.forced else ""
    )
    if summary.gave_up_stuck:
        released += f"; gave up: every slot stuck past --stuck-grace ({options.stuck_grace})"
    status = EXIT_STUCK if summary.gave_up_stuck else 0
    if report is not None:
        drained = report
        ctx.emit(
            _drain_json(drained),
            lambda: (
                f"worker stopped: {_occurrences(drained)}{released}; "
                f"{_left_text(ctx, drained.left)}"
            ),
        )
        return status
    ctx.emit(
        _summary_json(summary), lambda: f"worker stopped: {_counts(summary.statuses)}{released}"
    )
    return status
