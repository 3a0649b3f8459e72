"""How the ``jobledger`` command fails: exit statuses, one-line coded errors, hints.

Every failure prints exactly one line ``error: <CODE>: <message>`` on stderr, sometimes followed by
one ``hint: …`` line, and exits with a status that says what kind of failure it was:

====  ==========================================================================================
0     success
1     failure: a coded error that is none of the below (e.g. ``SCHEDULER_JOB_DISABLED`` is 4,
      ``SCHEDULER_LEASE_LOST`` is 1), a failed ``db verify``, a declined confirmation, a bug
2     usage: an unknown command or option, an invalid value (``SCHEDULER_INVALID_ARGUMENT``),
      a confirmation needed but stdin is not a terminal (``SCHEDULER_CONFIRMATION_REQUIRED``)
3     not found: the job or occurrence named does not exist (``SCHEDULER_NOT_FOUND``)
4     conflict: the store's state refuses the action (``SCHEDULER_*_CONFLICT``, revision
      conflicts, a job with live occurrences, a disabled job, an idempotency payload mismatch)
5     the store cannot be used as it is: missing (``SCHEDULER_STORE_NOT_FOUND``), needs
      ``jobledger db migrate`` (``SCHEDULER_MIGRATION_REQUIRED``), unknown or damaged schema,
      storage unavailable, misconfigured (``SCHEDULER_STORE_MISCONFIGURED``: no such database
      or role, authentication failed, nothing listening, unknown host), unsafe path, corrupt
      data
75    ``jobledger worker`` gave up: every slot was stuck past ``--stuck-grace`` in a handler that
      ignores its time limit (a temporary failure: a supervisor should start it again)
130   interrupted (Ctrl-C)
====  ==========================================================================================

A traceback is printed only with ``--debug``.
"""

from __future__ import annotations

import re
from typing import Final

from ..errors import (
    Conflict,
    DataCorrupt,
    InvalidArgument,
    JobDisabled,
    NotFound,
    SchedulerError,
    SchemaError,
    StorageUnavailable,
    StoreClosed,
    StoreMisconfigured,
    StoreNotFound,
    UnsafePath,
)

__all__ = [
    "ABORTED",
    "APP_IMPORT_FAILED",
    "CONFIRMATION_REQUIRED",
    "EXIT_CONFLICT",
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_STUCK",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "INTERNAL_ERROR",
    "INTERRUPTED",
    "VERIFY_FAILED",
    "error_lines",
    "exit_code_for",
    "in_cli_words",
]

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
EXIT_NOT_FOUND: Final = 3
EXIT_CONFLICT: Final = 4
EXIT_UNAVAILABLE: Final = 5
EXIT_STUCK: Final = 75  # EX_TEMPFAIL (sysexits.h)
EXIT_INTERRUPTED: Final = 130

# Codes only the command line raises (the library's codes come from jobledger.errors).
CONFIRMATION_REQUIRED: Final = "SCHEDULER_CONFIRMATION_REQUIRED"
ABORTED: Final = "SCHEDULER_ABORTED"
VERIFY_FAILED: Final = "SCHEDULER_VERIFY_FAILED"
INTERRUPTED: Final = "SCHEDULER_INTERRUPTED"
INTERNAL_ERROR: Final = "SCHEDULER_INTERNAL_ERROR"
APP_IMPORT_FAILED: Final = "SCHEDULER_APP_IMPORT_FAILED"

_USAGE_CODES: Final = frozenset({CONFIRMATION_REQUIRED})
_CONFLICT_CODES: Final = frozenset({"SCHEDULER_JOB_HAS_LIVE_OCCURRENCES"})


def exit_code_for(error: SchedulerError) -> int:
    """The exit status for a coded error (see the module docstring)."""
    if isinstance(error, InvalidArgument) or error.code in _USAGE_CODES:
        return EXIT_USAGE
    if isinstance(error, StoreNotFound | SchemaError | StorageUnavailable | StoreClosed):
        return EXIT_UNAVAILABLE
    if isinstance(error, StoreMisconfigured):
        return EXIT_UNAVAILABLE
    if isinstance(error, UnsafePath | DataCorrupt):
        return EXIT_UNAVAILABLE
    if isinstance(error, NotFound):
        return EXIT_NOT_FOUND
    if isinstance(error, Conflict | JobDisabled) or error.code in _CONFLICT_CODES:
        return EXIT_CONFLICT
    if error.code.endswith("_CONFLICT"):
        return EXIT_CONFLICT
    return EXIT_FAILURE


