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

Text arrives as bytes: Python decodes the command line with ``surrogateescape``, so a byte that is
not UTF-8 becomes a lone surrogate (``0xff`` → ``U+DCFF``). After parsing, every text value is
checked (:meth:`CommandParser.parse_args`) and such a value is a usage error naming the option and
the byte — except the values that name files (``--db``, ``--app-dir``, ``web``'s store), which the
operating system takes as bytes. JSON options (``--payload``) take the JSON itself, ``@path`` (a
file) or ``-`` (stdin), read as UTF-8 and parsed without letting deep nesting blow the stack.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, BinaryIO, Final, NoReturn, TextIO

from ..contract import (
    MAX_IDENTIFIER_LENGTH,
    MAX_JSON_BYTES,
    MAX_JSON_DEPTH,
    MAX_SAFE_INTEGER,
    normalize_identifier,
)
from ..errors import InvalidArgument
from .timefmt import format_duration, parse_duration, parse_instant

__all__ = [
    "HELP_WIDTH",
    "MAX_JSON_INPUT_BYTES",
    "PATH_DESTS",
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
# Arguments that name files or a store: the operating system takes them as bytes, so a name that
# is not UTF-8 is still a name (every other text value must be UTF-8).
PATH_DESTS: Final = frozenset({"db", "app_dir", "target"})
# The most a JSON option reads from a file or stdin: room for indentation and \u escapes around
# the 1 MiB a JSON value may encode to, without reading an endless stream to the end.
MAX_JSON_INPUT_BYTES: Final = 8 * MAX_JSON_BYTES
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


class UsageError(InvalidArgument):
    """The command line itself is wrong; ``prog`` names the (sub)command for the hint."""

    def __init__(self, message: str, *, prog: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message, details=details)
        self.prog = prog


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's formatter at a fixed width, keeping descriptions' line breaks."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=HELP_WIDTH, max_help_position=30)


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are :class:`UsageError` (one coded line, exit 2)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, prog=self.prog)

    def parse_args(
        self,
        args: Any = None,
        namespace: Any = None,
        *,
        stdin: TextIO | None = None,
    ) -> Any:
        """Parse, with ``stdin`` (default: the process's) as what a JSON option's ``-`` reads;
        then refuse any text value that is not valid UTF-8 (paths aside: :data:`PATH_DESTS`)."""
        with _reading_from(stdin):
            parsed = super().parse_args(args, namespace)
        chosen = _chosen_parser(self, parsed)
        # JSON options checked their text's bytes already; an escaped lone surrogate ("\ud800")
        # is the store's to refuse, by the value's name.
        json_dests = {a.dest for a in chosen._actions if a.type is json_arg}
        for dest, value in vars(parsed).items():
            if dest in PATH_DESTS or dest in json_dests:
                continue
            bad = _first_not_unicode(value)
            if bad is not None:
                raise _not_utf8(_option_name(chosen, dest), bad, prog=chosen.prog)
        return parsed


def _chosen_parser(root: argparse.ArgumentParser, parsed: Any) -> argparse.ArgumentParser:
    """The (sub)command parser the command line chose: the one whose options it holds."""
    parser = root
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(parsed, subs[0].dest, None) if subs else None
        if not subs or name not in subs[0].choices:
            return parser
        parser = subs[0].choices[name]


def _option_name(parser: argparse.ArgumentParser, dest: str) -> str:
    for action in parser._actions:
        if action.dest == dest:
            if action.option_strings:
                longs = [o for o in action.option_strings if o.startswith("--")]
                return (longs or action.option_strings)[0]
            return action.metavar if isinstance(action.metavar, str) else dest.upper()
    return dest


def _first_not_unicode(value: object) -> str | None:
    """The first string in ``value`` (a string, or lists and dicts of them) holding a lone
    surrogate. Iterative: a parsed JSON value may be nested hundreds deep."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii() and _SURROGATE.search(item):
                return item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return None


def _not_utf8(where: str | None, text: str, *, prog: str | None = None) -> InvalidArgument:
    """``where`` holds a byte that is not UTF-8 (a surrogateescape'd one) or a lone surrogate.

    The message gives the byte's offset and an escaped excerpt around it, never the raw text.
    """
    match = _SURROGATE.search(text)
    assert match is not None
    point = ord(match.group(0))
    offset = len(text[: match.start()].encode("utf-8"))
    if 0xDC80 <= point <= 0xDCFF:
        what = f"the byte 0x{point - 0xDC00:02x}"
    else:  # only a Python caller of main() can pass one of these
        what = f"a lone surrogate (U+{point:04X})"
    try:
        raw = text.encode("utf-8", "surrogateescape")  # the bytes the command line held
    except UnicodeEncodeError:
        raw = text.encode("utf-8", "backslashreplace")
    start = max(0, offset - 20)
    excerpt = ("…" if start else "") + repr(raw[start : offset + 20])[1:]
    excerpt += "…" if offset + 20 < len(raw) else ""
    message = f"not valid UTF-8: {what} at byte {offset} (in {excerpt})"
    message = message if where is None else f"{where} is {message}"
    details: dict[str, Any] = {"offset": offset, "reason": "not_utf8"}
    if where is not None:
        details["field"] = where
    if prog is not None:
        return UsageError(message, prog=prog, details=details)
    return InvalidArgument(message, details=details)


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
            "the store: a SQLite path, sqlite:///path or postgresql://… (default: the store of "
            "--app, else $JOBLEDGER_DB; without any of them a command names the default store's "
            "path and stops)"
        ),
    )
    group.add_argument(
        "--app",
        metavar="MODULE:APP",
        dest="app_ref",
        default=unset,
        help=text(
            "use the store of this jobledger.App (imported like `jobledger worker MODULE:APP`, "
            "from the current directory)"
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


def _typed(
    parse: Callable[[str], Any], name: str, *, checks_bytes: bool = False
) -> Callable[[str], Any]:
    """Wrap a parser raising InvalidArgument into an argparse ``type`` (named for messages).
    ``checks_bytes``: the parser refuses text that is not UTF-8 itself (with its own words)."""

    def convert(text: str) -> Any:
        if not checks_bytes and not text.isascii() and _SURROGATE.search(text):
            # Not UTF-8: parse_args refuses it once parsed, naming the option and the byte
            # (this parser's own message would quote the escaped text instead).
            return text
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


# What a JSON option's "-" reads while a command line is parsed (main() passes its stdin), and
# whether an option read it already.
_STDIN: ContextVar[_Stdin | None] = ContextVar("jobledger_cli_stdin", default=None)


@dataclass
class _Stdin:
    stream: TextIO
    read: bool = False


@contextmanager
def _reading_from(stdin: TextIO | None) -> Iterator[None]:
    token = _STDIN.set(_Stdin(sys.stdin if stdin is None else stdin))
    try:
        yield
    finally:
        _STDIN.reset(token)


def _decode(data: bytes, source: str) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidArgument(
            f"{source} is not valid UTF-8: the byte 0x{data[exc.start]:02x} at byte {exc.start}"
        ) from None
    return text.removeprefix("\ufeff")  # a byte order mark some editors write


def _too_big(source: str) -> InvalidArgument:
    return InvalidArgument(
        f"{source} is larger than {MAX_JSON_INPUT_BYTES // 1_048_576} MiB "
        f"(a JSON value may encode to at most {MAX_JSON_BYTES:,} bytes)"
    )


def _read_stream(stream: BinaryIO | TextIO, source: str) -> str:
    chunk = stream.read(MAX_JSON_INPUT_BYTES + 1)
    if isinstance(chunk, bytes):
        if len(chunk) > MAX_JSON_INPUT_BYTES:
            raise _too_big(source)
        return _decode(chunk, source)
    if len(chunk) > MAX_JSON_INPUT_BYTES:  # a text stream: characters, at least as many bytes
        raise _too_big(source)
    if not chunk.isascii() and _SURROGATE.search(chunk):
        raise _not_utf8(source, chunk)
    return chunk


def _read_stdin() -> str:
    holder = _STDIN.get() or _Stdin(sys.stdin)  # a type function called outside parse_args
    if holder.read:
        raise InvalidArgument("stdin (-) was already read by another option: pass a file (@path)")
    holder.read = True
    buffer = getattr(holder.stream, "buffer", None)
    try:
        if buffer is not None:  # the real stdin: decode the bytes ourselves, strictly
            return _read_stream(buffer, "stdin")
        return _read_stream(holder.stream, "stdin")
    except UnicodeDecodeError as exc:  # a text stream that decodes strictly itself
        raise InvalidArgument(f"stdin is not valid UTF-8 (byte {exc.start})") from None


def _read_file(path: str) -> str:
    if not path:
        raise InvalidArgument("@ must be followed by a file's path, e.g. @payload.json")
    shown = repr(path)  # escapes a name's undecodable bytes and control characters
    try:
        with open(path, "rb") as file:
            return _read_stream(file, f"@{shown}")
    except OSError as exc:
        raise InvalidArgument(f"cannot read @{shown}: {exc.strerror or exc}") from None


def _json_text(text: str) -> str:
    """The JSON text a JSON option names: the argument itself, ``@path`` (the file's content)
    or ``-`` (stdin), as valid UTF-8 text."""
    if text == "-":
        return _read_stdin()
    if text.startswith("@"):  # no JSON text starts with "@"
        return _read_file(text[1:])
    if not text.isascii() and _SURROGATE.search(text):
        raise _not_utf8(None, text)
    return text


def _parse_json(text: str) -> Any:
    """Parse JSON text (no NaN or Infinity). Nesting deep enough to exhaust the parser's stack
    is refused like any other value nested deeper than the limit (the store refuses the rest)."""

    def refuse(name: str) -> NoReturn:
        raise ValueError(f"{name} is not JSON")

    try:
        return json.loads(text, parse_constant=refuse)
    except RecursionError:
        # json.loads recurses once per level: ~1,000 levels reach the interpreter's limit.
        raise InvalidArgument(f"the JSON is nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:
        raise InvalidArgument(f"not valid JSON: {exc}") from None


def _json_value(text: str) -> Any:
    return _parse_json(_json_text(text))


instant_arg: Callable[[str], int] = _typed(parse_instant, "instant")
duration_arg: Callable[[str], timedelta] = _typed(parse_duration, "duration")
json_arg: Callable[[str], Any] = _typed(_json_value, "JSON", checks_bytes=True)
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
