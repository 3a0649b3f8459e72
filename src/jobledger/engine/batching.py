"""Fewer write transactions per occurrence: claims made ahead in batches, settles committed in
groups.

One SQLite file takes one writer at a time and each commit is an fsync; on PostgreSQL each
transaction is a round trip. A worker therefore never claims or settles one occurrence per
transaction:

* :class:`ClaimAhead` — a feeder thread keeps ``concurrency + prefetch`` occurrences claimed:
  whenever slots took some, one :meth:`~jobledger.Store.claim_batch` refills the buffer, so a
  claim transaction carries many occurrences even with one slot. Buffered claims are leased to
  the worker and tracked by its lease keeper, so their leases are renewed while they wait.
  A slot whose attempt ran past its time limit while its handler ignores cancellation is
  *stuck* (Python cannot stop a thread): it counts as neither free nor holding a lease, so
  nothing is claimed for it, and claims waiting in the buffer when no slot can start them are
  given back (:meth:`ClaimAhead.done` with ``stuck=True``, :meth:`ClaimAhead.freed`).
* :class:`Settler` — group commit. Slots hand their settlements over and go on to the next
  occurrence at once; a settler thread commits everything handed over since its last commit in
  one :meth:`~jobledger.Store.settle_batch`. A settlement is committed (or refused, if its lease
  was lost) before its attempt's result is reported, and its lease is kept until then. The
  start marks of buffered claims ride in the same transactions (``settle_batch(starts=…)``): a
  slot hands over its settlement together with the mark of the claim it runs next, and starts
  that handler once the commit returned.

Neither changes what is stored: a batch writes exactly what the single calls would have. What a
crash costs changes: results handed over but not yet committed are lost with the process, and
those occurrences run again after their leases (at-least-once, as for any crash mid-handler).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..clock import Monotonic, monotonic_clock
from ..contract import MAX_BATCH_SIZE
from ..errors import LeaseLost, SchedulerError
from ..models import Occurrence, Renewal, Settlement
from ..store.base import Store
from .commit import Done, StartTicket

__all__ = [
    "NO_QUEUE_LIMITS",
    "ClaimAhead",
    "Claimed",
    "QueueStates",
    "Settler",
    "committed_settlement",
]

logger = logging.getLogger("jobledger.worker")

# How long a failed batch waits before it is tried again, doubling up to the maximum.
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 2.0
# The events a settle writes, by outcome (the lease-expiry dead letter is told apart by its
# ``reason``); how far back a settle's own event is looked for.
_SETTLE_EVENT_TYPES = {
    "succeeded": frozenset({"occurrence_succeeded"}),
    "failed": frozenset({"occurrence_retry_scheduled", "occurrence_dead_lettered"}),
    "snoozed": frozenset({"occurrence_snoozed", "occurrence_dead_lettered"}),
}
_SETTLE_EVENT_LOOKBACK = 100


def committed_settlement(store: Store, settlement: Settlement) -> Occurrence | None:
    """The occurrence if ``settlement`` itself is stored — its settle event, written in the same
    transaction, names this owner and fence — else ``None``.

    For a retry after a COMMIT whose outcome was unknown: a settle that did commit is fenced
    out by its own retry, and must be reported as the success (or failure) it was, not as a
    lost lease.
    """
    wanted = _SETTLE_EVENT_TYPES[settlement.outcome]
    for event in store.events(occurrence_id=settlement.occurrence_id, limit=_SETTLE_EVENT_LOOKBACK):
        if (
            event.type in wanted
            and event.owner_id == settlement.owner_id
            and event.fence == settlement.fence
            and "reason" not in event.data
        ):
            return store.get_occurrence(settlement.occurrence_id)
    return None


class Settler:
    """Commits handed-over settlements in groups on its own thread (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        *,
        max_batch: int = MAX_BATCH_SIZE,
        monotonic: Monotonic = monotonic_clock,
    ) -> None:
        self._store = store
        self._monotonic = monotonic
        self._max_batch = max_batch
        self._changed = threading.Condition()
        self._pending: deque[tuple[Settlement, Done]] = deque()
        self._starts: deque[tuple[Renewal, StartTicket]] = deque()
        self._in_flight = 0
        self._closing = False
        self._thread: threading.Thread | None = None
        # (occurrence, fence) of settlements whose last commit ended with an unknown outcome.
        self._uncertain: set[tuple[str, int]] = set()
        self.batches = 0
        self.committed = 0

    def start(self) -> None:
        with self._changed:
            if self._thread is None:
                self._closing = False
                self._thread = threading.Thread(
                    target=self._run, name="jobledger-settler", daemon=True
                )
                self._thread.start()

    def submit(
        self, settlement: Settlement, done: Done, *, start: Renewal | None = None
    ) -> StartTicket | None:
        """Queue ``settlement``; ``done`` is called with its outcome after the commit. With
        ``start``: that attempt's start mark goes in the same commit (its ticket returned)."""
        # Validate in the caller's thread (a no-op for an attempt's checked settlement): a bad
        # settlement must fail its own attempt, not the batch it would have joined.
        settlement = settlement.check()
        marks = [] if start is None else [(start, StartTicket())]
        with self._changed:
            if self._thread is None or self._closing:
                closed = True
            else:
                closed = False
                self._pending.append((settlement, done))
                self._starts.extend(marks)
                self._changed.notify_all()
        if closed:  # no settler thread (stopped): commit in the caller's thread
            self._commit([(settlement, done)], marks)
        return marks[0][1] if marks else None

    def mark_started(self, start: Renewal) -> StartTicket:
        """Queue an attempt's start mark for the next commit (see :class:`Commit`)."""
        ticket = StartTicket()
        with self._changed:
            closed = self._thread is None or self._closing
            if not closed:
                self._starts.append((start, ticket))
                self._changed.notify_all()
        if closed:
            self._commit([], [(start, ticket)])
        return ticket

    @property
    def pending(self) -> int:
        with self._changed:
            return len(self._pending) + len(self._starts) + self._in_flight

    def _run(self) -> None:
        delay = RETRY_FIRST_S
        while True:
            with self._changed:
                while not self._pending and not self._starts and not self._closing:
                    self._changed.wait()
                if not self._pending and not self._starts:
                    return
                batch = [
                    self._pending.popleft() for _ in range(min(self._max_batch, len(self._pending)))
                ]
                starts = [
                    self._starts.popleft() for _ in range(min(self._max_batch, len(self._starts)))
                ]
                # An attempt settled (a check rejected it) while its mark waited: the settlement
                # stands, the mark is moot (its handler never runs).
                settled = {settlement.occurrence_id for settlement, _ in batch}
                for start, ticket in starts:
                    if start.occurrence_id in settled:
                        ticket.resolve(LeaseLost(f"{start.occurrence_id} was settled unstarted"))
                starts = [pair for pair in starts if pair[0].occurrence_id not in settled]
                self._in_flight = len(batch) + len(starts)
            committed = self._commit(batch, starts, retry=True)
            with self._changed:
                self._in_flight = 0
                if not committed:
                    # Storage trouble: keep the results and try again; their leases are still
                    # renewed, so nothing is run twice while the worker lives.
                    self._pending.extendleft(reversed(batch))
                    self._starts.extendleft(reversed(starts))
                self._changed.notify_all()
            if committed:
                delay = RETRY_FIRST_S
            else:
                with self._changed:
                    self._changed.wait_for(lambda: self._closing, timeout=delay)
                delay = min(RETRY_MAX_S, delay * 2)

    def _commit(
        self,
        batch: list[tuple[Settlement, Done]],
        starts: Sequence[tuple[Renewal, StartTicket]] = (),
        *,
        retry: bool = False,
    ) -> bool:
        settlements = [settlement for settlement, _ in batch]
        try:
            both: list[Occurrence | LeaseLost] = (
                self._store.settle_batch(settlements, starts=[start for start, _ in starts])
                if starts
                else self._store.settle_batch(settlements)
            )
        except SchedulerError as exc:
            if retry and exc.code == "SCHEDULER_STORAGE_UNAVAILABLE" and not self._closing:
                if (exc.details or {}).get("commitState") != "not_committed":
                    self._uncertain.update((s.occurrence_id, s.fence) for s in settlements)
                logger.warning(
                    "settling %d result(s) failed; will retry", len(batch), exc_info=True
                )
                return False
            logger.error("settling %d result(s) failed", len(batch), exc_info=True)
            for _, done in batch:
                self._call(done, exc)
            for _, ticket in starts:
                ticket.resolve(exc)
            return True
        outcomes = both[: len(settlements)]
        for (_, ticket), marked in zip(starts, both[len(settlements) :], strict=True):
            ticket.resolve(marked)
        if self._uncertain:
            outcomes = [
                self._resolve(settlement, outcome)
                for settlement, outcome in zip(settlements, outcomes, strict=True)
            ]
        self.batches += 1
        self.committed += sum(1 for outcome in outcomes if not isinstance(outcome, LeaseLost))
        for (_, done), outcome in zip(batch, outcomes, strict=True):
            self._call(done, outcome)
        return True

    def _resolve(
        self, settlement: Settlement, outcome: Occurrence | LeaseLost
    ) -> Occurrence | LeaseLost:
        """A lost lease after an unknown commit may be this settlement's own earlier commit."""
        key = (settlement.occurrence_id, settlement.fence)
        if key not in self._uncertain:
            return outcome
        self._uncertain.discard(key)
        if not isinstance(outcome, LeaseLost):
            return outcome
        try:
            stored = committed_settlement(self._store, settlement)
        except SchedulerError:
            logger.warning("could not check an uncertain settle; reporting it lost", exc_info=True)
            return outcome
        return outcome if stored is None else stored

    @staticmethod
    def _call(done: Done, outcome: Occurrence | BaseException) -> None:
        try:
            done(outcome)
        except Exception:
            logger.exception("reporting a settled attempt failed")

    def close(self, timeout_s: float) -> bool:
        """Commit what is pending (trying for up to ``timeout_s``) and stop. True when nothing
        was left uncommitted."""
        with self._changed:
            thread = self._thread
            deadline = self._monotonic() + timeout_s
            self._changed.wait_for(
                lambda: not self._pending and not self._starts and not self._in_flight,
                timeout=max(0.0, deadline - self._monotonic()),
            )
            left = len(self._pending) + self._in_flight
            self._closing = True
            self._changed.notify_all()
        if thread is not None:
            thread.join(timeout=max(0.1, deadline - self._monotonic()))
        with self._changed:
            self._thread = None
            abandoned = list(self._pending)
            self._pending.clear()
            unmarked = list(self._starts)
            self._starts.clear()
        for _, ticket in unmarked:  # their handlers never start
            ticket.resolve(SchedulerError("The worker stopped before this attempt started"))
        for _, done in abandoned:
            self._call(done, SchedulerError("The worker stopped before this result committed"))
        return left == 0 and not abandoned


