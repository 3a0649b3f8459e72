"""A worker slot's writes: its settlements, and the start marks of the claims it runs next.

A claim held ahead of a free slot is not started: if the worker dies, crash recovery gives it
back, its attempt not spent (``Occurrence.started_at`` unset). Before its handler runs, its start
must be durable. The claim transaction marks the claims that idle slots start at once; for a
claim taken from the buffer, :class:`SlotCommit` makes the mark ride in the transaction that
settles the slot's previous attempt: the settlement an attempt hands over on the slot's own
thread is held until the slot knows what it runs next, then handed to the settler together with
that claim's mark (one commit for both), and the next handler starts once that commit returned.
A settlement is never held longer than that: with nothing buffered (or when stopping) it goes
to the settler alone, and a settlement handed over from another thread (a time limit's) goes at
once.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from ..errors import LeaseLost, SchedulerError
from ..models import Occurrence, Renewal, Settlement
from .batching import ClaimAhead, Claimed, Settler
from .commit import Commit, Done, StartTicket

__all__ = ["SlotCommit", "ask_start", "await_start"]

logger = logging.getLogger("jobledger.runtime")


class _Starting(Protocol):
    """What :func:`await_start` needs of an attempt."""

    claimed: Occurrence

    def lease_renewed(self, occurrence: Occurrence) -> None: ...

    def lease_lost(self, error: LeaseLost) -> None: ...

    def release(self, reason: str) -> Occurrence | None: ...


def ask_start(commit: Commit, occurrence: Occurrence, owner_id: str, lease_ms: int) -> StartTicket:
    """Ask ``commit`` to mark this claim's attempt started (before its checks: they run while
    the mark commits)."""
    return commit.mark_started(Renewal(occurrence.id, owner_id, occurrence.fence, lease_ms))


def await_start(attempt: _Starting, ticket: StartTicket) -> bool:
    """Wait until the attempt's start mark is durable; ``True``: its handler may run. The mark
    is fenced and renews the lease (the attempt's step 5): a lost lease is reported to the
    attempt; a mark the store could not write gives the lease back (the handler never ran)."""
    try:
        attempt.lease_renewed(ticket.wait())
    except LeaseLost as exc:
        attempt.lease_lost(exc)
        return False
    except SchedulerError:
        logger.exception("marking %s started failed: giving it back", attempt.claimed.id)
        attempt.release("start_not_recorded")
        return False
    return True


class SlotCommit:
    """One slot's view of the settler (a :class:`~jobledger.engine.commit.Commit`) and of the
    buffer: :meth:`next` is the slot's next claim, with its start mark on the way."""

    def __init__(
        self,
        settler: Settler,
        feed: ClaimAhead,
        stop: threading.Event,
        *,
        owner_id: str,
        lease_ms: int,
    ) -> None:
        self._settler = settler
        self._feed = feed
        self._stop = stop
        self._owner_id = owner_id
        self._lease_ms = lease_ms
        self._thread: threading.Thread | None = None
        self._held: tuple[Settlement, Done] | None = None

    # -- Commit -------------------------------------------------------------------------------

    def submit(self, settlement: Settlement, done: Done) -> None:
        if threading.current_thread() is self._thread and self._held is None:
            self._held = (settlement.check(), done)  # goes with the next claim's mark
            return
        self._settler.submit(settlement, done)

    def mark_started(self, start: Renewal) -> StartTicket:
        return self._settler.mark_started(start)

    # -- the slot's loop ----------------------------------------------------------------------

    def next(self) -> tuple[Claimed, StartTicket | None] | None:
        """The slot's next claim (blocking until there is one; ``None`` when stopping), with
        the ticket of its start mark when the claim was not marked started: the held settlement
        of the slot's last attempt and that mark go to the settler in one commit."""
        self._thread = threading.current_thread()
        held, self._held = self._held, None
        if held is not None:
            claimed = self._feed.take_nowait(self._stop)
            if claimed is not None and claimed.occurrence.started_at is None:
                occurrence = claimed.occurrence
                mark = Renewal(occurrence.id, self._owner_id, occurrence.fence, self._lease_ms)
                return claimed, self._settler.submit(*held, start=mark)
            self._settler.submit(*held)
            if claimed is not None:
                return claimed, None
        taken = self._feed.take(self._stop)
        return None if taken is None else (taken, None)

    def flush(self) -> None:
        """Hand a held settlement to the settler (the slot stops)."""
        held, self._held = self._held, None
        if held is not None:
            self._settler.submit(*held)
