"""Every store operation, written once as named queries inside one transaction."""

from .base import OperationsBase
from .jobs import JobOperations
from .leases import LeaseOperations
from .occurrences import OccurrenceOperations

__all__ = ["JobOperations", "LeaseOperations", "OccurrenceOperations", "OperationsBase"]
