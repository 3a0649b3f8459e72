"""Fewer write transactions per occurrence: settles committed together, claims fetched together.

One SQLite file takes one writer at a time, and each commit is an fsync; on PostgreSQL each
transaction is a round trip. A worker with several slots would otherwise pay one transaction
per claim and one per settle. Two helpers let its slots share transactions instead:

* :class:`SettleBatcher` — *group commit*. A slot that settles while another slot's settle
  transaction is in flight queues its settlement; when that transaction ends, the next leader
  settles everything queued in one :meth:`~jobledger.Store.settle_batch`. Every caller still
  returns only after *its* settle committed, and a lost lease is still reported to the attempt
  that lost it, so an attempt cannot tell the difference — except that it waited less.
* :class:`ClaimFeed` — a slot looking for work claims, in one
  :meth:`~jobledger.Store.claim_batch`, one occurrence for every slot that is idle right now,
  and hands the others to those slots. It never claims for a busy slot, so no lease waits in a
  buffer while its occurrence could run elsewhere.

Neither changes what is stored: a batch writes exactly what the single calls would have.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .models import Occurrence, Settlement
from .store import common
from .store.base import Store

__all__ = ["ClaimFeed", "SettleBatcher"]


@dataclass(slots=True)
class _Waiter:
    settlement: Settlement
    done: bool = False
    settled: Occurrence | None = None
    error: BaseException | None = None


class SettleBatcher:
    """Group commit for settles from many threads of one process (see the module docstring).

    The first caller to find no transaction in flight leads: it takes everything queued (its
    own settlement included), commits it as one batch, wakes the others and steps down. A
    caller that queued meanwhile either finds its settlement done or leads the next batch, so
    no caller commits more than one batch and none waits behind an endless stream.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._changed = threading.Condition()
        self._queue: list[_Waiter] = []
        self._leading = False

    def settle(self, settlement: Settlement) -> Occurrence:
        """Settle as :meth:`Store.settle` would; raises its errors (``LeaseLost`` included)."""
        # Validate here, in the caller's thread: one bad settlement must fail its own caller,
        # not the batch it would have joined.
        common.normalize_settlements([settlement])
        waiter = _Waiter(settlement)
        with self._changed:
            self._queue.append(waiter)
            while self._leading and not waiter.done:
                self._changed.wait()
            if not waiter.done:
                self._leading = True
                batch, self._queue = self._queue, []
        if not waiter.done:
            self._commit(batch)
        if waiter.error is not None:
            raise waiter.error
        assert waiter.settled is not None
        return waiter.settled

    def _commit(self, batch: list[_Waiter]) -> None:
        try:
            outcomes = self._store.settle_batch([waiter.settlement for waiter in batch])
        except BaseException as exc:  # every member of the batch shares its fate
            self._finish(batch, [exc] * len(batch))
            raise
        self._finish(batch, outcomes)

    def _finish(self, batch: list[_Waiter], outcomes: Sequence[Occurrence | BaseException]) -> None:
        """Hand each waiter its outcome (a LeaseLost is an error too), wake them, step down."""
        with self._changed:
            for waiter, outcome in zip(batch, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    waiter.error = outcome
                else:
                    waiter.settled = outcome
                waiter.done = True
            self._leading = False
            self._changed.notify_all()


class ClaimFeed:
    """Claims for idle worker slots, one transaction for all of them (see the module docstring).

    ``claim(limit)`` is the store call (``claim_batch`` with the worker's owner, lease and
    filters bound); :meth:`take` returns an occurrence for the calling slot or ``None`` when
    nothing is claimable.
    """

    def __init__(self, claim: Callable[[int], list[Occurrence]], max_batch: int) -> None:
        self._claim = claim
        self._max_batch = max_batch
        self._lock = threading.Condition()
        self._ready: deque[Occurrence] = deque()
        self._wanting = 0  # slots inside take() right now
        self._claiming = False
        self._empty_round = 0  # bumped when a claim comes back short: the queue is drained

    def take(self) -> Occurrence | None:
        with self._lock:
            self._wanting += 1
            try:
                round_seen = self._empty_round
                while True:
                    if self._ready:
                        return self._ready.popleft()
                    if self._empty_round != round_seen:
                        return None  # a claim for us came back short: nothing claimable now
                    if not self._claiming:
                        break
                    self._lock.wait()
                self._claiming = True
                limit = min(self._wanting, self._max_batch)
            finally:
                self._wanting -= 1
        try:
            claimed = self._claim(limit)
        except BaseException:
            with self._lock:
                self._claiming = False
                self._lock.notify_all()
            raise
        with self._lock:
            self._claiming = False
            mine = claimed[0] if claimed else None
            self._ready.extend(claimed[1:])
            if len(claimed) < limit:
                self._empty_round += 1
            self._lock.notify_all()
        return mine

    def drain(self) -> list[Occurrence]:
        """Take back every claim no slot picked up (at shutdown, to release their leases)."""
        with self._lock:
            leftover = list(self._ready)
            self._ready.clear()
            return leftover
