"""The jobledger exception tree.

Every error jobledger raises on purpose is a :class:`SchedulerError` carrying a stable ``code``
(the reference implementation's ``SCHEDULER_*`` codes, so logs and alerts stay comparable),
a message that says what happened, and ``details`` (a JSON-able dict or ``None``). Where a lower
layer caused it, the original exception is chained as ``__cause__``.

A failed call changes nothing: validation runs before any write, and every write happens in one
transaction that is rolled back on error.

::

    SchedulerError                      (root; catch this to handle every jobledger error)
    ├── InvalidArgument                 SCHEDULER_INVALID_ARGUMENT
    ├── NotFound                        SCHEDULER_NOT_FOUND
    │   └── StoreNotFound               SCHEDULER_STORE_NOT_FOUND (no database at the target)
    ├── Conflict                        SCHEDULER_CONFLICT and the other *_CONFLICT codes
    │   ├── RevisionConflict            SCHEDULER_REVISION_CONFLICT
    │   ├── ClaimConflict               SCHEDULER_CLAIM_CONFLICT
    │   ├── IdempotencyPayloadMismatch  SCHEDULER_IDEMPOTENCY_PAYLOAD_MISMATCH
    │   ├── RequeueConflict             SCHEDULER_REQUEUE_EVIDENCE_CONFLICT / _ATTEMPT_LIMIT
    │   └── AdjudicationConflict        SCHEDULER_ADJUDICATION_* (evidence, already, eligible)
    ├── JobFailed                       SCHEDULER_JOB_FAILED (result(): dead letter, cancelled)
    ├── JobDisabled                     SCHEDULER_JOB_DISABLED
    ├── LeaseLost                       SCHEDULER_LEASE_LOST
    ├── StoreClosed                     SCHEDULER_STORE_CLOSED
    ├── UnsafePath                      SCHEDULER_UNSAFE_PATH (symlinks, shared directories)
    ├── SchemaError                     (the database is not one jobledger can use)
    │   ├── SchemaCorrupt               SCHEDULER_SCHEMA_CORRUPT
    │   ├── SchemaUnknown               SCHEDULER_SCHEMA_UNKNOWN
    │   └── MigrationRequired           SCHEDULER_MIGRATION_REQUIRED
    ├── DataCorrupt                     SCHEDULER_DATA_CORRUPT
    ├── StorageUnavailable              SCHEDULER_STORAGE_UNAVAILABLE (details.commitState)
    ├── StoreMisconfigured              SCHEDULER_STORE_MISCONFIGURED (details.problem)
    └── RuntimeRejection                SCHEDULER_RUNTIME_* (runtime configuration and execution)
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AdjudicationConflict",
    "ClaimConflict",
    "Conflict",
    "DataCorrupt",
    "IdempotencyPayloadMismatch",
    "InvalidArgument",
    "JobDisabled",
    "JobFailed",
    "LeaseLost",
    "MigrationRequired",
    "NotFound",
    "RequeueConflict",
    "RevisionConflict",
    "RuntimeRejection",
    "SchedulerError",
    "SchemaCorrupt",
    "SchemaError",
    "SchemaUnknown",
    "StorageUnavailable",
    "StoreClosed",
    "StoreMisconfigured",
    "StoreNotFound",
    "UnsafePath",
    "error_for_code",
]


class SchedulerError(Exception):
    """Root of every error jobledger raises on purpose.

    ``code`` is stable and meant for programs; ``message`` is for people; ``details`` holds
    JSON-able facts (expected vs actual revision, the storage code, ...).
    """

    default_code = "SCHEDULER_ERROR"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code: str = code or self.default_code
        self.message: str = message
        self.details: dict[str, Any] | None = details

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able view: ``{"code", "message", "details"}``."""
        return {"code": self.code, "message": self.message, "details": self.details}


class InvalidArgument(SchedulerError):
    default_code = "SCHEDULER_INVALID_ARGUMENT"


class NotFound(SchedulerError):
    default_code = "SCHEDULER_NOT_FOUND"


class StoreNotFound(NotFound):
    default_code = "SCHEDULER_STORE_NOT_FOUND"


class Conflict(SchedulerError):
    default_code = "SCHEDULER_CONFLICT"


class RevisionConflict(Conflict):
    default_code = "SCHEDULER_REVISION_CONFLICT"


class ClaimConflict(Conflict):
    default_code = "SCHEDULER_CLAIM_CONFLICT"


class IdempotencyPayloadMismatch(Conflict):
    default_code = "SCHEDULER_IDEMPOTENCY_PAYLOAD_MISMATCH"


class RequeueConflict(Conflict):
    default_code = "SCHEDULER_REQUEUE_EVIDENCE_CONFLICT"


