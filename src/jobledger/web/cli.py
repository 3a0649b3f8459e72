"""The ``jobledger web`` command's arguments, for the main CLI to mount (and ``python -m
jobledger.web``).

Credentials come from files or the environment rather than the command line, where other users
of the machine could read them in the process list:

* ``--token-file PATH`` or ``$JOBLEDGER_WEB_TOKEN`` — the bearer token;
* ``--basic-auth-file PATH`` (lines ``user:password``) or ``$JOBLEDGER_WEB_BASIC_AUTH``
  (``user:password[,user:password…]``);
* ``--secret-key-file PATH`` or ``$JOBLEDGER_WEB_SECRET`` — signs session cookies (default:
  random per run). Sessions live in the process either way: a restart signs everyone out.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import InvalidArgument
from ..store.base import Store
from .server import DEFAULT_HOST, DEFAULT_PORT
from .settings import DEFAULT_TITLE, WebSettings

__all__ = ["add_arguments", "main", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``jobledger web``'s arguments to ``parser`` (a subcommand's parser)."""
    parser.add_argument(
        "target",
        nargs="?",
        metavar="STORE",
        help="store: a SQLite path or postgresql:// URL (default: --db / $JOBLEDGER_DB)",
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help="address (default: %(default)s)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="default: %(default)s")
    parser.add_argument(
        "--token-file", type=Path, help="file holding the bearer token (or $JOBLEDGER_WEB_TOKEN)"
    )
    parser.add_argument(
        "--basic-auth-file",
        type=Path,
        help="file of user:password lines (or $JOBLEDGER_WEB_BASIC_AUTH: user:pw,user:pw)",
    )
    parser.add_argument(
        "--secret-key-file",
        type=Path,
        help="file holding the cookie key (or $JOBLEDGER_WEB_SECRET)",
    )
    parser.add_argument("--read-only", action="store_true", help="hide and refuse all actions")
    parser.add_argument(
        "--public-reads", action="store_true", help="let anyone read pages without signing in"
    )
    parser.add_argument("--title", default=DEFAULT_TITLE, help="title shown in the header")
    parser.add_argument(
        "--forwarded-allow-ips",
        metavar="IPS",
        help="reverse proxies whose X-Forwarded-* headers to trust (comma-separated, or *)",
    )
    parser.add_argument("--log-level", default="info", help="uvicorn log level")


def _read_secret(path: Path, what: str) -> str:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise InvalidArgument(f"cannot read the {what} file {path}: {exc.strerror}") from exc
    if not text:
        raise InvalidArgument(f"the {what} file {path} is empty")
    return text


def _users(text: str, separator: str) -> dict[str, str]:
    users: dict[str, str] = {}
    for raw in text.split(separator):
        entry = raw.strip()
        if not entry or entry.startswith("#"):
            continue
        user, colon, password = entry.partition(":")
        if not colon or not user or not password:
            raise InvalidArgument("basic auth entries are user:password")
        users[user] = password
    return users


def options_from(
    args: argparse.Namespace, environ: Mapping[str, str], *, store: Store | None = None
) -> dict[str, object]:
    """``serve`` arguments from parsed arguments and the environment: ``target`` (the ``store``
    given, else the one the arguments name), ``settings`` (a :class:`WebSettings`) and the
    server's own keywords."""
    target = store or args.target or getattr(args, "db", None) or environ.get("JOBLEDGER_DB")
    if not target:
        raise InvalidArgument("name the store: jobledger web PATH_OR_URL (or set JOBLEDGER_DB)")
    token = (
        _read_secret(args.token_file, "token")
        if args.token_file
        else environ.get("JOBLEDGER_WEB_TOKEN") or None
    )
    users: dict[str, str] = {}
    if args.basic_auth_file:
        users = _users(_read_secret(args.basic_auth_file, "basic auth"), "\n")
    elif environ.get("JOBLEDGER_WEB_BASIC_AUTH"):
        users = _users(environ["JOBLEDGER_WEB_BASIC_AUTH"], ",")
    secret = (
        _read_secret(args.secret_key_file, "secret key")
        if args.secret_key_file
        else environ.get("JOBLEDGER_WEB_SECRET") or None
    )
    settings = WebSettings(
        token=token,
        basic_auth=users,
        read_only=args.read_only,
        public_reads=args.public_reads,
        title=args.title,
        secret_key=secret,
        # Nothing configured: a token for this run, and a sign-in link printed by ``serve``.
        login_link=not (token or users or args.read_only),
    )
    return {
        "target": target,
        "settings": settings,
        "host": args.host,
        "port": args.port,
        "forwarded_allow_ips": args.forwarded_allow_ips,
        "log_level": args.log_level,
    }


def run(args: argparse.Namespace, *, store: Store | None = None) -> int:
    """Run ``jobledger web`` with parsed arguments (raises jobledger errors for bad input), on
    ``store`` if given (the ``jobledger`` command opens it with its store options)."""
    from .server import serve

    options = options_from(args, os.environ, store=store)
    target = options.pop("target")
    serve(target, **options)  # type: ignore[arg-type]
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jobledger web", description="Serve the dashboard.")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except InvalidArgument as exc:
        parser.exit(2, f"error: {exc.code}: {exc.message}\n")
