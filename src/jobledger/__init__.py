"""jobledger: a durable job scheduler kernel.

Jobs carry triggers; every firing becomes an occurrence with a deterministic identity; workers
claim occurrences under a lease with a fencing token, renew it, and settle it into succeeded,
retry or dead letter; every state change appends to an audit event log.
"""

from .app import App
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
from .handlers import AuthorizationRequest, Decision, Fail, JobContext, Retry, allow_all
from .heartbeat import ManualHeartbeat, ThreadHeartbeat
from .models import Event, Job, MigrationRecord, Occurrence, SchemaInfo, Settlement
from .retry import BackoffPolicy, ExponentialBackoff, FixedBackoff
from .runtime import RunResult, Runtime, RuntimeRunSummary
from .store import UNSET, SQLiteStore, Store, open_store
from .worker import Worker, WorkerSummary

__version__ = "0.1.0"

__all__ = [
    "UNSET",
    "App",
    "AuthorizationRequest",
    "BackoffPolicy",
    "ClaimConflict",
    "Clock",
    "Conflict",
    "DataCorrupt",
    "Decision",
    "Event",
    "ExponentialBackoff",
    "Fail",
    "FixedBackoff",
    "IdempotencyPayloadMismatch",
    "InvalidArgument",
    "Job",
    "JobContext",
    "JobDisabled",
    "LeaseLost",
    "ManualHeartbeat",
    "MigrationRecord",
    "MigrationRequired",
    "NotFound",
    "Occurrence",
    "RequeueConflict",
    "Retry",
    "RevisionConflict",
    "RunResult",
    "Runtime",
    "RuntimeRejection",
    "RuntimeRunSummary",
    "SQLiteStore",
    "SchedulerError",
    "SchemaCorrupt",
    "SchemaError",
    "SchemaInfo",
    "SchemaUnknown",
    "Settlement",
    "StorageUnavailable",
    "Store",
    "StoreClosed",
    "ThreadHeartbeat",
    "Worker",
    "WorkerSummary",
    "__version__",
    "allow_all",
    "canonical_json",
    "derive_occurrence_identity",
    "normalize_authority",
    "open_store",
    "system_clock",
]
