"""Every store operation, written once as named queries inside one transaction.

Each group is a sibling over :class:`OperationsBase` (the engine hooks and the row helpers they
share), one module per concern; :class:`jobledger.store.ledger.LedgerStore` combines them. What
two groups both need lives in the base or in ``store/common.py``, never in another group.
(One group extends another: :class:`CallerTxOperations` runs the occurrence group's enqueue in
a caller's transaction.)
"""

from .adjudication import AdjudicationOperations
from .admin import AdminOperations
from .base import JobMeta, OperationsBase
from .caller_tx import CallerTxOperations
from .claims import ClaimOperations
from .depths import DepthOperations
from .flows import FlowOperations
from .jobs import JobOperations
from .leases import LeaseOperations
from .listing import ListingOperations
from .occurrences import OccurrenceOperations
from .queues import QueueOperations
from .results import ResultOperations
from .schedules import ScheduleOperations

__all__ = [
    "AdjudicationOperations",
    "AdminOperations",
    "CallerTxOperations",
    "ClaimOperations",
    "DepthOperations",
    "FlowOperations",
    "JobMeta",
    "JobOperations",
    "LeaseOperations",
    "ListingOperations",
    "OccurrenceOperations",
    "OperationsBase",
    "QueueOperations",
    "ResultOperations",
    "ScheduleOperations",
]
