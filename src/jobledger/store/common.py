"""Decisions every store shares: lease arithmetic, what an audit event says, fixed errors.

Both stores decide transitions and shape audit events here, so the two can only differ in *how*
they read and write rows, never in *what* they decide. Argument validation is in
:mod:`.inputs`, row decoding in :mod:`.rows`, query loading in :mod:`.sql`.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from .. import contract
from ..errors import InvalidArgument, LeaseLost, NotFound, StorageUnavailable
from .tx import Row

__all__ = [
    "JOB_NAMES_LIMIT",
    "LAZY_DEAD_LETTER_BATCH",
    "LEASE_EXPIRED_ERROR",
    "checked_lease",
    "claim_event_data",
    "count_settlement",
    "event_params",
    "is_outcome_unknown",
    "lease_lost",
    "liveness_lock_unavailable",
    "minute_of",
    "settle_event",
    "throughput_params",
    "unknown_job",
]

LEASE_EXPIRED_ERROR = {
    "code": "lease_expired",
    "message": "Execution lease expired after the final allowed attempt",
}
LEASE_EXPIRED_ERROR_JSON = contract.canonical_json(LEASE_EXPIRED_ERROR)
LAZY_DEAD_LETTER_BATCH = 100
MINUTE_MS = 60_000
# An outcome-unknown error code (SPEC §9): ``SCHEDULER_OUTCOME_UNKNOWN`` or a handler's own
# ``<PREFIX>_OUTCOME_UNKNOWN``.
_OUTCOME_UNKNOWN = re.compile(r"^[A-Z0-9_]+_OUTCOME_UNKNOWN$")


def is_outcome_unknown(error: object) -> bool:
    """Whether a stored error (parsed JSON) says nobody knows if the side effect happened."""
    code = error.get("code") if isinstance(error, dict) else None
    return isinstance(code, str) and _OUTCOME_UNKNOWN.match(code) is not None


def checked_lease(now: int, lease_ms: int) -> int:
    """``lease_ms``, once its expiry from ``now`` is known to stay in the safe integer range.

    The stores add it to the row's effective instant (the later of ``now`` and the row's last
    change), so a lease never starts before the row's own timeline: a row changed by a process
    whose clock runs ahead is still leased for ``lease_ms`` from that change, not born expired.
    """
    if now + lease_ms > contract.MAX_SAFE_INTEGER:
        raise InvalidArgument("lease expiry exceeds the safe integer range")
    return lease_ms


def lease_lost(occurrence_id: str) -> LeaseLost:
    return LeaseLost(
        f"Occurrence lease is absent, expired, or owned by another fence: {occurrence_id}"
    )


def liveness_lock_unavailable(exc: BaseException, *, again: bool = False) -> StorageUnavailable:
    """A worker could not take its liveness lock (the file or the database session failed):
    at start (``phase`` ``open``), or ``again`` after losing it (``phase`` ``write``)."""
    return StorageUnavailable.during(
        "Could not take this owner's liveness lock" + (" again" if again else ""),
        phase="write" if again else "open",
        storage_code=type(exc).__name__,
        commit_state="not_committed",
        retryable=True,
    )


def minute_of(instant: int) -> int:
    return instant - instant % MINUTE_MS


def event_params(
    *,
    job_id: str,
    event_type: str,
    occurred_at: int,
    data_json: str,
    occurrence_id: str | None = None,
    owner_id: str | None = None,
    fence: int | None = None,
) -> dict[str, Any]:
    """The parameters of one ``insert_event`` (``data_json`` already canonical)."""
    return {
        "job_id": job_id,
        "occurrence_id": occurrence_id,
        "event_type": event_type,
        "occurred_at": occurred_at,
        "owner_id": owner_id,
        "fence": fence,
        "data_json": data_json,
    }


def claim_event_data(
    *, attempt: int, previous_status: str, previous_owner: str | None, targeted: bool
) -> tuple[str, str]:
    """The event type and canonical data of a claim (reclaimed when it was running)."""
    event_type = "occurrence_reclaimed" if previous_status == "running" else "occurrence_claimed"
    data: dict[str, Any] = {
        "attempt": attempt,
        "previousOwner": previous_owner,
        "previousStatus": previous_status,
    }
    if targeted:
        data["targeted"] = True
    return event_type, contract.encode_trusted_json(data)


_SETTLE_EVENTS = {
    "succeeded": "occurrence_succeeded",
    "retry_wait": "occurrence_retry_scheduled",
    "dead_letter": "occurrence_dead_lettered",
}


def settle_event(row: Mapping[str, Any], *, snoozed: bool = False) -> tuple[str, str]:
    """The event type and canonical data for a settled row (as ``settle_occurrence`` left it);
    a snooze under the cap is ``occurrence_snoozed`` ``{delay, until, snoozes}`` (SPEC §9)."""
    status = row["status"]
    if snoozed and status == "retry_wait":
        until = int(row["available_at"])
        return "occurrence_snoozed", contract.encode_trusted_json(
            {
                "delay": max(0, until - int(row["updated_at"])),
                "until": until,
                "snoozes": int(row["snoozes"]),
            }
        )
    data: dict[str, Any] = {"attempt": int(row["attempt"]), "maxAttempts": int(row["max_attempts"])}
    if status == "retry_wait":
        data["retryAt"] = int(row["available_at"])
    return _SETTLE_EVENTS[status], contract.encode_trusted_json(data)


# Settlements per (minute, kind, owner, status), merged into jobledger_throughput rows.
def count_settlement(
    tally: Counter[tuple[int, str, str, str]], now: int, row: Row, owner: str
) -> None:
    tally[(minute_of(now), row["kind"], owner, row["status"])] += 1


def throughput_params(tally: Counter[tuple[int, str, str, str]]) -> list[dict[str, Any]]:
    merged: dict[tuple[int, str, str], dict[str, Any]] = {}
    for (minute, kind, owner, status), count in tally.items():
        entry = merged.setdefault(
            (minute, kind, owner),
            {
                "minute": minute,
                "kind": kind,
                "owner_id": owner,
                "succeeded": 0,
                "retried": 0,
                "dead_lettered": 0,
            },
        )
        column = {"succeeded": "succeeded", "retry_wait": "retried"}.get(status, "dead_lettered")
        entry[column] += count
    return list(merged.values())


# How many jobs an unknown job id is compared with (an error path; stores hold few jobs).
JOB_NAMES_LIMIT = 10_000


def unknown_job(job_id: str, jobs: Iterable[tuple[str, str]]) -> NotFound:
    """``SCHEDULER_NOT_FOUND`` for a job id nobody declared, with a hint when ``job_id`` is the
    *kind* of some job (a job has two names: ``ensure_job("send-confirmation",
    "send_confirmation")``) or close to a job id or kind: "did you mean job send-confirmation
    (kind send_confirmation)?". ``jobs`` are (job id, kind) pairs; ``details.suggestions``
    lists the jobs suggested."""
    known = list(jobs)
    by_kind = [(key, kind) for key, kind in known if kind == job_id]
    if by_kind:
        picked = by_kind[:3]
    else:
        names = {key: [(key, kind)] for key, kind in known}
        for key, kind in known:
            names.setdefault(kind, []).append((key, kind))
        close = difflib.get_close_matches(job_id, list(names), n=3, cutoff=0.75)
        picked = list(dict.fromkeys(pair for name in close for pair in names[name]))[:3]
    message = f"Scheduler job does not exist: {job_id}"
    if picked:
        hints = " or ".join(f"job {key} (kind {kind})" for key, kind in picked)
        message += f"; did you mean {hints}?"
    return NotFound(
        message,
        details={
            "jobId": job_id,
            "suggestions": [{"jobId": key, "kind": kind} for key, kind in picked],
        },
    )
