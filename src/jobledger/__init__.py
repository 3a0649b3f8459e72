"""jobledger: a durable job scheduler kernel.

Jobs carry triggers; every firing becomes an occurrence with a deterministic identity; workers
claim occurrences under a lease with a fencing token, renew it, and settle it into succeeded,
retry or dead letter; every state change appends to an audit event log.
"""

from .clock import Clock, system_clock
from .contract import canonical_json, derive_occurrence_identity, normalize_authority
from .errors import (
    ClaimConflict,
    Conflict,
    DataCorrupt,
    IdempotencyPayloadMismatch,
    InvalidArgument,
    JobDisabled,
    LeaseLost,
    MigrationRequired,
    NotFound,
    RequeueConflict,
    RevisionConflict,
    RuntimeRejection,
    SchedulerError,
    SchemaCorrupt,
    SchemaError,
    SchemaUnknown,
    StorageUnavailable,
    StoreClosed,
)
from .models import Event, Job, MigrationRecord, Occurrence, SchemaInfo
from .store import UNSET, SQLiteStore, Store, open_store

__version__ = "0.1.0"

__all__ = [
    "UNSET",
    "ClaimConflict",
    "Clock",
    "Conflict",
    "DataCorrupt",
    "Event",
    "IdempotencyPayloadMismatch",
    "InvalidArgument",
    "Job",
    "JobDisabled",
    "LeaseLost",
    "MigrationRecord",
    "MigrationRequired",
    "NotFound",
    "Occurrence",
    "RequeueConflict",
    "RevisionConflict",
    "RuntimeRejection",
    "SQLiteStore",
    "SchedulerError",
    "SchemaCorrupt",
    "SchemaError",
    "SchemaInfo",
    "SchemaUnknown",
    "StorageUnavailable",
    "Store",
    "StoreClosed",
    "__version__",
    "canonical_json",
    "derive_occurrence_identity",
    "normalize_authority",
    "open_store",
    "system_clock",
]
