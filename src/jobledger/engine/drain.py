"""Run a worker until it is idle — "run everything now" — and say what is left.

:class:`Drain` runs a :class:`~jobledger.Worker` in the calling thread and watches it from
another. The worker is **idle** when, for its kinds,

* nothing is due now (:meth:`~jobledger.Store.oldest_due`: claimable queued or retry-waiting
  work, and expired leases to take over),
* it holds no lease and runs no attempt, and
* nothing waiting (queued or ``retry_wait``) falls due within ``horizon`` (default
  :data:`DEFAULT_IDLE_HORIZON`, 60 s) of the store's clock: a retry due a second from now, or an
  occurrence enqueued with a short delay, is waited for and run, not left behind.

Waiting for that next instant goes through the injected ``sleep`` (a fake clock's advance in
tests); waiting for the worker's own threads is a short real wait. When due work stays that this
worker never takes (another workspace: ``oldest_due`` cannot filter by it) the drain stops after
a quiet spell — nothing claimed, run or held for ``max(5 s, 5 × poll interval)``.

The :class:`DrainReport` counts **occurrences by their final status** in this run (an
occurrence retried twice and then successful is one ``succeeded``, in three attempts), and
:class:`Backlog` says what is left: how many occurrences of the worker's kinds still wait and
which is due next. Finding the next one reads the waiting occurrences page by page
(:meth:`~jobledger.Store.list_occurrences`), at most :data:`MAX_BACKLOG_SCAN` of them; beyond
that the earliest among those read is reported (``Backlog.complete`` is ``False``).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal

from ..durations import ms_from_timedelta
from ..errors import InvalidArgument, SchedulerError
from ..models import DueItem, Occurrence, RunResult
from ..store.base import Store
from .worker import Worker, WorkerSummary

__all__ = [
    "DEFAULT_IDLE_HORIZON",
    "MAX_BACKLOG_SCAN",
    "MAX_IDLE_HORIZON",
    "Backlog",
    "Drain",
    "DrainReport",
    "idle_horizon_ms",
    "read_backlog",
]

logger = logging.getLogger("jobledger.worker")

DEFAULT_IDLE_HORIZON = timedelta(seconds=60)
MAX_IDLE_HORIZON = timedelta(days=1)
# The most waiting occurrences read to find the next one due (a page is at most 1,000).
MAX_BACKLOG_SCAN = 10_000
# How often the watcher looks at the worker and the store (real time: the worker's threads).
IDLE_POLL_S = 0.2
# The longest single sleep towards the next due instant, so a stop is noticed soon.
WAIT_STEP_S = 1.0
PROGRESS_EVERY_S = 1.0
# Statuses of occurrences that still wait for a claim.
WAITING = ("queued", "retry_wait")


def idle_horizon_ms(horizon: timedelta) -> int:
    """``horizon`` as whole milliseconds, checked: 0 up to :data:`MAX_IDLE_HORIZON`."""
    horizon_ms = ms_from_timedelta(horizon, "idle_horizon")
    if horizon_ms > ms_from_timedelta(MAX_IDLE_HORIZON, "idle_horizon"):
        raise InvalidArgument(
            "the idle horizon must be at most one day", details={"field": "idle_horizon"}
        )
    return horizon_ms


@dataclass(frozen=True, slots=True)
class Backlog:
    """What is left for a worker's kinds at ``now``: ``waiting`` occurrences (queued or
    retry-waiting, due or not), of those not yet due the one due first (``next``), and how many
    are ``running`` (leased: by other workers, once a drain stopped)."""

    now: int
    waiting: int = 0
    next: Occurrence | None = None
    running: int = 0
    complete: bool = True

    @property
    def next_due_at(self) -> int | None:
        return None if self.next is None else self.next.available_at


def read_backlog(
    store: Store,
    kinds: Collection[str],
    *,
    now: int,
    limit: int = MAX_BACKLOG_SCAN,
    queues: Collection[str] | None = None,
) -> Backlog:
    """How many occurrences of ``kinds`` wait, and the first due after ``now`` in ``queues``
    (default: any queue; see the module docstring for the cost)."""
    rows = [row for row in store.count_occurrences() if row.kind in kinds]
    counts = {(row.kind, row.status): row.count for row in rows if row.status in WAITING}
    running = sum(row.count for row in rows if row.status == "running")
    best: Occurrence | None = None
    scanned, complete = 0, True
    for kind, status in sorted(key for key, count in counts.items() if count > 0):
        cursor: str | None = None
        while True:
            if scanned >= limit:
                complete = False
                break
            page = store.list_occurrences(
                status=status, kind=kind, limit=min(1000, limit - scanned), cursor=cursor
            )
            scanned += len(page.items)
            for occurrence in page.items:
                if queues is not None and occurrence.queue not in queues:
                    continue
                if occurrence.available_at > now and (
                    best is None
                    or (occurrence.available_at, occurrence.id) < (best.available_at, best.id)
                ):
                    best = occurrence
            cursor = page.next_cursor
            if cursor is None:
                break
    return Backlog(
        now=now, waiting=sum(counts.values()), next=best, running=running, complete=complete
    )


@dataclass(slots=True)
class DrainReport:
    """What a drain did: occurrences by their final status in this run (``statuses``), the
    attempts that took (``attempts``), why it stopped and what is left (``left``)."""

    statuses: Counter[str] = field(default_factory=Counter)
    attempts: int = 0
    outcome: Literal["idle", "stalled", "stopped"] = "stopped"
    left: Backlog | None = None
    summary: WorkerSummary = field(default_factory=WorkerSummary)
    due_kinds: int = 0

    @property
    def occurrences(self) -> int:
        return sum(self.statuses.values())


class Drain:
    """Runs ``worker`` until idle (see the module docstring); :meth:`run` blocks.

    ``sleep(seconds)`` waits for the store's clock to move towards the next due instant (default:
    a real wait); ``on_progress`` hears the report so far about once a second, ``on_wait`` the
    backlog each time the drain starts waiting for a new next-due occurrence.
    """

    def __init__(
        self,
        worker: Worker,
        *,
        horizon: timedelta = DEFAULT_IDLE_HORIZON,
        sleep: Callable[[float], None] | None = None,
        on_progress: Callable[[DrainReport], None] | None = None,
        on_wait: Callable[[Backlog], None] | None = None,
    ) -> None:
        if not isinstance(worker, Worker):
            raise InvalidArgument("worker must be a jobledger.Worker")
        self.horizon_ms = idle_horizon_ms(horizon)
        self.worker = worker
        self._done = threading.Event()
        self._sleep = sleep or self._done.wait
        self._on_progress = on_progress
        self._on_wait = on_wait
        self._lock = threading.Lock()
        self._finals: dict[str, str] = {}
        self._attempts = 0
        self._outcome: Literal["idle", "stalled", "stopped"] = "stopped"
        self._left: Backlog | None = None
        self._due_kinds = 0

    def run(self, *, install_signal_handlers: bool = True) -> DrainReport:
        watcher = threading.Thread(target=self._watch, name="jobledger-drain", daemon=True)
        watcher.start()
        try:
            summary = self.worker.run(
                install_signal_handlers=install_signal_handlers, on_result=self._heard
            )
        finally:
            self._done.set()
            watcher.join(timeout=5)
        report = self.report()
        report.summary = summary
        if report.left is None:  # stopped from outside: still say what is left
            report.left = self._backlog()
        return report

    def report(self) -> DrainReport:
        """The report so far (safe from any thread)."""
        with self._lock:
            return DrainReport(
                statuses=Counter(self._finals.values()),
                attempts=self._attempts,
                outcome=self._outcome,
                left=self._left,
                due_kinds=self._due_kinds,
            )

    def _heard(self, result: RunResult) -> None:
        if result.occurrence is None:
            return
        with self._lock:
            self._finals[result.occurrence.id] = result.status
            self._attempts += 1

    def _backlog(self) -> Backlog | None:
        store = self.worker.runtime.store
        try:
            return read_backlog(
                store, self.worker.kinds, now=store.now(), queues=self.worker.options.queues
            )
        except SchedulerError as exc:
            logger.warning("reading what is left failed: %s", exc)
            return None

    def _takeable(self, store: Store, due: list[DueItem]) -> list[DueItem]:
        """The due lanes this worker claims from: its queues, and not paused (work in a paused
        queue waits for a resume, not for this drain)."""
        wanted = self.worker.options.queues
        paused = {queue.name for queue in store.list_queues() if queue.paused}
        return [
            item
            for item in due
            if item.queue not in paused and (wanted is None or item.queue in wanted)
        ]

    def _stop(self, outcome: Literal["idle", "stalled"], left: Backlog | None) -> None:
        with self._lock:
            self._outcome, self._left = outcome, left
        self.worker.stop()

    def _watch(self) -> None:
        worker, done = self.worker, self._done
        while not worker.running:
            if done.wait(0.02):
                return
        runtime = worker.runtime
        store, owner, monotonic = runtime.store, runtime.owner_id, runtime.monotonic
        quiet_limit = max(5.0, 5 * worker.poll_interval_ms / 1000)
        idle_polls, last_attempts = 0, -1
        changed_at = shown_at = monotonic()
        waiting_for: str | None = None
        pause = IDLE_POLL_S
        while not done.wait(pause):
            pause = IDLE_POLL_S
            try:
                due = self._takeable(store, store.oldest_due(kinds=worker.kinds))
                held = any(holder.owner_id == owner for holder in store.lease_holders())
            except SchedulerError as exc:
                logger.warning("checking for due work failed: %s", exc)
                continue
            running = bool(runtime.in_flight())
            report = self.report()
            now = monotonic()
            if report.attempts != last_attempts or held or running:
                last_attempts, changed_at = report.attempts, now
            with self._lock:
                self._due_kinds = len(due)
            if self._on_progress is not None and now - shown_at >= PROGRESS_EVERY_S:
                shown_at = now
                report.due_kinds = len(due)
                self._on_progress(report)
            if due or held or running:
                idle_polls = 0
                if due and not held and now - changed_at >= quiet_limit:
                    # Due work that this worker never takes (another workspace).
                    self._stop("stalled", self._backlog())
                    return
                continue
            idle_polls += 1
            if idle_polls < 2:  # idle twice in a row: no claim was on its way
                continue
            left = self._backlog()
            next_due = None if left is None else left.next_due_at
            if left is None or next_due is None or next_due - left.now > self.horizon_ms:
                self._stop("idle", left)
                return
            # Something falls due within the horizon: wait for it, then let the worker run it.
            assert left.next is not None
            if left.next.id != waiting_for:
                waiting_for = left.next.id
                if self._on_wait is not None:
                    self._on_wait(left)
            self._sleep(min(WAIT_STEP_S, max(0.0, (next_due - left.now) / 1000)))
            # That was the wait: look again at once, and one idle look is then enough.
            idle_polls, pause = 1, 0.0
            changed_at = monotonic()
