"""The names on jobledger's spans: OpenTelemetry's messaging conventions, then jobledger's own.

jobledger is the messaging system: an enqueue *sends* a message (the occurrence) to a
destination (its queue) and each attempt *processes* it. Span names follow the conventions'
``{messaging.operation.name} {messaging.destination.name}``; the queue is a low-cardinality
name chosen by the application, never an id.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ATTEMPT",
    "BATCH_MESSAGE_COUNT",
    "DEDUPLICATED",
    "DEDUPLICATED_COUNT",
    "DESTINATION_NAME",
    "ERROR_TYPE",
    "FENCE",
    "JOB_ID",
    "JOB_KIND",
    "MAX_ATTEMPTS",
    "MESSAGE_ID",
    "OPERATION_NAME",
    "OPERATION_TYPE",
    "OUTCOME",
    "PARTITION",
    "PRIORITY",
    "RECLAIMED",
    "RETRY_AT_MS",
    "SYSTEM",
    "SYSTEM_NAME",
    "TRACER_NAME",
    "process_span_name",
    "send_span_name",
]

TRACER_NAME: Final = "jobledger"
SYSTEM_NAME: Final = "jobledger"

# OpenTelemetry semantic conventions, messaging (https://opentelemetry.io/docs/specs/semconv/).
SYSTEM: Final = "messaging.system"
OPERATION_NAME: Final = "messaging.operation.name"
OPERATION_TYPE: Final = "messaging.operation.type"
DESTINATION_NAME: Final = "messaging.destination.name"
MESSAGE_ID: Final = "messaging.message.id"
BATCH_MESSAGE_COUNT: Final = "messaging.batch.message_count"
ERROR_TYPE: Final = "error.type"

# jobledger's own, under its namespace (the conventions name no delivery attempt or fence).
JOB_ID: Final = "jobledger.job.id"
JOB_KIND: Final = "jobledger.job.kind"
DEDUPLICATED: Final = "jobledger.deduplicated"
DEDUPLICATED_COUNT: Final = "jobledger.deduplicated_count"
ATTEMPT: Final = "jobledger.attempt"
MAX_ATTEMPTS: Final = "jobledger.max_attempts"
FENCE: Final = "jobledger.fence"
RECLAIMED: Final = "jobledger.reclaimed"
PRIORITY: Final = "jobledger.priority"
PARTITION: Final = "jobledger.partition"
OUTCOME: Final = "jobledger.outcome"
RETRY_AT_MS: Final = "jobledger.retry_at_ms"


def send_span_name(queue: str | None) -> str:
    """``send <queue>``; just ``send`` while the queue is not known yet (the job's, read by the
    enqueue itself)."""
    return "send" if queue is None else f"send {queue}"


def process_span_name(queue: str) -> str:
    return f"process {queue}"
