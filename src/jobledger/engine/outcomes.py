"""How an attempt's failure is recorded: error sanitising and retry classification.

Both are pure: they read the exception (defensively — a hostile attribute getter must not break
the runtime) and return plain values the runtime passes to :meth:`Store.settle`.

The stored error record follows the reference (§3.11 step 14)::

    {"code": ≤128 chars, "message": ≤2000 chars, "name": ≤128 chars, "details": JSON}

``code`` is the exception's string ``code`` (trimmed, truncated to 128) or a fallback
(``execution_failed``; ``scheduler_rejected`` for runtime rejections). ``details`` is kept when
it is JSON, replaced by ``{"omitted": "invalid_error_details"}`` when it is not, and by
``{"omitted": "error_details_too_large"}`` when the record would exceed the 1 MiB JSON limit.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Any

from ..contract import MAX_JSON_BYTES, canonical_json, normalize_json
from ..durations import epoch_ms_from
from ..errors import InvalidArgument, RuntimeRejection
from .handlers import Retry
from .retry import BackoffPolicy

logger = logging.getLogger("jobledger.runtime")

__all__ = [
    "MAX_ERROR_CODE_LENGTH",
    "MAX_ERROR_MESSAGE_LENGTH",
    "FailurePlan",
    "classify_failure",
    "plan_rejection",
    "sanitize_error",
]

MAX_ERROR_CODE_LENGTH = 128
MAX_ERROR_MESSAGE_LENGTH = 2000
MAX_ERROR_NAME_LENGTH = 128
INVALID_DETAILS = {"omitted": "invalid_error_details"}
DETAILS_TOO_LARGE = {"omitted": "error_details_too_large"}


def _attribute(error: BaseException, name: str) -> Any:
    try:
        return getattr(error, name, None)
    except Exception:  # a hostile property must not break error recording
        return None


def sanitize_error(
    error: BaseException, *, default_code: str = "execution_failed"
) -> dict[str, Any]:
    """A JSON error record for ``error`` that always fits in the store."""
    code = _attribute(error, "code")
    code = code.strip() if isinstance(code, str) else ""
    message = _attribute(error, "message")
    if not isinstance(message, str):
        try:
            message = str(error)
        except Exception:
            message = ""
    record: dict[str, Any] = {
        "code": (code or default_code)[:MAX_ERROR_CODE_LENGTH],
        "message": (message or type(error).__name__)[:MAX_ERROR_MESSAGE_LENGTH],
        "name": type(error).__name__[:MAX_ERROR_NAME_LENGTH],
    }
    details = _attribute(error, "details")
    if details is not None:
        try:
            record["details"] = normalize_json(details, "error.details")
        except InvalidArgument as exc:
            too_large = "encoded bytes" in exc.message
            record["details"] = dict(DETAILS_TOO_LARGE if too_large else INVALID_DETAILS)
        if not _fits(record):
            record["details"] = dict(DETAILS_TOO_LARGE)
    return record


def _fits(record: dict[str, Any]) -> bool:
    try:
        return len(canonical_json(record).encode("utf-8")) <= MAX_JSON_BYTES
    except InvalidArgument:  # the encoder enforces the same limit
        return False


@dataclass(frozen=True, slots=True)
class FailurePlan:
    """How to settle a failed attempt."""

    error: dict[str, Any]
    retryable: bool
    retry_at: int | None


def classify_failure(
    error: BaseException,
    *,
    attempt: int,
    now: int,
    policy: BackoffPolicy,
    rng: random.Random,
) -> FailurePlan:
    """Decide retryability and the retry instant for a handler's exception.

    :class:`~jobledger.Retry` chooses its own instant (``at``, or ``now + delay``); an exception
    whose ``retryable`` is ``False`` (``Fail`` included) is final; anything else is retried at
    ``now + policy.delay_ms(attempt)`` unless it carries an epoch-ms ``retry_at``. If reading
    the exception's policy itself fails, the attempt is dead-lettered with
    ``SCHEDULER_RUNTIME_ERROR_POLICY_FAILED`` (as the reference does for a failing classifier).
    """
    try:
        if isinstance(error, Retry):
            if error.retry_at is not None:
                retry_at = error.retry_at
            elif error.delay_ms is not None:
                retry_at = now + error.delay_ms
            else:
                retry_at = now + policy.delay_ms(attempt, rng)
            return FailurePlan(sanitize_error(error), True, retry_at)
        retryable = getattr(error, "retryable", True) is not False
        explicit = getattr(error, "retry_at", None)
        if not retryable:
            return FailurePlan(sanitize_error(error), False, None)
        retry_at = (
            epoch_ms_from(explicit, "retry_at")
            if explicit is not None
            else now + policy.delay_ms(attempt, rng)
        )
        return FailurePlan(sanitize_error(error), True, retry_at)
    except Exception as exc:
        rejection = RuntimeRejection(
            "Could not classify the handler's error",
            code="SCHEDULER_RUNTIME_ERROR_POLICY_FAILED",
            details={"errorType": type(exc).__name__},
        )
        return FailurePlan(
            sanitize_error(rejection, default_code="scheduler_rejected"), False, None
        )


def plan_rejection(
    code: str,
    message: str,
    *,
    retryable: bool,
    details: dict[str, Any] | None,
    attempt: int,
    now: int,
    policy: BackoffPolicy,
    rng: random.Random,
    kind: str,
) -> FailurePlan:
    """How to settle an attempt the runtime itself rejected (``SCHEDULER_RUNTIME_*``): final,
    or — ``retryable`` — retried after the kind's backoff. A retry policy that fails is a
    programming error, surfaced as a final ``SCHEDULER_RUNTIME_ERROR_POLICY_FAILED`` instead of
    escaping with the lease held."""
    error = sanitize_error(
        RuntimeRejection(message, code=code, details=details), default_code="scheduler_rejected"
    )
    if not retryable:
        return FailurePlan(error, False, None)
    try:
        return FailurePlan(error, True, now + policy.delay_ms(attempt, rng))
    except Exception as exc:
        logger.exception("retry policy for %r failed", kind)
        failed = RuntimeRejection(
            "The retry policy failed while scheduling a retry",
            code="SCHEDULER_RUNTIME_ERROR_POLICY_FAILED",
            details={"errorType": type(exc).__name__, "rejected": code},
        )
        return FailurePlan(sanitize_error(failed, default_code="scheduler_rejected"), False, None)