def _hint(error: SchedulerError, default_target: bool) -> str | None:
    details = error.details or {}
    code = error.code
    if code == "SCHEDULER_STORE_NOT_CONFIGURED":
        return (
            "e.g. `jobledger --db postgresql://app@db/app stats`, `jobledger --app shop.jobs:app "
            "stats`, or export JOBLEDGER_DB"
        )
    if isinstance(error, StoreNotFound):
        if default_target:
            return (
                "no --db was given and $JOBLEDGER_DB is unset, so the default store was used; "
                "create it with `jobledger db init`, or point --db at your store"
            )
        source = details.get("targetSource")
        if source == "STORE":
            return (
                "check the STORE path given to `jobledger web`, or create the store with "
                "`jobledger --db <that path> db init`"
            )
        which = source if source in ("--db", "$JOBLEDGER_DB") else "--db / $JOBLEDGER_DB"
        return f"check the path ({which}), or create the store with `jobledger db init`"
    if isinstance(error, UnsafePath):
        return _unsafe_path_hint(details.get("reason"))
    if code == "SCHEDULER_MIGRATION_REQUIRED":
        if details.get("schemaVersion") == 0:
            return "create jobledger's tables in it with `jobledger db init`"
        return "run `jobledger db migrate` (SQLite files are backed up first)"
    if code == "SCHEDULER_SCHEMA_UNKNOWN":
        return (
            "the store was written by a newer or different program: check --db, or upgrade "
            "jobledger"
        )
    if code == "SCHEDULER_REVISION_CONFLICT":
        return "the job changed meanwhile: look again with `jobledger job show`, then retry"
    if code == "SCHEDULER_JOB_HAS_LIVE_OCCURRENCES":
        return (
            "list them with `jobledger occurrence list --job <id>` and cancel them with "
            "`jobledger cancel`, or let them finish"
        )
    if code == "SCHEDULER_REQUEUE_EVIDENCE_CONFLICT":
        return "the occurrence is no longer that dead letter: see `jobledger occurrence show <id>`"
    if code == "SCHEDULER_JOB_DISABLED":
        return "enable it first: `jobledger job enable <id>`"
    if code == CONFIRMATION_REQUIRED:
        return "pass --yes to confirm without a prompt"
    if isinstance(error, StoreMisconfigured):
        return (
            "repeating the command will not help: fix the store URL (--db / $JOBLEDGER_DB) or "
            "the server's set-up as the message says; nothing was written"
        )
    if isinstance(error, StorageUnavailable):
        if details.get("commitState") == "unknown":
            return "the write may or may not have been committed: check before repeating it"
        return "nothing was written; repeat the command when the store is reachable"
    if code == INTERNAL_ERROR:
        return "this is a bug in jobledger; run again with --debug for a traceback"
    return None


def _unsafe_path_hint(reason: object) -> str | None:
    if reason == "shared_directory":
        return (
            "others can create or replace files next to the database there: put it in a "
            "private directory of its own, e.g. --db <that directory>/jobledger/jobs.sqlite3 "
            "(`jobledger db init` makes the directory 0700); nothing was changed"
        )
    if reason == "symlink":
        return "give the real path: symbolic links on a database path are refused"
    if reason == "not_a_regular_file":
        return "--db must name a SQLite database file, not a device, pipe or directory"
    return None


# The library names its arguments (``reason``, ``authority.tenantId``); a refusal of a value
# the command passed on says which option it came from instead.
_OPTION_OF: Final = {
    "actor": "--actor",
    "authority.principal": "--principal",
    "authority.principal.id": "--principal",
    "authority.principal.type": "--principal",
    "authority.tenantId": "--tenant",
    "authority.workspaceId": "--workspace",
    "eventType": "--type",
    "job.kind": "--kind",
    "job.payload": "--payload",
    "key": "--key",
    "kind": "--kind",
    "maxAttempts": "--max-attempts",
    "occurrence.payload": "--payload",
    "payload": "--payload",
    "reason": "--reason",
}
_LEADING_FIELD: Final = re.compile(r"^(?:requests\[\d+\]: )?([A-Za-z][\w.]*)(?= )")


def in_cli_words(message: str) -> str:
    """``reason is not a valid identifier`` → ``--reason is not valid: …``."""
    found = _LEADING_FIELD.match(message)
    option = None if found is None else _OPTION_OF.get(found[1])
    if found is None or option is None:
        return message
    rest = message[found.end() :]
    if rest == " is not a valid identifier":
        rest = " is not valid: it must not be empty, hold control characters or be too long"
    return option + rest


_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _escaped(match: re.Match[str]) -> str:
    point = ord(match.group(0))
    if 0xDC80 <= point <= 0xDCFF:  # a byte of the command line that is not UTF-8
        return f"\\x{point - 0xDC00:02x}"
    return f"\\u{point:04x}"


def error_lines(error: SchedulerError, *, default_target: bool = False) -> list[str]:
    """``error: CODE: message`` (one line of valid UTF-8, whatever the message holds — argparse
    quotes a command line's undecodable bytes as they are) and maybe a hint."""
    message = _SURROGATE.sub(_escaped, " ".join(error.message.split()))
    if isinstance(error, InvalidArgument):
        message = in_cli_words(message)
    lines = [f"error: {error.code}: {message}"]
    hint = _hint(error, default_target)
    if hint is not None:
        lines.append(f"hint: {hint}")
    return lines
