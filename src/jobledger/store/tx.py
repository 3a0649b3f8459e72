"""The seam between store operations and storage engines.

Operations (``store/operations/``) are written once against :class:`Tx`; each backend implements
``Tx`` over its driver. Nothing here depends on a dialect.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from .. import contract
from ..errors import InvalidArgument

__all__ = ["Row", "Tx", "WorkSignal", "table_parameter", "validate_clock_reading"]

Row = Mapping[str, Any]


class Tx(Protocol):
    """One open transaction (or read session) on a store's database."""

    def one(self, query: str, params: Mapping[str, Any] | None = None) -> Row | None:
        """Run the named query; return its first row or ``None``."""
        ...

    def all(self, query: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        """Run the named query; return every row."""
        ...

    def run(self, query: str, params: Mapping[str, Any] | None = None) -> int:
        """Run the named statement; return the number of rows it changed."""
        ...

    def many(self, query: str, params: Sequence[Mapping[str, Any]]) -> None:
        """Run the named statement once per parameter set (one prepared statement; on
        PostgreSQL the executions are pipelined into one round trip)."""
        ...

    def rows_many(self, query: str, params: Sequence[Mapping[str, Any]]) -> list[Row | None]:
        """Run the named statement once per parameter set and return each execution's first
        row (``None`` where it returned none), in order — e.g. a guarded ``UPDATE … RETURNING``
        per item of a batch, pipelined on PostgreSQL."""
        ...

    def now(self) -> int:
        """The current instant in epoch ms, read inside this transaction."""
        ...

    def wake(self) -> None:
        """This transaction made work claimable that waiting workers of any process should
        claim at once (a slot of a limited queue freed, held rows admitted): announce it with
        the commit — PostgreSQL's ``NOTIFY`` on the work channel, SQLite's wake file — and
        wake this process's workers after it. Nothing is announced if it rolls back."""
        ...

    def table(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, object]:
        """The parameters of a many-rows statement (``insert_events``,
        ``insert_occurrences_from_jobs``) holding ``rows``: see :func:`table_parameter`."""
        ...

    def id_list(self, values: Sequence[str] | Sequence[int]) -> object:
        """``values`` as one query parameter holding a list (``:ids`` in a query): a JSON array
        for SQLite's ``json_each``, an array for PostgreSQL's ``= ANY``."""
        ...


class WorkSignal:
    """Wakes idle workers early when new work may be claimable: a latency hint, never a promise.

    Every enqueue or requeue through a store bumps its signal; the PostgreSQL store also bumps it
    when a ``NOTIFY`` from another process arrives. Correctness never depends on it: workers
    still poll, and leases make a missed or spurious wake-up harmless.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._generation = 0
        self._source: Callable[[], None] | None = None

    def feed_from(self, start: Callable[[], None]) -> None:
        """Have :meth:`watch` call ``start`` (once): what bumps this signal for work from other
        processes (the PostgreSQL LISTEN thread), started only when something waits for work —
        a process that only enqueues never pays for it."""
        with self._condition:
            self._source = start

    def watch(self) -> None:
        """Start the signal's source, if it has one that has not started (idempotent)."""
        with self._condition:
            start, self._source = self._source, None
        if start is not None:
            start()

    @property
    def generation(self) -> int:
        with self._condition:
            return self._generation

    def notify(self) -> None:
        with self._condition:
            self._generation += 1
            self._condition.notify_all()

    def wait(self, seen_generation: int, timeout_s: float) -> int:
        """Block until the generation differs from ``seen_generation`` or ``timeout_s`` passes.

        Returns the generation now current (equal to ``seen_generation`` on a timeout).
        """
        if self._source is not None:
            self.watch()
        with self._condition:
            self._condition.wait_for(lambda: self._generation != seen_generation, timeout_s)
            return self._generation


def table_parameter(rows: Sequence[Mapping[str, Any]]) -> dict[str, object]:
    """``{"rows": <JSON array of the rows>}``: one text parameter that SQLite (``json_each``)
    and PostgreSQL (``json_to_recordset``) unpack into rows inside the statement — one
    statement for many rows, and one parameter to encode instead of one per value."""
    return {"rows": json.dumps(list(rows), ensure_ascii=False, separators=(",", ":"))}


def validate_clock_reading(value: object) -> int:
    """A clock must return a non-negative safe integer of epoch ms."""
    try:
        return contract.normalize_epoch_ms(value, "clock result")
    except InvalidArgument:
        raise InvalidArgument("clock result must be a non-negative safe-integer epoch ms") from None
