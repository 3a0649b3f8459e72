"""Shared-file mode (``App(path, shared_file=True)``, SPEC §8): which catalog rows are jobledger's.

In a file of its own, jobledger verifies the whole catalog, and a table it did not make is
refused (``SCHEDULER_SCHEMA_UNKNOWN``). In a file shared with the application's own tables —
so that the application's rows and its enqueues commit in one SQLite transaction — verification
covers exactly jobledger's objects: its tables (any version's), their indexes, and anything
named as one of them. The application's other tables, indexes, triggers and views are not
looked at. An application object *with a jobledger name*, or an application index or trigger
*on a jobledger table*, lands in that scope, changes the fingerprint and is refused as
``SCHEDULER_SCHEMA_CORRUPT``.
"""

from __future__ import annotations

from .shapes import COLUMNS, INDEXES

__all__ = ["OWN_NAMES", "OWN_TABLES", "is_own"]

OWN_TABLES = frozenset(table for tables in COLUMNS.values() for table in tables)
OWN_NAMES = OWN_TABLES | frozenset(name for names in INDEXES.values() for name in names)


def is_own(name: str, table: str) -> bool:
    """A catalog row (``sqlite_master`` name and tbl_name) in jobledger's scope."""
    return name in OWN_NAMES or table in OWN_TABLES
