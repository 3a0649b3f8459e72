"""jobledger: a durable job scheduler.

Jobs carry triggers (cron, interval, one-off — or none, for work enqueued by callers); every
firing becomes an occurrence with a deterministic identity; workers claim occurrences under a
lease with a fencing token, renew it, and settle it into succeeded, retry or dead letter; every
state change appends to an audit event log.
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
    StoreMisconfigured,
    StoreNotFound,
    UnsafePath,
)
from .handlers import (
    AuthorizationRequest,
    Authorizer,
    Decision,
    Fail,
    Handler,
    JobContext,
    Retry,
    allow_all,
)
from .heartbeat import HeartbeatDriver, ManualHeartbeat, ThreadHeartbeat
from .models import (
    UNSET,
    AuditRecord,
    DueItem,
    EnqueueRequest,
    Event,
    Job,
    LeaseHolder,
    MigrationRecord,
    Occurrence,
    OccurrenceCount,
    OccurrencePage,
    OccurrenceStatus,
    PruneReport,
    Renewal,
    SchemaInfo,
    Settlement,
    ThroughputBucket,
    VerifyCheck,
    VerifyReport,
    WorkerRecord,
)
from .options import WorkerOptions
from .paths import default_store_target
from .retry import BackoffPolicy, ExponentialBackoff, FixedBackoff
from .runtime import RunResult, Runtime, RuntimeRunSummary
from .schedules import Cron, Every, MisfirePolicy, Once, parse_trigger
from .schedules.explain import Explanation
from .schedules.planner import Planner, PlanReport
from .store import SQLiteStore, Store, open_store
from .store.operations.schedules import SkippedSlots
from .worker import Worker, WorkerSummary

__version__ = "0.2.0"

__all__ = [
    "UNSET",
    "App",
    "AuditRecord",
    "AuthorizationRequest",
    "Authorizer",
    "BackoffPolicy",
    "ClaimConflict",
    "Clock",
    "Conflict",
    "Cron",
    "DataCorrupt",
    "Decision",
    "DueItem",
    "EnqueueRequest",
    "Event",
    "Every",
    "Explanation",
    "ExponentialBackoff",
    "Fail",
    "FixedBackoff",
    "Handler",
    "HeartbeatDriver",
    "IdempotencyPayloadMismatch",
    "InvalidArgument",
    "Job",
    "JobContext",
    "JobDisabled",
    "LeaseHolder",
    "LeaseLost",
    "ManualHeartbeat",
    "MigrationRecord",
    "MigrationRequired",
    "MisfirePolicy",
    "NotFound",
    "Occurrence",
    "OccurrenceCount",
    "OccurrencePage",
    "OccurrenceStatus",
    "Once",
    "PlanReport",
    "Planner",
    "PruneReport",
    "Renewal",
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
    "SkippedSlots",
    "StorageUnavailable",
    "Store",
    "StoreClosed",
    "StoreMisconfigured",
    "StoreNotFound",
    "ThreadHeartbeat",
    "ThroughputBucket",
    "UnsafePath",
    "VerifyCheck",
    "VerifyReport",
    "Worker",
    "WorkerOptions",
    "WorkerRecord",
    "WorkerSummary",
    "__version__",
    "allow_all",
    "canonical_json",
    "default_store_target",
    "derive_occurrence_identity",
    "normalize_authority",
    "open_store",
    "parse_trigger",
    "system_clock",
]
