"""The bounds a caller may ask the store for, and their defaults.

The store enforces them (``SCHEDULER_INVALID_ARGUMENT`` past the bound); the CLI, the dashboard
and ``/metrics`` take them from here to validate their own options and say what they show, so
no floor above the store reaches into its insides for a number (``docs/architecture.md``).
"""

from __future__ import annotations

__all__ = ["DEFAULT_PRUNE_BATCH", "MAX_CASES", "MAX_PAGE_LIMIT", "MAX_PRUNE_BATCH"]

# Items one page of a listing (jobs, occurrences, events, audit records) holds at most.
MAX_PAGE_LIMIT = 1000
# Outcome-unknown cases one ``adjudication_cases`` call returns at most (upstream's bound).
MAX_CASES = 500
# Occurrences ``prune`` deletes per transaction: the default and the most it accepts.
DEFAULT_PRUNE_BATCH = 2_000
MAX_PRUNE_BATCH = 5_000
