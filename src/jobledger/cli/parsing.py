"""Building the argument parser: the global options, one helper per kind of value, coded errors.

The parser is :mod:`argparse` (standard library: the SQLite path of jobledger has no dependency,
and neither does its command). Two adjustments make it behave like the rest of the command:

* a usage error raises :class:`UsageError` (a ``SCHEDULER_INVALID_ARGUMENT``) instead of printing
  the usage block and exiting, so it is reported as one coded line with a hint;
* the global options (``--db``, ``--json``, ``--tz``, …) are accepted before *or after* the
  command (``jobledger job list --json``): every sub-parser carries hidden copies whose default is
  "not given", so they override the root's value only when used.

Values are checked here, against the limits of the API they go to, so a refusal names the
option and speaks in the command's units (``argument --every: must be at least 1s, not 500ms``)
instead of the library's words (``interval must be between 1 s and … ms``).

Help is formatted at a fixed width, so ``--help`` reads the same everywhere and ``docs/cli.md``
can embed it verbatim (a test compares the two).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Final, NoReturn

from ..contract import MAX_IDENTIFIER_LENGTH, MAX_SAFE_INTEGER, normalize_identifier
from ..errors import InvalidArgument
from .timefmt import format_duration, parse_duration, parse_instant

__all__ = [
    "HELP_WIDTH",
    "CommandParser",
    "HelpFormatter",
    "UsageError",
    "add_command",
    "add_global_options",
    "add_group",
    "duration_arg",
    "duration_within",
    "float_arg",
    "identifier_arg",
    "instant_arg",
    "int_within",
    "job_arg",
    "json_arg",
    "kind_arg",
    "natural_arg",
    "positive_arg",
    "principal_arg",
    "timedelta_ms",
]

HELP_WIDTH: Final = 100
_ASCII_INT: Final = re.compile(r"[0-9]+")


class UsageError(InvalidArgument):
    """The command line itself is wrong; ``prog`` names the (sub)command for the hint."""

    def __init__(self, message: str, *, prog: str) -> None:
        super().__init__(message)
        self.prog = prog


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's formatter at a fixed width, keeping descriptions' line breaks."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=HELP_WIDTH, max_help_position=30)


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are :class:`UsageError` (one coded line, exit 2)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, prog=self.prog)


def add_global_options(parser: argparse.ArgumentParser, *, hidden: bool) -> None:
    """The options every command takes; ``hidden`` copies (on sub-parsers) default to "unset"."""
    unset: Any = argparse.SUPPRESS if hidden else None
    off: Any = argparse.SUPPRESS if hidden else False

    def text(words: str) -> str:
        return argparse.SUPPRESS if hidden else words

    group: Any = parser if hidden else parser.add_argument_group("global options")
    group.add_argument(
        "--db",
        metavar="URL",
        default=unset,
        help=text(
            "the store: a SQLite path, sqlite:///path or postgresql://… (default: $JOBLEDGER_DB, "
            "else the embedded store in your data directory)"
        ),
    )
    group.add_argument(
        "--json",
        action="store_true",
        default=off,
        help=text("print one JSON document on stdout (machine-readable, stable keys)"),
    )
    group.add_argument(
        "--tz",
        metavar="ZONE",
        default=unset,
        help=text("print instants in this IANA zone (default: UTC); --json is always UTC"),
    )
    group.add_argument(
        "--actor",
        metavar="NAME",
        default=unset,
        help=text("who you are, recorded in the audit log (default: cli:<user>@<host>)"),
    )
    group.add_argument(
        "-y",
        "--yes",
        action="store_true",
        default=off,
        help=text("answer yes to confirmations (needed when stdin is not a terminal)"),
    )
    group.add_argument(
        "--pg-schema",
        metavar="NAME",
        default=unset,
        help=text("PostgreSQL only: the schema jobledger's tables live in (default: jobledger)"),
    )
    group.add_argument(
        "--debug",
        action="store_true",
        default=off,
        help=text("print a traceback when a command fails"),
    )


def add_command(
    subparsers: Any,
    name: str,
    *,
    help: str,
    description: str | None = None,
    aliases: tuple[str, ...] = (),
) -> argparse.ArgumentParser:
    """A sub-command parser with the shared formatter and the hidden global options."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help=help,
        description=description or help[0].upper() + help[1:] + ".",
        aliases=list(aliases),
        formatter_class=HelpFormatter,
    )
    add_global_options(parser, hidden=True)
    return parser


