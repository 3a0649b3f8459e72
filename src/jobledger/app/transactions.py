"""The caller's own transaction (SPEC §8): handing it to the store, and the SQLite connection
the app gives out for it (:meth:`TransactionMethods.connect`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from ..errors import InvalidArgument
from ..models import EnqueueRequest, Occurrence
from ..store.operations import CallerTxOperations
from ..store.sqlite.store import SQLiteStore
from .base import AppBase

__all__ = ["TransactionMethods"]


class TransactionMethods(AppBase):
    """The caller's own transaction (SPEC §8)."""

    def connect(self) -> sqlite3.Connection:
        """SQLite: a new connection on the store's file, configured as the store's own
        (``isolation_level=None``, WAL, ``synchronous`` and the busy timeout as the store's,
        foreign keys on), for the app's own statements and ``enqueue(..., conn=...)`` in one
        transaction: open it with ``BEGIN IMMEDIATE``. The caller closes it. PostgreSQL is
        refused (``SCHEDULER_INVALID_ARGUMENT``): use the app's own psycopg, SQLAlchemy or
        Django connection there."""
        store = self.store
        if not isinstance(store, SQLiteStore):
            raise InvalidArgument(
                "app.connect() is for SQLite stores; on PostgreSQL pass your own connection "
                "(psycopg, SQLAlchemy, Django) as conn=",
                details={"field": "connect"},
            )
        return store.connect()

    def _caller_tx_store(self) -> CallerTxOperations:
        store = self.store
        if not isinstance(store, CallerTxOperations):
            raise InvalidArgument(
                f"conn= needs one of jobledger's stores; {type(store).__name__} cannot write in "
                "a caller's transaction",
                details={"field": "conn"},
            )
        return store

    def _enqueue_in_transaction(
        self, conn: object, requests: Sequence[EnqueueRequest]
    ) -> list[Occurrence]:
        return self._caller_tx_store().enqueue_in_transaction(conn, requests)

    def _enqueue_flow_in_transaction(
        self, conn: object, requests: Sequence[EnqueueRequest], expected_ids: Sequence[str]
    ) -> list[Occurrence]:
        return self._caller_tx_store().enqueue_flow_in_transaction(
            conn, requests, expected_ids=expected_ids
        )

    async def _enqueue_flow_in_transaction_async(
        self, conn: object, requests: Sequence[EnqueueRequest], expected_ids: Sequence[str]
    ) -> list[Occurrence]:
        return await self._caller_tx_store().enqueue_flow_in_transaction_async(
            conn, requests, expected_ids=expected_ids
        )

    async def _enqueue_in_transaction_async(
        self, conn: object, requests: Sequence[EnqueueRequest]
    ) -> list[Occurrence]:
        return await self._caller_tx_store().enqueue_in_transaction_async(conn, requests)
