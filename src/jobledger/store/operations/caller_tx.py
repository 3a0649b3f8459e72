"""Enqueue inside the caller's own transaction (SPEC §8), one batch or a whole flow (SPEC §10).

The same enqueue as :meth:`~jobledger.Store.enqueue_batch` and
:meth:`~jobledger.Store.enqueue_flow` — the same named queries, the same key rule and the same
flow check, through :meth:`OccurrenceOperations._enqueue_body` and ``flow_plan`` — but run in
a transaction the caller opened on its own connection, instead of one the store opens, commits
and retries. Each store runs it through its dialect's adapter (``postgres/caller.py``,
``sqlite/caller.py``), which refuses a connection outside a transaction or on another store and
wraps the work in a savepoint; which drivers are accepted is ``store/caller.py``'s business.
"""

from __future__ import annotations

import asyncio
import threading
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import TypeVar

from ...errors import InvalidArgument
from ...models import EnqueueRequest, Occurrence
from .. import caller, inputs
from ..tx import Tx
from .occurrences import OccurrenceOperations, flow_plan

__all__ = ["CallerTxOperations"]

T = TypeVar("T")


class CallerTxOperations(OccurrenceOperations):
    """Enqueue inside the caller's own transaction (SPEC §8)."""

    _store_id: str | None = None
    _store_id_lock = threading.Lock()

    def enqueue_in_transaction(
        self, conn: object, requests: Sequence[EnqueueRequest]
    ) -> list[Occurrence]:
        """As :meth:`enqueue_batch`, written in the transaction open on ``conn`` (never begun,
        committed or rolled back here). Refused with ``SCHEDULER_INVALID_ARGUMENT``, writing
        nothing: a connection outside a transaction, on another store, or (PostgreSQL) at an
        isolation level above READ COMMITTED. A jobledger error leaves the caller's transaction
        as it was before the call. Workers see the occurrences when the caller commits."""
        self._assert_open()
        link = caller.resolve(conn)
        normalized = inputs.normalize_enqueue_batch(requests)
        return self._in_caller_transaction(link, self._body(normalized))

    async def enqueue_in_transaction_async(
        self, conn: object, requests: Sequence[EnqueueRequest]
    ) -> list[Occurrence]:
        """:meth:`enqueue_in_transaction` for an async connection or session (a psycopg
        ``AsyncConnection``, a SQLAlchemy ``AsyncSession``/``AsyncConnection``): the store's
        statements are awaited on the running loop, driven from a worker thread."""
        self._assert_open()
        link = await caller.resolve_async(conn)
        normalized = inputs.normalize_enqueue_batch(requests)
        loop = asyncio.get_running_loop()
        body = self._body(normalized)
        return await asyncio.to_thread(self._in_caller_transaction, link, body, loop)

    def enqueue_flow_in_transaction(
        self, conn: object, requests: Sequence[EnqueueRequest], *, expected_ids: Sequence[str]
    ) -> list[Occurrence]:
        """:meth:`enqueue_flow` (``App.flow(conn=...)``) written in the transaction open on
        ``conn``, with the rules and refusals of :meth:`enqueue_in_transaction`. The flow's
        check runs inside the savepoint: ``SCHEDULER_FLOW_CONFLICT`` (or an unknown parent)
        rolls back the whole graph and leaves the caller's transaction as it was."""
        self._assert_open()
        link = caller.resolve(conn)
        normalized, check = flow_plan(requests, expected_ids)
        return self._in_caller_transaction(link, self._body(normalized, check))

    async def enqueue_flow_in_transaction_async(
        self, conn: object, requests: Sequence[EnqueueRequest], *, expected_ids: Sequence[str]
    ) -> list[Occurrence]:
        """:meth:`enqueue_flow_in_transaction` for an async connection or session
        (``App.flow_async(conn=...)``), awaited on the running loop as
        :meth:`enqueue_in_transaction_async` is."""
        self._assert_open()
        link = await caller.resolve_async(conn)
        normalized, check = flow_plan(requests, expected_ids)
        loop = asyncio.get_running_loop()
        body = self._body(normalized, check)
        return await asyncio.to_thread(self._in_caller_transaction, link, body, loop)

    def _body(
        self,
        requests: Sequence[inputs.EnqueueInput],
        check: Callable[[list[Occurrence]], None] | None = None,
    ) -> Callable[[Tx], list[Occurrence]]:
        def body(tx: Tx) -> list[Occurrence]:
            if not requests:
                return []
            occurrences, _ = self._enqueue_body(tx, requests)
            if check is not None:
                check(occurrences)  # raising here rolls back to the savepoint
            return occurrences

        return body

    def _own_store_id(self) -> str:
        """This store's id (``jobledger_store``), read once: a caller's connection must find
        the same id where it looks for the store."""
        with self._store_id_lock:
            if self._store_id is None:
                row = self._read(lambda tx: tx.one("store_identity"))
                if row is None:
                    raise InvalidArgument("this store has no store id (schema before v4)")
                self._store_id = str(row["store_id"])
            return self._store_id

    @abstractmethod
    def _in_caller_transaction(
        self,
        link: caller.CallerLink,
        body: Callable[[Tx], T],
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> T:
        """Run ``body`` in the caller's transaction on ``link`` (the dialect's adapter)."""
