"""What a runtime and a worker report as they go: the hook metrics and logs hang on.

An :class:`Observer` receives one call per thing that happened — claims made, an attempt
started or finished, a lease lost, a slot stuck in a handler past its time limit (and freed),
a planner pass, a step of the store's clock — and must return quickly and never raise
(failures are logged and ignored). The default :data:`NO_OBSERVER` does nothing;
:class:`jobledger.metrics.PrometheusObserver` turns the calls into Prometheus metrics.

Log records about one attempt carry the occurrence id, kind, attempt and fence as ``extra``
fields (:func:`attempt_fields`), so a structured formatter (``jobledger.logs.JsonFormatter``)
puts them on every line.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..models import Occurrence

if TYPE_CHECKING:
    from ..models import RunResult

__all__ = ["NO_OBSERVER", "Observer", "attempt_fields", "notify"]

logger = logging.getLogger("jobledger.observe")


class Observer:
    """Base class with no-op hooks; override the ones you need."""

    def claimed(self, occurrences: Sequence[Occurrence]) -> None:
        """A claim transaction leased these (``occurrence.reclaimed`` marks takeovers)."""

    def started(self, occurrence: Occurrence) -> None:
        """A slot started running this occurrence's attempt."""

    def finished(self, occurrence: Occurrence, result: RunResult, duration_s: float) -> None:
        """An attempt ended (``result.status``: settled status or ``aborted``); ``duration_s``
        is from its start to the end of its handler."""

    def lease_lost(self, occurrence: Occurrence) -> None:
        """A lease this process held turned out to be lost (expired or taken over)."""

    def planned(self, enqueued: Sequence[Occurrence], skipped: int, now: int) -> None:
        """A planner pass enqueued these slots (``now`` - ``scheduled_for`` is the lag)."""

    def slot_stuck(self, occurrence: Occurrence) -> None:
        """A worker slot is stuck: ``occurrence``'s attempt ran past its time limit and was
        settled, but its handler ignores cancellation and its thread runs on."""

    def slot_freed(self, occurrence: Occurrence) -> None:
        """The stuck handler of ``occurrence`` returned: its slot runs attempts again."""

    def clock_stepped(self, direction: str, seconds: float) -> None:
        """The store's clock moved ``seconds`` more (``direction="forward"``) or less
        (``"backward"``) than the monotonic clock between two housekeeping passes."""


NO_OBSERVER = Observer()


def notify(observer: Observer, hook: str, *args: Any) -> None:
    """Call ``observer.<hook>(*args)``; an observer's failure is logged, never raised."""
    if observer is NO_OBSERVER:
        return
    try:
        getattr(observer, hook)(*args)
    except Exception:
        logger.exception("observer %s.%s failed", type(observer).__name__, hook)


def attempt_fields(occurrence: Occurrence) -> dict[str, Any]:
    """The ``extra`` fields every log line about an attempt carries."""
    return {
        "occurrence_id": occurrence.id,
        "job_id": occurrence.job_id,
        "kind": occurrence.kind,
        "attempt": occurrence.attempt,
        "fence": occurrence.fence,
    }