@dataclass(frozen=True, slots=True)
class QueueStates:
    """Which queues have limits (claimed only for free slots) and which are paused (buffered
    claims given back); ``unknown``: they could not be read (claim nothing limited)."""

    limited: frozenset[str]
    paused: frozenset[str]
    unknown: bool = False
    # The windows (ms) of the rate limits declared (queue and partition rates): held-back work
    # becomes claimable at their boundaries, so an idle feeder looks again then.
    rate_windows_ms: frozenset[int] = frozenset()


NO_QUEUE_LIMITS = QueueStates(frozenset(), frozenset())


@dataclass(slots=True)
class Claimed:
    """A claim waiting in the buffer (a lease holder for the keeper until a slot takes it)."""

    occurrence: Occurrence
    claimed_at: float  # monotonic seconds when the claim committed (or was last renewed)
    lost: LeaseLost | None = None
    limited: bool = False  # from a queue with limits: claimed for a free slot, taken first
    monotonic: Monotonic = field(default=monotonic_clock, repr=False)

    @property
    def lease(self) -> Occurrence:
        return self.occurrence

    def lease_renewed(self, occurrence: Occurrence) -> None:
        self.occurrence = occurrence
        self.claimed_at = self.monotonic()

    def lease_lost(self, error: LeaseLost) -> None:
        self.lost = error


