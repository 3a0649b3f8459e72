"""What every command receives: the global options, resolved once, and the ways to talk back.

:class:`Context` holds the store target (``--db``, the store of ``--app MODULE:APP``,
``$JOBLEDGER_DB``; never the embedded default unless named with ``--db``),
the output mode (``--json`` or tables), the zone instants are printed in (``--tz``), the actor
recorded for operator actions (``--actor``), and the streams. Commands open the store through
:meth:`Context.open_store`, which never creates or upgrades a database unless the command says
so (only ``db init``, ``db migrate`` and ``worker --migrate`` do); the errors it raises say what
to run, in the command's words.
"""

from __future__ import annotations

import getpass
import json
import shutil
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, tzinfo
from typing import Any, TextIO

from ..contract import escape_surrogates, normalize_identifier
from ..errors import (
    InvalidArgument,
    MigrationRequired,
    SchedulerError,
    StoreMisconfigured,
    StoreNotFound,
)
from ..store import Store, open_store
from ..store.paths import DB_ENV
from .errors import ABORTED, CONFIRMATION_REQUIRED
from .timefmt import format_age, format_instant

__all__ = ["Context", "default_actor", "is_postgres"]

_POSTGRES_PREFIXES = ("postgresql://", "postgres://")
# Where the store's location came from (Context.target_source), as errors say it.
_SOURCES = {
    "--db": "the path given by --db",
    f"${DB_ENV}": f"the path in ${DB_ENV}",
    "default": "the default store",
    "STORE": "the STORE given to `jobledger web`",
    "--app": "the store of the app given by --app",
}
NOT_CONFIGURED = "SCHEDULER_STORE_NOT_CONFIGURED"


def is_postgres(target: str) -> bool:
    return target.startswith(_POSTGRES_PREFIXES)


def default_actor() -> str:
    """``cli:<user>@<host>``: who runs this command, for the audit log."""
    try:
        user = getpass.getuser()
    except Exception:  # no login name (e.g. a container without a passwd entry)
        user = "unknown"
    host = socket.gethostname() or "localhost"
    return f"cli:{user}@{host}"


