"""The ``jobledger`` command: operate a store from a terminal — inspect, explain, act, run.

A thin shell over the public API (no SQL here), one module per command group::

    jobledger db init | info | verify | migrate | prune      (db.py)
    jobledger job list | show | add | update | enable | disable | remove   (jobs.py)
    jobledger enqueue JOB                                    (enqueue.py)
    jobledger occurrence list | show;  jobledger cancel      (occurrences.py)
    jobledger dead-letter list | requeue                     (dead_letters.py)
    jobledger adjudicate list | show | decide                (adjudicate.py)
    jobledger queue list | show | set | pause | resume       (queues.py)
    jobledger history [--follow];  jobledger audit           (history.py)
    jobledger explain JOB;  jobledger plan                   (explain.py)
    jobledger stats                                          (stats.py)
    jobledger worker MODULE:APP                              (worker.py)
    jobledger web                                            (web.py; the dashboard's extra)

Global options (before or after the command): ``--db``, ``--json``, ``--tz``, ``--actor``,
``--yes``, ``--pg-schema``, ``--debug``. Tables for people by default; ``--json`` prints one
document with stable camelCase keys. Errors are one line, ``error: <CODE>: <message>``, with a
meaningful exit status (:mod:`jobledger.cli.errors`). See ``docs/cli.md``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from ..errors import InvalidArgument, SchedulerError
from ..store import Store
from ..store.paths import default_target, resolve_target
from ..version import __version__
from . import (
    adjudicate,
    db,
    dead_letters,
    enqueue,
    explain,
    history,
    jobs,
    occurrences,
    queues,
    stats,
    web,
    worker,
)
from .context import Context, default_actor
from .errors import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    INTERNAL_ERROR,
    INTERRUPTED,
    error_lines,
    exit_code_for,
)
from .parsing import CommandParser, HelpFormatter, UsageError, add_global_options
from .timefmt import parse_zone

__all__ = ["build_parser", "default_target", "main"]

DESCRIPTION = """\
Operate a jobledger store: inspect it, explain schedules, act on occurrences, run workers.

