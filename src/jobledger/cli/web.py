"""``jobledger web``: serve the dashboard (the optional ``jobledger[web]`` extra).

The dashboard's own arguments come from :mod:`jobledger.web.cli`. Importing it loads Starlette
and Jinja2, which every other command should not pay for, so the full parser is mounted only
when the command line asks for ``web`` (or when the docs are generated); otherwise a stub with
the same one-line help stands in its place.
"""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from ..errors import InvalidArgument, SchedulerError
from .context import Context
from .parsing import add_command

__all__ = ["available", "register"]

HELP = "serve the dashboard over this store (needs: pip install 'jobledger[web]')"
DESCRIPTION = (
    "Serve the dashboard (a web UI over the Store API) for --db, on 127.0.0.1 by default.\n"
    "Needs the web extra: pip install 'jobledger[web]'. Like every command but `db init`,\n"
    "`db migrate` and `worker --migrate`, it refuses a missing store or one that needs\n"
    "`jobledger db migrate`. See docs/web.md."
)


def _web_cli() -> Any:
    try:
        from ..web import cli as web_cli
    except ImportError:
        return None
    if not (hasattr(web_cli, "add_arguments") and hasattr(web_cli, "run")):
        return None
    return web_cli


def available() -> bool:
    """Whether the dashboard can be served here (its extra is installed)."""
    return _web_cli() is not None


def register(subparsers: Any, *, mount: bool) -> None:
    parser = add_command(subparsers, "web", help=HELP, description=DESCRIPTION)
    web_cli = _web_cli() if mount else None
    if web_cli is None:
        parser.set_defaults(handler=lambda ctx, args: run_missing())
        return
    web_cli.add_arguments(parser)
    parser.set_defaults(handler=run_web)


def run_missing() -> NoReturn:
    raise SchedulerError(
        "the dashboard needs the web extra: pip install 'jobledger[web]'",
        code="SCHEDULER_EXTRA_MISSING",
    )


def run_web(ctx: Context, args: argparse.Namespace) -> int:
    web_cli = _web_cli()
    assert web_cli is not None
    if getattr(args, "target", None) is None:
        ctx.require_target()
        args.target = ctx.target
    else:  # errors name the STORE argument as where the path came from, not --db
        ctx.target, ctx.target_source = args.target, "STORE"
    # Open it as every command does (refusing a missing or old store, with --pg-schema and the
    # other store options) and serve that store.
    with ctx.open_store() as store:
        try:
            code: int = web_cli.run(args, store=store)
        except InvalidArgument as exc:
            raise _in_cli_words(exc) from exc
    return code


def _in_cli_words(error: InvalidArgument) -> InvalidArgument:
    """The dashboard's settings speak Python (``read_only=True``); say the options instead."""
    words = {
        "token=": "--token-file (or $JOBLEDGER_WEB_TOKEN)",
        "basic_auth=": "--basic-auth-file (or $JOBLEDGER_WEB_BASIC_AUTH)",
        "read_only=True": "--read-only",
        "a token or basic auth": (
            "a token (--token-file, $JOBLEDGER_WEB_TOKEN) or basic auth (--basic-auth-file, "
            "$JOBLEDGER_WEB_BASIC_AUTH)"
        ),
        "bind to 127.0.0.1": "--host 127.0.0.1",
        "login_link=True for a token made for this run": "give none: a token is made for this run",
    }
    message = error.message
    for api, cli in words.items():
        message = message.replace(api, cli)
    if message == error.message:
        return error
    return InvalidArgument(message, code=error.code, details=error.details)
