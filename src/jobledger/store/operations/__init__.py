"""Every store operation, written once as named queries inside one transaction.

The groups build on each other (jobs → occurrences → leases → admin) so each module stays
small; :class:`AdminOperations` is the complete set.
"""

from .admin import AdminOperations
from .base import JobMeta, OperationsBase

__all__ = ["AdminOperations", "JobMeta", "OperationsBase"]