class AdjudicationConflict(Conflict):
    """An adjudication refused: ``SCHEDULER_ADJUDICATION_EVIDENCE_CONFLICT`` (the evidence digest,
    attempt or fence changed), ``_ALREADY_RECORDED``, ``_NOT_ELIGIBLE`` or ``_ATTEMPT_LIMIT``."""

    default_code = "SCHEDULER_ADJUDICATION_EVIDENCE_CONFLICT"


class JobFailed(SchedulerError):
    """What :meth:`App.result` raises for an occurrence that ended without a result (a dead
    letter or a cancellation): ``occurrence`` is its snapshot, ``error`` its last error record
    (its ``code`` says why, e.g. ``SCHEDULER_OUTCOME_UNKNOWN``)."""

    default_code = "SCHEDULER_JOB_FAILED"

    def __init__(
        self,
        message: str,
        *,
        occurrence: Any = None,
        error: Any = None,
        code: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message, code=code, details=details)
        self.occurrence = occurrence
        self.error = error


class JobDisabled(SchedulerError):
    default_code = "SCHEDULER_JOB_DISABLED"


class LeaseLost(SchedulerError):
    default_code = "SCHEDULER_LEASE_LOST"


class StoreClosed(SchedulerError):
    default_code = "SCHEDULER_STORE_CLOSED"


class UnsafePath(SchedulerError):
    """A database location jobledger refuses to use (a symlink, a filesystem root, …)."""

    default_code = "SCHEDULER_UNSAFE_PATH"


class SchemaError(SchedulerError):
    default_code = "SCHEDULER_SCHEMA_CORRUPT"


class SchemaCorrupt(SchemaError):
    default_code = "SCHEDULER_SCHEMA_CORRUPT"


class SchemaUnknown(SchemaError):
    default_code = "SCHEDULER_SCHEMA_UNKNOWN"


class MigrationRequired(SchemaError):
    default_code = "SCHEDULER_MIGRATION_REQUIRED"


class DataCorrupt(SchedulerError):
    default_code = "SCHEDULER_DATA_CORRUPT"


class StorageUnavailable(SchedulerError):
    """The storage engine failed (disk full, read-only, I/O error, lost connection).

    ``details["commitState"]`` is ``"not_committed"`` when jobledger knows the write was rolled
    back, otherwise ``"unknown"``: check the store before repeating a non-idempotent write.
    """

    default_code = "SCHEDULER_STORAGE_UNAVAILABLE"

    @classmethod
    def during(
        cls,
        message: str,
        *,
        phase: str,
        storage_code: str,
        commit_state: str,
        retryable: bool,
    ) -> StorageUnavailable:
        """The one shape of storage-failure details every store reports."""
        return cls(
            message,
            details={
                "phase": phase,
                "storageCode": storage_code,
                "commitState": commit_state,
                "retryable": retryable,
            },
        )


class StoreMisconfigured(SchedulerError):
    """The store cannot be reached as configured, and waiting will not change that: no such
    database or role, authentication failed, nothing listening at that host and port, an
    unknown host, SSL required but not offered. ``details["problem"]`` says which
    (``no_such_database``, ``no_such_role``, ``authentication_failed``, ``server_not_listening``,
    ``unknown_host``, ``ssl_not_supported``); the message says what to fix. Unlike
    :class:`StorageUnavailable`, repeating the call will not help. No password is ever part of
    the message or the details.
    """

    default_code = "SCHEDULER_STORE_MISCONFIGURED"


class RuntimeRejection(SchedulerError):
    """A runtime configuration or execution rejection (``SCHEDULER_RUNTIME_*``)."""

    default_code = "SCHEDULER_RUNTIME_ERROR"


_BY_CODE: dict[str, type[SchedulerError]] = {
    cls.default_code: cls
    for cls in (
        InvalidArgument,
        NotFound,
        Conflict,
        RevisionConflict,
        ClaimConflict,
        IdempotencyPayloadMismatch,
        RequeueConflict,
        JobDisabled,
        JobFailed,
        LeaseLost,
        StoreClosed,
        StoreNotFound,
        UnsafePath,
        SchemaCorrupt,
        SchemaUnknown,
        MigrationRequired,
        DataCorrupt,
        StorageUnavailable,
        StoreMisconfigured,
    )
}


def error_for_code(
    code: str, message: str, details: dict[str, Any] | None = None
) -> SchedulerError:
    """Build the most specific :class:`SchedulerError` subclass for ``code``."""
    if code.startswith("SCHEDULER_RUNTIME_"):
        return RuntimeRejection(message, code=code, details=details)
    if code.startswith("SCHEDULER_ADJUDICATION_"):
        return AdjudicationConflict(message, code=code, details=details)
    cls = _BY_CODE.get(code)
    if cls is None:
        cls = Conflict if code.endswith("_CONFLICT") else SchedulerError
    return cls(message, code=code, details=details)