def add_group(
    subparsers: Any,
    name: str,
    *,
    help: str,
    description: str | None = None,
    aliases: tuple[str, ...] = (),
) -> Any:
    """A command group (``job``, ``db`` …) and the sub-parsers action for its commands."""
    parser = add_command(subparsers, name, help=help, description=description, aliases=aliases)
    return parser.add_subparsers(
        title="commands", dest=f"{name}_command", required=True, metavar="COMMAND"
    )


# -- values ----------------------------------------------------------------------------------


def _typed(parse: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    """Wrap a parser raising InvalidArgument into an argparse ``type`` (named for messages)."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except InvalidArgument as exc:
            raise argparse.ArgumentTypeError(exc.message) from None

    convert.__name__ = name
    return convert


def _natural(text: str, minimum: int) -> int:
    stripped = text.strip()
    if not _ASCII_INT.fullmatch(stripped) or int(stripped) > MAX_SAFE_INTEGER:
        raise InvalidArgument(f"not a whole number: {text!r}")
    value = int(stripped)
    if value < minimum:
        raise InvalidArgument(f"must be at least {minimum}, not {value}")
    return value


def _json_value(text: str) -> Any:
    def refuse(name: str) -> NoReturn:
        raise ValueError(f"{name} is not JSON")

    try:
        return json.loads(text, parse_constant=refuse)
    except ValueError as exc:
        raise InvalidArgument(f"not valid JSON: {exc}") from None


instant_arg: Callable[[str], int] = _typed(parse_instant, "instant")
duration_arg: Callable[[str], timedelta] = _typed(parse_duration, "duration")
json_arg: Callable[[str], Any] = _typed(_json_value, "JSON")
positive_arg: Callable[[str], int] = _typed(lambda text: _natural(text, 1), "positive integer")
natural_arg: Callable[[str], int] = _typed(lambda text: _natural(text, 0), "integer")


def int_within(low: int, high: int) -> Callable[[str], int]:
    """A whole number from ``low`` to ``high`` (both included); the message names the range."""

    def parse(text: str) -> int:
        value = _natural(text, 0)
        if not low <= value <= high:
            raise InvalidArgument(f"must be from {low:,} to {high:,}, not {value:,}")
        return value

    return _typed(parse, f"integer {low}..{high}")


def duration_within(
    minimum: timedelta | None = None, maximum: timedelta | None = None
) -> Callable[[str], timedelta]:
    """A duration (as :data:`duration_arg`) at least ``minimum`` and at most ``maximum``."""

    def parse(text: str) -> timedelta:
        value = parse_duration(text)
        shown = format_duration(timedelta_ms(value))
        if minimum is not None and value < minimum:
            raise InvalidArgument(
                f"must be at least {format_duration(timedelta_ms(minimum))}, not {shown}"
            )
        if maximum is not None and value > maximum:
            raise InvalidArgument(
                f"must be at most {format_duration(timedelta_ms(maximum))}, not {shown}"
            )
        return value

    return _typed(parse, "duration")


def identifier_arg(max_length: int) -> Callable[[str], str]:
    """An identifier (a job id, a kind): trimmed, 1..``max_length`` characters, no control
    characters — the store's rule, said in the command's words."""

    def parse(text: str) -> str:
        try:
            return normalize_identifier(text, "identifier", max_length=max_length)
        except InvalidArgument:
            shown = repr(text) if len(text) <= 40 else repr(text[:37] + "...")
            raise InvalidArgument(
                f"not a valid name: {shown} (1 to {max_length} characters, no control characters)"
            ) from None

    return _typed(parse, "identifier")


job_arg: Callable[[str], str] = identifier_arg(MAX_IDENTIFIER_LENGTH)
kind_arg: Callable[[str], str] = identifier_arg(128)


def float_arg(text: str) -> float:
    """A plain decimal number (``0.1``); no ``nan``/``inf``."""
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)?|\.[0-9]+", text.strip()):
        raise argparse.ArgumentTypeError(f"not a decimal number: {text!r}")
    return float(text)


def principal_arg(text: str) -> dict[str, str]:
    """``TYPE:ID`` → ``{"type": TYPE, "id": ID}`` (``user:alice``, ``service:billing``)."""
    kind, sep, ident = text.partition(":")
    if not sep or not kind.strip() or not ident.strip():
        raise argparse.ArgumentTypeError(f"must be TYPE:ID, e.g. user:alice (got {text!r})")
    return {"type": kind.strip(), "id": ident.strip()}


def timedelta_ms(value: timedelta) -> int:
    return value // timedelta(milliseconds=1)
