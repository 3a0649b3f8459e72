"""Where an attempt's settlement goes: the :class:`Commit` protocol and :class:`CommitNow`.

A runtime running one attempt at a time commits each settlement at once (:class:`CommitNow`);
a worker hands them to its :class:`~jobledger.engine.batching.Settler`, which group-commits
everything handed over since its last commit. Either way the attempt is called back with the
committed occurrence, a ``LeaseLost`` (fenced out), or the error.

A commit also writes the **start mark** of an attempt whose claim was held ahead
(``Occurrence.started_at`` unset): :meth:`Commit.mark_started` returns a :class:`StartTicket`,
and the handler runs only once :meth:`StartTicket.wait` returned — the mark is durable. A crash
gives a claim without a mark back instead of counting it lost.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from ..models import Occurrence, Renewal, Settlement
from ..store.base import Store

__all__ = ["Commit", "CommitNow", "Done", "StartTicket"]

# What a commit calls back with: the committed occurrence, a LeaseLost, or the error.
Done = Callable[[Occurrence | BaseException], None]


class StartTicket:
    """An attempt's start mark on its way to the store (resolved once, from any thread)."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._outcome: Occurrence | BaseException | None = None

    def resolve(self, outcome: Occurrence | BaseException) -> None:
        if not self._done.is_set():
            self._outcome = outcome
            self._done.set()

    def wait(self) -> Occurrence:
        """Block until the mark committed; return the marked (and renewed) occurrence, or raise
        ``LeaseLost`` (fenced out: the handler must not start) or the storage error."""
        self._done.wait()
        outcome = self._outcome
        if isinstance(outcome, BaseException):
            raise outcome
        assert outcome is not None
        return outcome


class Commit(Protocol):
    """Where an attempt's settlement (and start mark) is written."""

    def submit(self, settlement: Settlement, done: Done) -> None:
        """Write ``settlement`` (now or later) and call ``done`` with the outcome."""
        ...

    def mark_started(self, start: Renewal) -> StartTicket:
        """Mark the attempt started (now or with the next write); the ticket says when."""
        ...


class CommitNow:
    """Commits each settlement at once, in the calling thread (one attempt at a time)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def submit(self, settlement: Settlement, done: Done) -> None:
        try:
            [outcome] = self._store.settle_batch([settlement])
        except BaseException as exc:
            done(exc)
            raise
        done(outcome)

    def mark_started(self, start: Renewal) -> StartTicket:
        ticket = StartTicket()
        try:
            [outcome] = self._store.start_batch([start])
        except Exception as exc:
            ticket.resolve(exc)
        else:
            ticket.resolve(outcome)
        return ticket
