"""Why queued work is not running (SPEC §7): the words ``explain``, ``occurrence show``, the
dashboard and ``jobledger queue`` use for a queue's limits and for what holds an occurrence back.

Read through the :class:`~jobledger.Store` protocol only (``queue_depths`` and
``occurrence_gate``, both bounded reads). A reason is a stable ``code`` (for ``--json`` and
scripts) and a sentence for people:

* ``queue_paused`` — "queue paused by ops at …: incident";
* ``partition_limit`` — "partition customer:42 at its limit (1 running)";
* ``partition_rate`` — "partition customer:42 rate limit: next window at …";
* ``queue_concurrency`` — "queue at its concurrency limit (5 running)";
* ``queue_rate`` — "rate limit: next window at …";
* ``not_due`` / ``retry_wait`` — not due until its instant; ``job_disabled``; ``blocked``
  (waiting for parent occurrences);
* ``ready`` — nothing holds it: the next worker that claims its kind from its queue takes it.

``worker_concurrency`` holds a worker's own claims, not an occurrence: it is not a reason here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ..models import Occurrence, Queue, QueueDepth, Rate
from ..store.base import Store

__all__ = ["WaitReason", "limit_words", "queue_reasons", "rate_words", "why_waiting"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000))


def _iso(instant_ms: int) -> str:
    moment = _EPOCH + timedelta(milliseconds=instant_ms)
    spec = "milliseconds" if moment.microsecond else "seconds"
    return moment.isoformat(timespec=spec).replace("+00:00", "Z")


def _per(per_ms: int) -> str:
    """A rate window exactly: ``1m``, ``90s``, ``1h30m`` (every unit kept)."""
    parts, rest = [], per_ms
    for unit, size in _UNITS:
        amount, rest = divmod(rest, size)
        if amount:
            parts.append(f"{amount}{unit}")
    if rest:
        parts.append(f"{rest}ms")
    return "".join(parts)


def rate_words(rate: Rate) -> str:
    """``10/1m``: at most 10 claims per one-minute window (the form ``queue set`` takes)."""
    return f"{rate.limit}/{_per(rate.per_ms)}"


def limit_words(queue: Queue) -> list[str]:
    """A queue's declared limits in words, e.g. ``["concurrency 5", "rate 10/1m"]``."""
    words = []
    if queue.concurrency is not None:
        words.append(f"concurrency {queue.concurrency}")
    if queue.worker_concurrency is not None:
        words.append(f"per worker {queue.worker_concurrency}")
    if queue.partition_concurrency is not None:
        words.append(f"per partition {queue.partition_concurrency}")
    if queue.rate is not None:
        words.append(f"rate {rate_words(queue.rate)}")
    if queue.partition_rate is not None:
        words.append(f"partition rate {rate_words(queue.partition_rate)}")
    return words


@dataclass(frozen=True, slots=True)
class WaitReason:
    """One thing that keeps an occurrence from running (codes: the module docstring)."""

    code: str
    text: str
    until: int | None = None  # when it stops holding, where that is known (epoch ms)

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "text": self.text,
            "until": None if self.until is None else _iso(self.until),
        }


def why_waiting(
    store: Store, occurrence: Occurrence, *, when: Callable[[int], str] = _iso
) -> list[WaitReason]:
    """Why ``occurrence`` is not running now (empty unless it is queued, retrying or blocked).
    ``when`` formats instants in the sentences (default ISO 8601 UTC)."""
    if occurrence.status == "blocked":
        return [WaitReason("blocked", "waiting for its parent occurrences to settle")]
    if occurrence.status not in ("queued", "retry_wait"):
        return []
    now = store.now()
    reasons: list[WaitReason] = []
    job = store.get_job(occurrence.job_id)
    if job is not None and not job.enabled:
        reasons.append(WaitReason("job_disabled", f"job {job.id} is disabled"))
    if occurrence.available_at > now:
        due = when(occurrence.available_at)
        if occurrence.status == "retry_wait":
            code, text = "retry_wait", f"retry due at {due}"
        else:
            code, text = "not_due", f"not due until {due}"
        reasons.append(WaitReason(code, text, occurrence.available_at))
    [depth] = store.queue_depths(names=[occurrence.queue])
    reasons += _queue_reasons(depth, when)
    gate = store.occurrence_gate(occurrence.id)
    queue = depth.queue
    if gate is not None and gate.gate == "held" and occurrence.partition is not None:
        partition = occurrence.partition
        cap = queue.partition_concurrency
        rate = queue.partition_rate
        full = cap is not None and gate.partition_running >= cap
        if full or rate is None or gate.partition_wake_at is None:
            reasons.append(
                WaitReason(
                    "partition_limit",
                    f"partition {partition} at its limit ({gate.partition_running} running)",
                )
            )
        if rate is not None and gate.partition_wake_at is not None:
            reasons.append(
                WaitReason(
                    "partition_rate",
                    f"partition {partition} rate limit: next window at "
                    f"{when(gate.partition_wake_at)}",
                    gate.partition_wake_at,
                )
            )
    if not reasons:
        reasons.append(
            WaitReason(
                "ready",
                f"nothing holds it back: the next worker claiming kind {occurrence.kind} from "
                f"queue {occurrence.queue} takes it",
            )
        )
    return reasons


def _queue_reasons(depth: QueueDepth, when: Callable[[int], str]) -> list[WaitReason]:
    """What holds every queued occurrence of a queue back (pause, queue-wide limits)."""
    queue = depth.queue
    reasons = []
    if queue.paused:
        by = f" by {queue.paused_by}" if queue.paused_by else ""
        at = f" at {when(queue.paused_at)}" if queue.paused_at is not None else ""
        why = f": {queue.paused_reason}" if queue.paused_reason else ""
        reasons.append(WaitReason("queue_paused", f"queue paused{by}{at}{why}"))
    if queue.concurrency is not None and depth.running >= queue.concurrency:
        reasons.append(
            WaitReason(
                "queue_concurrency",
                f"queue at its concurrency limit ({depth.running} running"
                f"{_set_by(queue, 'concurrency')})",
            )
        )
    if (
        queue.rate is not None
        and depth.rate_claims >= queue.rate.limit
        and depth.rate_window_end is not None
    ):
        reasons.append(
            WaitReason(
                "queue_rate",
                f"rate limit{_set_by(queue, 'rate', ' (', ')')}: next window at "
                f"{when(depth.rate_window_end)}",
                depth.rate_window_end,
            )
        )
    return reasons


def _set_by(queue: Queue, limit: str, before: str = "; ", after: str = "") -> str:
    """Who set a limit, when it is not the app's declaration (SPEC §14: an operator's value
    stands until an operator changes it, so say so where it holds work back)."""
    if queue.sources.get(limit) != "operator":
        return ""
    return f"{before}set by an operator: `jobledger queue set` changes it{after}"


def queue_reasons(depth: QueueDepth, when: Callable[[int], str] = _iso) -> list[WaitReason]:
    """What holds a whole queue back now (for ``queue show`` and the dashboard)."""
    return _queue_reasons(depth, when)
