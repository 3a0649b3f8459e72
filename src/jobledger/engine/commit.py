"""Where an attempt's settlement goes: the :class:`Commit` protocol and :class:`CommitNow`.

A runtime running one attempt at a time commits each settlement at once (:class:`CommitNow`);
a worker hands them to its :class:`~jobledger.engine.batching.Settler`, which group-commits
everything handed over since its last commit. Either way the attempt is called back with the
committed occurrence, a ``LeaseLost`` (fenced out), or the error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..models import Occurrence, Settlement
from ..store.base import Store

__all__ = ["Commit", "CommitNow", "Done"]

# What a commit calls back with: the committed occurrence, a LeaseLost, or the error.
Done = Callable[[Occurrence | BaseException], None]


class Commit(Protocol):
    """Where an attempt's settlement is written."""

    def submit(self, settlement: Settlement, done: Done) -> None:
        """Write ``settlement`` (now or later) and call ``done`` with the outcome."""
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
