"""The store implementation shared by every backend.

:class:`LedgerStore` implements every :class:`~jobledger.store.base.Store` operation as a
sequence of named queries run inside one transaction (``store/operations/``). The SQLite and
PostgreSQL stores subclass it and supply only what differs per engine: how a transaction is
opened, which queries the names resolve to, how claim candidates are probed, how the whole
database is verified, and where "now" comes from (the injected clock, or the database clock).
"""

from __future__ import annotations

from .operations import (
    AdjudicationOperations,
    AdminOperations,
    CallerTxOperations,
    ClaimOperations,
    DepthOperations,
    FlowOperations,
    JobOperations,
    LeaseOperations,
    ListingOperations,
    QueueOperations,
    ResultOperations,
    ScheduleOperations,
)
from .tx import Row, Tx, WorkSignal, validate_clock_reading

__all__ = ["LedgerStore", "Row", "Tx", "WorkSignal", "validate_clock_reading"]


class LedgerStore(
    ListingOperations,
    JobOperations,
    CallerTxOperations,
    ClaimOperations,
    LeaseOperations,
    AdminOperations,
    ScheduleOperations,
    QueueOperations,
    DepthOperations,
    FlowOperations,
    ResultOperations,
    AdjudicationOperations,
):
    """Shared implementation of the :class:`Store` protocol; subclasses bind an engine."""
