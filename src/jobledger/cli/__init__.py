"""The ``jobledger`` command: inspect and operate a store from a shell.

A thin shell over the public API (no SQL here). Every command takes the store target with
``--store`` (or ``$JOBLEDGER_STORE``): a SQLite path, ``sqlite:///…``, or ``postgresql://…``.
Output is JSON on stdout; errors are ``error: <CODE>: <message>`` on stderr with exit status 2
for bad input and 1 for everything else.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, is_dataclass
from typing import Any

from ..errors import InvalidArgument, SchedulerError
from . import commands

__all__ = ["build_parser", "main"]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


def _json_argument(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from exc


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jobledger",
        description="Inspect and operate a jobledger store.",
    )
    parser.add_argument(
        "--store",
        default=os.environ.get("JOBLEDGER_STORE"),
        help="store target: a SQLite path, sqlite:///path or postgresql://… "
        "(default: $JOBLEDGER_STORE)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sub.add_parser("schema", help="create or upgrade the store and print its schema info")

    job_create = sub.add_parser("create-job", help="create a job")
    job_create.add_argument("--id", required=True)
    job_create.add_argument("--kind", required=True)
    job_create.add_argument(
        "--principal", required=True, help="who the job acts for, as TYPE:ID (e.g. user:alice)"
    )
    job_create.add_argument("--workspace", help="authority workspaceId")
    job_create.add_argument("--tenant", help="authority tenantId")
    job_create.add_argument("--payload", type=_json_argument, default=None, help="JSON payload")
    job_create.add_argument("--trigger", type=_json_argument, default=None, help="JSON trigger")
    job_create.add_argument("--max-attempts", type=int, default=3)
    job_create.add_argument("--disabled", action="store_true", help="create it disabled")

    job_show = sub.add_parser("job", help="print a job")
    job_show.add_argument("job_id")

    for name, enabled in (("enable-job", True), ("disable-job", False)):
        toggle = sub.add_parser(name, help=f"{'enable' if enabled else 'disable'} a job (CAS)")
        toggle.add_argument("job_id")
        toggle.add_argument("--expected-revision", type=int, required=True)
        toggle.set_defaults(enabled=enabled)

    enqueue = sub.add_parser("enqueue", help="enqueue one firing of a job (idempotent)")
    enqueue.add_argument("job_id")
    enqueue.add_argument(
        "--at", required=True, help="scheduled instant: epoch ms or an ISO 8601 time with offset"
    )
    enqueue.add_argument("--trigger-key", required=True, help="names the firing, e.g. manual:1")
    enqueue.add_argument("--payload", type=_json_argument, help="JSON payload override")

    show = sub.add_parser("occurrence", help="print an occurrence")
    show.add_argument("occurrence_id")

    history = sub.add_parser("history", help="print audit events, newest first")
    history.add_argument("--job")
    history.add_argument("--occurrence")
    history.add_argument("--limit", type=int, default=50)

    dead = sub.add_parser("dead-letters", help="list dead letters, most recent first")
    dead.add_argument("--job")
    dead.add_argument("--limit", type=int, default=50)

    requeue = sub.add_parser("requeue", help="give a dead letter exactly one more attempt")
    requeue.add_argument("occurrence_id")
    requeue.add_argument("--fence", type=int, required=True, help="the dead letter's fence")
    requeue.add_argument("--reason", required=True)
    requeue.add_argument("--actor", required=True, help="who is requeueing (recorded)")

    worker = sub.add_parser("worker", help="run a worker for the handlers of an App")
    worker.add_argument("app", help="the App object to run, as module:attribute")
    worker.add_argument("--concurrency", type=int, default=4)
    worker.add_argument("--grace-period", type=float, default=30.0, help="seconds")
    return parser


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _print(value: Any) -> None:
    json.dump(_plain(value), sys.stdout, indent=2, ensure_ascii=False, sort_keys=False)
    sys.stdout.write("\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], Any] = commands.HANDLERS[args.command]
    try:
        if args.command != "worker" and not args.store:
            raise InvalidArgument("no store given: pass --store or set JOBLEDGER_STORE")
        result = handler(args)
    except SchedulerError as exc:
        sys.stderr.write(f"error: {exc.code}: {exc.message}\n")
        if exc.details:
            sys.stderr.write(f"details: {json.dumps(exc.details, ensure_ascii=False)}\n")
        return EXIT_USAGE if isinstance(exc, InvalidArgument) else EXIT_FAILURE
    if result is not None:
        try:
            _print(result)
        except BrokenPipeError:
            # The reader (e.g. `| head`) went away; that is not an error of ours.
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - replaces the closed stream
    return EXIT_OK