@dataclass
class Context:
    """The resolved global options and the streams of one ``jobledger`` invocation."""

    target: str
    target_source: str
    json: bool = False
    zone: tzinfo = UTC
    debug: bool = False
    yes: bool = False
    actor: str = field(default_factory=default_actor)
    pg_schema: str | None = None
    stdin: TextIO | None = None
    stdout: TextIO | None = None
    stderr: TextIO | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    sleep: Callable[[float], None] | None = None
    # Store options an app given by --app opens its store with (PostgreSQL schema, pool …).
    app_store_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.actor = normalize_identifier(self.actor, "--actor")

    # -- the store --------------------------------------------------------------------------

    @property
    def uses_default_target(self) -> bool:
        return self.target_source == "default"

    def require_target(self) -> None:
        """Refuse to guess the store: with no ``--db``, ``--app`` or ``$JOBLEDGER_DB`` a command
        would read the embedded default store (the demo's), which is rarely the one meant.
        ``SCHEDULER_STORE_NOT_CONFIGURED``; its hint names the three ways and the default's
        path (``--db <that path>`` uses it)."""
        if self.uses_default_target:
            raise StoreMisconfigured(
                "No store given: pass --db (a SQLite path or postgresql://…), --app MODULE:APP "
                f"(the store your app uses) or set ${DB_ENV}; the embedded default store is "
                f"--db {self.target}",
                code=NOT_CONFIGURED,
                details={"problem": "no_store_given", "defaultTarget": self.target},
            )

    def open_store(self, *, migrate: bool = False) -> Store:
        """Open the store; ``migrate=False`` (every read and operator command) neither creates
        nor upgrades it: a missing file is ``SCHEDULER_STORE_NOT_FOUND`` (naming the path and
        where it came from), an old schema ``SCHEDULER_MIGRATION_REQUIRED``. No store given
        at all is ``SCHEDULER_STORE_NOT_CONFIGURED`` (:meth:`require_target`)."""
        self.require_target()
        try:
            return open_store(self.target, migrate=migrate, **self.store_options())
        except StoreNotFound as exc:
            raise self._not_found(exc) from exc
        except MigrationRequired as exc:
            raise self._needs_migration(exc) from exc

    def _needs_migration(self, exc: MigrationRequired) -> MigrationRequired:
        """The library's error ("open it with migrate=True") in this command's words."""
        details = dict(exc.details or {})
        found, needed = details.get("schemaVersion"), details.get("requiredVersion")
        where = _SOURCES.get(self.target_source, self.target_source)
        if found == 0:
            message = (
                f"The store at {self.target} ({where}) is an empty database, not yet a "
                "jobledger store"
            )
        else:
            message = (
                f"The store at {self.target} ({where}) is at schema v{found}; this jobledger "
                f"needs v{needed}"
            )
        return MigrationRequired(
            message, details={**details, "target": self.target, "targetSource": self.target_source}
        )

    def _not_found(self, exc: StoreNotFound) -> StoreNotFound:
        """The library's error, saying which path was looked at and who chose it — above all
        for the default store, which the user never typed."""
        details = dict(exc.details or {})
        path = details.get("target") or self.target
        where = _SOURCES.get(self.target_source, self.target_source)
        return StoreNotFound(
            f"No scheduler database exists at {path} ({where})",
            details={**details, "target": path, "targetSource": self.target_source},
        )

    def store_options(self) -> dict[str, Any]:
        """``open_store`` options for the target (PostgreSQL: no LISTEN thread, ``--pg-schema``)."""
        if is_postgres(self.target):
            options: dict[str, Any] = {**self.app_store_options, "listen": False}
            if self.pg_schema is not None:
                options["schema"] = self.pg_schema
            return options
        if self.pg_schema is not None:
            raise InvalidArgument(
                "--pg-schema applies only to a PostgreSQL store (--db postgresql://…)",
                details={"field": "--pg-schema"},
            )
        return dict(self.app_store_options)

    # -- output -----------------------------------------------------------------------------

    @property
    def out(self) -> TextIO:
        assert self.stdout is not None
        return self.stdout

    @property
    def err(self) -> TextIO:
        assert self.stderr is not None
        return self.stderr

    @property
    def color(self) -> bool:
        """Colour only on a terminal, and never when ``NO_COLOR`` is set or ``TERM=dumb``."""
        if self.env.get("NO_COLOR", "") != "" or self.env.get("TERM") == "dumb":
            return False
        return _isatty(self.out)

    @property
    def width(self) -> int | None:
        """The terminal's width when stdout is one (tables shrink to fit), else no limit."""
        if not _isatty(self.out):
            return None
        return shutil.get_terminal_size((100, 24)).columns

    def write(self, text: str) -> None:
        """A line (or lines) on stdout (a lone surrogate of a stored value as its escape)."""
        text = escape_surrogates(text)
        self.out.write(text if text.endswith("\n") else text + "\n")
        self.out.flush()

    def emit(self, document: Any, human: str | Callable[[], str]) -> None:
        """The command's result: ``document`` as JSON with ``--json``, else the human text."""
        if self.json:
            self.write(json.dumps(document, indent=2, ensure_ascii=False))
            return
        text = human() if callable(human) else human
        if text:
            self.write(text)

    def emit_line(self, document: Any) -> None:
        """One compact JSON document on one line (JSON Lines, for streaming commands)."""
        self.write(json.dumps(document, ensure_ascii=False, separators=(",", ":")))

    def note(self, text: str) -> None:
        """Progress and remarks for people, on stderr (stdout stays the result)."""
        self.err.write(text + "\n")
        self.err.flush()

    def when(self, instant_ms: int | None) -> str:
        """An instant for people, in the ``--tz`` zone."""
        return format_instant(instant_ms, self.zone)

    def ago(self, instant_ms: int | None, now_ms: int) -> str:
        return format_age(instant_ms, now_ms)

    def pause(self, seconds: float) -> None:
        """Sleep (injected in tests, so following a log needs no real waiting)."""
        assert self.sleep is not None
        self.sleep(seconds)

    # -- confirmation -----------------------------------------------------------------------

    def confirm(self, question: str) -> None:
        """Ask before a destructive or bulk action; return only if the answer is yes.

        ``--yes`` answers for the operator. Without it, stdin must be a terminal: a script
        that forgot ``--yes`` fails (``SCHEDULER_CONFIRMATION_REQUIRED``) instead of hanging.
        """
        if self.yes:
            return
        if self.stdin is None or not _isatty(self.stdin):
            raise SchedulerError(
                f"{question} — needs confirmation, and stdin is not a terminal",
                code=CONFIRMATION_REQUIRED,
            )
        self.err.write(f"{question} [y/N] ")
        self.err.flush()
        line = self.stdin.readline()
        if not line.endswith("\n"):  # end of input (Ctrl-D): end the prompt's line ourselves
            self.err.write("\n")
        answer = line.strip().lower()
        if answer not in ("y", "yes"):
            raise SchedulerError("not confirmed; nothing was changed", code=ABORTED)


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
