"""Group commit: concurrent writes of one store share one write transaction.

An application enqueues from many threads (or ``enqueue_async`` tasks, which run the store on
worker threads) at once. Each write transaction costs a commit — an fsync on SQLite at full
durability, a WAL flush and a round trip on PostgreSQL — and SQLite runs one writer at a time,
so N callers used to pay N commits one after the other. Here the callers form a queue: the
first becomes the **leader**, takes every item queued by then, writes them all in one
transaction and commits once; the others wait and are answered from that commit. Whoever queued
while the leader was writing is led by the next leader (the first of them), so a group forms
exactly when callers contend and a lone caller writes alone, with no added wait.

Each item of a group runs inside its own savepoint: an item that fails (an unknown job, a
payload that differs from its key's first one, a flow whose identities do not match) rolls back
alone and raises in its own caller; the others commit. A failure of the transaction itself (the
database unavailable, the commit refused) fails every item of the group — none of them
returned, none of them is committed. Every caller returns only after the commit that holds its
item: a process killed mid-group loses only calls that had not returned. A process forked while
a group is in flight starts its own with none (the leader is a thread the child does not have).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ..errors import SchedulerError
from .tx import Tx

__all__ = ["GroupCommit"]

R = TypeVar("R")


@dataclass(eq=False)
class _Item(Generic[R]):
    body: Callable[[Tx], R]
    woken: threading.Event = field(default_factory=threading.Event)
    done: bool = False
    result: R | None = None
    error: BaseException | None = None

    def answer(self) -> R:
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]  # set with done, error None


class GroupCommit(Generic[R]):
    """Runs item bodies in shared write transactions (module docstring).

    ``write`` runs one body in one write transaction of the store (commit on return, roll back
    on error). Each item of a shared transaction runs in the savepoint of the named queries
    ``group_item_begin`` / ``group_item_end`` / ``group_item_undo`` (``queries.sql``)."""

    def __init__(self, write: Callable[[Callable[[Tx], object]], object]) -> None:
        self._write = write
        self._mutex = threading.Lock()
        self._queued: list[_Item[R]] = []
        self._leading = False
        _groups.add(self)

    def _after_fork_in_child(self) -> None:
        """A forked child has only the forking thread: a group in flight at the fork has a
        leader (and callers) the child does not have, so it starts with none."""
        self._mutex = threading.Lock()
        self._queued = []
        self._leading = False

    def run(self, body: Callable[[Tx], R]) -> R:
        """Run ``body`` in a write transaction, possibly shared with concurrent callers';
        return its result once that transaction committed, or raise its error."""
        item: _Item[R] = _Item(body)
        with self._mutex:
            self._queued.append(item)
            lead = not self._leading
            self._leading = True
        if not lead:
            item.woken.wait()
            if item.done:
                return item.answer()
            # promoted: the previous leader left this item first in the queue
        with self._mutex:
            group, self._queued = self._queued, []
        try:
            self._commit(group)
        finally:
            with self._mutex:
                if self._queued:
                    self._queued[0].woken.set()  # not done: it leads the next group
                else:
                    self._leading = False
        return item.answer()

    def _commit(self, group: Sequence[_Item[R]]) -> None:
        if len(group) == 1:
            # A lone caller: its own transaction, exactly as without grouping.
            [item] = group
            try:
                item.result = self._write(item.body)  # type: ignore[assignment]
            except BaseException as exc:
                item.error = exc
            self._answer(group)
            return

        def shared(tx: Tx) -> None:
            for item in group:
                item.error = None
                tx.run("group_item_begin")
                try:
                    item.result = item.body(tx)
                except SchedulerError as exc:
                    # This item's own refusal: undo its writes, keep the others'.
                    tx.run("group_item_undo")
                    item.error = exc
                tx.run("group_item_end")

        try:
            self._write(shared)
        except BaseException as exc:
            for item in group:
                item.result, item.error = None, exc
        self._answer(group)

    @staticmethod
    def _answer(group: Sequence[_Item[R]]) -> None:
        for item in group:
            item.done = True
            item.woken.set()


# Every group of this process, reset in a forked child (as forks.py resets the stores; kept
# here so that this module, which the store's operations import, imports nothing of theirs).
_groups: weakref.WeakSet[GroupCommit[Any]] = weakref.WeakSet()


def _reset_in_child() -> None:
    for group in list(_groups):
        group._after_fork_in_child()


os.register_at_fork(after_in_child=_reset_in_child)