The store is --db (a SQLite path, sqlite:///path or postgresql://…), else the store of
--app MODULE:APP, else $JOBLEDGER_DB; with none of them a command stops and names the embedded
default store's path (`jobledger worker` runs on its app's store). Only `db init`, `db migrate`
and `worker --migrate` create or upgrade a store. Global options may also follow the command.
Exit status: 0 ok, 1 failure, 2 usage, 3 not found, 4 conflict, 5 store missing or needs
migration, 130 interrupted.
"""


_VALUED_GLOBALS = frozenset({"--db", "--tz", "--actor", "--pg-schema"})


def _command_of(argv: Sequence[str]) -> str | None:
    """The command word of a command line (skipping global options and their values)."""
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word in _VALUED_GLOBALS:
            skip = True
        elif not word.startswith("-"):
            return word
    return None


def build_parser(*, mount_web: bool = True) -> CommandParser:
    """The whole command tree (each module registers its group).

    ``mount_web=False`` leaves ``jobledger web``'s own arguments out (a stub with the same help
    line): they load the dashboard's dependencies, which only ``web`` needs.
    """
    parser = CommandParser(
        prog="jobledger",
        description=DESCRIPTION,
        formatter_class=HelpFormatter,
    )
    add_global_options(parser, hidden=False)
    parser.add_argument("--version", action="version", version=f"jobledger {__version__}")
    commands = parser.add_subparsers(
        title="commands", dest="command", required=True, metavar="COMMAND"
    )
    for module in (
        db,
        jobs,
        enqueue,
        occurrences,
        dead_letters,
        adjudicate,
        queues,
        history,
        explain,
        stats,
        worker,
    ):
        module.register(commands)
    web.register(commands, mount=mount_web)
    return parser


def _context(
    args: object,
    *,
    env: Mapping[str, str],
    stdin: TextIO,
    stdout: TextIO,
    stderr: TextIO,
    sleep: Callable[[float], None],
) -> Context:
    target, source = resolve_target(getattr(args, "db", None), env)
    app_options: dict[str, Any] = {}
    app_ref = getattr(args, "app_ref", None)
    if app_ref is not None:
        target, source, app_options = _app_target(args, app_ref)
    zone_name = getattr(args, "tz", None)
    actor = getattr(args, "actor", None)
    return Context(
        target=target,
        target_source=source,
        json=bool(getattr(args, "json", False)),
        zone=parse_zone(zone_name) if zone_name else parse_zone("UTC"),
        debug=bool(getattr(args, "debug", False)),
        yes=bool(getattr(args, "yes", False)),
        actor=actor if actor is not None else default_actor(),
        pg_schema=getattr(args, "pg_schema", None),
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        env=env,
        sleep=sleep,
        app_store_options=app_options,
    )


def _app_target(args: object, app_ref: str) -> tuple[str, str, dict[str, Any]]:
    """The store an app given by ``--app MODULE:APP`` uses, and the options it opens it with."""
    if getattr(args, "db", None) is not None:
        raise InvalidArgument(
            "--db and --app both name a store: give one", details={"field": "--app"}
        )
    if getattr(args, "command", None) == "worker":
        raise InvalidArgument(
            "`jobledger worker` takes the app as its argument: jobledger worker MODULE:APP",
            details={"field": "--app"},
        )
    app = worker.load_app(app_ref, ".")
    try:
        found = app.target
        options = {
            key: value for key, value in app.store_options.items() if key in _APP_STORE_OPTIONS
        }
    finally:
        app.close()
    target = found.target if isinstance(found, Store) else str(found)
    return target, "--app", options


# What the CLI keeps of an app's own store options: where its tables are, not its pool sizes.
_APP_STORE_OPTIONS = frozenset({"schema"})


def main(
    argv: Sequence[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    sleep: Callable[[float], None] | None = None,
) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``) and return the exit status.

    ``env``, the streams and ``sleep`` default to the process's; tests inject them.
    """
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    words = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in words
    ctx: Context | None = None
    try:
        wants_web = _command_of(words) == "web"
        if wants_web and not web.available():
            web.run_missing()  # before parsing: the dashboard's arguments are unknown without it
        try:
            parser = build_parser(mount_web=wants_web)
            args = parser.parse_args(words, stdin=stdin or sys.stdin)  # stdin: --payload -
        except SystemExit as exc:  # --help, --version: argparse printed and exits
            return exc.code if isinstance(exc.code, int) else EXIT_USAGE
        ctx = _context(
            args,
            env=os.environ if env is None else env,
            stdin=stdin or sys.stdin,
            stdout=out,
            stderr=err,
            sleep=sleep or time.sleep,
        )
        debug = ctx.debug
        code: int = args.handler(ctx, args)
        return code
    except SchedulerError as exc:
        if debug:
            traceback.print_exception(exc, file=err)
        default = ctx is not None and ctx.uses_default_target
        for line in error_lines(exc, default_target=default):
            err.write(line + "\n")
        if isinstance(exc, UsageError):
            err.write(f"hint: see `{exc.prog} --help`\n")
        return exit_code_for(exc)
    except KeyboardInterrupt:
        err.write(f"\nerror: {INTERRUPTED}: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`jobledger history | head`): not an error of ours. Point stdout
        # at devnull so the interpreter's final flush does not complain either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(devnull, out.fileno())
        return 0
    except Exception as exc:  # a bug: still one coded line, the traceback with --debug
        if debug:
            traceback.print_exception(exc, file=err)
        internal = SchedulerError(f"{type(exc).__name__}: {exc}", code=INTERNAL_ERROR)
        for line in error_lines(internal):
            err.write(line + "\n")
        return 1
