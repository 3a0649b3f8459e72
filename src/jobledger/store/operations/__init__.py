"""Every store operation, written once as named queries inside one transaction.

Each group is a sibling over :class:`OperationsBase` (the engine hooks and the row helpers they
share), one module per concern; :class:`jobledger.store.ledger.LedgerStore` combines them. What
two groups both need lives in the base or in ``store/common.py``, never in another group.
"""

from .adjudication import AdjudicationOperations
from .admin import AdminOperations
from .base import JobMeta, OperationsBase
from .claims import ClaimOperations
from .flows import FlowOperations
from .jobs import JobOperations
from .leases import LeaseOperations
from .occurrences import OccurrenceOperations
from .queues import QueueOperations
from .results import ResultOperations
from .schedules import ScheduleOperations

__all__ = [
    "AdjudicationOperations",
    "AdminOperations",
    "ClaimOperations",
    "FlowOperations",
    "JobMeta",
    "JobOperations",
    "LeaseOperations",
    "OccurrenceOperations",
    "OperationsBase",
    "QueueOperations",
    "ResultOperations",
    "ScheduleOperations",
]