class ClaimAhead:
    """Keeps up to ``capacity`` claims in hand — running or buffered — with batched claims.

    ``claim(limit, free, start)`` is the store call (``claim_batch`` with the worker's owner,
    lease, kinds and queues bound; ``free``: how many slots could start a claim now, the most it
    may take from queues with limits — from those a claim is a start, never a prefetch, SPEC §7;
    ``start``: how many slots wait idle for one — the claim marks that many started, and slots
    take marked claims first; the others are marked by the settle that frees a slot).
    ``queue_states()`` says which queues have limits and which are paused (read at most once per
    claim); buffered claims of a queue paused since are given back at the next poll. Slots
    call :meth:`take` (a buffered claim, or ``None`` when stopping) and :meth:`done` when an
    attempt no longer needs its slot. ``track``/``untrack`` register the
    buffered claims with the lease keeper. The feeder thread claims as soon as there is room,
    and waits for the work signal (or the poll interval) when the queue came back short.

    A slot is *stuck* from ``done(stuck=True)`` (its attempt is over — a time limit settled it —
    but its thread still runs the handler) until :meth:`freed`. Claims are made only for slots
    that can start them; when every slot is stuck, the feeder hands the buffered claims to
    ``give_back`` (which releases their leases) instead of keeping them renewed for nobody.
    """

    def __init__(
        self,
        claim: Callable[[int, int, int], list[Occurrence]],
        *,
        capacity: int,
        slots: int | None = None,
        window_s: float | None = None,
        track: Callable[[Claimed], None],
        untrack: Callable[[Claimed], None],
        wait_for_work: Callable[[int, threading.Event], None],
        generation: Callable[[], int],
        on_error: Callable[[BaseException], None],
        wake: Callable[[], None] = lambda: None,
        give_back: Callable[[list[Occurrence]], None] = lambda claims: None,
        give_back_paused: Callable[[list[Occurrence]], None] = lambda claims: None,
        queue_states: Callable[[], QueueStates] = lambda: NO_QUEUE_LIMITS,
        monotonic: Monotonic = monotonic_clock,
    ) -> None:
        self._claim = claim
        self._give_back_paused = give_back_paused
        self._queue_states = queue_states
        self._monotonic = monotonic
        self._capacity = capacity
        # Adaptive prefetch (``window_s`` given): hold only as many claims ahead of the ``slots``
        # as cover ``window_s`` of work at the handlers' average duration (an exponentially
        # weighted mean), never more than ``capacity`` in all and always one per slot.
        self._slots = capacity if slots is None else slots
        self._window_s = window_s
        self._mean_s: float | None = None
        self._track = track
        self._untrack = untrack
        self._wait_for_work = wait_for_work
        self._generation = generation
        self._on_error = on_error
        self._wake = wake
        self._give_back = give_back
        self._changed = threading.Condition()
        self._ready: deque[Claimed] = deque()
        self._busy = 0
        # The last claim could take from queues with limits: a slot freed may start one now.
        self._limits = False
        # Slots whose attempt ended (timed out) while their thread still runs its handler.
        self._stuck = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.claims = 0  # claim transactions made (for figures and tests)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._feed, name="jobledger-feeder", daemon=True)
        self._thread.start()

    def take(self, stop: threading.Event) -> Claimed | None:
        """A buffered claim for the calling slot; blocks until one is there or ``stop`` is set."""
        with self._changed:
            while True:
                if stop.is_set() or self._stop.is_set():
                    return None
                while self._ready:
                    claimed = self._next_ready()
                    if claimed.lost is not None:
                        self._untrack(claimed)
                        continue  # another owner has it now
                    self._busy += 1
                    self._untrack(claimed)
                    self._changed.notify_all()
                    return claimed
                self._changed.wait(0.5)

    def take_nowait(self, stop: threading.Event) -> Claimed | None:
        """A buffered claim if one is there now (``None`` when none is, or when stopping)."""
        with self._changed:
            while self._ready and not (stop.is_set() or self._stop.is_set()):
                claimed = self._next_ready()
                self._untrack(claimed)
                if claimed.lost is None:
                    self._busy += 1
                    self._changed.notify_all()
                    return claimed
            return None

    def _next_ready(self) -> Claimed:
        """The next buffered claim: one the claim marked started first (claimed for a slot idle
        then), then one of a limited queue (claimed for a slot that is free now), else the
        oldest (the caller holds the lock)."""
        for wanted in (lambda e: e.occurrence.started_at is not None, lambda e: e.limited):
            for index, entry in enumerate(self._ready):
                if wanted(entry):
                    del self._ready[index]
                    return entry
        return self._ready.popleft()

    def done(self, duration_s: float | None = None, *, stuck: bool = False) -> None:
        """A slot's attempt is over (its handler took ``duration_s``): there is room to claim
        one more — unless ``stuck``: the attempt was settled (a time limit) but the slot's thread
        still runs its handler, so the slot stays taken until :meth:`freed`."""
        with self._changed:
            self._busy -= 1
            if stuck:
                self._stuck += 1
            if duration_s is not None and not stuck:
                # A timed-out attempt's duration is its limit, not what its handler takes.
                mean = self._mean_s
                self._mean_s = duration_s if mean is None else 0.8 * mean + 0.2 * duration_s
            stranded = self._stranded()
            # From a limited queue a claim is made only for a free slot (SPEC §7), so a feeder
            # waiting for work may have left limited work queued for want of a slot: this one
            # is free now (its settle committed before this call), and it claims at once
            # rather than at the next poll (SPEC §14).
            freed = self._limits and not stuck
            self._changed.notify_all()
        if stranded or freed:
            self._wake()  # a feeder waiting for work gives stranded claims back / claims now

    def freed(self) -> None:
        """A stuck slot's handler returned at last: the slot can run attempts again."""
        with self._changed:
            self._stuck = max(0, self._stuck - 1)
            self._changed.notify_all()

    @property
    def stuck(self) -> int:
        """Slots whose thread still runs a handler whose attempt is already over."""
        with self._changed:
            return self._stuck

    @property
    def target(self) -> int:
        """How many claims to keep in hand now (running and buffered), for the slots that can
        start one: none when every slot is stuck."""
        usable = self._slots - self._stuck
        if usable <= 0:
            return 0
        capacity = self._capacity - self._stuck
        if self._window_s is None or self._mean_s is None:
            return capacity
        ahead = int(usable * self._window_s / max(self._mean_s, 1e-6))
        return max(usable + 1, min(capacity, usable + ahead))

    def _room(self) -> int:
        return self.target - self._busy - len(self._ready)

    def _stranded(self) -> bool:
        """Buffered claims that no slot can start: every slot is stuck."""
        return bool(self._ready) and self._slots - self._stuck <= 0

    def _feed(self) -> None:
        while not self._stop.is_set():
            with self._changed:
                while self._room() <= 0 and not self._stop.is_set() and not self._stranded():
                    self._changed.wait()
                if self._stop.is_set():
                    return
                stranded = self._take_stranded()
            if stranded:
                self._give_back(stranded)
                continue
            try:
                states = self._queue_states()
            except Exception as exc:  # no queue states this round: claim from unlimited only
                self._on_error(exc)
                states = QueueStates(frozenset(), frozenset(), unknown=True)
            with self._changed:
                self._limits = bool(states.limited) or states.unknown
                paused = self._take_paused(states.paused)
                want = min(self._room(), MAX_BATCH_SIZE)
                free = max(
                    0,
                    self._slots
                    - self._stuck
                    - self._busy
                    - sum(1 for entry in self._ready if entry.limited),
                )
                # Slots waiting for a claim now start what this claim takes at once: marked
                # started in the claim itself (the rest of the batch waits unmarked).
                idle = max(0, self._slots - self._stuck - self._busy - len(self._ready))
            if paused:
                self._give_back_paused(paused)
            seen = self._generation()
            try:
                claimed = self._claim(want, 0 if states.unknown else free, min(idle, want))
            except Exception as exc:
                self._on_error(exc)
                self._wait_for_work(seen, self._stop)
                continue
            self.claims += 1
            now = self._monotonic()
            entries = [
                Claimed(
                    item,
                    now,
                    monotonic=self._monotonic,
                    limited=item.queue in states.limited,
                )
                for item in claimed
            ]
            for entry in entries:
                self._track(entry)
            with self._changed:
                self._ready.extend(entries)
                self._changed.notify_all()
            if len(claimed) < want:
                # The queue is drained for now: wait for an enqueue (or the poll interval).
                self._wait_for_work(seen, self._stop)

    def _take_paused(self, paused: frozenset[str]) -> list[Occurrence]:
        """Take the buffered claims of paused queues out (the caller holds the lock)."""
        if not paused or not self._ready:
            return []
        keep = deque(entry for entry in self._ready if entry.occurrence.queue not in paused)
        taken = [entry for entry in self._ready if entry.occurrence.queue in paused]
        self._ready = keep
        for entry in taken:
            self._untrack(entry)
        return [entry.occurrence for entry in taken if entry.lost is None]

    def _take_stranded(self) -> list[Occurrence]:
        """Empty the buffer if no slot can start its claims (the caller holds the lock)."""
        if not self._stranded():
            return []
        entries = list(self._ready)
        self._ready.clear()
        for entry in entries:
            self._untrack(entry)
        return [entry.occurrence for entry in entries if entry.lost is None]

    def stop_claiming(self) -> None:
        """Make no more claims (safe from a signal handler: it only sets an event)."""
        self._stop.set()

    def stop(self) -> list[Occurrence]:
        """Stop claiming; return the buffered claims no slot took (to give their leases back)."""
        self._stop.set()
        self._wake()  # a feeder waiting for work wakes and sees the stop
        with self._changed:
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._changed:
            left = [entry for entry in self._ready if entry.lost is None]
            for entry in self._ready:
                self._untrack(entry)
            self._ready.clear()
        return [entry.occurrence for entry in left]
